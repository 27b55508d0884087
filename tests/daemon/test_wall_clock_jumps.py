"""The board's time rules with its two clocks apart: TTLs and retry back-offs follow the
monotonic clock, so a jump of the wall clock (NTP, ``date -s``), forward or back, expires no
agent and stretches no back-off; silence on the monotonic clock still expires. The board on a
real SQLite store, its clock moved by the test (the same through a daemon under libfaketime:
``tests/reliability/test_clock_jumps.py``)."""

from __future__ import annotations

from pathlib import Path

from colibri.config.settings import SchedulerSettings
from colibri.core.model import TaskSpec
from colibri.core.protocol import RegisterAgent
from colibri.daemon.board import Board
from colibri.daemon.board.capacity import LiveAgent
from tests.inprocess import ManualClock, Peer, board_on

DAY = 86_400.0


def pass_time(
    board: Board, clock: ManualClock, seconds: int, agent: LiveAgent | None = None
) -> None:
    """Time passes, the daemon sweeping each second as its loop does; the agent, if given,
    heartbeats after each sweep."""
    for _ in range(seconds):
        clock.mono += 1.0
        clock.wall += 1.0
        board.sweep()  # first: the sweep that follows a jump judges the silence before it
        if agent is not None:
            board.heartbeat(agent)
        board.store.commit()
        board.take_effects()


def running_on(board: Board, task_id: str) -> str | None:
    task = board.tasks[task_id]
    return task.agent if task.state == "running" else None


def test_wall_clock_jumps_expire_no_agent_and_silence_still_does(tmp_path: Path) -> None:
    with board_on(tmp_path / "board.sqlite", SchedulerSettings(agent_ttl=10)) as (board, clock):
        harness = Peer("harness")
        agent, _, _ = board.register(RegisterAgent(name="a1", capabilities=["x"], ttl=10), harness)
        task, _ = board.submit(TaskSpec(text="long job", capabilities=["x"]))
        board.dispatch()
        board.store.commit()
        board.take_effects()
        assert running_on(board, task.id) == "a1"
        for jump in (DAY, 3600.0, -2 * DAY, 400 * DAY):
            clock.wall += jump  # the wall clock alone moves
            pass_time(board, clock, 5, agent)
            assert running_on(board, task.id) == "a1", jump
            assert board.agents["a1"].online
        clock.wall -= DAY  # back, as it falls silent: its ttl is not a day longer
        pass_time(board, clock, 9)  # silent, within its ttl of 10 s
        assert running_on(board, task.id) == "a1"
        pass_time(board, clock, 2)  # silent past it: expired, its session lost
        assert not board.agents["a1"].online
        final = board.store.get_task(task.id)
        assert final is not None
        assert final.state == "closed" and "session lost" in (final.error or ""), final


def test_a_retry_back_off_follows_the_monotonic_clock_whatever_the_wall_clock_does(
    tmp_path: Path,
) -> None:
    settings = SchedulerSettings(retry_backoff=5.0)
    with board_on(tmp_path / "board.sqlite", settings) as (board, clock):
        harness = Peer("harness")
        agent, _, _ = board.register(RegisterAgent(name="a1", capabilities=["x"], ttl=600), harness)
        task, _ = board.submit(TaskSpec(text="flaky", capabilities=["x"], max_attempts=3))
        for attempt, jump in ((1, -DAY), (2, DAY)):
            back_off = int(5.0 * 2 ** (attempt - 1))  # doubled at each failure
            board.dispatch()
            board.store.commit()
            board.take_effects()
            epoch = board.tasks[task.id].epoch
            board.fail(agent, task.id, epoch, "transient")
            board.store.commit()
            assert board.tasks[task.id].state == "pending"
            clock.wall += jump  # back: a wall-clock back-off would wait a day; forward: none
            pass_time(board, clock, back_off - 1, agent)
            board.dispatch()
            assert board.tasks[task.id].state == "pending", jump  # not due yet
            pass_time(board, clock, 2, agent)
            board.dispatch()
            assert board.tasks[task.id].state == "running", jump
            assert board.tasks[task.id].epoch == epoch + 1
