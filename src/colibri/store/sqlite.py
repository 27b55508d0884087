"""The embedded SQLite store: one file in WAL mode, written by one thread.

Durability: ``synchronous=FULL`` by default, so a committed (and so acknowledged) task survives
power loss; ``relaxed`` durability (``synchronous=NORMAL``) survives a process crash only.
Writes open with ``BEGIN IMMEDIATE`` so a writer never upgrades a read lock and deadlocks; the
daemon commits many requests at once (group commit), so the fsync is paid once per batch.
``journal_size_limit`` bounds the WAL file after each checkpoint.
"""

from __future__ import annotations

import secrets
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import msgspec

from colibri.core.errors import StorageUnavailable
from colibri.core.model import Agent, LedgerEntry, Task
from colibri.core.schedules import Schedule
from colibri.core.tokens import Token
from colibri.store import sql
from colibri.store.base import StoreConflict
from colibri.store.rows import (
    agent_from_row,
    agent_row,
    ledger_from_row,
    ledger_values,
    task_change_values,
    task_from_row,
    task_values,
    token_from_row,
    token_row,
)
from colibri.store.sqlite_schema import open_board
from colibri.store.task_query import TaskFilter

_Q = sql.load("sqlite")
_json = msgspec.json.Encoder()
_schedule_decoder = msgspec.json.Decoder(Schedule)

T = TypeVar("T")


#: SQLite result codes that mean the storage, not the statement, is at fault.
_STORAGE_CODES = (
    "SQLITE_FULL", "SQLITE_IOERR", "SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_BUSY",
    "SQLITE_LOCKED", "SQLITE_NOMEM", "SQLITE_PROTOCOL", "SQLITE_CORRUPT", "SQLITE_NOTADB",
)  # fmt: skip


#: What a uniqueness violation inserting a task means, by its SQLite extended result code.
_TAKEN = {
    "SQLITE_CONSTRAINT_PRIMARYKEY": "task id {task.id} is taken; the task was not written",
    "SQLITE_CONSTRAINT_UNIQUE": (
        "tenant {task.tenant} has a task with idempotency key {task.idempotency_key!r}; "
        "task {task.id} was not written"
    ),
}


def _is_storage_fault(exc: sqlite3.Error) -> bool:
    return str(getattr(exc, "sqlite_errorname", "")).startswith(_STORAGE_CODES)


def _storage_error(exc: sqlite3.Error) -> StorageUnavailable:
    return StorageUnavailable(f"the board's store could not write ({exc}); nothing was changed")


#: SQLite's extended code for a failed fsync (``SQLITE_IOERR_FSYNC``): at a COMMIT in WAL mode
#: the batch's frames, commit frame included, are in the WAL file already, and a crash before
#: the next commit would let recovery replay them.
_FSYNC_FAILED = 1034
_IN_DOUBT = (
    "the disk did not confirm this batch ({why}), so whether it was written is not known until "
    "the board's store can write again; retry with the same idempotency key, or look the task "
    "up once the daemon serves again"
)

#: A batch written to whose transaction SQLite rolled back by itself.
_ROLLED_BACK_BY_SQLITE = (
    "the board's store lost the batch it was writing (an I/O error or a full disk); nothing "
    "was changed"
)


