"""Held writes of one statement sent as one statement: the rows as one JSON array, which
msgspec encodes and PostgreSQL parses (both in C), rather than an ``executemany`` of one
execution a row. A batch of a drain moves hundreds of tasks; a row's execution cost the daemon
its parameters adapted one by one and the server a statement's start and end each.

Only the task updates go so (``AS_ONE``): their compare-and-set is counted over the whole
statement (every row must change one task), and a task updated twice in one sending is sent in
two statements, in order (``chunks``) — one statement would change it once.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import msgspec

from colibri.store.rows import CHANGE_COLUMNS

#: The PostgreSQL type of each column sent, where it is not ``text``.
_TYPES = {"attempts": "bigint", "epoch": "bigint", "expected_epoch": "bigint"}
_SENT = ("id", *CHANGE_COLUMNS, "expected_state", "expected_epoch")
_UPDATE_TASKS = (
    "UPDATE tasks AS t SET "
    + ", ".join(f"{c} = r.{c}" for c in CHANGE_COLUMNS)
    + " FROM json_to_recordset(%s::json) AS r("
    + ", ".join(f"{c} {_TYPES.get(c, 'text')}" for c in _SENT)
    + ") WHERE t.id = r.id AND t.state = r.expected_state AND t.epoch = r.expected_epoch"
).encode()
#: The held writes (by their statement's name in ``postgresql.sql``) sent as one statement,
#: and that statement: its one parameter is the rows' JSON array.
AS_ONE = {"update_task": _UPDATE_TASKS}
_encode = msgspec.json.Encoder().encode


def chunks(rows: list[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """The rows in order, cut wherever a task comes again: no statement changes a task twice."""
    chunk: list[dict[str, Any]] = []
    ids: set[str] = set()
    for row in rows:
        if row["id"] in ids:
            yield chunk
            chunk, ids = [], set()
        chunk.append(row)
        ids.add(row["id"])
    if chunk:
        yield chunk


def parameters(rows: list[dict[str, Any]]) -> tuple[str]:
    """``AS_ONE``'s parameter for these rows."""
    return (_encode(rows).decode(),)
