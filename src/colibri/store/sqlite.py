"""The embedded SQLite store: one file in WAL mode, written by one thread.

Durability: ``synchronous=FULL`` by default, so a committed (and so acknowledged) task survives
power loss; ``relaxed`` durability (``synchronous=NORMAL``) survives a process crash only.
Writes open with ``BEGIN IMMEDIATE`` so a writer never upgrades a read lock and deadlocks; the
daemon commits many requests at once (group commit), so the fsync is paid once per batch.
``journal_size_limit`` bounds the WAL file after each checkpoint.
"""

from __future__ import annotations

import os
import secrets
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any, TypeVar

import msgspec

from colibri.core.errors import ConfigError, StorageUnavailable
from colibri.core.model import Agent, Cost, LedgerEntry, Task
from colibri.core.schedules import Schedule
from colibri.store import sql
from colibri.store.base import StoreConflict, TaskFilter

#: 'Coli' — marks the file as a Colibri board, so a foreign SQLite file is never written to.
APPLICATION_ID = 0x436F6C69
#: After a checkpoint resets the WAL, a larger file is cut back to this. In steady state the
#: WAL resets at the auto-checkpoint (1,000 pages, just under 4 MiB), so only a reader that
#: pinned it or one huge batch ever makes it grow past the limit, and never for long.
WAL_SIZE_LIMIT = 4 * 1024 * 1024
_Q = sql.load("sqlite")
SCHEMA_VERSION = max(int(name.split("_")[1]) for name in _Q if name.startswith("migration_"))

_json = msgspec.json.Encoder()
_list_decoder = msgspec.json.Decoder(list[str])
_cost_decoder = msgspec.json.Decoder(Cost)
_schedule_decoder = msgspec.json.Decoder(Schedule)

T = TypeVar("T")

_TASK_FIELDS = (
    "id tenant text capabilities workspace agent pinned parent priority min_score state outcome "
    "output error cost attempts max_attempts epoch labels idempotency_key not_before created_at "
    "updated_at"
).split()


def _task_row(task: Task) -> dict[str, Any]:
    return {
        "id": task.id,
        "tenant": task.tenant,
        "text": task.text,
        "capabilities": _json.encode(task.capabilities),
        "workspace": task.workspace,
        "agent": task.agent,
        "pinned": int(task.pinned),
        "parent": task.parent,
        "sender": task.sender,
        "priority": task.priority,
        "min_score": task.min_score,
        "state": task.state,
        "outcome": task.outcome,
        "output": task.output,
        "error": task.error,
        "cost": None if task.cost is None else _json.encode(task.cost),
        "attempts": task.attempts,
        "max_attempts": task.max_attempts,
        "epoch": task.epoch,
        "labels": _json.encode(task.labels),
        "idempotency_key": task.idempotency_key,
        "not_before": task.not_before,
        "schedule": task.schedule,
        "question": task.question,
        "budget_usd": task.budget_usd,
        "created_at": task.created_at,
        "updated_at": task.updated_at,
    }


def _task_from_row(row: sqlite3.Row) -> Task:
    return Task(
        id=row["id"],
        tenant=row["tenant"],
        text=row["text"],
        capabilities=_list_decoder.decode(row["capabilities"]),
        workspace=row["workspace"],
        agent=row["agent"],
        pinned=bool(row["pinned"]),
        parent=row["parent"],
        sender=row["sender"],
        priority=row["priority"],
        min_score=row["min_score"],
        state=row["state"],
        outcome=row["outcome"],
        output=row["output"],
        error=row["error"],
        cost=None if row["cost"] is None else _cost_decoder.decode(row["cost"]),
        attempts=row["attempts"],
        max_attempts=row["max_attempts"],
        epoch=row["epoch"],
        labels=_list_decoder.decode(row["labels"]),
        idempotency_key=row["idempotency_key"],
        not_before=row["not_before"],
        schedule=row["schedule"],
        question=row["question"],
        budget_usd=row["budget_usd"],
        created_at=row["created_at"],
        updated_at=row["updated_at"],
    )


