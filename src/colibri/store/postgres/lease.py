"""``BoardLease``: the leases by which a daemon serves a PostgreSQL board, or some of its tenants.

A daemon serves the board, or some of its tenants, by its leases; the others wait as
standbys, or serve other tenants, and take over when a lease expires. The leases are rows of
``leases`` (``core.leases`` names them), judged by the server's clock; every taking gives a
row a new epoch, and the store's batches check the epochs they were begun under (the fence).
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, NoReturn

from colibri.core.errors import StorageUnavailable
from colibri.core.leases import (
    BOARD_LEASE,
    Survey,
    is_tenant_lease,
    lease_name,
    lease_names,
    lease_tenant,
)
from colibri.core.model import DEFAULT_TENANT, rfc3339
from colibri.store.postgres.connection import _NAME_TENANTS, LEAST_SILENCE, _connect, _first_line
from colibri.store.postgres.schema import _Q

if TYPE_CHECKING:
    import psycopg

_LOCK_TIMEOUT = b"SELECT set_config('lock_timeout', %s, true)"
#: The lock that queues the daemons taking leases of one board (a key of its own per schema),
#: held for the taking's transaction. Not the ``leases`` table's: a renewal's UPDATE would
#: queue behind every other daemon's taking, and sharing daemons far from the server, taking
#: tenants one after another, starved each other's renewals past their ttl.
_TAKINGS_LOCK = (
    b"SELECT pg_advisory_xact_lock(hashtextextended('colibri leases ' || current_schema(), 0))"
)


#: About how many round trips a taking costs (the clash, then BEGIN, its bounds, the lock, the
#: rows it overlaps, the clash again, the epoch, the row, COMMIT): one is not started unless
#: it has the time for them.
TAKING_ROUND_TRIPS = 10


class BoardLease:
    """The leases that make a daemon the server of the board — of the whole of it (one row,
    ``board``), or of some tenants (a row each, ``tenant/<name>``) beside daemons serving
    others: renewed together and given back together, on a connection of their own (a renewal
    never waits behind a batch). A daemon started with its tenants (or for the whole board)
    takes them all at once or none; a sharing daemon (``sharing``) takes and gives back
    tenants one by one as the daemons come and go.

    Judged by the server's clock alone (``now()``): no two hosts' clocks are compared. The
    owner is a UUID per process, so a daemon started again is a new owner, and every taking —
    by another daemon or the same one — gives each row an epoch beyond any it had: the fence of
    the store's writes (``PostgresStore.fence``) turns away whatever an older epoch still tries.
    """

    def __init__(
        self,
        dsn: str,
        ttl: float,
        address: str | None = None,
        root: str | None = None,
        tenants: tuple[str, ...] = (),
        *,
        sharing: bool = False,
    ) -> None:
        import uuid

        self.dsn = dsn
        self.ttl = ttl
        self.address = address
        self.root = root
        self.sharing = sharing
        #: The tenants asked for (``--tenants``); () for the whole board, or when sharing.
        self.configured = tenants
        #: The rows held, each with the epoch it was taken at.
        self.epochs: dict[str, int] = {}
        self.owner = str(uuid.uuid4())
        #: When (``time.monotonic()``) the last statement that took or renewed the lease was
        #: sent: the lease runs out no sooner than this + ttl, whatever PostgreSQL's clock says.
        self.held_since = 0.0
        #: The other daemons' live leases as last read (``beat``): tenant → address ("*" for a
        #: daemon serving the whole board), where a request for a tenant not served here is sent.
        self.elsewhere: dict[str, str | None] = {}
        #: How many agents are connected to the daemon, said at each beat (``hive list``).
        self.agents = 0
        #: The board's daemons (``hive_list``'s rows) as the last beat read them, and when
        #: (``time.monotonic()``): what the ``hive`` request answers with, never read on the loop.
        self.hive: list[dict[str, Any]] = []
        self.hive_read = 0.0
        #: The board's clock (its server's) less this host's wall clock, in seconds, measured
        #: at each taking and renewal: what the daemon's schedules add to its own wall clock
        #: (``daemon.clock.BoardClock``), as the lease itself is judged by the server's.
        self.clock_offset = 0.0
        #: How long the last renewal took, sent to answered: a round trip to the server.
        self.round_trip = 0.0
        self._conn: psycopg.Connection[dict[str, Any]] | None = None
        self._renewing: psycopg.Connection[dict[str, Any]] | None = None

    @property
    def epoch(self) -> int:
        """The newest epoch of the rows held (their one epoch, taken together); 0: none."""
        return max(self.epochs.values(), default=0)

    @property
    def tenants(self) -> tuple[str, ...]:
        """The tenants served now; () for the whole board (or none, sharing)."""
        return tuple(sorted(lease_tenant(n) for n in self.epochs if n != BOARD_LEASE))

    @property
    def fence(self) -> tuple[str, list[str], list[int]]:
        """What the store's batches check (``lease_fence``): this owner, its rows and epochs."""
        held = list(self.epochs.items())  # at once: a taking's thread may add to it meanwhile
        return (self.owner, [n for n, _ in held], [e for _, e in held])

    @property
    def named(self) -> str:
        """The tenants the store's transactions name (row-level security): ``*`` for all; a
        sharing daemon serving none names ``-``, which is no tenant's name."""
        if BOARD_LEASE in self.epochs or not (self.sharing or self.configured):
            return "*"
        return ",".join(self.tenants) or "-"

    @property
    def what(self) -> str:
        """The lease in a message: the board's, or tenant acme's, or tenants acme, beta's."""
        tenants = self.tenants if self.sharing else self.configured
        if not tenants:
            return "this daemon's leases" if self.sharing else "the board's lease"
        if len(tenants) == 1:
            return f"the lease of tenant {tenants[0]}"
        return f"the leases of tenants {', '.join(tenants)}"

    def _connection(self) -> psycopg.Connection[dict[str, Any]]:
        if self._conn is None or self._conn.closed or self._conn.broken:
            # A renewal over a connection whose server went silent (its answers lost) gives
            # up after a third of the ttl (a second at least; a taking's lock waits a quarter,
            # and is answered first), and the next one connects again before the deadline:
            # otherwise every renewal would queue behind the hung one's lock.
            self._conn = _connect(self.dsn, max(self.ttl / 3, LEAST_SILENCE / 2))
        return self._conn

    def _clocked(self, rows: list[dict[str, Any]], sent: float, answered: float) -> None:
        """Note the board's clock from a taking's or renewal's answer (``board_time``, the
        server's as it answered), sent and answered at these wall-clock times of this host: the
        offset is the server's time less the middle of the round trip, within half of it. Kept
        while a new one is within that of it (a renewal's jitter does not move the schedules'
        clock back and forth), and not taken from a round trip of a second or more."""
        if not rows or answered - sent >= 1.0:
            return
        half = (answered - sent) / 2
        offset = float(rows[0]["board_time"]) - (sent + half)
        if abs(offset - self.clock_offset) > half + 0.001:
            self.clock_offset = offset

    def _run(self, name: str, args: dict[str, Any]) -> list[dict[str, Any]]:
        import psycopg

        try:
            cursor = self._connection().execute(_Q[name].encode(), args)
            return cursor.fetchall() if cursor.description is not None else []
        except psycopg.OperationalError as exc:
            self._unreachable(exc)

    def _unreachable(
        self, exc: Exception, conn: psycopg.Connection[dict[str, Any]] | None = None
    ) -> NoReturn:
        """Close the connection that failed (the lease's, unless another is named) and say so."""
        failed = conn or self._conn
        if failed is not None:
            failed.close()
        raise StorageUnavailable(
            f"the PostgreSQL board's lease could not be reached ({_first_line(exc)})"
        ) from None

    def take(self) -> bool:
        """Take the leases if nobody holds them, nor one they overlap (the whole board's, or —
        taking that — any tenant's), or their holders' have expired; True if taken. All or
        none, under a lock of the table that queues the daemons taking leases (not those
        renewing theirs for long, nor any batch: the fence's row locks do not wait for it)."""
        return self._take(lease_names(self.configured))

    def take_tenants(self, tenants: tuple[str, ...], until: float | None = None) -> list[str]:
        """Take these tenants' leases, each if it is free (a sharing daemon); those taken —
        up to the first the server could not be asked about, or the first after the first
        there is no time for before ``until`` (``time.monotonic()``): the rest at a later
        step, planned again from the leases as they are then."""
        taken: list[str] = []
        for tenant in tenants:
            left = None if until is None else until - time.monotonic()
            if taken and left is not None and left < TAKING_ROUND_TRIPS * self.round_trip:
                break  # (the first is always tried: a far server must not stop every taking)
            try:
                if self._take([lease_name(tenant)], left if taken else None):
                    taken.append(tenant)
            except StorageUnavailable:
                break
        return taken

    def _take(self, names: list[str], left: float | None = None) -> bool:
        import psycopg

        sent = time.monotonic()
        # A taking waits for nobody longer than a quarter of the ttl, nor past the time it
        # was given (what is left of it once its own round trips are counted).
        wait = self.ttl / 4
        if left is not None:
            wait = min(wait, left - TAKING_ROUND_TRIPS * self.round_trip)
        args: dict[str, Any] = {"owner": self.owner, "address": self.address,
                                "ttl": self.ttl, "names": names}  # fmt: skip
        conn = self._connection()
        taken = False
        try:
            # A lease in the way now (a standby's every poll while its daemon lives): refused
            # by a read that locks nothing, so that polls never hold up the holder's renewals.
            if conn.execute(_Q["lease_clash"].encode(), args).fetchone() is not None:
                return False
            with conn.transaction():
                # A taking waits for nobody longer than this: a daemon that takes a tenant
                # must be back to its renewals well before its own leases' deadline.
                conn.execute(_LOCK_TIMEOUT, (f"{max(1, int(wait * 1000))}ms",))
                # The takings' lock first (they queue here, so two never hold rows the other
                # wants; renewals and batches do not wait for it),
                conn.execute(_TAKINGS_LOCK)
                # then the expired rows this one overlaps, held as a takeover holds its own: a
                # batch still open under one of them (its daemon stalled past its lease) ends
                # first, and none begins after — the whole board's fence and a tenant's meet
                # here. (Renewals wait meanwhile: for a stalled batch, a quarter ttl at most.)
                conn.execute(_Q["lease_overlaps"].encode(), args)
                if conn.execute(_Q["lease_clash"].encode(), args).fetchone() is not None:
                    raise psycopg.Rollback  # (ends the transaction, and only it)
                found = conn.execute(_Q["lease_next_epoch"].encode(), args).fetchone()
                assert found is not None
                args["epoch"] = int(found["epoch"])
                asked = time.time()
                rows = conn.execute(_Q["lease_take"].encode(), args).fetchall()
                self._clocked(rows, asked, time.time())
                if len(rows) != len(names):  # (the lock makes this not happen)
                    raise psycopg.Rollback
                taken = True
        except psycopg.errors.LockNotAvailable:
            return False  # another taking, or a stalled batch: tried again at the next poll
        except psycopg.OperationalError as exc:
            self._unreachable(exc)
        if not taken:
            return False
        self.epochs.update(dict.fromkeys(names, args["epoch"]))
        if len(self.epochs) == len(names):
            self.held_since = sent  # (the others' renewals keep their own)
        return True

    def holder(self) -> dict[str, Any] | None:
        """Who holds a lease in the way of these (owner, address, epoch, and seconds left by
        the server's clock, ``name`` which lease); None if none is live."""
        rows = self._run("lease_clash", {"names": lease_names(self.configured)})
        return rows[0] if rows else None

    def renew(self) -> bool:
        """Extend them by ``ttl`` from now; False if one is no longer ours (another took it).
        On a connection of its own, beside whatever other lease work runs on its thread (a
        taking, a survey, a beat): none of that is ever in the way of a renewal. The rows
        renewed are those held as it is sent; one taken meanwhile has a ttl of its own."""
        import psycopg

        sent, asked = time.monotonic(), time.time()
        args = self._rows_args()
        try:
            if self._renewing is None or self._renewing.closed or self._renewing.broken:
                self._renewing = _connect(self.dsn, max(self.ttl / 3, LEAST_SILENCE / 2))
            rows = self._renewing.execute(_Q["lease_renew"].encode(), args).fetchall()
            self._clocked(rows, asked, time.time())
        except psycopg.OperationalError as exc:
            self._unreachable(exc, self._renewing)
        if len(rows) != len(args["names"]):
            return False
        self.held_since = sent
        # What other lease work is measured by: a taking costs a few round trips like this.
        self.round_trip = time.monotonic() - sent
        return True

    def _rows_args(self) -> dict[str, Any]:
        held = list(self.epochs.items())  # at once: a taking's thread may add to it meanwhile
        return {"owner": self.owner, "ttl": self.ttl, "names": [n for n, _ in held],
                "epochs": [e for _, e in held]}  # fmt: skip

    def drop(self, tenants: tuple[str, ...]) -> dict[str, int]:
        """Stop counting these tenants' leases as held (a sharing daemon giving them back): no
        longer renewed, nor in the fence. Their rows and epochs, for ``release_rows`` once the
        daemon serves them no more."""
        return {n: self.epochs.pop(n) for n in map(lease_name, tenants) if n in self.epochs}

    def release_rows(self, rows: dict[str, int]) -> None:
        """Give these rows back at once: the daemon that takes them need not wait out the ttl.
        If this fails, they expire by themselves."""
        self._run_quietly("lease_release", {"owner": self.owner, "names": list(rows),
                                            "epochs": list(rows.values())})  # fmt: skip

    def make_known(self, tenants: set[str]) -> None:
        """Record these tenants on the board (its ``tenants``), for sharing daemons to take."""
        import psycopg

        from colibri.core.model import check_name

        for tenant in tenants:
            check_name(tenant, "tenant")  # never "*", nor "a,b": names that would name others
        conn = self._connection()
        try:
            with conn.transaction():
                conn.execute(_NAME_TENANTS, ("*",))
                conn.cursor().executemany(
                    _Q["ensure_tenant"].encode(),
                    [(t, rfc3339(time.time())) for t in sorted(tenants)],
                )
        except psycopg.OperationalError as exc:
            self._unreachable(exc)

    def survey(self) -> Survey:
        """The leases and daemons of the board, as a sharing daemon plans by (one round trip,
        every tenant named: the table of tenants is under row-level security)."""
        import psycopg

        conn = self._connection()
        try:
            with conn.pipeline():
                conn.execute(b"BEGIN")
                conn.execute(_NAME_TENANTS, ("*",))
                known = conn.execute(_Q["known_tenants"].encode())
                leases = conn.execute(_Q["live_leases"].encode())
                daemons = conn.execute(_Q["sharing_daemons"].encode())
                conn.execute(b"ROLLBACK")
            tenants = {r["name"] for r in known.fetchall()} | {DEFAULT_TENANT}
            rows, alive = leases.fetchall(), daemons.fetchall()
            sharing = {r["id"] for r in alive if r["sharing"]}
            reserved = {t for r in alive if not r["sharing"] for t in r["tenants"] or ()}
        except psycopg.OperationalError as exc:
            self._unreachable(exc)
        owners = {
            lease_tenant(r["name"]): r["owner"]
            for r in rows
            if r["live"] and is_tenant_lease(r["name"])
        }
        if any(r["live"] and r["name"] == BOARD_LEASE for r in rows):
            owners["*"] = next(r["owner"] for r in rows if r["name"] == BOARD_LEASE)
        handovers = {
            lease_tenant(r["name"]): r["handover_to"]
            for r in rows
            if r["handover_to"] is not None and is_tenant_lease(r["name"])
        }
        return Survey(tenants, owners, handovers, sharing, reserved)

    def beat(self) -> None:
        """Say this daemon is there, serving or standing by (``colibri hive list``), and read
        where the other daemons' tenants are served (``elsewhere``) and the board's daemons
        (``hive``)."""
        import os
        import socket

        self._run("hive_beat", {"id": self.owner, "address": self.address,
                                "host": socket.gethostname(), "pid": os.getpid(),
                                "root": self.root, "ttl": self.ttl,
                                "sharing": self.sharing, "agents": self.agents,
                                "tenants": list(self.configured) or None})  # fmt: skip
        self.elsewhere = {
            lease_tenant(row["name"]): row["address"]
            for row in self._run("live_leases", {})
            if row["live"] and row["owner"] != self.owner
        }
        self.hive, self.hive_read = self._run("hive_list", {}), time.monotonic()
        self._run_quietly("hive_forget_old", {})

    def _run_quietly(self, name: str, args: dict[str, Any]) -> None:
        import psycopg

        try:
            self._connection().execute(_Q[name].encode(), args)
        except (psycopg.Error, StorageUnavailable):
            pass

    def release(self) -> None:
        """Give them back at once (a clean stop): the next daemon need not wait out the ttl."""
        if self.epochs:
            # (If this fails, the leases expire by themselves.)
            self._run_quietly("lease_release", self._rows_args())
        self._run_quietly("hive_leave", {"id": self.owner})
        self.close()

    def close(self) -> None:
        for conn in (self._conn, self._renewing):
            if conn is not None:
                conn.close()
