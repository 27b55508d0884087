"""The named SQL blocks of ``sql/<dialect>.sql``, and the statements both dialects build alike."""

from __future__ import annotations

import re
from importlib.resources import files
from typing import TYPE_CHECKING, Any

from colibri.store.rows import LEDGER_COLUMNS, TASK_COLUMNS

if TYPE_CHECKING:
    from colibri.store.task_query import TaskFilter

_BLOCK = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def _blocks(name: str) -> dict[str, str]:
    text = files("colibri.store").joinpath(f"sql/{name}.sql").read_text("utf-8")
    parts = _BLOCK.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}


def load(dialect: str) -> dict[str, str]:
    """The statements of ``dialect`` (``sqlite`` or ``postgresql``): its own, and those of
    ``common.sql`` that both write alike (their ``?`` placeholders are ``%s`` to PostgreSQL)."""
    common = _blocks("common")
    if dialect == "postgresql":
        common = {name: body.replace("?", "%s") for name, body in common.items()}
    # Rows written whole: their columns are their structs' fields (colibri.store.rows).
    common["insert_task"] = _insert("tasks", (*TASK_COLUMNS, "fingerprint"), dialect)
    common["insert_ledger"] = _insert("ledger", ("seq", *LEDGER_COLUMNS), dialect)
    own = _blocks(dialect)
    again = sorted(common.keys() & own.keys())
    if again:  # one home a statement: a dialect's own would hide the shared one
        raise ValueError(f"sql/{dialect}.sql names {', '.join(again)} again: common.sql has them")
    return {**common, **own}


def _insert(table: str, columns: tuple[str, ...], dialect: str) -> str:
    """``INSERT`` of a whole row: positional values for SQLite, named ones for PostgreSQL."""
    values = ("?" if dialect == "sqlite" else f"%({c})s" for c in columns)
    return f"INSERT INTO {table} ({', '.join(columns)}) VALUES ({', '.join(values)});"


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


#: How many of an id's last characters the index ``tasks_tail`` keeps: a suffix of at least
#: this many is found through it (among the ids that end alike: one in 65,536 of them).
TAIL = 4


def _end(n: int) -> str:
    """The last ``n`` characters of a task's id, as both dialects write it (``substr`` from a
    position: the same text as ``tasks_tail``'s expression for ``TAIL``, so the index is used)."""
    return f"substr(id, length(id) - {n - 1})"


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
    if query.suffix:
        # Equality, not LIKE: no character of the suffix is a pattern. An id shorter than the
        # suffix yields a shorter substring in both dialects, never equal to it.
        if len(query.suffix) > TAIL:
            where.append(f"{_end(TAIL)} = {placeholder}")  # what tasks_tail finds
            args.append(query.suffix[-TAIL:])
        where.append(f"{_end(len(query.suffix))} = {placeholder}")
        args.append(query.suffix)
    if query.after is not None:
        where.append(f"id > {placeholder}")
        args.append(query.after)
    if query.before is not None:
        where.append(f"id < {placeholder}")
        args.append(query.before)
    return (" WHERE " + " AND ".join(where) if where else ""), args


def list_tasks_query(
    query: TaskFilter, placeholder: str, scope: str = "", tasks: str = "tasks"
) -> tuple[str, list[Any]]:
    """``list_tasks``' statement and its arguments; ``placeholder``: ``?`` or ``%s``;
    ``tasks``: the rows it reads, the table or a query of it named ``tasks``."""
    where, args = _task_conditions(query, placeholder, scope)
    order = "DESC" if query.newest else ""
    return f"SELECT * FROM {tasks}{where} ORDER BY id {order} LIMIT {placeholder}", [
        *args,
        query.limit,
    ]


def count_tasks_query(
    query: TaskFilter, placeholder: str, scope: str = "", tasks: str = "tasks"
) -> tuple[str, list[Any]]:
    """``count_tasks``' statement and its arguments; ``placeholder``: ``?`` or ``%s``."""
    where, args = _task_conditions(query, placeholder, scope)
    return f"SELECT COUNT(*) AS n FROM {tasks}{where}", args
