"""``PostgresStore``: the ``Store`` contract's methods as the statements of ``postgresql.sql``.

Row-level security (migration 5): every row is seen and written only by a transaction that
named its tenants — ``set_config('colibri.tenants', …, true)``, for that transaction alone,
never for the connection. ``PostgresStore.tenants`` is what this store names: ``*``, every
tenant, while one daemon serves the whole board. Rows that are the whole board's (tokens,
tenants' names) are read and written with every tenant named (``_naming``).
"""

from __future__ import annotations

import secrets
from collections.abc import Mapping
from operator import attrgetter
from typing import Any

import msgspec

from colibri.core import cursor
from colibri.core.errors import ConfigError
from colibri.core.model import DEFAULT_TENANT, Agent, LedgerEntry, Task
from colibri.core.schedules import Schedule
from colibri.core.states import State
from colibri.core.tokens import Token
from colibri.store import sql
from colibri.store.base import StoreConflict
from colibri.store.postgres import bulk
from colibri.store.postgres.commit import Committing
from colibri.store.postgres.schema import _Q, migrate
from colibri.store.postgres.unit import _text
from colibri.store.rows import (
    agent_from_row,
    agent_row,
    encode_list,
    ledger_from_row,
    task_from_row,
    token_from_row,
    token_row,
)
from colibri.store.task_query import TaskFilter

_json = msgspec.json.Encoder()
_schedule_decoder = msgspec.json.Decoder(Schedule)
#: The rows a read finds: those of the tenants named (the queries of postgresql.sql say it too),
#: also on a connection row-level security does not bind (a superuser's).
_SEEN = "colibri_sees(tenant)"
_SEQ = attrgetter("seq")
#: The open tasks, as rows named ``tasks``: no index of tasks holds the state (a transition's
#: update would write a new entry into it), so a read of tasks in an open state goes by the
#: ids of ``open_tasks`` (migration_12), in their order, rather than through every task.
_OPEN_TASKS = "(SELECT t.* FROM open_tasks o JOIN tasks t ON t.id = o.id) AS tasks"


def _read_for(query: TaskFilter) -> str:
    """The rows a task query reads: the open tasks' when it asks for a state of theirs."""
    return _OPEN_TASKS if query.state not in (None, State.CLOSED) else "tasks"


class PostgresStore(Committing):
    """The ``Store`` on a PostgreSQL database; each method keeps the contract of ``base``."""

    #: A batch's task writes, questions, ledger rows, tenants, skills and token uses are sent
    #: together, at its next read or its commit: a round trip a batch, not one a write.
    defers_writes = True

    def __init__(
        self, dsn: str, *, durability: str = "full", lease_ttl: float | None = None
    ) -> None:
        if durability not in ("full", "relaxed"):
            raise ConfigError(f"unknown durability {durability!r}: use full or relaxed")
        super().__init__(dsn, durability=durability, lease_ttl=lease_ttl)
        try:
            migrate(self._conn, self.location)
        except BaseException:
            self._conn.close()  # refused (a newer schema, a role that cannot migrate): let go
            raise

    # -- tasks -------------------------------------------------------------------------------

    def insert_task(
        self, task: Task, entry: LedgerEntry, fingerprint: str | None = None
    ) -> LedgerEntry:
        self._hold("insert_task", bulk.task_insert(task, fingerprint))
        self._batch.unsent.append(entry)
        return entry

    def update_task(
        self,
        task: Task,
        expected_state: str,
        expected_epoch: int,
        entry: LedgerEntry,
        *more: LedgerEntry,
    ) -> LedgerEntry:
        row = bulk.task_change(task, expected_state, expected_epoch)
        self._hold("update_task", row, "compare-and-set")
        self._batch.unsent.extend((entry, *more))
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
        text, args = sql.list_tasks_query(query, "%s", _SEEN, _read_for(query))
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
        text, args = sql.count_tasks_query(query, "%s", _SEEN, _read_for(query))
        row = self._one(text, args)
        return int(row["n"]) if row else 0

    def count_by_state(self) -> dict[str, int]:
        return {r["state"]: int(r["n"]) for r in self._rows(_Q["count_by_state"])}

    def count_by_outcome(self) -> dict[str, int]:
        return {r["outcome"]: int(r["n"]) for r in self._rows(_Q["count_by_outcome"])}

    def set_question(self, task_id: str, question: str | None) -> None:
        self._hold("set_question", (question, task_id))

    def set_after(self, task_id: str, after: list[str]) -> None:
        self._hold("set_after", (encode_list(after).decode(), task_id))

    # -- ledger ------------------------------------------------------------------------------

    def append_ledger(self, entry: LedgerEntry) -> LedgerEntry:
        self._check_lost()
        self._batch.dirty = True
        self._batch.unsent.append(entry)
        return entry

    def ledger(
        self, after: Mapping[str, int], limit: int, task: str | None = None,
        tenant: str | None = None,
    ) -> list[LedgerEntry]:  # fmt: skip
        if task is not None:
            rows = self._rows(_Q["ledger_of_task"], (task, tenant, tenant))
            entries = [e for e in map(ledger_from_row, rows) if cursor.unread(after, e)]
            return entries[:limit]
        if tenant is not None:
            rows = self._rows(_Q["ledger_of_tenant"], (tenant, after.get(tenant, 0), limit))
            return [ledger_from_row(r) for r in rows]
        tenants, seqs = list(after), list(after.values())
        rows = self._rows(
            _Q["ledger_of_tenants"], {"tenants": tenants, "seqs": seqs, "limit": limit}
        )
        streams: dict[str, list[LedgerEntry]] = {}
        for entry in map(ledger_from_row, rows):
            streams.setdefault(entry.tenant, []).append(entry)
        for stream in streams.values():
            stream.sort(key=_SEQ)
        return cursor.merged(streams.values(), limit)

    def ledger_heads(self) -> dict[str, int]:
        return {r["tenant"]: int(r["seq"]) for r in self._rows(_Q["ledger_heads"])}

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
