"""The PostgreSQL store: the same ``Store`` contract as SQLite, on a database server.

``--store postgresql://user@host/db`` (any libpq connection string; ``options=-csearch_path=S``
puts the board in schema ``S``). One connection in autocommit mode, used by one thread: a batch
is an explicit ``BEGIN`` … ``COMMIT``, as on SQLite, so reads outside a batch hold no snapshot.

A batch's writes are held and sent together (``defers_writes``): its task inserts and updates,
questions, ledger rows, tenants, skills and token uses wait in memory until the batch's next
read, a write that is sent at once, or its commit, and then go in one pipelined round trip,
consecutive writes of one statement as one ``executemany``. A batch of any size costs three
round trips: its opening (``BEGIN``, the lease's fence, the writers' lock — a transaction-level
advisory lock of the board, so two writers queue rather than interleave — and the ledger's
highest ``seq``, all pipelined), its writes, and its ``COMMIT``. The ledger's ``seq`` is
numbered by the store, not by a sequence (which would leave gaps on a rollback): one more than
the highest committed, once the lock is held. A held write the rows refuse (a taken id, a
compare-and-set that found the row moved) loses the whole batch where it is sent
(``BatchRefused``): the daemon's memory holds the open tasks, so that is a bug, and it rolls
the batch back. The writes whose answer a caller needs at once (an agent's or schedule's name
of another tenant, a fire recorded twice, a token id taken, a revocation) are sent at once,
each that may be refused under a savepoint, so that the batch's earlier writes stand.

A lost connection, a server shut down, a read-only or full database are ``StorageUnavailable``;
the next ``rollback`` connects again (or keeps saying so; after a silence, it takes the
connection ``reachable`` made instead). ``durability="relaxed"`` turns
``synchronous_commit`` off: a crash of the server may lose the last commits, never corrupt.

A daemon serves the board, or some of its tenants, by its leases (``BoardLease``); the others
wait as standbys, or serve other tenants, and take over when a lease expires.

The daemon runs the store's statements on its loop. Bounded by its lease (``lease_ttl``), a
connection gives up after half the ttl without a word from the server (``_heard_within``):
a server gone silent costs the loop that long, then ``StorageUnavailable``, not the many
minutes the kernel would take to say so.

Row-level security (migration 5): every row is seen and written only by a transaction that
named its tenants — ``set_config('colibri.tenants', …, true)``, for that transaction alone,
never for the connection. ``PostgresStore.tenants`` is what this store names: ``*``, every
tenant, while one daemon serves the whole board. A batch names them in the statement that takes
the writers' lock (no round trip of its own); a read outside a batch goes in a transaction of
its own, pipelined: ``BEGIN``, the tenants, the query, ``ROLLBACK`` in one round trip.
``grant_role`` makes the role that daemons should connect as.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import secrets
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import msgspec

from colibri.core.errors import ConfigError, LeaseLost, LockHeld, StorageUnavailable, shown
from colibri.core.model import DEFAULT_TENANT, Agent, LedgerEntry, Task, rfc3339
from colibri.core.schedules import Schedule
from colibri.core.tokens import Token
from colibri.store import sql
from colibri.store.base import BatchRefused, StoreConflict, TaskFilter
from colibri.store.rows import (
    agent_from_row,
    agent_row,
    ledger_from_row,
    ledger_row,
    task_change_row,
    task_from_row,
    task_row,
    token_from_row,
    token_row,
)

if TYPE_CHECKING:
    import psycopg

_Q = sql.load("postgresql")
_MIGRATIONS = {
    int(name.split("_")[1]): body
    for name, body in sql.load("postgresql").items()
    if name.startswith("migration_")
}
SCHEMA_VERSION = max(_MIGRATIONS)
#: The columns of each table of a board of ``SCHEMA_VERSION``, as its migrations make them (a
#: test holds this to a fresh board's): a board that says it is of this version and lacks one
#: is of a shape no release made, and is refused rather than served with a column missing.
_COLUMNS = {
    "agents": "name tenant capabilities slots ttl workspace registered_at last_seen",
    "colibri_schema": "version",
    "hives": "id address host pid root ttl started_at last_beat sharing agents tenants",
    "leases": "name owner address epoch taken_at expires_at handover_to",
    "ledger": "seq at task schedule tenant from_state to_state agent epoch reason cost uid pid",
    "meta": "name value",
    "schedule_fires": "schedule nominal outcome task at reason tenant",
    "schedules": "name next_fire_at doc tenant",
    "skills": "name description",
    "tasks": (
        "id tenant text capabilities workspace agent pinned parent sender priority min_score state "
        "outcome output error cost attempts max_attempts epoch labels idempotency_key not_before "
        "schedule question budget_usd created_at updated_at fingerprint"
    ),
    "tenants": "name created_at",
    "tokens": (
        "id tenant role agent capabilities workspace secret_hash created_at expires_at revoked_at "
        "last_used_at"
    ),
}
_json = msgspec.json.Encoder()
_schedule_decoder = msgspec.json.Decoder(Schedule)
SCHEMES = ("postgresql://", "postgres://")
#: The unique indexes of ``tasks`` and what a violation of each means.
_TAKEN = {
    "tasks_pkey": "a task id is taken",
    "tasks_idempotency": "a tenant's idempotency key is taken",
}
#: The advisory lock of a board's writers: one key per schema (a board), held per batch.
_BOARD_KEY = "SELECT hashtextextended('colibri board ' || current_schema(), 0)"
#: What every write transaction takes first (after the fence): the lock that queues the
#: writers of one board, and what tells its outcome if the COMMIT's answer is lost — the
#: transaction's id, its backend and the server's start (``PostgresStore._outcome``).
_WRITERS_LOCK = (
    "SELECT pg_advisory_xact_lock((" + _BOARD_KEY + ")), txid_current() AS xid, "
    "pg_backend_pid() AS backend, pg_postmaster_start_time() AS started, "
    "set_config('colibri.tenants', %s, true) AS tenants "
    # Set first (the FROM is evaluated before the list): how long the batch waits for the lock,
    # and how long its transaction may sit idle (its daemon stopped mid-batch) before the
    # server ends it — and with it the lock that every daemon's batches queue on.
    "FROM (SELECT set_config('lock_timeout', %s, true), "
    "set_config('idle_in_transaction_session_timeout', %s, true)) AS bounded"
).encode()
#: The tenants a transaction sees and writes (row-level security), named for it alone.
_NAME_TENANTS = b"SELECT set_config('colibri.tenants', %s, true)"
_LOCK_TIMEOUT = b"SELECT set_config('lock_timeout', %s, true)"
#: The lock that queues the daemons taking leases of one board (a key of its own per schema),
#: held for the taking's transaction. Not the ``leases`` table's: a renewal's UPDATE would
#: queue behind every other daemon's taking, and sharing daemons far from the server, taking
#: tenants one after another, starved each other's renewals past their ttl.
_TAKINGS_LOCK = (
    b"SELECT pg_advisory_xact_lock(hashtextextended('colibri leases ' || current_schema(), 0))"
)
#: The rows a read finds: those of the tenants named (the queries of postgresql.sql say it too),
#: also on a connection row-level security does not bind (a superuser's).
_SEEN = "colibri_sees(tenant)"

_SERVER_STARTED = b"SELECT pg_postmaster_start_time() AS started"
_XACT_STATUS = b"SELECT txid_status(%s) AS status"
_END_BACKEND = b"SELECT pg_terminate_backend(%s)"
_LEDGER_ROW = b"SELECT at, task, schedule, to_state, epoch, reason FROM ledger WHERE seq = %s"
#: The least silence (seconds) a daemon's connection waits out before it gives up, however
#: short its lease (a lease's own connection, half of it): a server under load may say
#: nothing that long, and giving up costs a new connection and the board read again.
LEAST_SILENCE = 2.0
#: How long the loop waits for a commit whose answer was lost to settle on the server.
_OUTCOME_WAIT = 1.0


@dataclass
class _InDoubt:
    """A batch whose COMMIT was sent and whose answer was lost."""

    #: The row of ``_WRITERS_LOCK``: xid, backend, started.
    opened: dict[str, Any]
    #: Its first ledger row as written (``seq`` included), if it wrote one.
    first_row: dict[str, Any] | None


@dataclass
class _Write:
    """Writes of one statement held for the batch's next sending (``PostgresStore._hold``)."""

    #: The statement's name in ``postgresql.sql``.
    query: str
    #: Its parameters, one entry per execution.
    rows: list[Any]
    #: ``compare-and-set``: every execution must change one row, or the batch is refused.
    kind: str = ""
    #: The tenants named for these writes alone (``*``: rows that are the whole board's).
    tenants: str = ""


