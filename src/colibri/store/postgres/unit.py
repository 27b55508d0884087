"""The PostgreSQL store's unit of work: a batch, its writes held and sent together.

A batch is an explicit ``BEGIN`` … ``COMMIT``, as on SQLite, so reads outside a batch hold no
snapshot. Its writes are held (``defers_writes``): its task inserts and updates, questions,
ledger rows, tenants, skills and token uses wait in memory until the batch's next read, a
write that is sent at once, or its commit, and then go in one pipelined round trip,
consecutive writes of one statement together: task inserts and updates as one statement of
their rows (``bulk``), the others as one ``executemany``. A batch of any size costs two
round trips: its opening (``BEGIN`` and the lease's fence) with its writes, then its
``COMMIT`` (three when it reads before it writes: the opening goes with the first read). The
ledger's ``seq`` is each tenant's own, numbered by the store, not by a sequence (which would
leave gaps on a rollback): the writes move the tenant's row of ``ledger_heads`` past
the batch's rows and number them from it, in the same round trip, and the row stays locked
until the batch ends — so the batches of one tenant number one after another, and those of
different tenants (different daemons) never wait for each other. A held write the rows refuse
(a taken id, a compare-and-set that found the row moved) loses the whole batch where it is sent
(``BatchRefused``): the daemon's memory holds the open tasks, so that is a bug, and it rolls
the batch back. The writes whose answer a caller needs at once (an agent's or schedule's name
of another tenant, a fire recorded twice, a token id taken, a revocation) are sent at once,
each that may be refused under a savepoint, so that the batch's earlier writes stand.

Row-level security: a batch names its tenants (``tenants``) in the statement that opens it
(no round trip of its own); a read outside a batch goes in a transaction of its
own (``StoreConnection._read``).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, NoReturn

from colibri.core.errors import LeaseLost, StorageUnavailable
from colibri.core.leases import BOARD_LEASE, lease_tenant
from colibri.core.model import LedgerEntry
from colibri.store.base import BatchRefused
from colibri.store.postgres import bulk, numbering
from colibri.store.postgres.connected import StoreConnection
from colibri.store.postgres.connection import _NAME_TENANTS, _first_line
from colibri.store.postgres.schema import _Q
from colibri.store.rows import ledger_row

if TYPE_CHECKING:
    import psycopg

#: The unique indexes of ``tasks`` and what a violation of each means.
_TAKEN = {
    "tasks_pkey": "a task id is taken",
    "tasks_idempotency": "a tenant's idempotency key is taken",
}
#: What every write transaction takes first (after the fence): what tells its outcome if the
#: COMMIT's answer is lost — the transaction's id, its backend and the server's start
#: (``PostgresStore._outcome``) — and the tenants it names.
_OPENING = (
    b"SELECT txid_current() AS xid, "
    b"pg_backend_pid() AS backend, pg_postmaster_start_time() AS started, "
    b"set_config('colibri.tenants', %s, true) AS tenants "
    # Set first (the FROM is evaluated before the list): how long the batch waits for a lock
    # (a tenant's ledger head, held by a batch of a daemon that lost its lease), and how long
    # its transaction may sit idle (its daemon stopped mid-batch) before the server ends it —
    # and with it the locks it holds.
    b"FROM (SELECT set_config('lock_timeout', %s, true), "
    b"set_config('idle_in_transaction_session_timeout', %s, true)) AS bounded"
)


@dataclass
class _Batch:
    """One batch as this side knows it, from its first write to its end."""

    #: Written to: not yet committed or rolled back.
    dirty: bool = False
    #: Its transaction is open on the server (``_begin``), not only in ``writes``.
    begun: bool = False
    #: Its writes not yet sent (``defers_writes``), in order, consecutive ones of one statement
    #: together; and its ledger rows, numbered as they are sent.
    writes: list[_Write] = field(default_factory=list)
    unsent: list[LedgerEntry] = field(default_factory=list)
    #: Its transaction id, backend and server start (``_opened_as``), and its first ledger row:
    #: what tells its outcome if its COMMIT's answer is lost.
    opened: dict[str, Any] | None = None
    first_row: dict[str, Any] | None = None


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


def _leases_lost(fence: tuple[str, list[str], list[int]], held: set[str]) -> str:
    """Which of the fence's leases (``board``, ``tenant/acme``) were not found held."""
    lost = [
        ("on the board" if name == BOARD_LEASE else f"of tenant {lease_tenant(name)}")
        + f" (epoch {epoch})"
        for name, epoch in zip(fence[1], fence[2], strict=True)
        if name not in held
    ]
    leases = "lease" if len(lost) == 1 else "leases"
    return f"this daemon's {leases} {', '.join(lost)} passed to another daemon (or expired)"


