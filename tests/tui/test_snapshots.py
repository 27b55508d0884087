"""The TUI's main screens compared with their recorded SVG (pytest-textual-snapshot), against
a real daemon. Ids and ages change from run to run: they are masked (every id drawn as
``########``, every age as ``--``); the texts, states, agents and costs are fixed.

After a deliberate change of the screens: ``pytest tests/tui/test_snapshots.py
--snapshot-update``, then look at the new SVGs under ``__snapshots__``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot

from colibri.client import socket_path
from colibri.tui import views
from colibri.tui.app import ColibriApp
from tests.helpers import Daemon, FakeAgent
from tests.tui.test_tui import shown_on

SnapCompare = Callable[..., bool]


@pytest.fixture
def board(daemon: Daemon, monkeypatch: pytest.MonkeyPatch) -> Iterator[Daemon]:
    """A board in every state: done with a cost, failed, running, asking, pending, a family."""
    monkeypatch.setattr(views, "short_id", lambda task_id: "#" * 8)
    monkeypatch.setattr(views, "age", lambda instant, now: "--")
    linux = FakeAgent(daemon, "linux-1", ["linux", "python"], slots=2)
    bsd = FakeAgent(daemon, "bsd-1", ["freebsd", "zfs"])
    try:
        daemon.submit("upgrade zfs on the build hosts", capabilities=["freebsd", "zfs"])
        bsd.out(bsd.next_assign(), output="upgraded", cost={"usd": 0.021})
        daemon.submit("run the python test suite", capabilities=["python"], priority=5)
        linux.fail(linux.next_assign(), error="exit 3: 2 tests failed")
        parent = daemon.submit("prepare the release", capabilities=["docs"])
        daemon.submit("write release notes", capabilities=["docs"], parent=parent["id"])
        daemon.submit("migrate the schema", capabilities=["python"])
        asking = linux.next_assign()
        asker = daemon.client()
        asker.send("ask", task=asking["task"]["id"], epoch=asking["epoch"],
                   claim=asking["claim"], question="drop the legacy table too?")  # fmt: skip
        daemon.submit("rebuild the kernel module", capabilities=["linux"])
        linux.next_assign()
        yield daemon
        asker.close()
    finally:
        linux.close()
        bsd.close()


def settled(*words: str) -> Callable[[Pilot[Any]], Any]:
    """Wait until the board is loaded and these words are on the screen."""

    async def run_before(pilot: Pilot[Any]) -> None:
        app = pilot.app
        assert isinstance(app, ColibriApp)
        for _ in range(200):
            if len(app.rows) == 6 and all(word in shown_on(app) for word in words):
                app.task_list.move_to(0)
                await pilot.pause(0.2)
                return
            await pilot.pause(0.05)
        raise AssertionError(f"the board never showed {words}")

    return run_before


def app_for(daemon: Daemon) -> ColibriApp:
    # A fixed root in the header: the test's own is a new temporary directory each run.
    app = ColibriApp(socket_path(daemon.root), root=Path("/srv/build"))
    # The tab's underline glides when its label changes ("Tasks" → "Tasks 6"): not in a still.
    app.animation_level = "none"
    return app


def test_the_tasks_screen(board: Daemon, snap_compare: SnapCompare) -> None:
    assert snap_compare(app_for(board), terminal_size=(120, 16),
                        run_before=settled("asking", "1 failed"))  # fmt: skip


def test_the_tasks_screen_on_80_by_24(board: Daemon, snap_compare: SnapCompare) -> None:
    assert snap_compare(app_for(board), run_before=settled("asking", "1 failed"))


def test_the_agents_screen(board: Daemon, snap_compare: SnapCompare) -> None:
    assert snap_compare(app_for(board), terminal_size=(100, 12), press=["2"],
                        run_before=settled("asking"))  # fmt: skip
