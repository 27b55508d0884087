"""Held writes of one statement sent as one statement: the rows as one JSON array, which
msgspec encodes and PostgreSQL parses (both in C), rather than an ``executemany`` of one
execution a row. A batch of a drain moves hundreds of tasks; a row's execution cost the daemon
its parameters adapted one by one and the server a statement's start and end each.

The task inserts and updates go so (``AS_ONE``). An update's compare-and-set is counted over
the whole statement (every row must change one task), and a task updated twice in one sending
is sent in two statements, in order (``chunks``) — one statement would change it once.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator
from typing import Any

import msgspec

from colibri.core.model import Task
from colibri.store.rows import CHANGE_COLUMNS, TASK_COLUMNS

#: The PostgreSQL type of each column sent, where it is not ``text``. Lists, a cost and a
#: change are sent as JSON, and written as their text as it was sent (as ``rows`` writes
#: them: msgspec's encoding, which ``json`` keeps as it is); ``pinned`` as a boolean, written
#: 0 or 1.
_TYPES = {
    "attempts": "bigint", "epoch": "bigint", "expected_epoch": "bigint", "priority": "bigint",
    "max_attempts": "bigint", "min_score": "double precision",
    "budget_usd": "double precision", "pinned": "boolean",
    **dict.fromkeys(("capabilities", "labels", "after", "cost", "change"), "json"),
}  # fmt: skip


def _written(column: str) -> str:
    kind = _TYPES.get(column)
    return f"r.{column}" + ("::text" if kind == "json" else "::int" if kind == "boolean" else "")


def _recordset(columns: tuple[str, ...]) -> str:
    return (
        "json_to_recordset(%s::json) AS r("
        + ", ".join(f"{c} {_TYPES.get(c, 'text')}" for c in columns)
        + ")"
    )


_INSERTED = (*TASK_COLUMNS, "fingerprint")
_INSERT_TASKS = (
    f"INSERT INTO tasks ({', '.join(_INSERTED)}) "
    f"SELECT {', '.join(_written(c) for c in _INSERTED)} FROM {_recordset(_INSERTED)}"
).encode()
_UPDATE_TASKS = (
    "UPDATE tasks AS t SET "
    + ", ".join(f"{c} = {_written(c)}" for c in CHANGE_COLUMNS)
    + f" FROM {_recordset(('id', *CHANGE_COLUMNS, 'expected_state', 'expected_epoch'))}"
    + " WHERE t.id = r.id AND t.state = r.expected_state AND t.epoch = r.expected_epoch"
).encode()
#: The held writes (by their statement's name in ``postgresql.sql``) sent as one statement,
#: and that statement: its one parameter is the rows' JSON array.
AS_ONE = {"insert_task": _INSERT_TASKS, "update_task": _UPDATE_TASKS}
#: Those that join their rows to the tasks (``BY_INDEX``).
JOINED = {"update_task"}
#: Around each: the rows joined to their tasks by the primary key, one look-up a row. The
#: planner, which takes any JSON array for a hundred rows, would otherwise hash them and scan
#: the whole table (every closed task) on a board of some ten thousand tasks or more.
BY_INDEX = (
    b"SELECT set_config('enable_hashjoin', 'off', true), "
    b"set_config('enable_mergejoin', 'off', true)"
)
AS_BEFORE = (b"RESET enable_hashjoin", b"RESET enable_mergejoin")

_TASK_TYPES = {f.name: f.type for f in msgspec.structs.fields(Task)}
#: A row of ``_INSERT_TASKS``: the task, and its submission's fingerprint.
TaskInsert = msgspec.defstruct(
    "TaskInsert", [*((c, _TASK_TYPES[c]) for c in TASK_COLUMNS), ("fingerprint", str | None)]
)
#: A row of ``_UPDATE_TASKS``: the task's fields a transition changes, as ``Task`` types them,
#: and what the row must hold for the change to be made.
TaskChange = msgspec.defstruct(
    "TaskChange",
    [
        ("id", str),
        *((c, _TASK_TYPES[c]) for c in CHANGE_COLUMNS),
        ("expected_state", str),
        ("expected_epoch", int),
    ],  # fmt: skip
)
_changed = operator.attrgetter(*CHANGE_COLUMNS)
_encode = msgspec.json.Encoder().encode


def task_insert(task: Task, fingerprint: str | None) -> Any:
    """``task``'s row of ``_INSERT_TASKS`` (a ``TaskInsert``)."""
    return TaskInsert(*msgspec.structs.astuple(task), fingerprint)


def task_change(task: Task, expected_state: str, expected_epoch: int) -> Any:
    """``task``'s row of ``_UPDATE_TASKS`` (a ``TaskChange``)."""
    return TaskChange(task.id, *_changed(task), expected_state, expected_epoch)


def chunks(rows: list[Any]) -> Iterator[list[Any]]:
    """The rows in order, cut wherever a task comes again: no statement changes a task twice."""
    chunk: list[Any] = []
    ids: set[str] = set()
    for row in rows:
        if row.id in ids:
            yield chunk
            chunk, ids = [], set()
        chunk.append(row)
        ids.add(row.id)
    if chunk:
        yield chunk


def parameters(rows: list[Any]) -> tuple[str]:
    """``AS_ONE``'s parameter for these rows."""
    return (_encode(rows).decode(),)
