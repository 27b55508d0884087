"""A task's dependencies as a graph, for its page: what it waits for, transitively (its
``after``, theirs, … as a tree, bounded), and what waits for it (the tasks whose ``after``
names it). Both come from the feed's board, which holds every task the identity signed in may
see (a token's tenant's, no other: the daemon refuses an ``after`` across tenants); a
dependency not on it is asked for with ``get``, at most ``GETS`` times a page, so a page
costs the daemon a bounded number of requests however wide the graph is."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field

from colibri.core.model import Task
from colibri.tui.board import Board
from colibri.web import views

#: Levels of the tree of what a task waits for (its ``after`` is the first).
DEPTH = 3
#: Tasks shown in that tree at most, and in the list of what waits for it.
NODES = 50
#: ``get`` requests a page may make for dependencies not on the board.
GETS = 10


@dataclass
class Node:
    """A task of the tree: ``state`` its word (``?`` when it could not be read), ``below``
    what it waits for in turn, ``more`` how many of those are not shown (past the depth or
    the cap), ``again`` it is shown above already (a diamond: not expanded twice)."""

    id: str
    state: str
    column: str
    text: str
    below: list[Node] = field(default_factory=list)
    more: int = 0
    again: bool = False


Lookup = Callable[[str], Awaitable[Task | None]]


def node(board: Board, task_id: str, task: Task | None) -> Node:
    if task is None:
        return Node(task_id, "?", "unknown", "")
    held = board.held(task)
    return Node(task_id, views.state_word(task, held), views.column_of(task, held), task.text)


async def waits_for(board: Board, task: Task, get: Lookup) -> tuple[list[Node], int]:
    """The tree of what ``task`` waits for, breadth first (the nearest are shown before the
    cap cuts), and how many tasks of it are not shown."""
    budget = [GETS]

    async def lookup(task_id: str) -> Task | None:
        found = board.tasks.get(task_id)
        if found is None and budget[0] > 0:
            budget[0] -= 1
            found = await get(task_id)
        return found

    shown = {task.id}
    count = 0
    roots: list[Node] = []
    level: list[tuple[list[Node], Node | None, list[str]]] = [(roots, None, list(task.after))]
    left_out = 0
    for depth in range(DEPTH):
        below: list[tuple[list[Node], Node | None, list[str]]] = []
        for into, parent, ids in level:
            for dep_id in ids:
                if count >= NODES:
                    left_out += 1
                    if parent is not None:
                        parent.more += 1
                    continue
                count += 1
                dep = await lookup(dep_id)
                item = node(board, dep_id, dep)
                into.append(item)
                if dep_id in shown:
                    item.again = True
                    continue
                shown.add(dep_id)
                if dep is not None and dep.after:
                    if depth + 1 < DEPTH:
                        below.append((item.below, item, list(dep.after)))
                    else:
                        item.more = len(dep.after)
                        left_out += len(dep.after)
        level = below
    return roots, left_out


def waiting_on(board: Board, task_id: str) -> tuple[list[Node], int]:
    """The tasks whose ``after`` names ``task_id``, oldest first, at most ``NODES``, and how
    many more there are."""
    found = sorted((t for t in board.tasks.values() if task_id in t.after), key=lambda t: t.id)
    return [node(board, t.id, t) for t in found[:NODES]], max(0, len(found) - NODES)


def ids_of(nodes: list[Node]) -> set[str]:
    """Every task of a tree (so that a page is drawn again when one of them changes)."""
    ids: set[str] = set()
    for item in nodes:
        ids.add(item.id)
        ids |= ids_of(item.below)
    return ids
