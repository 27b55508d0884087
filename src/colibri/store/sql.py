"""The named SQL blocks of ``sql/<dialect>.sql``, and the statements both dialects build alike."""

from __future__ import annotations

import re
from importlib.resources import files
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from colibri.store.base import TaskFilter

_BLOCK = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def load(dialect: str) -> dict[str, str]:
    text = files("colibri.store").joinpath(f"sql/{dialect}.sql").read_text("utf-8")
    parts = _BLOCK.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


#: ``cost_totals``' grouping keys: the same SQL in both dialects (``{key}`` in its query).
COST_KEYS = {
    "agent": "l.agent",
    # a task with no workspace counts for the workspace of the agent that ran it
    "workspace": "COALESCE(t.workspace, (SELECT a.workspace FROM agents a WHERE a.name = l.agent))",
    "tenant": "l.tenant",
    "day": "substr(l.at, 1, 10)",
}


def cost_query(text: str, by: str) -> str:
    """The ``cost_totals`` query ``text`` grouped by ``by`` (one of ``COST_KEYS``)."""
    key = COST_KEYS.get(by)
    if key is None:
        raise ValueError(f"cost totals by {by!r}: by agent, workspace, tenant or day")
    return text.replace("{key}", key)


def list_tasks_query(query: TaskFilter, placeholder: str) -> tuple[str, list[Any]]:
    """``list_tasks``' statement and its arguments; ``placeholder``: ``?`` or ``%s``."""
    where: list[str] = []
    args: list[Any] = []
    for column in ("state", "agent", "workspace", "parent", "tenant"):
        value = getattr(query, column)
        if value is not None:
            where.append(f"{column} = {placeholder}")
            args.append(value)
    if query.after is not None:
        where.append(f"id > {placeholder}")
        args.append(query.after)
    text = "SELECT * FROM tasks"
    if where:
        text += " WHERE " + " AND ".join(where)
    text += f" ORDER BY id LIMIT {placeholder}"
    args.append(query.limit)
    return text, args
