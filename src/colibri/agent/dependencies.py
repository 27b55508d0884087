"""What the tasks a task waited for (its ``after``) came to, for its session.

The harness reads each with ``get`` on its own connection and writes them, in ``after``
order, to ``.colibri/sessions/TASK.after.json`` (``COLIBRI_DEPENDENCIES`` names it):

    [{"id": "01a2…", "text": "…", "outcome": "done", "output": "…", "error": null,
      "change": {"branch": "colibri/…", "base": "…", "head": "…", "files": 1, …} | null}]

and the task body's header names each: ``after: ID OUTCOME BRANCH`` (``-`` for none).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Sequence

import msgspec

from colibri.client import AsyncClient
from colibri.core.backoff import Backoff
from colibri.core.errors import ColibriError, ConnectionClosed
from colibri.core.model import Task

#: How long the harness tries to read a task's dependencies (its connection may be down).
FETCH_PATIENCE = 10.0


class DependencyUnread(Exception):
    """A dependency could not be read; the message says which, for the task's error."""


async def fetch(connection: Callable[[], AsyncClient | None], ids: Sequence[str]) -> list[Task]:
    """Each of ``ids`` as the daemon has it now, in their order, over the harness's
    connection as it is at each try (a dropped one is waited for, within FETCH_PATIENCE)."""
    found: list[Task] = []
    for task_id in ids:
        pauses = Backoff(0.05, 1.0)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + FETCH_PATIENCE
        while True:
            client = connection()
            why = "no connection to the daemon"
            if client is not None:
                try:
                    found.append(await client.get(task_id))
                    break
                except ColibriError as exc:
                    if not (exc.transient or isinstance(exc, ConnectionClosed)):
                        raise DependencyUnread(
                            f"could not read the task it waited for, {task_id}: {exc.message}"
                        ) from None
                    why = exc.message
            if loop.time() >= deadline:
                raise DependencyUnread(f"could not read the task it waited for, {task_id}: {why}")
            await asyncio.sleep(pauses.next())
    return found


def as_json(dependencies: Sequence[Task]) -> bytes:
    return json.dumps(
        [
            {
                "id": d.id,
                "text": d.text,
                "outcome": d.outcome,
                "output": d.output,
                "error": d.error,
                "change": msgspec.to_builtins(d.change),
            }  # fmt: skip
            for d in dependencies
        ],
        ensure_ascii=False,
        indent=1,
    ).encode()


def header_lines(dependencies: Sequence[Task]) -> tuple[str, ...]:
    """``ID OUTCOME BRANCH`` of each, for the body's ``after:`` lines."""
    return tuple(
        f"{d.id} {d.outcome or d.state} {d.change.branch if d.change else '-'}"
        for d in dependencies
    )