def is_postgres(location: str) -> bool:
    return location.startswith(SCHEMES)


def shown_location(dsn: str) -> str:
    """The connection string without its password, for status and messages."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(dsn)
    except Exception:  # a malformed string: say nothing of it
        return "postgresql://(unreadable connection string)"
    host = parts.get("host") or "localhost"
    port = f":{parts['port']}" if parts.get("port") else ""
    user = f"{parts['user']}@" if parts.get("user") else ""
    database = parts.get("dbname") or ""
    return f"postgresql://{user}{host}{port}/{database}"


def _text(row: dict[str, Any]) -> dict[str, Any]:
    """``rows.py`` writes JSON as bytes (SQLite's BLOB-or-TEXT); PostgreSQL's columns are text."""
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in row.items()}


#: psycopg's Wait (1 read, 2 write, 3 both) as poll's events.
_POLL_EVENTS = {1: 0x001, 2: 0x004, 3: 0x001 | 0x004}  # POLLIN, POLLOUT


class _Silent(Exception):
    """The server said nothing for as long as a connection's ``silence`` allows."""


class _PastDeadline(_Silent):
    """The server had not answered by the daemon's lease deadline: the daemon stops then, and
    its loop must be free to (a wait begun just before it would otherwise go on for up to
    the whole ``silence``, past the lease's expiry)."""


def _heard_within(
    gen: Any, pgconn: Any, silence: float, until: Callable[[], float | None] | None = None
) -> Any:
    """Drive one of psycopg's protocol generators on ``pgconn``'s socket as its own wait
    does, but give up once the socket has been neither readable nor writable for ``silence``
    seconds: a server gone silent (a network partition, a host frozen, a half-open connection)
    answers nothing, and the kernel says nothing of it for many minutes. A long answer that
    keeps coming (a big read) is not cut: every byte that arrives starts the silence again.
    ``until``: the monotonic time (asked anew at each turn: a renewal moves it) past which no
    wait goes on, silence or not — the daemon's lease deadline (``_PastDeadline``)."""
    import select

    fileno = pgconn.socket
    try:
        wanted = next(gen)
        poller = select.poll()  # no descriptor of its own, unlike an epoll selector
        poller.register(fileno, _POLL_EVENTS[wanted])
        heard = time.monotonic()
        while True:
            now = time.monotonic()
            left = heard + silence - now
            if left <= 0:
                raise _Silent
            deadline = until() if until is not None else None
            if deadline is not None:
                if deadline <= now:
                    raise _PastDeadline
                left = min(left, deadline - now)
            events = poller.poll(None if left == math.inf else left * 1000)
            if not events:
                continue
            heard = time.monotonic()
            mask = events[0][1]
            ready = (1 if mask & select.POLLIN else 0) | (2 if mask & select.POLLOUT else 0)
            if not ready:  # an error or a hang-up alone, as psycopg's own poll wait says it
                import psycopg

                pgconn.finish()  # (so that the store sees it broken, and connects again)
                raise psycopg.OperationalError("connection socket closed")
            now_wanted = gen.send(ready)
            if now_wanted != wanted:
                poller.modify(fileno, _POLL_EVENTS[now_wanted])
                wanted = now_wanted
    except StopIteration as done:
        return done.value


@functools.cache
def _heeding_class() -> type[psycopg.Connection[dict[str, Any]]]:
    """psycopg's connection, whose waits give up on a silent server (``silence``): the daemon's
    store runs its statements on the daemon's loop, which must not hang on one."""
    import psycopg

    class Heeding(psycopg.Connection[dict[str, Any]]):
        #: Seconds of silence after which a wait gives up and closes the connection (the
        #: exchange is left half-way); None waits as psycopg does.
        silence: float | None = None
        #: Whether it was closed so: its server may be silent still, and connecting to it
        #: again could take as long (``PostgresStore._reset`` leaves that to ``reachable``).
        went_silent = False
        #: The monotonic time past which no wait goes on (None: none): the daemon's lease
        #: deadline, for the connections its loop waits on (``PostgresStore.heed_deadline``).
        until: Callable[[], float | None] | None = None

        def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
            if timeout is not None:  # psycopg's own bounded waits (notifies) keep their bound
                return super().wait(gen, interval, timeout)
            if self.silence is None and (self.until is None or self.until() is None):
                return super().wait(gen, interval)
            silence = math.inf if self.silence is None else self.silence
            try:
                return _heard_within(gen, self.pgconn, silence, self.until)
            except _Silent as exc:
                self.went_silent = True
                self.pgconn.finish()
                said = (
                    "PostgreSQL had not answered by this daemon's lease deadline"
                    if isinstance(exc, _PastDeadline)
                    else f"PostgreSQL said nothing for {self.silence:g} s"
                )
                raise psycopg.OperationalError(f"{said}; the connection was closed") from None

    return Heeding


def _leases_lost(fence: tuple[str, list[str], list[int]], held: set[str]) -> str:
    """Which of the fence's leases (``board``, ``tenant/acme``) were not found held."""
    lost = [
        ("on the board" if name == "board" else f"of tenant {name.removeprefix('tenant/')}")
        + f" (epoch {epoch})"
        for name, epoch in zip(fence[1], fence[2], strict=True)
        if name not in held
    ]
    leases = "lease" if len(lost) == 1 else "leases"
    return f"this daemon's {leases} {', '.join(lost)} passed to another daemon (or expired)"


#: What every connection sets for itself, whatever the server, database or role make the
#: default (``ALTER DATABASE/ROLE … SET``, ``PGOPTIONS``): the store relies on each.
#: ``read committed``: every statement sees what committed before it — the migrations read
#: the schema after taking their lock, a batch numbers its ledger rows after the writers' lock
#: (in a snapshot taken at the fence, before the lock, two batches would take one ``seq``).
#: Writes allowed; no statement, lock or idle transaction cut short but by the store's own
#: bounds (a batch sets ``lock_timeout`` and ``idle_in_transaction_session_timeout`` for
#: itself), nor an idle connection (a lease's, between renewals); row-level security applied,
#: never skipped; dates as psycopg reads them (ISO: other styles it cannot parse) and in UTC.
#: ``search_path`` is the one setting taken from the connection: it names the board's schema.
_SESSION = {
    "default_transaction_isolation": "read committed",
    "default_transaction_read_only": "off",
    "statement_timeout": "0",
    "lock_timeout": "0",
    "idle_in_transaction_session_timeout": "0",
    "row_security": "on",
    "DateStyle": "ISO, YMD",
    "TimeZone": "UTC",
}
#: PostgreSQL 14 and later end a session idle this long (0: never).
_SESSION_14 = {"idle_session_timeout": "0"}


def _session(server_version: int, durability: str) -> tuple[bytes, list[str]]:
    """The statement that sets ``_SESSION`` (and ``synchronous_commit`` by ``durability``:
    ``full`` sets it on, whatever the default) in one round trip, and its parameters."""
    settings = {**_SESSION, **(_SESSION_14 if server_version >= 140000 else {})}
    settings["synchronous_commit"] = "off" if durability == "relaxed" else "on"
    calls = ", ".join("set_config(%s, %s, false)" for _ in settings)
    return f"SELECT {calls}".encode(), [part for pair in settings.items() for part in pair]


def _connect(
    dsn: str,
    silence: float | None = None,
    durability: str = "full",
    until: Callable[[], float | None] | None = None,
) -> psycopg.Connection[dict[str, Any]]:
    """A connection in autocommit mode, its session set as the store relies on (``_SESSION``);
    with ``silence``, its waits and its connecting give up after that long without a word
    from the server (connecting: 2 s at least, libpq's least ``connect_timeout``), and with
    ``until`` at that time too (``Heeding.until``)."""
    import psycopg  # not installed: the CLI says what to install (colibri.extras)
    from psycopg.rows import dict_row

    try:
        conn = _heeding_class().connect(
            dsn,
            autocommit=True,
            row_factory=dict_row,
            connect_timeout=10 if silence is None else max(2, math.ceil(silence)),
        )
    except psycopg.Error as exc:
        raise StorageUnavailable(
            f"cannot reach the PostgreSQL board at {shown_location(dsn)}: "
            f"{str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}"
        ) from None
    conn.silence = silence  # type: ignore[attr-defined]
    conn.until = until  # type: ignore[attr-defined]
    #: Its backend's pid, known here without a round trip, for when it is no more.
    conn.backend = conn.info.backend_pid  # type: ignore[attr-defined]
    try:
        conn.execute(*_session(conn.info.server_version, durability))
    except psycopg.OperationalError as exc:
        conn.close()
        raise StorageUnavailable(
            f"the PostgreSQL board at {shown_location(dsn)} broke off as it was being "
            f"connected to ({_first_line(exc)})"
        ) from None
    except psycopg.Error as exc:
        conn.close()
        raise ConfigError(
            f"the connection to the PostgreSQL board at {shown_location(dsn)} refused the "
            f"settings the store needs ({_first_line(exc)}); connect to PostgreSQL itself, "
            "not through a proxy that forbids SET"
        ) from None
    return conn


class PostgresStore:
    """The ``Store`` on a PostgreSQL database; each method keeps the contract of ``base``."""

    #: A batch's task writes, questions, ledger rows, tenants, skills and token uses are sent
    #: together, at its next read or its commit: a round trip a batch, not one a write.
    defers_writes = True

    def __init__(
        self, dsn: str, *, durability: str = "full", lease_ttl: float | None = None
    ) -> None:
        if durability not in ("full", "relaxed"):
            raise ConfigError(f"unknown durability {durability!r}: use full or relaxed")
        self._dsn = dsn
        self._durability = durability
        self.location = shown_location(dsn)
        #: How long a batch waits for the writers' lock, and may sit idle in its transaction
        #: (PostgreSQL's ``lock_timeout`` and ``idle_in_transaction_session_timeout``, for the
        #: batch only); "0" waits for ever. And how long any wait gives up after without a
        #: word from the server (``_heard_within``); None waits for ever. A daemon's store is
        #: bounded by its lease (``lease_ttl``): see ``_bound``.
        self.bounds = ("0", "0")
        self.silence: float | None = None
        #: The daemon's lease deadline, past which no wait of its connections goes on
        #: (``heed_deadline``); None: no such bound.
        self._deadline: Callable[[], float] | None = None
        if lease_ttl is not None:
            self._bound(lease_ttl)
        #: A connection made off the loop by ``reachable``, taken by ``_reset`` in place of one
        #: that went silent.
        self._spare: psycopg.Connection[dict[str, Any]] | None = None
        self._conn = _connect(dsn, self.silence, durability, self._until)
        try:
            self._migrate()
        except BaseException:
            self._conn.close()  # refused (a newer schema, a role that cannot migrate): let go
            raise
        #: Whether a batch is open: written to, not yet committed or rolled back.
        self._dirty = False
        #: Whether its transaction is open on the server (``_begin``), not only in ``_writes``.
        self._begun = False
        self._lost = ""
        #: The next ledger seq of the open batch (known once its transaction is begun).
        self._next_seq: int | None = None
        #: The batch's writes not yet sent (``defers_writes``), in order, consecutive ones of
        #: one statement together; and its ledger rows, numbered as they are sent.
        self._writes: list[_Write] = []
        self._unsent: list[LedgerEntry] = []
        #: ``(owner, lease rows, their epochs)`` of the leases this store writes under
        #: (``BoardLease.fence``): every batch checks them first, holding the rows so that no
        #: takeover can commit in between.
        self.fence: tuple[str, list[str], list[int]] | None = None
        #: The tenants this store's transactions name for row-level security: ``*`` is every one.
        self.tenants = "*"
        #: The open batch's transaction id, backend and server start (see ``_writing``), and
        #: its first ledger row; a batch whose COMMIT's answer was lost and whose outcome the
        #: server could not tell yet (``rollback`` waits for it).
        self._opened: dict[str, Any] | None = None
        #: What a lost batch's calls raise: the storage failed, the lease passed, or a write
        #: was refused as it was sent.
        self._lost_as: type[Exception] = StorageUnavailable
        self._first_row: dict[str, Any] | None = None
        self._in_doubt: _InDoubt | None = None

    def _version(self) -> int | None:
        """The board's schema version; None when the schema holds no board yet."""
        conn = self._conn
        if conn.execute("SELECT to_regclass('colibri_schema') AS ours").fetchone() == {
            "ours": None
        }:
            return None
        row = conn.execute("SELECT version FROM colibri_schema").fetchone()
        return int(row["version"]) if row else 0

    def _migrate(self) -> None:
        import psycopg

        try:
            self._make_tables()
        except psycopg.OperationalError as exc:
            # (Its COMMIT's answer may be what was lost: the tables may be there. Making them
            # again is safe — the version says what is left to do.)
            raise StorageUnavailable(
                f"the connection to the PostgreSQL board at {self.location} broke while its "
                f"tables were being made ({_first_line(exc)}); run the command again"
            ) from None

    def _make_tables(self) -> None:
        import psycopg

        #: What a migration meets on a board unlike its version: a table or column it follows
        #: never had, or one it makes already there.
        unlike_its_version = (
            psycopg.errors.UndefinedTable,
            psycopg.errors.UndefinedColumn,
            psycopg.errors.UndefinedObject,
            psycopg.errors.DuplicateTable,
            psycopg.errors.DuplicateColumn,
            psycopg.errors.DuplicateObject,
        )

        if self._version() == SCHEMA_VERSION:
            # The common case: no lock, so opening never waits for a writer's batch.
            check_shape(self._conn, self.location)
            return
        conn = self._conn
        with conn.transaction():
            conn.execute("SELECT pg_advisory_xact_lock((" + _BOARD_KEY + "))")
            found = conn.execute(
                "SELECT to_regclass('colibri_schema') AS ours, "
                "(SELECT COUNT(*) FROM pg_tables WHERE schemaname = current_schema()) AS n"
            ).fetchone()
            assert found is not None
            if found["ours"] is None and found["n"]:
                raise ConfigError(
                    f"the schema of {self.location} holds another program's tables, not a "
                    "Colibri board; it was left untouched (give another schema with "
                    "options=-csearch_path=…)"
                )
            version = 0
            if found["ours"] is not None:
                row = conn.execute("SELECT version FROM colibri_schema").fetchone()
                version = int(row["version"]) if row else 0
            if version > SCHEMA_VERSION:
                raise ConfigError(
                    f"{self.location} has schema version {version}, newer than this Colibri "
                    f"understands ({SCHEMA_VERSION}); upgrade colibri"
                )
            if version == SCHEMA_VERSION:
                # Made or migrated by another while this one waited for the lock.
                check_shape(conn, self.location)
                return
            # A daemon of the older version serving the board would go on writing the old
            # shape into the new one: the board is changed only while none serves it.
            holder = live_lease(conn) if version >= 2 else None
            if holder is not None:
                raise LockHeld(
                    holder["owner"],
                    f"the board at {self.location} has schema version {version} and this "
                    f"Colibri needs {SCHEMA_VERSION}, but {holder['said']}: stop the daemons of "
                    "the older version first (a clean stop gives the lease back at once), then "
                    "start again",
                )
            # Rows a migration moves are every tenant's (the owner is held to RLS too).
            conn.execute(_NAME_TENANTS, ("*",))
            try:
                for n in range(version + 1, SCHEMA_VERSION + 1):
                    conn.execute(_MIGRATIONS[n].encode())
                    conn.execute("UPDATE colibri_schema SET version = %s", (n,))
                # (Inside the transaction: a shape refused leaves the board as it was.)
                check_shape(conn, self.location)
            except unlike_its_version as exc:
                raise ConfigError(
                    f"the board at {self.location} says schema version {version}, but its "
                    f"tables are not those of any release of Colibri ({_first_line(exc)}); it "
                    "was left unchanged: restore it from a backup, or give another schema"
                ) from None
            except psycopg.errors.InsufficientPrivilege as exc:
                if version:
                    raise ConfigError(
                        f"the board at {self.location} has schema version {version} and this "
                        f"Colibri needs {SCHEMA_VERSION}, which only the owner of its tables "
                        f"can make ({_first_line(exc)}); run `colibri hive grant ROLE --store` "
                        "with the owner's connection string once (it migrates the board), then "
                        "start again"
                    ) from None
                raise ConfigError(
                    f"cannot create the board's tables in {self.location}: {exc}".strip()
                ) from None

    # -- unit of work ------------------------------------------------------------------------

    def _begin(self) -> None:
        """Open the batch's transaction on the server, in one round trip: ``BEGIN``, the
        lease's fence, the writers' lock (with the batch's tenants named), and the highest
        ledger seq its rows are numbered after."""
        import psycopg

        conn = self._conn
        with conn.pipeline():
            conn.execute(b"BEGIN")
            fenced = None
            if self.fence is not None:
                fenced = conn.execute(_Q["lease_fence"].encode(), self.fence)
            # The transaction's id, its backend and the server's start, taken with the
            # writers' lock: if the connection breaks while the COMMIT is on its way,
            # PostgreSQL can still say whether it committed (``_outcome``).
            opened = conn.execute(_WRITERS_LOCK, (self.tenants, *self.bounds))
            top = conn.execute(_Q["ledger_top"].encode())
        if fenced is not None and self.fence is not None:
            held = {row["name"] for row in fenced.fetchall()}
            if len(held) != len(self.fence[1]):
                self._lost = f"{_leases_lost(self.fence, held)}; nothing was written"
                self._lost_as = LeaseLost
                # Not left open: the batch's reads would go on in a transaction that names
                # no tenant, and see nothing. (A connection that breaks meanwhile ends it too.)
                with contextlib.suppress(psycopg.Error):
                    conn.execute(b"ROLLBACK")
                raise LeaseLost(self._lost)
        self._opened = opened.fetchone()
        found = top.fetchone()
        self._next_seq = int(found["seq"] if found else 0) + 1
        self._begun = True

    @contextmanager
    def _writing(self) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        """A write sent at once, inside the batch's transaction: the writes held before it
        go first (``_send``), so the order of the batch is kept."""
        import psycopg

        self._check_lost()
        self._send()
        try:
            yield self._conn
        except (psycopg.OperationalError, psycopg.errors.InternalError) as exc:
            self._lose(exc)
        except psycopg.errors.InFailedSqlTransaction as exc:
            self._lose(exc)

    def _check_lost(self) -> None:
        """A lost batch refuses every call of it, as it was lost, until ``rollback``."""
        if self._lost:
            raise self._lost_as(self._lost)

    def _hold(self, query: str, row: Any, kind: str = "", tenants: str = "") -> None:
        """A write held until the batch is sent (``_send``): its next read, a write sent at
        once, or the commit. Consecutive writes of one statement go as one ``executemany``."""
        self._check_lost()
        self._dirty = True
        last = self._writes[-1] if self._writes else None
        if last is not None and last.query == query and last.tenants == tenants:
            last.rows.append(row)
        else:
            self._writes.append(_Write(query, [row], kind, tenants))

    def _send(self) -> None:
        """Send what the batch holds, in one pipelined round trip (after ``_begin``, once a
        batch): its writes in order, then its ledger rows, numbered now. A write refused
        here — a task id or idempotency key taken, a compare-and-set that found the row
        moved — loses the whole batch: ``BatchRefused``, and every later call of the batch
        raises until ``rollback``. So does anything else that stops a sending half-way: what
        reached the server of it may be applied, what did not is not."""
        import psycopg

        self._check_lost()
        self._dirty = True
        conn = self._conn
        try:
            if not self._begun:
                self._begin()
            if not self._writes and not self._unsent:
                return
            writes, self._writes = self._writes, []
            rows = self._number(self._unsent)
            self._unsent = []
            counted: list[tuple[_Write, psycopg.Cursor[dict[str, Any]]]] = []
            with conn.pipeline():
                for write in writes:
                    if write.tenants:
                        conn.execute(_NAME_TENANTS, (write.tenants,))
                    cursor = conn.cursor()
                    if len(write.rows) == 1:
                        cursor.execute(_Q[write.query].encode(), write.rows[0])
                    else:
                        cursor.executemany(_Q[write.query].encode(), write.rows)
                    if write.kind == "compare-and-set":
                        counted.append((write, cursor))
                    if write.tenants:
                        conn.execute(_NAME_TENANTS, (self.tenants,))
                if rows:
                    conn.cursor().executemany(_Q["insert_ledger"].encode(), rows)
        except LeaseLost:
            raise  # (the batch is lost already, as a lease lost)
        except psycopg.errors.UniqueViolation as exc:
            taken = _TAKEN.get(exc.diag.constraint_name or "")
            if taken is None:
                self._refused(_first_line(exc), exc)
            # (Row-level security keeps the key's value out of the server's message.)
            inserted = [row["id"] for write in writes if write.query == "insert_task"
                        for row in write.rows]  # fmt: skip
            shown = ", ".join(inserted[:5]) + (
                f" and {len(inserted) - 5} more" * (len(inserted) > 5)
            )
            self._refused(f"{taken} by one of the batch's new tasks ({shown})", exc)
        except (psycopg.OperationalError, psycopg.errors.InternalError) as exc:
            self._lose(exc)
        except psycopg.errors.InFailedSqlTransaction as exc:
            self._lose(exc)
        except psycopg.Error as exc:
            # Refused by the server for another reason (a check, a policy), or by the driver (a
            # value it cannot send): a write the board should never have made. Lost with the
            # batch, as a taken id is.
            self._refused(_first_line(exc), exc)
        except BaseException:
            # Stopped half-way by anything else (a bug): some of the batch may have reached
            # the server, the rest not. It must never commit: lost, and the error goes on.
            self._abandon("its sending stopped half-way")
            raise
        for write, cursor in counted:
            if cursor.rowcount != len(write.rows):
                moved = len(write.rows) - max(cursor.rowcount, 0)
                self._refused(
                    f"{moved} of the batch's {len(write.rows)} task updates found the row in "
                    "another state or epoch than expected, or no such task",
                    None,
                )

    def _refused(self, why: str, exc: Exception | None) -> NoReturn:
        self._abandon(f"a write of it was refused when it was sent: {why}")
        raise BatchRefused(self._lost) from exc

    def _abandon(self, why: str) -> None:
        """Lose the batch (``BatchRefused`` for every later call until ``rollback``) and end
        its transaction on the server."""
        self._lost = f"this batch is lost ({why}); nothing of it was written"
        self._lost_as = BatchRefused
        if not self._conn.broken:
            with contextlib.suppress(Exception):
                self._conn.execute(b"ROLLBACK")

    def _bound(self, ttl: float) -> None:
        """Bound a batch's waits by a lease of ``ttl`` seconds: the writers' lock waited for a
        third of it at most (a batch waiting longer is refused ``storage_unavailable`` and
        tried again, rather than carrying the daemon past its lease), and a transaction left
        idle (its daemon stopped mid-batch) ended by the server after half of it, so that it
        holds the other daemons' batches up no longer; and a connection whose server says
        nothing for half of it (``LEAST_SILENCE`` at least) given up (``_heard_within``), so
        that the daemon's loop, which runs the statements, waits no longer either."""
        self.bounds = (f"{int(ttl * 1000 / 3)}ms", f"{int(ttl * 1000 / 2)}ms")
        self.silence = max(ttl / 2, LEAST_SILENCE)

    def heed_deadline(self, deadline: Callable[[], float]) -> None:
        """Give every wait of the store's connections up by ``deadline()`` (the monotonic time
        by which the daemon's lease must have been renewed), silent server or not: the daemon's
        loop runs the statements, and must be free at its deadline to stop serving."""
        self._deadline = deadline

    def _until(self) -> float | None:
        return None if self._deadline is None else self._deadline()

    def reachable(self) -> None:
        """Asked on a connection of its own, which is kept (if none is yet) for ``_reset`` to
        take in place of one that went silent: connecting again is never done on the loop
        after a silence, where it could take as long."""
        import psycopg

        try:
            conn = _connect(self._dsn, self.silence, self._durability, self._until)
            try:
                conn.execute(b"SELECT 1")
            except BaseException:
                conn.close()
                raise
        except psycopg.Error as exc:
            raise StorageUnavailable(
                f"the PostgreSQL board at {self.location} does not answer ({_first_line(exc)})"
            ) from None
        if self._spare is None:
            self._spare = conn
        else:
            conn.close()

    def _lose(self, exc: Exception) -> None:
        error = StorageUnavailable(
            f"the PostgreSQL board could not write ({_first_line(exc)}); nothing was changed"
        )
        self._lost, self._lost_as = error.message, StorageUnavailable
        raise error from None

    def commit(self) -> None:
        import psycopg

        self._check_lost()
        if not self._dirty:
            return
        self._send()
        if self._conn.info.transaction_status != psycopg.pq.TransactionStatus.INTRANS:
            # Aborted on the server (a statement of it failed) or ended: a COMMIT would be
            # answered as a ROLLBACK, quietly. Never acknowledge such a batch.
            self._abandon("its transaction was aborted or ended on the server before the commit")
            raise BatchRefused(self._lost)
        opened, first = self._opened, self._first_row
        try:
            self._conn.execute(b"COMMIT")
        except psycopg.Error as exc:
            self._end_batch()
            self._reset()
            if opened is not None:
                # The COMMIT may have reached the server, and committed, before its answer
                # was lost (a server shut down or crashing answers FATAL, not always on a
                # connection psycopg marks broken yet): ask PostgreSQL, never guess.
                doubt = _InDoubt(opened, first)
                outcome = self._outcome(doubt)
                if outcome == "committed":
                    return
                if outcome in (None, "unknowable"):
                    if outcome is None:
                        # Until it is settled, the board must not be read again (``rollback``):
                        # rebuilt from before a commit that lands later, it would not be true.
                        self._in_doubt = doubt
                    raise StorageUnavailable(
                        f"the PostgreSQL board's connection broke while this batch was being "
                        f"committed ({_first_line(exc)}), and whether it was written is not "
                        "known until the server answers; retry with the same idempotency key, "
                        "or look the task up once the daemon serves again"
                    ) from None
            raise StorageUnavailable(
                f"the PostgreSQL board could not commit ({_first_line(exc)}); nothing was changed"
            ) from None
        self._end_batch()

    def _end_batch(self) -> None:
        self._dirty = False
        self._begun = False
        self._next_seq = None
        self._opened = None
        self._first_row = None
        self._writes.clear()
        self._unsent.clear()

    def _outcome(self, doubt: _InDoubt) -> str | None:
        """``committed`` or ``aborted``: what became of a batch whose COMMIT's answer was lost,
        asked over the connection made again; ``unknowable`` when it is settled either way but
        cannot be told (see ``_outcome_from_ledger``); None while the server cannot say."""
        import psycopg

        if self._lost:
            return None  # the connection could not be made again
        conn = self._conn
        try:
            now = conn.execute(_SERVER_STARTED).fetchone()
            if now is None or now["started"] != doubt.opened["started"]:
                # The server started again (or another took its place) since the batch began:
                # a transaction id whose commit never reached its disk is handed out again, so
                # the id's status may be another transaction's. The batch's own rows decide.
                return self._outcome_from_ledger(doubt)
            deadline = time.monotonic() + _OUTCOME_WAIT
            ended_backend = False
            while True:
                row = conn.execute(_XACT_STATUS, (doubt.opened["xid"],)).fetchone()
                status = None if row is None else row["status"]
                if status in ("committed", "aborted"):
                    return str(status)
                if status is None:  # too old to be known: the rows decide
                    return self._outcome_from_ledger(doubt)
                # In progress: the old connection's backend still has it, finishing the
                # commit or waiting for a COMMIT that never came. Ended, it settles at once
                # (a commit under way completes first).
                if not ended_backend:
                    conn.execute(_END_BACKEND, (doubt.opened["backend"],))
                    ended_backend = True
                if time.monotonic() > deadline:
                    return None
                time.sleep(0.005)
        except psycopg.Error:
            self._reset()
            return None

    def _outcome_from_ledger(self, doubt: _InDoubt) -> str:
        """Whether the batch's first ledger row is in the ledger, as the batch wrote it; for a
        batch that wrote none, ``unknowable`` (nothing of it can be told from another's). Only
        asked when no backend can still hold the transaction — the server started again, or
        the transaction is too old for its status to be kept — so whatever it was, it is
        settled in the data: the board may be read again."""
        first = doubt.first_row
        if first is None:
            return "unknowable"
        # (Whatever tenant the row there now has: another daemon's batch may have taken the seq.)
        rows = self._read(_LEDGER_ROW, (first["seq"],), "*")
        if not rows:
            return "aborted"
        row = rows[0]
        same = all(row[key] == first[key] for key in ("at", "task", "schedule", "to_state",
                                                       "epoch", "reason"))  # fmt: skip
        return "committed" if same else "aborted"

    def rollback(self) -> None:
        self._lost = ""
        self._lost_as = StorageUnavailable
        self._end_batch()
        self._reset()
        if self._lost and getattr(self._conn, "went_silent", False):
            raise StorageUnavailable(self._lost)  # no connection yet (``reachable`` makes one)
        if self._in_doubt is not None:
            outcome = self._outcome(self._in_doubt)
            if outcome is None:
                raise StorageUnavailable(
                    "the PostgreSQL board cannot say yet whether a batch whose commit's answer "
                    "was lost was written; the daemon reads the board again once it can"
                )
            self._in_doubt = None

    def _reset(self) -> None:
        """End whatever transaction is open; connect again if the connection is gone — but not
        after it went silent: then a connection ``reachable`` made is taken, and until there is
        one the store stays lost (connecting to a silent server would hold the caller up)."""
        import psycopg

        spare, self._spare = self._spare, None
        if self._conn.closed or self._conn.broken:
            if spare is not None:
                silent, self._conn = self._conn, spare
                if getattr(silent, "went_silent", False):
                    # Its backend may still be in the batch's transaction, holding the writers'
                    # lock until the server ends it as idle (half the ttl): end it now.
                    with contextlib.suppress(psycopg.Error):
                        spare.execute(_END_BACKEND, (silent.backend,))  # type: ignore[attr-defined]
                return
            if getattr(self._conn, "went_silent", False):
                self._lost = f"the PostgreSQL board said nothing for {self.silence:g} s"
                return
            try:
                self._conn = _connect(self._dsn, self.silence, self._durability, self._until)
            except StorageUnavailable as exc:
                self._lost = exc.message
            return
        try:
            if self._conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                self._conn.execute("ROLLBACK")
        except psycopg.Error:
            pass
        # A pipeline cut short by an error (a lock timeout) may leave psycopg counting as
        # prepared a statement whose PREPARE the server skipped: each later use of it fails
        # "prepared statement … does not exist", every batch with it refused. Forget them
        # all, here and (at the next statement) on the server; they are prepared again.
        prepared = getattr(self._conn, "_prepared", None)
        if prepared is not None:
            prepared.clear()
        if spare is not None:
            if self._conn.broken:  # (the ROLLBACK found it gone after all)
                self._spare = spare
            else:
                spare.close()

    def close(self) -> None:
        # Closing the connection ends its transaction on the server; nothing is waited for
        # (a ROLLBACK would wait on a server gone silent) and nothing is connected again. A
        # batch in doubt is settled in what the server has, which the next daemon reads.
        self._end_batch()
        self._conn.close()
        if self._spare is not None:
            self._spare.close()

    # -- reads -------------------------------------------------------------------------------

    def _rows(self, query: str, args: Any = (), tenants: str = "") -> list[dict[str, Any]]:
        """The rows of a read, seen as the store's ``tenants`` see them (or as ``tenants``)."""
        import psycopg

        try:
            if not self._dirty:
                return self._read(query.encode(), args, tenants or self.tenants)
            self._send()  # what the batch holds, so that the read sees it
            try:
                with self._naming(self._conn, tenants or self.tenants):
                    return self._conn.execute(query.encode(), args).fetchall()
            except psycopg.Error as exc:
                if not isinstance(exc, psycopg.OperationalError):
                    # Refused inside the batch (a bug): the server aborted its transaction.
                    self._abandon(f"a read inside it failed: {_first_line(exc)}")
                raise
        except psycopg.OperationalError as exc:
            error = StorageUnavailable(
                f"the PostgreSQL board could not be read ({_first_line(exc)})"
            )
            if self._dirty:  # and the batch went with the connection
                self._lost, self._lost_as = error.message, StorageUnavailable
            raise error from None

    @contextmanager
    def _naming(self, conn: psycopg.Connection[dict[str, Any]], tenants: str) -> Iterator[None]:
        """Inside a batch: the statements within see (and write) as ``tenants`` name, then as
        the store's own again — rows that are the whole board's, not one tenant's: tokens (a
        token of any tenant is read, and made, by any daemon), tenants' names."""
        if tenants == self.tenants:
            yield
            return
        conn.execute(_NAME_TENANTS, (tenants,))
        try:
            yield
        finally:
            conn.execute(_NAME_TENANTS, (self.tenants,))

    def _read(self, query: bytes, args: Any, tenants: str) -> list[dict[str, Any]]:
        """A read outside a batch. Each statement is then a transaction of its own, and
        row-level security shows it only the rows of the tenants it names: the read goes in a
        transaction that names them, pipelined (one round trip), and rolled back. Always —
        also as a role RLS does not bind now: a role's attributes can change under a live
        connection, and a board read blind (a rebuild finding no task) must never be what
        that looks like."""
        import psycopg

        conn = self._conn
        try:
            with conn.pipeline():
                conn.execute(b"BEGIN")
                conn.execute(_NAME_TENANTS, (tenants,))
                cursor = conn.execute(query, args)
                # A read writes nothing: ended so, it cannot keep anything by mistake either.
                conn.execute(b"ROLLBACK")
        except psycopg.Error:
            # A statement refused skips the rest of the pipeline, its ROLLBACK too: end the
            # transaction here, or the next batch would begin inside a failed one.
            if (
                not conn.broken
                and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
            ):
                conn.execute(b"ROLLBACK")
            raise
        return cursor.fetchall()

    def _one(self, query: str, args: Any = (), tenants: str = "") -> dict[str, Any] | None:
        rows = self._rows(query, args, tenants)
        return rows[0] if rows else None

    # -- tasks -------------------------------------------------------------------------------

    def _number(self, entries: list[LedgerEntry]) -> list[dict[str, Any]]:
        """Number the batch's ledger rows after those before them (the transaction holds the
        writers' lock by now: nobody else numbers), each ``seq`` set on its entry."""
        rows = []
        for entry in entries:
            assert self._next_seq is not None
            entry.seq = self._next_seq
            self._next_seq += 1
            row = _text(ledger_row(entry))
            row["seq"] = entry.seq
            if self._first_row is None:
                self._first_row = row
            rows.append(row)
        return rows

    @contextmanager
    def _refusable(self, conn: psycopg.Connection[dict[str, Any]]) -> Iterator[None]:
        """A statement that may be refused, under a savepoint: a refusal spares the batch."""
        conn.execute("SAVEPOINT refusable")
        try:
            yield
        except BaseException:
            conn.execute("ROLLBACK TO SAVEPOINT refusable")
            raise
        finally:
            conn.execute("RELEASE SAVEPOINT refusable")

    def insert_task(
        self, task: Task, entry: LedgerEntry, fingerprint: str | None = None
    ) -> LedgerEntry:
        row = _text(task_row(task))
        row["fingerprint"] = fingerprint
        self._hold("insert_task", row)
        self._unsent.append(entry)
        return entry

    def update_task(
        self,
        task: Task,
        expected_state: str,
        expected_epoch: int,
        entry: LedgerEntry,
        *more: LedgerEntry,
    ) -> LedgerEntry:
        row = _text(task_change_row(task))
        row["expected_state"] = expected_state
        row["expected_epoch"] = expected_epoch
        self._hold("update_task", row, "compare-and-set")
        self._unsent.append(entry)
        self._unsent.extend(more)
        return entry

    def get_task(self, task_id: str) -> Task | None:
        row = self._one(_Q["get_task"], (task_id,))
        return None if row is None else task_from_row(row)

    def find_idempotent(self, tenant: str, key: str) -> Task | None:
        row = self._one(_Q["find_idempotent"], (tenant, key))
        return None if row is None else task_from_row(row)

    def fingerprint(self, task_id: str) -> str | None:
        row = self._one(_Q["fingerprint"], (task_id,))
        return None if row is None else row["fingerprint"]

    def claim_key(self) -> bytes:
        row = self._one(_Q["get_meta"], ("claim_key",))
        if row is not None:
            return bytes(row["value"])
        with self._writing() as conn:
            conn.execute(_Q["put_meta"].encode(), ("claim_key", secrets.token_bytes(32)))
        self.commit()
        row = self._one(_Q["get_meta"], ("claim_key",))
        assert row is not None
        return bytes(row["value"])

    def list_tasks(self, query: TaskFilter) -> list[Task]:
        text, args = sql.list_tasks_query(query, "%s", _SEEN)
        return [task_from_row(r) for r in self._rows(text, args)]

    def children(self, task_id: str) -> list[Task]:
        return [task_from_row(r) for r in self._rows(_Q["children"], (task_id,))]

    def count_children(self, task_id: str) -> int:
        row = self._one(_Q["count_children"], (task_id,))
        return int(row["n"]) if row else 0

    def open_family(self, task_id: str) -> list[Task]:
        return [task_from_row(r) for r in self._rows(_Q["open_family"], (task_id,))]

    def open_tasks(self) -> list[Task]:
        return [task_from_row(r) for r in self._rows(_Q["open_tasks"])]

    def count_tasks(self, query: TaskFilter) -> int:
        text, args = sql.count_tasks_query(query, "%s", _SEEN)
        row = self._one(text, args)
        return int(row["n"]) if row else 0

    def count_by_state(self) -> dict[str, int]:
        return {r["state"]: int(r["n"]) for r in self._rows(_Q["count_by_state"])}

    def count_by_outcome(self) -> dict[str, int]:
        return {r["outcome"]: int(r["n"]) for r in self._rows(_Q["count_by_outcome"])}

    def set_question(self, task_id: str, question: str | None) -> None:
        self._hold("set_question", (question, task_id))

    # -- ledger ------------------------------------------------------------------------------

    def append_ledger(self, entry: LedgerEntry) -> LedgerEntry:
        self._check_lost()
        self._dirty = True
        self._unsent.append(entry)
        return entry

    def ledger(
        self, after: int, limit: int, task: str | None = None, tenant: str | None = None
    ) -> list[LedgerEntry]:
        if task is not None:
            rows = self._rows(_Q["ledger_of_task"], (task, tenant, tenant, after, limit))
        elif tenant is not None:
            rows = self._rows(_Q["ledger_of_tenant"], (tenant, after, limit))
        else:
            rows = self._rows(_Q["ledger_after"], (after, limit))
        return [ledger_from_row(r) for r in rows]

    def max_ledger_seq(self) -> int:
        # The whole board's, whatever tenants the store names: the ledger's seq is the board's.
        row = self._one(_Q["max_ledger_seq"], tenants="*")
        return int(row["seq"]) if row else 0

    def cost_totals(self, by: str, since: str, tenant: str | None = None) -> list[dict[str, Any]]:
        query = sql.cost_query(_Q["cost_totals"], by)
        return [
            {
                "key": r["key"],
                "sessions": int(r["sessions"]),
                "usd": float(r["usd"]),
                "tokens_in": int(r["tokens_in"]),
                "tokens_out": int(r["tokens_out"]),
            }
            for r in self._rows(query, (since, tenant, tenant))
        ]

    # -- agents, tenants, skills -------------------------------------------------------------

    def upsert_agent(self, agent: Agent, registered_at: str) -> None:
        row = _text(agent_row(agent, registered_at))
        self._upsert_named("upsert_agent", row, f"agent name {agent.name!r}")

    def _upsert_named(self, query: str, args: Any, what: str) -> None:
        """An upsert of a row whose name is the whole board's: a row of the name in a tenant
        this store does not name is not replaced (``StoreConflict``; row-level security
        refuses it as its role, the statement's condition as any)."""
        import psycopg

        with self._writing() as conn:
            try:
                with self._refusable(conn):
                    if conn.execute(_Q[query].encode(), args).fetchone() is None:
                        raise StoreConflict(f"{what} is another tenant's; nothing was written")
            except psycopg.errors.InsufficientPrivilege as exc:
                raise StoreConflict(f"{what} is another tenant's; nothing was written") from exc

    def agents(self) -> list[Agent]:
        return [agent_from_row(r) for r in self._rows(_Q["all_agents"])]

    def ensure_tenant(self, name: str, at: str) -> None:
        self._hold("ensure_tenant", (name, at), tenants="*")

    def ensure_skills(self, names: list[str]) -> None:
        for name in names:
            self._hold("ensure_skill", (name,))

    def describe_skill(self, name: str, description: str) -> None:
        with self._writing() as conn:
            conn.execute(_Q["describe_skill"].encode(), (name, description))

    def skills(self) -> list[tuple[str, str, int]]:
        return [
            (r["name"], r["description"], int(r["agents"])) for r in self._rows(_Q["all_skills"])
        ]

    # -- schedules ---------------------------------------------------------------------------

    def upsert_schedule(self, schedule: Schedule) -> None:
        args = (
            schedule.name,
            schedule.task.tenant or DEFAULT_TENANT,
            schedule.next_fire_at,
            _json.encode(schedule).decode(),
        )
        self._upsert_named("upsert_schedule", args, f"schedule name {schedule.name!r}")

    def get_schedule(self, name: str) -> Schedule | None:
        row = self._one(_Q["get_schedule"], (name,))
        return None if row is None else _schedule_decoder.decode(row["doc"])

    def schedules(self) -> list[Schedule]:
        return [_schedule_decoder.decode(r["doc"]) for r in self._rows(_Q["all_schedules"])]

    def delete_schedule(self, name: str) -> bool:
        with self._writing() as conn:
            return conn.execute(_Q["delete_schedule"].encode(), (name,)).rowcount == 1

    def record_fire(
        self,
        schedule: str,
        nominal: str,
        outcome: str,
        task: str | None,
        at: str,
        reason: str | None = None,
    ) -> bool:
        import psycopg

        with self._writing() as conn:
            try:
                with self._refusable(conn):
                    conn.execute(
                        _Q["insert_fire"].encode(),
                        {"schedule": schedule, "nominal": nominal, "outcome": outcome,
                         "task": task, "at": at, "reason": reason},
                    )  # fmt: skip
            except psycopg.errors.UniqueViolation:
                return False
            return True

    def fire_recorded(self, schedule: str, nominal: str) -> bool:
        return self._one(_Q["fire_recorded"], (schedule, nominal)) is not None

    def fires(self, schedule: str, limit: int) -> list[dict[str, Any]]:
        return [dict(r) for r in self._rows(_Q["fires_of"], (schedule, limit))]

    # -- tokens ------------------------------------------------------------------------------

    def insert_token(self, token: Token, secret_hash: str) -> None:
        import psycopg

        with self._writing() as conn, self._naming(conn, "*"):
            try:
                with self._refusable(conn):
                    conn.execute(
                        _Q["insert_token"].encode(),
                        tuple(
                            v.decode() if isinstance(v, bytes) else v
                            for v in token_row(token, secret_hash)
                        ),
                    )
            except psycopg.errors.UniqueViolation as exc:
                raise StoreConflict(f"token id {token.id} is taken; nothing was written") from exc

    def token(self, token_id: str) -> tuple[Token, str] | None:
        # Whatever its tenant: a daemon serving other tenants tells its holder where the
        # token's tenant is served (``not_owner``), rather than that it is unknown.
        row = self._one(_Q["get_token"], (token_id,), tenants="*")
        return None if row is None else (token_from_row(row), row["secret_hash"])

    def tokens(self) -> list[Token]:
        # Every tenant's, as ``token``: agent names are the whole board's (one name, one tenant).
        return [token_from_row(r) for r in self._rows(_Q["all_tokens"], tenants="*")]

    def revoke_token(self, token_id: str, at: str) -> bool:
        with self._writing() as conn:
            return conn.execute(_Q["revoke_token"].encode(), (at, token_id)).rowcount == 1

    def touch_token(self, token_id: str, at: str) -> None:
        self._hold("touch_token", (at, token_id))


def check_shape(conn: psycopg.Connection[dict[str, Any]], location: str) -> None:
    """Refuse, in one line, a board of ``SCHEMA_VERSION`` that lacks a column a board of that
    version has (``_COLUMNS``): made by no release (or changed by hand), it would fail later,
    mid-batch."""
    found: dict[str, set[str]] = {}
    for row in conn.execute(_Q["board_columns"].encode()).fetchall():
        found.setdefault(row["table_name"], set()).add(row["column_name"])
    missing = [
        f"{table}.{column}"
        for table, columns in _COLUMNS.items()
        for column in columns.split()
        if column not in found.get(table, ())
    ]
    if missing:
        more = len(missing) - 5
        shown = ", ".join(missing[:5]) + (f" and {more} more" if more > 0 else "")
        raise ConfigError(
            f"the board at {location} says schema version {SCHEMA_VERSION} but lacks {shown}: "
            "its tables are not those of any release of Colibri; it was left unchanged: "
            "restore it from a backup, or give another schema"
        )


def hive_list(dsn: str) -> list[dict[str, Any]]:
    """The daemons of the board at ``dsn``, oldest first, each with its live leases (``leases``
    rows, ``tenants`` served: ``*`` for the whole board), their epoch and least time left."""
    conn = _connect(dsn)
    try:
        if conn.execute("SELECT to_regclass('hives') AS t").fetchone() == {"t": None}:
            return []
        found = conn.execute(_Q["copy_board_version"].encode()).fetchone()
        version = 0 if found is None else int(found["version"])
        where = shown_location(dsn)
        if version < SCHEMA_VERSION:
            raise ConfigError(
                f"the board at {where} has schema version {version}, older than this Colibri "
                f"reads ({SCHEMA_VERSION}): start a daemon of this version on it (it migrates "
                "the board), or run colibri hive grant with the tables' owner's connection string"
            )
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"the board at {where} has schema version {version}, newer than this Colibri "
                f"understands ({SCHEMA_VERSION}); upgrade colibri"
            )
        check_shape(conn, where)
        rows = [dict(r) for r in conn.execute(_Q["hive_list"].encode()).fetchall()]
    finally:
        conn.close()
    for row in rows:
        # What it serves: "*" (the whole board), or its tenants.
        row["tenants"] = ["*" if n == "board" else n.removeprefix("tenant/") for n in row["leases"]]
    return rows


