"""The embedded SQLite store: one file in WAL mode, written by one thread.

How a batch is opened, written and committed is ``sqlite_unit``'s; here are the ``Store``
contract's methods as the statements of ``sql/sqlite.sql``.
"""

from __future__ import annotations

import secrets
import sqlite3
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

import msgspec

from colibri.core import cursor
from colibri.core.model import Agent, LedgerEntry, Task
from colibri.core.schedules import Schedule
from colibri.core.tokens import Token
from colibri.store import sql
from colibri.store.base import StoreConflict
from colibri.store.rows import (
    agent_from_row,
    agent_row,
    encode_list,
    ledger_from_row,
    task_change_values,
    task_from_row,
    task_values,
    token_from_row,
    token_row,
)
from colibri.store.sqlite_unit import _Q as _Q
from colibri.store.sqlite_unit import SqliteUnitOfWork
from colibri.store.task_query import TaskFilter

_json = msgspec.json.Encoder()
_schedule_decoder = msgspec.json.Decoder(Schedule)

T = TypeVar("T")


#: What a uniqueness violation inserting a task means, by its SQLite extended result code.
_TAKEN = {
    "SQLITE_CONSTRAINT_PRIMARYKEY": "task id {task.id} is taken; the task was not written",
    "SQLITE_CONSTRAINT_UNIQUE": (
        "tenant {task.tenant} has a task with idempotency key {task.idempotency_key!r}; "
        "task {task.id} was not written"
    ),
}


def ledger_of(
    conn: sqlite3.Connection, after: Mapping[str, int], limit: int, task: str | None = None,
    tenant: str | None = None,
) -> list[LedgerEntry]:  # fmt: skip
    """``Store.ledger`` on a connection to a board (the store's, or a read-only one)."""
    if task is not None:
        rows = conn.execute(_Q["ledger_of_task"], (task, tenant, tenant))
        return [e for e in map(ledger_from_row, rows) if cursor.unread(after, e)][:limit]
    tenants = [tenant] if tenant is not None else [r[0] for r in conn.execute(_Q["ledger_heads"])]
    streams = [
        [ledger_from_row(r) for r in conn.execute(
            _Q["ledger_of_tenant"], (name, after.get(name, 0), limit))]
        for name in tenants
    ]  # fmt: skip
    return cursor.merged(streams, limit)


class SqliteStore(SqliteUnitOfWork):
    """The ``Store`` on an SQLite file; each method keeps the contract ``store.base`` states."""

    #: Each write is applied when it is called: SQLite is in the process, a write costs no
    #: round trip to hold back.
    defers_writes = False

    # -- tasks -------------------------------------------------------------------------------

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
        self, after: Mapping[str, int], limit: int, task: str | None = None,
        tenant: str | None = None,
    ) -> list[LedgerEntry]:  # fmt: skip
        self._ledger_read()
        return ledger_of(self._conn, after, limit, task, tenant)

    def ledger_heads(self) -> dict[str, int]:
        self._ledger_read()
        return {tenant: int(seq) for tenant, seq in self._conn.execute(_Q["ledger_heads"])}

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

    def set_after(self, task_id: str, after: list[str]) -> None:
        with self._writing() as conn:
            conn.execute(_Q["set_after"], (encode_list(after), task_id))

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
