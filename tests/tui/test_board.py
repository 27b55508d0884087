"""The board the TUI and the web draw: which tasks wait for others (``held``), from the
dependencies' states and the task's ``if_dependency_fails``, as the daemon decides it."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from colibri.core import events
from colibri.core.model import Task
from colibri.tui.board import Board

AT = "2026-01-01T00:00:00.000Z"


def task(task_id: str, **fields: Any) -> Task:
    return Task(id=task_id, text=task_id, capabilities=[], created_at=AT, updated_at=AT, **fields)


def moved(board: Board, old: Task, to: str, reason: str, **fields: Any) -> Task:
    """``old`` as its event says it moved (from its state to ``to``)."""
    new = msgspec.structs.replace(old, state=to, **fields)
    board.apply(events.TaskChanged(from_state=old.state, to_state=to, reason=reason, task=new))
    return new


@pytest.mark.parametrize(
    ("outcome", "policy", "held"),
    [
        ("done", "cancel", False),
        ("done", "wait", False),
        ("failed", "run", False),
        ("cancelled", "run", False),
        # Waits for a retry of it: the daemon says nothing of the task meanwhile.
        ("failed", "wait", True),
        ("cancelled", "wait", True),
    ],
)
def test_a_task_is_held_while_a_dependency_is_open_and_by_its_policy_once_closed(
    outcome: str, policy: str, held: bool
) -> None:
    board = Board()
    dep = task("dep", state="running")
    waiting = task("waiting", after=["dep"], if_dependency_fails=policy)
    for known in (dep, waiting):
        board.put(known)
    assert board.held(waiting)
    dep = moved(board, dep, outcome, "out", outcome=outcome)
    assert board.held(waiting), "an ended dependency counts once it is closed"
    moved(board, dep, "closed", "closed", outcome=outcome)
    assert board.held(board.tasks["waiting"]) is held


def test_a_task_waiting_for_a_retry_waits_for_the_retry_then_is_released() -> None:
    board = Board()
    dep = task("dep", state="closed", outcome="failed")
    waiting = task("waiting", after=["dep"], if_dependency_fails="wait")
    for known in (dep, waiting):
        board.put(known)
    assert board.held(waiting)
    retry = task("retry")
    board.apply(events.TaskChanged(from_state=None, to_state="pending", reason="retry", task=retry))
    waiting = moved(board, waiting, "pending", "waits for retry, the retry of dep", after=["retry"])
    assert board.held(waiting)
    moved(board, retry, "closed", "closed", outcome="done")
    assert not board.held(waiting)


def test_neither_an_open_task_nor_one_waiting_for_nothing_known_is_held() -> None:
    board = Board()
    running = task("running", state="running", after=["dep"])
    unknown = task("unknown", after=["not-on-this-board"])
    for known in (task("dep"), running, unknown):
        board.put(known)
    assert not board.held(running)
    assert not board.held(unknown)