class SqliteStore:
    """The ``Store`` on an SQLite file; each method keeps the contract ``store.base`` states."""

    #: Each write is applied when it is called: SQLite is in the process, a write costs no
    #: round trip to hold back.
    defers_writes = False

    def __init__(self, location: str, *, durability: str = "full") -> None:
        self.location = location
        self._conn = open_board(location, durability)
        #: Whether the open batch has written (see ``commit``), and why it was lost if a
        #: storage fault rolled it back (then nothing is written or committed until
        #: ``rollback``).
        self._dirty = False
        self._lost = ""
        #: Why a batch whose COMMIT's sync failed is still in doubt ("" when none is).
        self._in_doubt = ""
        #: The next ledger seq of the open batch (known once the batch has written a row), and
        #: the batch's ledger rows, numbered but not yet written: they go in one
        #: ``executemany`` before the commit, or before a read of the ledger.
        self._next_seq: int | None = None
        self._unsent: list[tuple[Any, ...]] = []

    # -- unit of work ------------------------------------------------------------------------

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        if self._lost:
            raise StorageUnavailable(self._lost)
        if self._dirty and not self._conn.in_transaction:
            # SQLite rolled the batch back by itself (an I/O error or a full disk met by a
            # read): what it wrote is gone, so nothing more may be written into a new
            # transaction and committed as if the batch were whole.
            self._lose_batch(_ROLLED_BACK_BY_SQLITE)
        try:
            if not self._conn.in_transaction:
                self._conn.execute("BEGIN IMMEDIATE")
            self._dirty = True
            yield self._conn
        except sqlite3.OperationalError as exc:
            if not _is_storage_fault(exc):
                raise  # a bug in a statement, not a storage problem: reported as internal
            # The batch's earlier writes are gone with it: until the caller gives the batch
            # up (``rollback``), nothing more is written and nothing commits — a write that
            # came after it must not commit on its own and pass for the whole batch.
            self._abort()
            error = _storage_error(exc)
            self._lost = error.message
            raise error from None

    def commit(self) -> None:
        if self._lost:
            raise StorageUnavailable(self._lost)
        if not self._conn.in_transaction:
            if self._dirty:
                # Written to, and no transaction left to commit: SQLite rolled it back by
                # itself (an I/O error or a full disk met by a read's cache spill, say). The
                # writes are gone: say so, never let them be acknowledged.
                self._dirty = False
                self._forget_ledger()
                raise StorageUnavailable(_ROLLED_BACK_BY_SQLITE)
            return
        try:
            self._send_ledger()
            self._conn.execute("COMMIT")
            self._dirty = False
        except sqlite3.Error as exc:
            self.rollback()
            if getattr(exc, "sqlite_errorcode", None) == _FSYNC_FAILED:
                # Written to the WAL, not confirmed on disk: neither committed nor not, as far
                # as the daemon can tell. Settled (a later commit overwrites its frames), it
                # did not happen; until then it is in doubt, and nothing is read again.
                self._in_doubt = _IN_DOUBT.format(why=exc)
                if not self._settle():
                    raise StorageUnavailable(self._in_doubt) from None
            raise _storage_error(exc) from None
        self._next_seq = None

    def _settle(self) -> bool:
        """After a COMMIT whose sync failed: commit a write of our own, synced. Its frames go
        where the failed batch's are (SQLite writes at the end of what it knows committed), so
        once it is on disk no recovery can replay the failed batch: it did not happen. True
        then; False while the disk still fails (the batch stays in doubt)."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.execute(_Q["put_settled"], (f"{time.time():.6f}".encode(),))
            self._conn.execute("COMMIT")
        except sqlite3.Error:
            self._abort()
            return False
        self._in_doubt = ""
        return True

    def rollback(self) -> None:
        self._dirty = False
        self._lost = ""
        self._abort()
        if self._in_doubt and not self._settle():
            # Read again now, the board could hold a batch that a crash would bring back.
            raise StorageUnavailable(self._in_doubt)

    def reachable(self) -> None:
        return  # a file on this host: whether it can be written, the next batch says

    def heed_deadline(self, deadline: Callable[[], float]) -> None:
        return  # no lease: a board of SQLite is this host's alone

    def _lose_batch(self, why: str) -> None:
        """Give the open batch up: nothing of it commits until ``rollback``."""
        self._abort()
        self._lost = why
        raise StorageUnavailable(why)

    def _forget_ledger(self) -> None:
        self._next_seq = None
        self._unsent.clear()

    def _abort(self) -> None:
        self._forget_ledger()
        if self._conn.in_transaction:
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # SQLite may already have rolled back by itself (e.g. on SQLITE_FULL)

    def close(self) -> None:
        try:
            self.rollback()
        except sqlite3.ProgrammingError:
            return  # already closed
        self._conn.close()

    # -- tasks -------------------------------------------------------------------------------

    def _ledger(self, conn: sqlite3.Connection, entry: LedgerEntry) -> LedgerEntry:
        """Number a ledger row (one more than the highest: the batch holds the write lock, so
        nobody else numbers meanwhile) and keep it for ``_send_ledger``."""
        if self._next_seq is None:
            self._next_seq = int(conn.execute(_Q["max_ledger_seq"]).fetchone()[0]) + 1
        entry.seq = self._next_seq
        self._next_seq += 1
        self._unsent.append((entry.seq, *ledger_values(entry)))
        return entry

    def _send_ledger(self) -> None:
        """Write the batch's numbered ledger rows, all in one ``executemany`` (one prepared
        statement stepped in C, not a Python call per row)."""
        if self._unsent:
            rows, self._unsent = self._unsent, []
            self._conn.executemany(_Q["insert_ledger"], rows)

    def _ledger_read(self) -> None:
        """Before a read of the ledger: the batch's own rows are part of what it reads. If they
        cannot be written, the batch is lost (a read must not leave half its rows behind)."""
        if self._unsent:
            try:
                with self._writing():
                    self._send_ledger()
            except sqlite3.Error as exc:
                self._lose_batch(f"the board's store could not write its ledger rows ({exc}); "
                                 "nothing was changed")  # fmt: skip

    def insert_task(
        self, task: Task, entry: LedgerEntry, fingerprint: str | None = None
    ) -> LedgerEntry:
        values = (*task_values(task), fingerprint)
        with self._writing() as conn:
            try:
                conn.execute(_Q["insert_task"], values)
            except sqlite3.IntegrityError as exc:
                # Only this statement is undone (SQLite aborts the statement, not the
                # transaction): the batch's earlier writes stand, as the contract says.
                taken = _TAKEN.get(exc.sqlite_errorname)
                if taken is None:
                    raise  # a column the model never leaves empty: a bug, not a conflict
                raise StoreConflict(taken.format(task=task)) from exc
            return self._ledger(conn, entry)

    def update_task(
        self,
        task: Task,
        expected_state: str,
        expected_epoch: int,
        entry: LedgerEntry,
        *more: LedgerEntry,
    ) -> LedgerEntry:
        values = (*task_change_values(task), task.id, expected_state, expected_epoch)
        with self._writing() as conn:
            if conn.execute(_Q["update_task"], values).rowcount != 1:
                raise StoreConflict(
                    f"task {task.id} is not {expected_state} at epoch {expected_epoch} "
                    "(or does not exist); it was not written"
                )
            first = self._ledger(conn, entry)
            for extra in more:  # further rows of the same change, in order (e.g. done, closed)
                self._ledger(conn, extra)
            return first

    def _one(
        self, query: str, args: tuple[Any, ...], convert: Callable[[sqlite3.Row], T]
    ) -> T | None:
        row = self._conn.execute(query, args).fetchone()
        return None if row is None else convert(row)

    def get_task(self, task_id: str) -> Task | None:
        return self._one(_Q["get_task"], (task_id,), task_from_row)

    def find_idempotent(self, tenant: str, key: str) -> Task | None:
        return self._one(_Q["find_idempotent"], (tenant, key), task_from_row)

    def claim_key(self) -> bytes:
        row = self._conn.execute(_Q["get_meta"], ("claim_key",)).fetchone()
        if row is not None:
            return bytes(row[0])
        with self._writing() as conn:
            conn.execute(_Q["put_meta"], ("claim_key", secrets.token_bytes(32)))
        self.commit()
        return bytes(self._conn.execute(_Q["get_meta"], ("claim_key",)).fetchone()[0])

    def fingerprint(self, task_id: str) -> str | None:
        row = self._conn.execute(_Q["fingerprint"], (task_id,)).fetchone()
        return None if row is None else row[0]

    def list_tasks(self, query: TaskFilter) -> list[Task]:
        text, args = sql.list_tasks_query(query, "?")
        return [task_from_row(r) for r in self._conn.execute(text, args)]

    def count_children(self, task_id: str) -> int:
        return int(self._conn.execute(_Q["count_children"], (task_id,)).fetchone()[0])

    def children(self, task_id: str) -> list[Task]:
        return [task_from_row(r) for r in self._conn.execute(_Q["children"], (task_id,))]

    def open_family(self, task_id: str) -> list[Task]:
        return [task_from_row(r) for r in self._conn.execute(_Q["open_family"], (task_id,))]

    def open_tasks(self) -> list[Task]:
        return [task_from_row(r) for r in self._conn.execute(_Q["open_tasks"])]

    def count_tasks(self, query: TaskFilter) -> int:
        text, args = sql.count_tasks_query(query, "?")
        return int(self._conn.execute(text, args).fetchone()[0])

    def count_by_state(self) -> dict[str, int]:
        return {state: n for state, n in self._conn.execute(_Q["count_by_state"])}

    def count_by_outcome(self) -> dict[str, int]:
        return {outcome: n for outcome, n in self._conn.execute(_Q["count_by_outcome"])}

    # -- ledger ------------------------------------------------------------------------------

    def ledger(
        self, after: int, limit: int, task: str | None = None, tenant: str | None = None
    ) -> list[LedgerEntry]:
        self._ledger_read()
        if task is not None:
            rows = self._conn.execute(_Q["ledger_of_task"], (task, tenant, tenant, after, limit))
        elif tenant is not None:
            rows = self._conn.execute(_Q["ledger_of_tenant"], (tenant, after, limit))
        else:
            rows = self._conn.execute(_Q["ledger_after"], (after, limit))
        return [ledger_from_row(r) for r in rows]

    def max_ledger_seq(self) -> int:
        self._ledger_read()
        return int(self._conn.execute(_Q["max_ledger_seq"]).fetchone()[0])

    # -- agents, tenants, skills -------------------------------------------------------------

    def upsert_agent(self, agent: Agent, registered_at: str) -> None:
        with self._writing() as conn:
            conn.execute(_Q["upsert_agent"], agent_row(agent, registered_at))

    def agents(self) -> list[Agent]:
        return [agent_from_row(r) for r in self._conn.execute(_Q["all_agents"])]

    def ensure_tenant(self, name: str, at: str) -> None:
        with self._writing() as conn:
            conn.execute(_Q["ensure_tenant"], (name, at))

    def ensure_skills(self, names: list[str]) -> None:
        with self._writing() as conn:
            conn.executemany(_Q["ensure_skill"], [(n,) for n in names])

    def describe_skill(self, name: str, description: str) -> None:
        with self._writing() as conn:
            conn.execute(_Q["describe_skill"], (name, description))

    def skills(self) -> list[tuple[str, str, int]]:
        return [(r[0], r[1], r[2]) for r in self._conn.execute(_Q["all_skills"])]

    # -- schedules ---------------------------------------------------------------------------

    def upsert_schedule(self, schedule: Schedule) -> None:
        with self._writing() as conn:
            conn.execute(
                _Q["upsert_schedule"],
                (schedule.name, schedule.next_fire_at, _json.encode(schedule)),
            )

    def get_schedule(self, name: str) -> Schedule | None:
        row = self._conn.execute(_Q["get_schedule"], (name,)).fetchone()
        return None if row is None else _schedule_decoder.decode(row[0])

    def schedules(self) -> list[Schedule]:
        return [_schedule_decoder.decode(r[0]) for r in self._conn.execute(_Q["all_schedules"])]

    def delete_schedule(self, name: str) -> bool:
        with self._writing() as conn:
            return conn.execute(_Q["delete_schedule"], (name,)).rowcount == 1

    def record_fire(
        self,
        schedule: str,
        nominal: str,
        outcome: str,
        task: str | None,
        at: str,
        reason: str | None = None,
    ) -> bool:
        with self._writing() as conn:
            try:
                conn.execute("SAVEPOINT fire")
                conn.execute(_Q["insert_fire"], (schedule, nominal, outcome, task, at, reason))
            except sqlite3.IntegrityError:
                conn.execute("ROLLBACK TO fire")
                return False
            finally:
                conn.execute("RELEASE fire")
            return True

    def fire_recorded(self, schedule: str, nominal: str) -> bool:
        return self._conn.execute(_Q["fire_recorded"], (schedule, nominal)).fetchone() is not None

    def fires(self, schedule: str, limit: int) -> list[dict[str, Any]]:
        return [dict(r) for r in self._conn.execute(_Q["fires_of"], (schedule, limit))]

    def cost_totals(self, by: str, since: str, tenant: str | None = None) -> list[dict[str, Any]]:
        self._ledger_read()
        query = sql.cost_query(_Q["cost_totals"], by)
        # One tenant's by its own rows (an index); a condition the planner cannot drop
        # (``? IS NULL OR …``) would read every tenant's.
        query = query.replace("{tenant}", "" if tenant is None else "AND l.tenant = ?")
        args = (since,) if tenant is None else (since, tenant)
        return [
            {
                "key": r["key"],
                "sessions": r["sessions"],
                "usd": r["usd"],
                "tokens_in": int(r["tokens_in"]),
                "tokens_out": int(r["tokens_out"]),
            }
            for r in self._conn.execute(query, args)
        ]

    def set_question(self, task_id: str, question: str | None) -> None:
        with self._writing() as conn:
            conn.execute(_Q["set_question"], (question, task_id))

    def append_ledger(self, entry: LedgerEntry) -> LedgerEntry:
        with self._writing() as conn:
            return self._ledger(conn, entry)

    # -- tokens ------------------------------------------------------------------------------

    def insert_token(self, token: Token, secret_hash: str) -> None:
        with self._writing() as conn:
            try:
                conn.execute(_Q["insert_token"], token_row(token, secret_hash))
            except sqlite3.IntegrityError as exc:
                raise StoreConflict(f"token id {token.id} is taken; nothing was written") from exc

    def token(self, token_id: str) -> tuple[Token, str] | None:
        row = self._conn.execute(_Q["get_token"], (token_id,)).fetchone()
        return None if row is None else (token_from_row(row), row["secret_hash"])

    def tokens(self) -> list[Token]:
        return [token_from_row(r) for r in self._conn.execute(_Q["all_tokens"])]

    def revoke_token(self, token_id: str, at: str) -> bool:
        with self._writing() as conn:
            return conn.execute(_Q["revoke_token"], (at, token_id)).rowcount == 1

    def touch_token(self, token_id: str, at: str) -> None:
        with self._writing() as conn:
            conn.execute(_Q["touch_token"], (at, token_id))