def hand_over(dsn: str, tenant: str, to: str) -> dict[str, Any]:
    """Mark ``tenant``'s lease to be handed to the sharing daemon whose id starts with ``to``
    (``colibri hive move``): its owner gives it back at its next renewal, and only that daemon
    takes it while it lives. What was marked: tenant, from (owner), to, epoch. Refused, in one
    line and marking nothing, unless both daemons share tenants out and the tenant is served."""
    import psycopg

    from colibri.core.model import check_name

    check_name(tenant, "tenant")
    if not re.fullmatch(r"[0-9a-f-]{1,36}", to):
        raise ConfigError(
            f"--to {shown(to)} is not a daemon's id: give its id, or the start of it, as colibri "
            "hive list shows it"
        )
    where = shown_location(dsn)
    conn = _connect(dsn)
    try:
        with conn.transaction():
            daemons = conn.execute(_Q["live_daemons_like"].encode(), (to + "%",)).fetchall()
            if len(daemons) != 1:
                said = "no daemon of the board" if not daemons else "more than one daemon"
                raise ConfigError(
                    f"{said} has an id starting with {to!r} and beat within its ttl; see "
                    "colibri hive list"
                )
            target = daemons[0]
            if not target["sharing"]:
                raise ConfigError(
                    f"daemon {target['id'][:8]} serves the tenants it was started with, not a "
                    "share: move tenants only to a daemon started with --share"
                )
            held = conn.execute(_Q["lease_of_tenant"].encode(), (tenant,)).fetchone()
            if held is None:
                raise ConfigError(
                    f"no daemon serves tenant {tenant} now (a sharing daemon takes a free tenant "
                    "within seconds); nothing was marked"
                )
            if held["owner"] == target["id"]:
                return {"tenant": tenant, "from": held["owner"], "to": target["id"],
                        "epoch": int(held["epoch"]), "already": True}  # fmt: skip
            if not held["sharing"]:
                raise ConfigError(
                    f"tenant {tenant} is served by daemon {str(held['owner'])[:8]}, which serves "
                    "it by --tenants (or the whole board): stop that daemon to move it; "
                    "nothing was marked"
                )
            marked = conn.execute(
                _Q["lease_hand_over"].encode(), {"to": target["id"], "name": f"tenant/{tenant}"}
            ).fetchone()
            if marked is None:  # (its lease lapsed since it was read)
                raise ConfigError(
                    f"no daemon serves tenant {tenant} now (its lease just lapsed); nothing was "
                    "marked"
                )
    except psycopg.OperationalError as exc:
        raise StorageUnavailable(
            f"the connection to {where} broke ({_first_line(exc)}); run the command again"
        ) from None
    finally:
        conn.close()
    return {"tenant": tenant, "from": held["owner"], "to": target["id"],
            "epoch": int(held["epoch"]), "already": False}  # fmt: skip


