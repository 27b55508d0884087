"""A batch the daemon took for failed though it had committed (its COMMIT's answer was lost):
after the board is rebuilt, the claims it made reach their agents and the waits it answered
are answered — and they still do when the batch that carries them fails in its turn.

The board on a real SQLite store, driven step by step as the server drives it: commit, then
(the answer lost) rollback and rebuild, as ``Server._fail_batch`` does. The PostgreSQL tests
(tests/postgres/test_pg_faults.py) lose the answer for real; here the sequence is exact."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec

from colibri.config import SchedulerSettings
from colibri.core.model import TaskSpec
from colibri.core.protocol import RegisterAgent
from colibri.daemon.board import Board
from colibri.store import open_store
from tests.inprocess import ManualClock, Peer


def _board(tmp_path: Path) -> tuple[Any, Board, Peer]:
    store = open_store(str(tmp_path / "board.sqlite"), durability="relaxed")
    board = Board(store, SchedulerSettings(), ManualClock())
    board.rebuild()
    store.commit()
    board.take_effects()
    peer = Peer("a1")
    board.register(RegisterAgent(name="a1", slots=1), peer)
    store.commit()
    board.take_effects()
    return store, board, peer


def _lost_answer(store: Any, board: Board) -> None:
    """The batch commits; the daemon, told it failed, rolls back and rebuilds."""
    store.commit()
    store.rollback()
    board.rebuild()


def _deliver(store: Any, board: Board) -> None:
    store.commit()
    outbox = board.take_effects().outbox
    for peer, message in outbox:
        peer.send(message)


def test_a_claim_retold_after_a_lost_commit_survives_the_next_batch_failing(
    tmp_path: Path,
) -> None:
    store, board, peer = _board(tmp_path)
    task, _ = board.submit(TaskSpec(text="claimed in the lost commit"))
    assert board.dispatch() == 1
    _lost_answer(store, board)
    # The batch that carries the retold assign fails as well (the server flapping).
    board.submit(TaskSpec(text="in the batch that fails"))
    store.rollback()
    board.rebuild()
    _deliver(store, board)
    assert board.tasks[task.id].state == "running" and board.tasks[task.id].agent == "a1"
    told = [msgspec.to_builtins(m) for m in peer.messages]
    assigns = [m for m in told if m.get("event") == "assign"]
    assert [a["task"]["id"] for a in assigns] == [task.id]  # told once, not never, not twice


def test_a_wait_answered_after_a_lost_commit_survives_the_next_batch_failing(
    tmp_path: Path,
) -> None:
    store, board, _ = _board(tmp_path)
    task, _ = board.submit(TaskSpec(text="waited for"))
    board.dispatch()
    _deliver(store, board)
    waiter = Peer("w")
    assert board.wait(waiter, 7, task.id) is None
    board.out(board.agents["a1"], task.id, board.tasks[task.id].epoch, "r", None)
    _lost_answer(store, board)  # rebuilt: the task is closed in the store, the wait answered
    board.submit(TaskSpec(text="in the batch that fails"))
    store.rollback()
    board.rebuild()
    _deliver(store, board)
    answers = [msgspec.to_builtins(m) for m in waiter.messages if m.get("id") == 7]
    assert len(answers) == 1 and answers[0]["task"]["state"] == "closed", waiter.messages
    assert not board.audience.waits(waiter)