def _ledger_row(entry: LedgerEntry) -> dict[str, Any]:
    return {
        "at": entry.at,
        "task": entry.task,
        "schedule": entry.schedule,
        "tenant": entry.tenant,
        "from_state": entry.from_state,
        "to_state": entry.to_state,
        "agent": entry.agent,
        "epoch": entry.epoch,
        "reason": entry.reason,
        "cost": None if entry.cost is None else _json.encode(entry.cost),
        "uid": entry.uid,
        "pid": entry.pid,
    }


def _ledger_from_row(row: sqlite3.Row) -> LedgerEntry:
    return LedgerEntry(
        seq=row["seq"],
        at=row["at"],
        task=row["task"],
        schedule=row["schedule"],
        tenant=row["tenant"],
        from_state=row["from_state"],
        to_state=row["to_state"],
        agent=row["agent"],
        epoch=row["epoch"],
        reason=row["reason"],
        cost=None if row["cost"] is None else _cost_decoder.decode(row["cost"]),
        uid=row["uid"],
        pid=row["pid"],
    )


#: SQLite result codes that mean the storage, not the statement, is at fault.
_STORAGE_CODES = (
    "SQLITE_FULL", "SQLITE_IOERR", "SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_BUSY",
    "SQLITE_LOCKED", "SQLITE_NOMEM", "SQLITE_PROTOCOL", "SQLITE_CORRUPT", "SQLITE_NOTADB",
)  # fmt: skip


def _is_storage_fault(exc: sqlite3.Error) -> bool:
    return str(getattr(exc, "sqlite_errorname", "")).startswith(_STORAGE_CODES)


def _storage_error(exc: sqlite3.Error) -> StorageUnavailable:
    return StorageUnavailable(f"the board's store could not write ({exc}); nothing was changed")


