"""Tasks, ledger entries, agents and tokens as the rows of ``sql/sqlite.sql``, and back.

Lists and costs are JSON text, booleans 0 or 1; every other field is its own column. A row is
read by column name, so any driver's mapping-like row will do.
"""

from __future__ import annotations

from typing import Any, Protocol

import msgspec

from colibri.core.model import Agent, Cost, LedgerEntry, Task
from colibri.core.tokens import Token

_json = msgspec.json.Encoder()
_list_decoder = msgspec.json.Decoder(list[str])
_cost_decoder = msgspec.json.Decoder(Cost)


class Row(Protocol):
    def __getitem__(self, column: str) -> Any: ...


def encode_cost(cost: Cost | None) -> bytes | None:
    return None if cost is None else _json.encode(cost)


#: A task's columns in the order of ``insert_task``'s values (``task_values``), the
#: fingerprint last; ``task_row`` names them.
TASK_COLUMNS = (
    "id", "tenant", "text", "capabilities", "workspace", "agent", "pinned", "parent", "sender",
    "priority", "min_score", "state", "outcome", "output", "error", "cost", "attempts",
    "max_attempts", "epoch", "labels", "idempotency_key", "not_before", "schedule", "question",
    "budget_usd", "created_at", "updated_at",
)  # fmt: skip
#: The columns a transition may change, in the order of ``update_task``'s values, then the
#: row it changes: ``id``, ``expected_state``, ``expected_epoch``.
CHANGE_COLUMNS = (
    "state", "outcome", "agent", "output", "error", "cost", "attempts", "epoch", "not_before",
    "question", "updated_at",
)  # fmt: skip
#: A ledger row's columns in the order of ``insert_ledger``'s values (``seq`` is the store's).
LEDGER_COLUMNS = (
    "at", "task", "schedule", "tenant", "from_state", "to_state", "agent", "epoch", "reason",
    "cost", "uid", "pid",
)  # fmt: skip


def task_values(task: Task) -> tuple[Any, ...]:
    """The task's columns as positional values, in ``TASK_COLUMNS`` order: the hot path of a
    submission binds these, with no dict and no name looked up per value."""
    return (
        task.id, task.tenant, task.text, _json.encode(task.capabilities), task.workspace,
        task.agent, int(task.pinned), task.parent, task.sender, task.priority, task.min_score,
        task.state, task.outcome, task.output, task.error, encode_cost(task.cost),
        task.attempts, task.max_attempts, task.epoch, _json.encode(task.labels),
        task.idempotency_key, task.not_before, task.schedule, task.question, task.budget_usd,
        task.created_at, task.updated_at,
    )  # fmt: skip


def task_row(task: Task) -> dict[str, Any]:
    return dict(zip(TASK_COLUMNS, task_values(task), strict=True))


def task_change_values(task: Task) -> tuple[Any, ...]:
    """The columns a transition may change (``update_task``), in ``CHANGE_COLUMNS`` order; the
    others stay as inserted."""
    return (
        task.state, task.outcome, task.agent, task.output, task.error, encode_cost(task.cost),
        task.attempts, task.epoch, task.not_before, task.question, task.updated_at,
    )  # fmt: skip


def task_change_row(task: Task) -> dict[str, Any]:
    return {"id": task.id, **dict(zip(CHANGE_COLUMNS, task_change_values(task), strict=True))}


def task_from_row(row: Row) -> Task:
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


def ledger_values(entry: LedgerEntry) -> tuple[Any, ...]:
    """Every field but ``seq``, which the store assigns, in ``LEDGER_COLUMNS`` order."""
    return (
        entry.at, entry.task, entry.schedule, entry.tenant, entry.from_state, entry.to_state,
        entry.agent, entry.epoch, entry.reason, encode_cost(entry.cost), entry.uid, entry.pid,
    )  # fmt: skip


def ledger_row(entry: LedgerEntry) -> dict[str, Any]:
    """Every field but ``seq``, which the store assigns."""
    return dict(zip(LEDGER_COLUMNS, ledger_values(entry), strict=True))


def ledger_from_row(row: Row) -> LedgerEntry:
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


def agent_row(agent: Agent, registered_at: str) -> dict[str, Any]:
    """What is kept of an agent; ``online`` and ``running`` live in the daemon's memory."""
    return {
        "name": agent.name,
        "tenant": agent.tenant,
        "capabilities": _json.encode(agent.capabilities),
        "slots": agent.slots,
        "ttl": agent.ttl,
        "workspace": agent.workspace,
        "registered_at": registered_at,
        "last_seen": agent.last_seen,
    }


def agent_from_row(row: Row) -> Agent:
    return Agent(
        name=row["name"],
        tenant=row["tenant"],
        capabilities=_list_decoder.decode(row["capabilities"]),
        slots=row["slots"],
        ttl=row["ttl"],
        workspace=row["workspace"],
        last_seen=row["last_seen"],
    )


def token_row(token: Token, secret_hash: str) -> tuple[Any, ...]:
    return (
        token.id, token.tenant, token.role, token.agent, _json.encode(token.capabilities),
        token.workspace, secret_hash, token.created_at, token.expires_at, token.revoked_at,
        token.last_used_at,
    )  # fmt: skip


def token_from_row(row: Row) -> Token:
    return Token(
        id=row["id"],
        tenant=row["tenant"],
        role=row["role"],
        agent=row["agent"],
        capabilities=_list_decoder.decode(row["capabilities"]),
        workspace=row["workspace"],
        created_at=row["created_at"],
        expires_at=row["expires_at"],
        revoked_at=row["revoked_at"],
        last_used_at=row["last_used_at"],
    )