def lease_holder_of(dsn: str, tenant: str) -> dict[str, Any] | None:
    """The live lease of ``tenant`` (owner, epoch, sharing), or None."""
    conn = _connect(dsn)
    try:
        row = conn.execute(_Q["lease_of_tenant"].encode(), (tenant,)).fetchone()
        return None if row is None else dict(row)
    finally:
        conn.close()


#: A role's name as ``colibri hive grant`` takes it: an SQL identifier that needs no quoting,
#: not one of PostgreSQL's own (``pg_…``) nor a word it reserves for roles.
_ROLE_NAME = re.compile(r"(?!pg_)[a-z_][a-z0-9_]{0,62}")
_RESERVED_ROLES = frozenset({"public", "none", "current_user", "session_user", "current_role"})


def grant_role(dsn: str, role: str) -> dict[str, Any]:
    """Make ``role`` the one daemons connect as, row-level security binding it: made (LOGIN,
    no password) if it does not exist; refused if PostgreSQL would not hold it to the
    policies — a superuser, BYPASSRLS, the owner of a table of the board or of its schema, a
    member of any of those (it could ``SET ROLE`` to one), or CREATEROLE (it could make itself
    such a member). It may read and write the rows of the board's tables, those of tables later
    migrations make too, and nothing else: whatever it was granted on them before is taken back
    first (no TRUNCATE, which RLS does not govern). Run with the tables' owner's connection
    string: the board is made or migrated first, as a daemon starting on it would."""
    import psycopg
    from psycopg import sql as pgsql

    if not _ROLE_NAME.fullmatch(role) or role in _RESERVED_ROLES:
        raise ConfigError(
            f"role name {shown(role)} is not one this command takes: 1 to 63 of a-z, 0-9 and _, "
            "not starting with a digit or pg_, and not a name PostgreSQL reserves"
        )
    PostgresStore(dsn).close()
    where = shown_location(dsn)
    conn = _connect(dsn)
    try:
        with conn.transaction():
            found = conn.execute(_Q["grant_role_found"].encode(), (role,)).fetchone()
            assert found is not None
            _refuse_unbound(role, found)
            ident, schema = pgsql.Identifier(role), pgsql.Identifier(found["schema"])
            if not found["exists"]:
                conn.execute(pgsql.SQL("CREATE ROLE {} LOGIN").format(ident))
            conn.execute(
                pgsql.SQL("REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {role}").format(
                    schema=schema, role=ident
                )
            )
            # What it still has through a group it is in, or PUBLIC, is not this grant's to
            # take back: refused (TRUNCATE empties a table whatever the policies say).
            beyond = conn.execute(_Q["grant_role_beyond_rows"].encode(), (role,)).fetchone()
            if beyond is not None:
                raise ConfigError(
                    f"role {role} may {beyond['what']} table {beyond['name']} of the board "
                    "through a role it is a member of (or PUBLIC), which row-level security "
                    "does not govern: revoke that first; nothing was granted"
                )
            for statement in (
                "GRANT USAGE ON SCHEMA {schema} TO {role}",
                "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}",
                "ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} "
                "GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {role}",
            ):
                conn.execute(pgsql.SQL(statement).format(schema=schema, role=ident))
            tables = conn.execute(_Q["board_tables_rls"].encode()).fetchall()
    except psycopg.OperationalError as exc:
        raise StorageUnavailable(
            f"the connection to {where} broke ({_first_line(exc)}); nothing was granted: run "
            "the command again"
        ) from None
    except psycopg.errors.InsufficientPrivilege as exc:
        raise ConfigError(
            f"cannot grant {role} the board at {where}: {_first_line(exc)} (connect as the "
            "owner of its tables, with the right to make roles)"
        ) from None
    except psycopg.Error as exc:
        raise ConfigError(
            f"cannot grant {role} the board at {where}: {_first_line(exc)}; nothing was granted"
        ) from None
    finally:
        conn.close()
    return {
        "role": role,
        "created": not found["exists"],
        "schema": found["schema"],
        "board": where,
        "tables": [t["name"] for t in tables],
        "not_forced": [t["name"] for t in tables if not t["forced"]],
    }


