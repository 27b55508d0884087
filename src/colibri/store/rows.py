"""Tasks, ledger entries, agents and tokens as the rows of ``sql/sqlite.sql``, and back.

Lists, costs and changes are JSON text, booleans 0 or 1; every other field is its own column.
A row is read by column name, so any driver's mapping-like row will do.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar, cast

import msgspec

from colibri.core.model import Agent, Change, Cost, LedgerEntry, Task
from colibri.core.tokens import Token

T = TypeVar("T")

_json = msgspec.json.Encoder()
_list_decoder = msgspec.json.Decoder(list[str])
_cost_decoder = msgspec.json.Decoder(Cost)
_change_decoder = msgspec.json.Decoder(Change)


class Row(Protocol):
    def __getitem__(self, column: str) -> Any: ...


def encode_cost(cost: Cost | Change | None) -> bytes | None:
    return None if cost is None else _json.encode(cost)


def encode_list(names: list[str]) -> bytes:
    return _json.encode(names)


#: A task's columns: the fields of ``Task``, in its order (``insert_task`` writes them so, the
#: fingerprint after). Lists, the cost and the change are JSON text, ``pinned`` 0 or 1.
TASK_COLUMNS: tuple[str, ...] = Task.__struct_fields__
#: The columns a transition may change, in the order of ``update_task``'s values, then the
#: row it changes: ``id``, ``expected_state``, ``expected_epoch``.
CHANGE_COLUMNS = (
    "state", "outcome", "agent", "output", "error", "cost", "attempts", "epoch", "not_before",
    "question", "change", "updated_at",
)  # fmt: skip
#: A ledger row's columns but ``seq`` (the store's): the fields of ``LedgerEntry``.
LEDGER_COLUMNS: tuple[str, ...] = tuple(f for f in LedgerEntry.__struct_fields__ if f != "seq")

#: How a field is written to its column, where it is not as it is; and read back.
_WRITE: dict[str, Callable[[Any], Any]] = {
    "capabilities": _json.encode, "labels": _json.encode, "cost": encode_cost, "pinned": int,
    "after": _json.encode, "change": encode_cost,
}  # fmt: skip
_READ: dict[str, Callable[[Any], Any]] = {
    "capabilities": _list_decoder.decode, "labels": _list_decoder.decode,
    "cost": lambda text: None if text is None else _cost_decoder.decode(text), "pinned": bool,
    "after": _list_decoder.decode,
    "change": lambda text: None if text is None else _change_decoder.decode(text),
}  # fmt: skip


def _writer(columns: tuple[str, ...]) -> Callable[[Any], tuple[Any, ...]]:
    """The values of ``columns`` of a struct, each as its column holds it, in that order: the
    hot path of a submission binds these. Compiled from the columns, as dataclasses compiles
    its methods: as fast as the tuple written out, with no dict and no name looked up."""
    cells = (f"write_{c}(s.{c})" if c in _WRITE else f"s.{c}" for c in columns)
    names = {f"write_{c}": encode for c, encode in _WRITE.items()}
    return cast("Callable[[Any], tuple[Any, ...]]", eval(f"lambda s: ({', '.join(cells)},)", names))


def _reader(kind: type[T], columns: tuple[str, ...]) -> Callable[[Row], T]:
    """A struct from a row read by column name (the reverse of ``_writer``), compiled alike."""
    cells = (f"{c}=read_{c}(r[{c!r}])" if c in _READ else f"{c}=r[{c!r}]" for c in columns)
    names = {"kind": kind, **{f"read_{c}": decode for c, decode in _READ.items()}}
    return cast("Callable[[Row], T]", eval(f"lambda r: kind({', '.join(cells)})", names))


#: The task's columns as positional values, in ``TASK_COLUMNS`` order.
task_values = _writer(TASK_COLUMNS)
#: The columns a transition may change (``update_task``), in ``CHANGE_COLUMNS`` order; the
#: others stay as inserted.
task_change_values = _writer(CHANGE_COLUMNS)
task_from_row = _reader(Task, TASK_COLUMNS)
#: Every field but ``seq``, which the store assigns, in ``LEDGER_COLUMNS`` order.
ledger_values = _writer(LEDGER_COLUMNS)
ledger_from_row = _reader(LedgerEntry, ("seq", *LEDGER_COLUMNS))


def task_row(task: Task) -> dict[str, Any]:
    return dict(zip(TASK_COLUMNS, task_values(task), strict=True))


def ledger_row(entry: LedgerEntry) -> dict[str, Any]:
    """Every field but ``seq``, which the store assigns."""
    return dict(zip(LEDGER_COLUMNS, ledger_values(entry), strict=True))


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