class SqliteStore:
    def __init__(self, location: str, *, durability: str = "full") -> None:
        self.location = location
        if durability not in ("full", "relaxed"):
            raise ConfigError(f"unknown durability {durability!r}: use full or relaxed")
        # SQLite follows links, and writes the WAL and shared memory beside the board: none of
        # them may be a link planted to make it write elsewhere.
        for companion in ("", "-wal", "-shm", "-journal"):
            if os.path.islink(location + companion):
                raise ConfigError(
                    f"{location + companion} is a symbolic link; give the board's real path "
                    "with --store, or remove the link"
                )
        try:
            fd = os.open(location, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise ConfigError(
                f"{location} cannot be opened for writing ({exc.strerror}); fix its permissions "
                "or pass --store with another path"
            ) from None
        os.close(fd)
        self._conn = sqlite3.connect(
            location, isolation_level=None, check_same_thread=False, cached_statements=256
        )
        self._conn.row_factory = sqlite3.Row
        #: Whether the open batch has written (see ``commit``), and why it was lost if a
        #: storage fault rolled it back (then nothing is written or committed until
        #: ``rollback``).
        self._dirty = False
        self._lost = ""
        try:
            self._check_identity()
            self._conn.execute("PRAGMA journal_mode=WAL")
            # Schema changes are synced whatever the durability: a power cut right after
            # creating a board must not leave a file without its tables.
            self._conn.execute("PRAGMA synchronous=FULL")
            self._conn.execute("PRAGMA busy_timeout=5000")
            self._conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
            self._migrate()
            if durability == "relaxed":
                self._conn.execute("PRAGMA synchronous=NORMAL")
        except sqlite3.DatabaseError as exc:
            self._conn.close()
            raise ConfigError(
                f"{location} is not a usable SQLite board ({exc}); move it aside or pass "
                "--store with another path"
            ) from None
        except BaseException:
            self._conn.close()
            raise

    def _check_identity(self) -> None:
        app_id = self._conn.execute("PRAGMA application_id").fetchone()[0]
        if app_id == APPLICATION_ID:
            return
        tables = self._conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]
        if app_id != 0 or tables:
            self._conn.close()
            raise ConfigError(
                f"{self.location} is an SQLite file of another program, not a Colibri board; "
                "it was left untouched (pass --store with another path)"
            )

    def _migrate(self) -> None:
        version = self._conn.execute("PRAGMA user_version").fetchone()[0]
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"{self.location} has schema version {version}, newer than this Colibri "
                f"understands ({SCHEMA_VERSION}); upgrade colibri"
            )
        for n in range(version + 1, SCHEMA_VERSION + 1):
            self._conn.execute("BEGIN IMMEDIATE")
            try:
                for statement in _split(_Q[f"migration_{n}"]):
                    self._conn.execute(statement)
                self._conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
                self._conn.execute(f"PRAGMA user_version={n}")
                self._conn.execute("COMMIT")
            except BaseException:
                self._conn.execute("ROLLBACK")
                raise

    # -- unit of work ------------------------------------------------------------------------

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        if self._lost:
            raise StorageUnavailable(self._lost)
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
                raise StorageUnavailable(
                    "the board's store lost the batch it was writing (an I/O error or a full "
                    "disk); nothing was changed"
                )
            return
        try:
            self._conn.execute("COMMIT")
            self._dirty = False
        except sqlite3.Error as exc:
            self.rollback()
            raise _storage_error(exc) from None

    def rollback(self) -> None:
        self._dirty = False
        self._lost = ""
        self._abort()

    def _abort(self) -> None:
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
        cursor = conn.execute(_Q["insert_ledger"], _ledger_row(entry))
        entry.seq = cursor.lastrowid or 0
        return entry

    def insert_task(
        self, task: Task, entry: LedgerEntry, fingerprint: str | None = None
    ) -> LedgerEntry:
        row = _task_row(task)
        row["fingerprint"] = fingerprint
        with self._writing() as conn:
            conn.execute(_Q["insert_task"], row)
            return self._ledger(conn, entry)

    def update_task(
        self,
        task: Task,
        expected_state: str,
        expected_epoch: int,
        entry: LedgerEntry,
        *more: LedgerEntry,
    ) -> LedgerEntry:
        row = {
            "id": task.id, "state": task.state, "outcome": task.outcome, "agent": task.agent,
            "output": task.output, "error": task.error,
            "cost": None if task.cost is None else _json.encode(task.cost),
            "attempts": task.attempts, "epoch": task.epoch, "not_before": task.not_before,
            "question": task.question, "updated_at": task.updated_at,
            "expected_state": expected_state,
            "expected_epoch": expected_epoch,
        }  # fmt: skip
        with self._writing() as conn:
            if conn.execute(_Q["update_task"], row).rowcount != 1:
                raise StoreConflict(task.id)
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
        return self._one(_Q["get_task"], (task_id,), _task_from_row)

    def find_idempotent(self, tenant: str, key: str) -> Task | None:
        return self._one(_Q["find_idempotent"], (tenant, key), _task_from_row)

    def claim_key(self) -> bytes:
        """The board's secret for signing claims: made (256 random bits) and committed the
        first time it is asked for, the same ever after."""
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
        where: list[str] = []
        args: list[Any] = []
        for column in ("state", "agent", "workspace", "parent", "tenant"):
            value = getattr(query, column)
            if value is not None:
                where.append(f"{column} = ?")
                args.append(value)
        if query.after is not None:
            where.append("id > ?")
            args.append(query.after)
        text = "SELECT * FROM tasks"
        if where:
            text += " WHERE " + " AND ".join(where)
        text += " ORDER BY id LIMIT ?"
        args.append(query.limit)
        return [_task_from_row(r) for r in self._conn.execute(text, args)]

    def count_children(self, task_id: str) -> int:
        return int(self._conn.execute(_Q["count_children"], (task_id,)).fetchone()[0])

    def children(self, task_id: str) -> list[Task]:
        return [_task_from_row(r) for r in self._conn.execute(_Q["children"], (task_id,))]

    def open_family(self, task_id: str) -> list[Task]:
        return [_task_from_row(r) for r in self._conn.execute(_Q["open_family"], (task_id,))]

    def open_tasks(self) -> list[Task]:
        return [_task_from_row(r) for r in self._conn.execute(_Q["open_tasks"])]

    def count_by_state(self) -> dict[str, int]:
        return {state: n for state, n in self._conn.execute(_Q["count_by_state"])}

    # -- ledger ------------------------------------------------------------------------------

    def ledger(self, after: int, limit: int, task: str | None = None) -> list[LedgerEntry]:
        if task is None:
            rows = self._conn.execute(_Q["ledger_after"], (after, limit))
        else:
            rows = self._conn.execute(_Q["ledger_of_task"], (task, after, limit))
        return [_ledger_from_row(r) for r in rows]

    def max_ledger_seq(self) -> int:
        return int(self._conn.execute(_Q["max_ledger_seq"]).fetchone()[0])

    # -- agents, tenants, skills -------------------------------------------------------------

    def upsert_agent(self, agent: Agent, registered_at: str) -> None:
        with self._writing() as conn:
            conn.execute(
                _Q["upsert_agent"],
                {
                    "name": agent.name,
                    "tenant": agent.tenant,
                    "capabilities": _json.encode(agent.capabilities),
                    "slots": agent.slots,
                    "ttl": agent.ttl,
                    "workspace": agent.workspace,
                    "registered_at": registered_at,
                    "last_seen": agent.last_seen,
                },
            )

    def agents(self) -> list[Agent]:
        return [
            Agent(
                name=r["name"],
                tenant=r["tenant"],
                capabilities=_list_decoder.decode(r["capabilities"]),
                slots=r["slots"],
                ttl=r["ttl"],
                workspace=r["workspace"],
                last_seen=r["last_seen"],
            )
            for r in self._conn.execute(_Q["all_agents"])
        ]

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
        """Record what became of one nominal fire time; False if it was recorded before."""
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
        """Whether a fire of ``schedule`` at ``nominal`` was recorded, whatever became of it."""
        return self._conn.execute(_Q["fire_recorded"], (schedule, nominal)).fetchone() is not None

    def fires(self, schedule: str, limit: int) -> list[dict[str, Any]]:
        return [dict(r) for r in self._conn.execute(_Q["fires_of"], (schedule, limit))]

    COST_KEYS = {
        "agent": "l.agent",
        # a task with no workspace counts for the workspace of the agent that ran it
        "workspace": (
            "COALESCE(t.workspace, (SELECT a.workspace FROM agents a WHERE a.name = l.agent))"
        ),
        "tenant": "l.tenant",
        "day": "substr(l.at, 1, 10)",
    }

    def cost_totals(self, by: str, since: str) -> list[dict[str, Any]]:
        """Cost reported by sessions since ``since`` (RFC 3339), summed per ``by``."""
        query = _Q["cost_totals"].replace("{key}", self.COST_KEYS[by])
        return [
            {
                "key": r["key"],
                "sessions": r["sessions"],
                "usd": r["usd"],
                "tokens_in": int(r["tokens_in"]),
                "tokens_out": int(r["tokens_out"]),
            }
            for r in self._conn.execute(query, (since,))
        ]

    def set_question(self, task_id: str, question: str | None) -> None:
        """A running task's pending question (not a transition: no ledger row)."""
        with self._writing() as conn:
            conn.execute(_Q["set_question"], (question, task_id))

    def append_ledger(self, entry: LedgerEntry) -> LedgerEntry:
        """A ledger row with no task change (a schedule's missed or skipped fire)."""
        with self._writing() as conn:
            return self._ledger(conn, entry)


def _split(script: str) -> list[str]:
    """Split a migration into statements; sqlite3 decides where one is complete."""
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip() and not _only_comments(buffer):
        statements.append(buffer.strip())
    return statements


def _only_comments(statement: str) -> bool:
    return all(not line.strip() or line.strip().startswith("--") for line in statement.splitlines())