def _refuse_unbound(role: str, found: dict[str, Any]) -> None:
    """Refuse a role that row-level security would not bind (``grant_role_found``)."""
    why = None
    if found["me"] == role:
        why = "is the one this command connects as, the tables' owner"
    elif found["superuser"] or found["bypassrls"]:
        why = "is a superuser" if found["superuser"] else "has BYPASSRLS"
    elif found["member_of_unbound"]:
        why = (
            f"is a member of {found['member_of_unbound']}, which row-level security never binds "
            "(or which can make roles)"
        )
    elif found["owns"]:
        why = f"owns table {found['owns']} of the board (or is a member of its owner)"
    elif found["owns_schema"]:
        why = f"owns schema {found['schema']} (or is a member of its owner)"
    elif found["createrole"]:
        why = "has CREATEROLE, with which it can make itself a member of the tables' owner"
    if why is not None:
        raise ConfigError(
            f"role {role} {why}: row-level security would not hold it; give the daemons a role "
            "of their own that owns nothing; nothing was granted"
        )


def live_lease(
    conn: psycopg.Connection[dict[str, Any]], tenant: str | None = None
) -> dict[str, Any] | None:
    """A lease a daemon holds now (by the server's clock) — any, or one that covers ``tenant``
    (its own or the whole board's): its ``owner`` and what to say of it (``said``: the daemon,
    its pid, host and address, the lease, its epoch and time left)."""
    live = conn.execute(_Q["live_lease"].encode(), {"tenant": tenant}).fetchone()
    if live is None:
        return None
    who = f"daemon {str(live['owner'])[:8]}"
    # (A board of schema version 2 has its lease but no table of daemons yet.)
    if conn.execute(_Q["hives_made"].encode()).fetchone() == {"made": True}:
        daemon = conn.execute(_Q["hive_of"].encode(), (live["owner"],)).fetchone()
        if daemon is not None:
            who += f" (pid {daemon['pid']} on {daemon['host']})"
    where = f" at {live['address']}" if live["address"] else ""
    name = str(live["name"])
    lease = "the board's lease" if name == "board" else f"the lease of tenant {name[7:]}"
    said = f"{who}{where} holds {lease} (epoch {live['epoch']}, {float(live['left_s']):.1f}s left)"
    return {"owner": str(live["owner"]), "said": said}


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def lease_names(tenants: tuple[str, ...]) -> list[str]:
    """The lease rows a daemon serving ``tenants`` holds: one per tenant, or the whole board's."""
    return [f"tenant/{t}" for t in tenants] or ["board"]


