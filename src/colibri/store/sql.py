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


def _task_conditions(query: TaskFilter, placeholder: str, scope: str) -> tuple[str, list[Any]]:
    """The ``WHERE`` clause (or nothing) of a task filter, and its arguments; ``scope``: a
    condition every row must meet besides (the tenants a PostgreSQL store names), or ""."""
    where: list[str] = [scope] if scope else []
    args: list[Any] = []
    for column in ("state", "outcome", "agent", "workspace", "parent", "tenant"):
        value = getattr(query, column)
        if value is not None:
            where.append(f"{column} = {placeholder}")
            args.append(value)
    if query.prefix:
        # A range, not LIKE: the primary key's index answers it in both dialects, and no
        # character of the prefix is a pattern. Ids are ASCII, so the successor of the last
        # character bounds every id that starts with the prefix.
        where.append(f"id >= {placeholder} AND id < {placeholder}")
        args += [query.prefix, query.prefix[:-1] + chr(ord(query.prefix[-1]) + 1)]
    if query.after is not None:
        where.append(f"id > {placeholder}")
        args.append(query.after)
    if query.before is not None:
        where.append(f"id < {placeholder}")
        args.append(query.before)
    return (" WHERE " + " AND ".join(where) if where else ""), args


def list_tasks_query(query: TaskFilter, placeholder: str, scope: str = "") -> tuple[str, list[Any]]:
    """``list_tasks``' statement and its arguments; ``placeholder``: ``?`` or ``%s``."""
    where, args = _task_conditions(query, placeholder, scope)
    order = "DESC" if query.newest else ""
    return f"SELECT * FROM tasks{where} ORDER BY id {order} LIMIT {placeholder}", [
        *args,
        query.limit,
    ]


def count_tasks_query(
    query: TaskFilter, placeholder: str, scope: str = ""
) -> tuple[str, list[Any]]:
    """``count_tasks``' statement and its arguments; ``placeholder``: ``?`` or ``%s``."""
    where, args = _task_conditions(query, placeholder, scope)
    return f"SELECT COUNT(*) AS n FROM tasks{where}", args
