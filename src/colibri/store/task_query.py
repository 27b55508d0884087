"""Which tasks a read asks for (``TaskFilter``), and the one task part of an id names.

The daemon's commands and a board read without its daemon (``offline``) find a task by the
start or end of its id alike (``named_task``), through any store's ``list_tasks`` and
``count_tasks``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from colibri.core.errors import AmbiguousTask
from colibri.core.model import task_id_part


@dataclass(frozen=True, slots=True)
class TaskFilter:
    """Which tasks ``Store.list_tasks`` returns: every field that is not None must match.

    ``state``, ``outcome``, ``agent``, ``workspace``, ``parent`` and ``tenant`` are compared
    for equality with the task's field (``agent`` is the pinned agent or the one that holds or
    last held the task); ``prefix`` keeps the ids that start with it and ``suffix`` those that
    end with it (both set: ids that do both); ``after`` keeps only ids
    greater than it and ``before`` only ids less than it (byte order), for paging; ``newest``
    returns the greatest ids first (the newest: ids are UUIDv7) instead of the least; ``limit``
    is the most tasks returned.
    """

    state: str | None = None
    outcome: str | None = None
    agent: str | None = None
    workspace: str | None = None
    parent: str | None = None
    tenant: str | None = None
    prefix: str | None = None
    suffix: str | None = None
    after: str | None = None
    before: str | None = None
    newest: bool = False
    limit: int = 100


#: The most ids named in an ``ambiguous_task`` refusal (and how many it counts).
NAMED_IDS = 3


def named_task(
    task_id: str,
    tenant: str | None,
    ids: Callable[[TaskFilter], list[str]],
    count: Callable[[TaskFilter], int],
) -> str:
    """The whole id of the one task whose id starts or ends with ``task_id`` (``tenant``'s
    alone, None: every tenant's), found by ``ids`` and ``count`` (a store's ``list_tasks``' ids
    and ``count_tasks``, or the same queries on a board read without its daemon); ``task_id``
    itself when it is a whole id or names none, for the caller's ``unknown_task``.

    :raises AmbiguousTask: it starts or ends the ids of several tasks.
    :raises BadRequest: it is too short to name one.
    """
    part, look = task_id_part(task_id)
    if not look:
        return part
    starts = TaskFilter(prefix=part, tenant=tenant, limit=NAMED_IDS)
    ends = TaskFilter(suffix=part, tenant=tenant, limit=NAMED_IDS)
    found = sorted({*ids(starts), *ids(ends)})
    if len(found) == 1:
        return found[0]
    if not found:
        return task_id
    both = TaskFilter(prefix=part, suffix=part, tenant=tenant)
    raise AmbiguousTask(task_id, count(starts) + count(ends) - count(both), found[:NAMED_IDS])