@dataclass(frozen=True, slots=True)
class Survey:
    """The board's leases and daemons as a sharing daemon plans by (``core.sharing``)."""

    #: Every tenant known (the board's ``tenants``, and ``default``).
    tenants: set[str]
    #: tenant → the daemon whose live lease holds it ("*": a live whole-board lease's tenant).
    owners: dict[str, str]
    #: tenant → the daemon it is to be handed to (``hive move``).
    handovers: dict[str, str]
    #: The live sharing daemons.
    sharing: set[str]
    #: Tenants live daemons started with ``--tenants`` serve or stand by for: not shared out.
    reserved: set[str]


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
        return tuple(sorted(n.removeprefix("tenant/") for n in self.epochs if n != "board"))

    @property
    def fence(self) -> tuple[str, list[str], list[int]]:
        """What the store's batches check (``lease_fence``): this owner, its rows and epochs."""
        held = list(self.epochs.items())  # at once: a taking's thread may add to it meanwhile
        return (self.owner, [n for n, _ in held], [e for _, e in held])

    @property
    def named(self) -> str:
        """The tenants the store's transactions name (row-level security): ``*`` for all; a
        sharing daemon serving none names ``-``, which is no tenant's name."""
        if "board" in self.epochs or not (self.sharing or self.configured):
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
                if self._take([f"tenant/{tenant}"], left if taken else None):
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
        return {n: self.epochs.pop(n) for n in [f"tenant/{t}" for t in tenants] if n in self.epochs}

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
            r["name"].removeprefix("tenant/"): r["owner"]
            for r in rows
            if r["live"] and r["name"].startswith("tenant/")
        }
        if any(r["live"] and r["name"] == "board" for r in rows):
            owners["*"] = next(r["owner"] for r in rows if r["name"] == "board")
        handovers = {
            r["name"].removeprefix("tenant/"): r["handover_to"]
            for r in rows
            if r["handover_to"] is not None and r["name"].startswith("tenant/")
        }
        return Survey(tenants, owners, handovers, sharing, reserved)

    def beat(self) -> None:
        """Say this daemon is there, serving or standing by (``colibri hive list``), and read
        where the other daemons' tenants are served (``elsewhere``)."""
        import os
        import socket

        self._run("hive_beat", {"id": self.owner, "address": self.address,
                                "host": socket.gethostname(), "pid": os.getpid(),
                                "root": self.root, "ttl": self.ttl,
                                "sharing": self.sharing, "agents": self.agents,
                                "tenants": list(self.configured) or None})  # fmt: skip
        self.elsewhere = {
            "*" if row["name"] == "board" else row["name"].removeprefix("tenant/"): row["address"]
            for row in self._run("live_leases", {})
            if row["live"] and row["owner"] != self.owner
        }
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
