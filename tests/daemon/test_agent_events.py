"""Subscribers hear of an agent's changes that no task event shows: its ready pool growing or
shrinking, and its circuit breaker closing (the TUI's agents tab follows them). The board on a
real SQLite store, driven as the server drives it, its clock moved by the test."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from colibri.core.model import TaskSpec
from colibri.core.protocol import RegisterAgent
from colibri.daemon.board import BREAKER_AFTER, BREAKER_COOL_DOWN, Board
from tests.inprocess import ManualClock, Peer, board_on


def heard(board: Board, watcher: Peer, kind: str = "agent") -> list[Any]:
    """The events of this kind the watcher got from what the board did since the last call
    (for ``agent`` events, their agents)."""
    board.store.commit()
    for peer, message in board.take_effects().outbox:  # sent, as the server sends them
        peer.send(message)
    found = [m for m in watcher.messages if m.get("event") == kind]
    watcher.messages.clear()
    return [m["agent"] for m in found] if kind == "agent" else found


def wait_out(board: Board, clock: ManualClock, seconds: float) -> None:
    """Time passes, the daemon sweeping each second as its loop does."""
    for _ in range(int(seconds)):
        clock.advance(1.0)
        board.sweep()


def test_a_new_ready_pool_size_and_a_closed_breaker_are_announced(tmp_path: Path) -> None:
    with board_on(tmp_path / "board.sqlite") as (board, clock):
        watcher = Peer("tui")
        board.subscribe(watcher)
        harness = Peer("harness")
        agent, _, _ = board.register(
            RegisterAgent(name="api", capabilities=["python"], workspace="api", ttl=600), harness
        )
        assert [a.name for a in heard(board, watcher)] == ["api"]

        board.heartbeat(agent, 2)  # two warm sessions wait
        [event] = heard(board, watcher)
        assert event.ready == 2 and not event.breaker_open
        board.heartbeat(agent, 2)  # the same again: nothing to say
        board.heartbeat(agent)  # a heartbeat that does not say (any request counts as one)
        assert heard(board, watcher) == []

        task, _ = board.submit(TaskSpec(text="never ready", capabilities=["python"]))
        for _ in range(BREAKER_AFTER):
            board.dispatch()
            epoch = board.tasks[task.id].epoch
            board.requeue(agent, task.id, epoch, "not ready in time")
        assert [e["agent"] for e in heard(board, watcher, "unhealthy")] == ["api"]

        wait_out(board, clock, BREAKER_COOL_DOWN - 1)
        assert heard(board, watcher) == []  # still cooling down
        wait_out(board, clock, 1)
        [event] = heard(board, watcher)
        assert event.name == "api" and not event.breaker_open
