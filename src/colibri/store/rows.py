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


def task_row(task: Task) -> dict[str, Any]:
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
        "cost": encode_cost(task.cost),
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


def task_change_row(task: Task) -> dict[str, Any]:
    """The columns a transition may change (``update_task``); the others stay as inserted."""
    return {
        "id": task.id, "state": task.state, "outcome": task.outcome, "agent": task.agent,
        "output": task.output, "error": task.error, "cost": encode_cost(task.cost),
        "attempts": task.attempts, "epoch": task.epoch, "not_before": task.not_before,
        "question": task.question, "updated_at": task.updated_at,
    }  # fmt: skip


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


def ledger_row(entry: LedgerEntry) -> dict[str, Any]:
    """Every field but ``seq``, which the store assigns."""
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
        "cost": encode_cost(entry.cost),
        "uid": entry.uid,
        "pid": entry.pid,
    }


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