def _text(row: dict[str, Any]) -> dict[str, Any]:
    """``rows.py`` writes JSON as bytes (SQLite's BLOB-or-TEXT); PostgreSQL's columns are text."""
    return {k: (v.decode() if isinstance(v, bytes) else v) for k, v in row.items()}


class UnitOfWork(StoreConnection):
    """A ``PostgresStore``'s batches: opened, written to (held, or at once), read within, and
    ended; lost as a whole when any part of one fails (``_lost``), until ``rollback``."""

    def __init__(
        self, dsn: str, *, durability: str = "full", lease_ttl: float | None = None
    ) -> None:
        super().__init__(dsn, durability=durability, lease_ttl=lease_ttl)
        #: The batch being written to (one committing aside has its own: ``commit_aside``).
        self._batch = _Batch()
        #: ``(owner, lease rows, their epochs)`` of the leases this store writes under
        #: (``BoardLease.fence``): every batch checks them first, holding the rows so that no
        #: takeover can commit in between.
        self.fence: tuple[str, list[str], list[int]] | None = None
        #: The tenants this store's transactions name for row-level security: ``*`` is every one.
        self.tenants = "*"
        #: What a lost batch's calls raise: the storage failed, the lease passed, or a write
        #: was refused as it was sent.
        self._lost_as: type[Exception] = StorageUnavailable

    def _begin(self, batch: _Batch) -> None:
        """Open the batch's transaction on the server, in one round trip: ``BEGIN``, the
        lease's fence, and the statement that names the batch's tenants."""
        with self._conn.pipeline():
            opening = self._opening()
        self._opened_as(batch, *opening)

    def _opening(self) -> tuple[Any, Any]:
        """The statements that open the batch's transaction, into the pipeline under way:
        ``_opened_as`` reads their answers once it is through."""
        conn = self._conn
        conn.execute(b"BEGIN")
        fenced = None
        if self.fence is not None:
            fenced = conn.execute(_Q["lease_fence"].encode(), self.fence)
        # The transaction's id, its backend and the server's start: if the connection breaks
        # while the COMMIT is on its way, PostgreSQL can still say whether it committed
        # (``_outcome``).
        return fenced, conn.execute(_OPENING, (self.tenants, *self.bounds))

    def _opened_as(self, batch: _Batch, fenced: Any, opened: Any) -> None:
        """The batch's transaction opened: its fence held (or the batch lost, ``LeaseLost``,
        and its transaction ended, whatever went with it into the pipeline)."""
        import psycopg

        conn = self._conn
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
        batch.opened = opened.fetchone()
        batch.begun = True

    @contextmanager
    def _writing(self) -> Iterator[psycopg.Connection[dict[str, Any]]]:
        """A write sent at once, inside the batch's transaction: the writes held before it
        go first (``_send``), so the order of the batch is kept."""
        import psycopg

        self._join()
        self._check_lost()
        self._send(self._batch)
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
        batch = self._batch
        batch.dirty = True
        last = batch.writes[-1] if batch.writes else None
        if last is not None and last.query == query and last.tenants == tenants:
            last.rows.append(row)
        else:
            batch.writes.append(_Write(query, [row], kind, tenants))

    def _send(self, batch: _Batch) -> None:
        """Send what the batch holds, in one pipelined round trip (after ``_begin``, once a
        batch): its writes in order, then its ledger rows, numbered now. A write refused
        here — a task id or idempotency key taken, a compare-and-set that found the row
        moved — loses the whole batch: ``BatchRefused``, and every later call of the batch
        raises until ``rollback``. So does anything else that stops a sending half-way: what
        reached the server of it may be applied, what did not is not."""
        import psycopg

        self._check_lost()
        batch.dirty = True
        conn = self._conn
        try:
            opening = None
            if not batch.writes and not batch.unsent:
                if not batch.begun:
                    self._begin(batch)
                return
            writes, batch.writes = batch.writes, []
            entries, batch.unsent = batch.unsent, []
            by_tenant = numbering.by_tenant(entries)
            heads: list[psycopg.Cursor[dict[str, Any]]] = []
            counted: list[tuple[int, psycopg.Cursor[dict[str, Any]]]] = []
            with conn.pipeline():
                if not batch.begun:
                    # Opened in the round trip of the writes: the fence is read with them,
                    # and a batch that finds it lost is rolled back before anything commits.
                    opening = self._opening()
                for write in writes:
                    if write.tenants:
                        conn.execute(_NAME_TENANTS, (write.tenants,))
                    counted.extend(self._execute(write))
                    if write.tenants:
                        conn.execute(_NAME_TENANTS, (self.tenants,))
                # Each tenant's rows numbered from its head (in name order: batches that
                # share tenants lock their heads alike).
                for columns in by_tenant.values():
                    heads.append(conn.execute(numbering.INSERT_LEDGER, columns))
            if opening is not None:
                self._opened_as(batch, *opening)
        except LeaseLost:
            raise  # (the batch is lost already, as a lease lost)
        except psycopg.errors.UniqueViolation as exc:
            taken = _TAKEN.get(exc.diag.constraint_name or "")
            if taken is None:
                self._refused(_first_line(exc), exc)
            # (Row-level security keeps the key's value out of the server's message.)
            inserted = [row.id for write in writes if write.query == "insert_task"
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
        if entries:
            self._numbered(batch, entries, by_tenant, heads)
        expected = sum(n for n, _ in counted)
        moved = sum(n - max(cursor.rowcount, 0) for n, cursor in counted)
        if moved:
            self._refused(
                f"{moved} of the batch's {expected} task updates found the row in another "
                "state or epoch than expected, or no such task",
                None,
            )

    def _execute(self, write: _Write) -> list[tuple[int, psycopg.Cursor[dict[str, Any]]]]:
        """Send one held write into the pipeline under way: as one statement of its rows
        (``bulk``), or one execution a row. For a compare-and-set, what each statement must
        change: its rows, and its cursor, which says how many it did."""
        conn, sent = self._conn, []
        as_one = bulk.AS_ONE.get(write.query)
        if as_one is not None:
            joined = write.query in bulk.JOINED
            if joined:
                conn.execute(bulk.BY_INDEX)
            for rows in bulk.chunks(write.rows):
                sent.append((len(rows), conn.execute(as_one, bulk.parameters(rows))))
            if joined:
                for reset in bulk.AS_BEFORE:
                    conn.execute(reset)
        else:
            cursor = conn.cursor()
            if len(write.rows) == 1:
                cursor.execute(_Q[write.query].encode(), write.rows[0])
            else:
                cursor.executemany(_Q[write.query].encode(), write.rows)
            sent.append((len(write.rows), cursor))
        return sent if write.kind == "compare-and-set" else []

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

    def _lose(self, exc: Exception) -> None:
        error = StorageUnavailable(
            f"the PostgreSQL board could not write ({_first_line(exc)}); nothing was changed"
        )
        self._lost, self._lost_as = error.message, StorageUnavailable
        raise error from None

    def _end_batch(self) -> None:
        self._batch = _Batch()

    def _rows(self, query: str, args: Any = (), tenants: str = "") -> list[dict[str, Any]]:
        """The rows of a read, seen as the store's ``tenants`` see them (or as ``tenants``)."""
        import psycopg

        self._join()
        self._check_lost()
        try:
            if not self._batch.dirty:
                return self._read(query.encode(), args, tenants or self.tenants)
            self._send(self._batch)  # what the batch holds, so that the read sees it
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
            if self._batch.dirty:  # and the batch went with the connection
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

    def _one(self, query: str, args: Any = (), tenants: str = "") -> dict[str, Any] | None:
        rows = self._rows(query, args, tenants)
        return rows[0] if rows else None

    def _numbered(
        self,
        batch: _Batch,
        entries: list[LedgerEntry],
        by_tenant: dict[str, dict[str, Any]],
        heads: list[psycopg.Cursor[dict[str, Any]]],
    ) -> None:
        numbering.numbered(entries, by_tenant, heads)
        if batch.first_row is None:
            batch.first_row = {**_text(ledger_row(entries[0])), "seq": entries[0].seq}

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
