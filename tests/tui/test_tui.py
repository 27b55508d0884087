"""``colibri tui`` driven by Textual's own harness (``App.run_test`` and its Pilot) against a
real daemon process: what it shows comes from the daemon's events, and what its keys do is
checked on the daemon's board."""

from __future__ import annotations

import asyncio
import html
import re
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Static

from colibri.client import socket_path
from colibri.core.text import short_id
from colibri.daemon.board import BREAKER_AFTER
from colibri.tui.app import ColibriApp
from colibri.tui.screens import Confirm, TaskScreen
from tests.helpers import Daemon, FakeAgent

SIZE = (140, 40)


def run(scenario: Callable[[ColibriApp, Pilot[None]], Awaitable[None]], root: Path,
        size: tuple[int, int] = SIZE) -> None:  # fmt: skip
    async def main() -> None:
        app = ColibriApp(socket_path(root), root=root)
        async with app.run_test(size=size) as pilot:
            await scenario(app, pilot)

    asyncio.run(main())


async def until(pilot: Pilot[None], predicate: Callable[[], Any], timeout: float = 10.0) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s")
        await pilot.pause(0.05)


def text_of(app: ColibriApp, selector: str) -> str:
    return str(app.query_one(selector, Static).render())


def shown_on(app: ColibriApp) -> str:
    """What the terminal shows, as text: the lines of Textual's SVG screenshot."""
    lines: dict[int, list[str]] = {}
    svg = app.export_screenshot()
    for line, fragment in re.findall(
        r'clip-path="url\(#terminal-\d+-line-(\d+)\)">(.*?)</text>', svg
    ):
        lines.setdefault(int(line), []).append(html.unescape(fragment).replace("\xa0", " "))
    return "\n".join("".join(lines[n]) for n in sorted(lines))


def notes(app: ColibriApp) -> str:
    """The notifications shown (toasts wrap their text across lines of the screen)."""
    return "\n".join(str(n.message) for n in app._notifications)


def row_texts(app: ColibriApp) -> list[str]:
    return [app.board.tasks[task_id].text for task_id in app.rows]


def test_tasks_appear_as_they_are_submitted(daemon: Daemon) -> None:
    before = daemon.submit("already on the board", capabilities=["nobody-has-this"])

    async def scenario(app: ColibriApp, pilot: Pilot[None]) -> None:
        await until(pilot, lambda: before["id"] in app.rows)
        later = [daemon.submit(f"submitted later {n}", capabilities=["gpu"]) for n in (1, 2)]
        await until(pilot, lambda: all(t["id"] in app.rows for t in later))
        # Newest first, the header counts them, and the table shows the text and capabilities.
        assert row_texts(app)[:3] == ["submitted later 2", "submitted later 1",
                                      "already on the board"]  # fmt: skip
        await until(pilot, lambda: "3 pending" in text_of(app, "#header"))
        assert "0 running" in text_of(app, "#header")
        board = shown_on(app)
        assert "submitted later 2" in board and "gpu" in board

    run(scenario, daemon.root)


def test_cancel_from_the_tui_cancels_the_family(daemon: Daemon) -> None:
    parent = daemon.submit("the parent", capabilities=["nobody-has-this"])
    children = [
        daemon.submit(f"child {n}", capabilities=["nobody-has-this"], parent=parent["id"])
        for n in (1, 2)
    ]
    bystander = daemon.submit("not in the family", capabilities=["nobody-has-this"])

    async def scenario(app: ColibriApp, pilot: Pilot[None]) -> None:
        await until(pilot, lambda: len(app.rows) == 4)
        app.set_filter("the parent")
        assert app.selected_id() == parent["id"]
        await pilot.press("c")
        confirm = await until(pilot, lambda: isinstance(app.screen, Confirm) and app.screen)
        assert "2 open descendants" in confirm.question
        await pilot.press("y")
        await until(pilot, lambda: daemon.task(parent["id"])["outcome"] == "cancelled")
        assert [daemon.task(c["id"])["outcome"] for c in children] == ["cancelled"] * 2
        assert daemon.task(bystander["id"])["state"] == "pending"
        # The board shows it from the events.
        await until(pilot, lambda: app.board.tasks[parent["id"]].outcome == "cancelled")

    run(scenario, daemon.root)


def test_cancel_can_be_declined(daemon: Daemon) -> None:
    task = daemon.submit("keep me", capabilities=["nobody-has-this"])

    async def scenario(app: ColibriApp, pilot: Pilot[None]) -> None:
        await until(pilot, lambda: app.rows == [task["id"]])
        await pilot.press("c")
        confirm = await until(pilot, lambda: isinstance(app.screen, Confirm) and app.screen)
        assert "descendant" not in confirm.question
        await pilot.press("n")
        await pilot.pause(0.3)
        assert daemon.task(task["id"])["state"] == "pending"

    run(scenario, daemon.root)


def test_pause_and_resume_toggle_dispatch(daemon: Daemon) -> None:
    async def scenario(app: ColibriApp, pilot: Pilot[None]) -> None:
        await until(pilot, lambda: app.client is not None)
        await pilot.press("p")
        await until(pilot, lambda: daemon.call("status")["paused"])
        await until(pilot, lambda: "PAUSED" in text_of(app, "#banner"))
        assert app.query_one("#banner").display
        await pilot.press("p")
        await until(pilot, lambda: not daemon.call("status")["paused"])
        await until(pilot, lambda: not app.query_one("#banner").display)
        # A pause made elsewhere shows too: it comes as an event.
        daemon.call("toggle-swarm", paused=True)
        await until(pilot, lambda: app.query_one("#banner").display)

    run(scenario, daemon.root)


def test_the_filter_narrows_the_board(daemon: Daemon) -> None:
    alpha = daemon.submit("alpha: rotate the keys", capabilities=["zfs"])
    beta = daemon.submit("beta: write the notes", capabilities=["docs"])

    async def scenario(app: ColibriApp, pilot: Pilot[None]) -> None:
        await until(pilot, lambda: len(app.rows) == 2)
        await pilot.press("slash")
        await pilot.press(*"ALPHA", "enter")
        await until(pilot, lambda: app.rows == [alpha["id"]])
        await pilot.press("slash")
        for _ in range(5):
            await pilot.press("backspace")
        await pilot.press(*"cap:docs", "enter")
        await until(pilot, lambda: app.rows == [beta["id"]])
        await pilot.press("escape")
        await until(pilot, lambda: len(app.rows) == 2)
        app.set_filter("state:running")
        assert app.rows == []
        app.set_filter("state:pending nothing-matches-this")
        assert app.rows == []

    run(scenario, daemon.root)


def test_the_detail_screen_shows_output_ledger_and_family(daemon: Daemon) -> None:
    agent = FakeAgent(daemon, "worker-1", ["python"])
    try:
        parent = daemon.submit("parent of the work", capabilities=["nobody-has-this"])
        task = daemon.submit("compute the answer", capabilities=["python"], parent=parent["id"])
        assign = agent.next_assign()
        agent.out(assign, output="the answer is 42")
        daemon.wait_closed(task["id"])

        async def scenario(app: ColibriApp, pilot: Pilot[None]) -> None:
            await until(pilot, lambda: task["id"] in app.rows)
            await until(pilot, lambda: app.board.tasks[task["id"]].state == "closed")
            app.set_filter("compute")
            await pilot.press("enter")
            detail = await until(pilot, lambda: isinstance(app.screen, TaskScreen) and app.screen)
            body = detail.body.plain
            assert "the answer is 42" in body
            assert "pending → running" in body and "worker-1" in body  # its ledger rows
            assert "parent of the work" in body  # its family
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, TaskScreen))
            await pilot.press("2")
            await until(pilot, lambda: "worker-1" in shown_on(app))
            assert "0/1" in shown_on(app)

        run(scenario, daemon.root)
    finally:
        agent.close()


def test_answer_and_submit_from_the_tui(daemon: Daemon) -> None:
    agent = FakeAgent(daemon, "term-1", ["interactive"])
    asker = daemon.client()
    try:
        task = daemon.submit("migrate the schema", capabilities=["interactive"])
        assign = agent.next_assign()
        ask_id = asker.send("ask", task=task["id"], epoch=assign["epoch"], claim=assign["claim"],
                            question="drop the legacy table too?")  # fmt: skip

        async def scenario(app: ColibriApp, pilot: Pilot[None]) -> None:
            await until(pilot, lambda: "1 asking" in text_of(app, "#header"))
            await pilot.press("a")
            await pilot.pause(0.2)
            await pilot.press(*"yes, drop it", "enter")
            await pilot.pause(0.2)
            await pilot.press("s")
            await pilot.pause(0.2)
            await pilot.press(*"a task from the tui")
            await pilot.press("tab", *"linux, zfs", "enter")
            await until(pilot, lambda: any(t.text == "a task from the tui"
                                           for t in app.board.tasks.values()))  # fmt: skip

        run(scenario, daemon.root)
        reply = asker.read()
        assert reply["id"] == ask_id and reply["answer"] == "yes, drop it"
        submitted = [t for t in daemon.call("list")["tasks"] if t["text"] == "a task from the tui"]
        assert [t["capabilities"] for t in submitted] == [["linux", "zfs"]]
    finally:
        asker.close()
        agent.close()


def test_a_daemon_restart_is_survived(daemon: Daemon) -> None:
    first = daemon.submit("before the restart", capabilities=["nobody-has-this"])

    async def scenario(app: ColibriApp, pilot: Pilot[None]) -> None:
        await until(pilot, lambda: first["id"] in app.rows)
        daemon.kill()
        await until(pilot, lambda: "went away" in text_of(app, "#banner"))
        assert first["id"] in app.rows  # the board stays in view meanwhile
        daemon.start()
        await until(pilot, lambda: not app.lost)
        await until(pilot, lambda: "the daemon is back" in text_of(app, "#notes"))
        later = daemon.submit("after the restart")
        await until(pilot, lambda: later["id"] in app.rows)
        assert not app.query_one("#banner").display

    run(scenario, daemon.root)


def test_no_daemon_shows_how_to_start_one_then_connects(root: Path) -> None:
    daemon = Daemon(root)

    async def scenario(app: ColibriApp, pilot: Pilot[None]) -> None:
        await until(pilot, lambda: app.has_class("offline"))
        message = text_of(app, "#offline")
        assert "No daemon is answering" in message
        assert f"colibri --root {root} run" in message
        assert "colibri demo" in message
        daemon.start()
        try:
            await until(pilot, lambda: not app.has_class("offline"))
            task = daemon.submit("the first task")
            await until(pilot, lambda: task["id"] in app.rows)
        finally:
            daemon.stop()

    run(scenario, root)


@pytest.mark.parametrize("size", [(80, 24), (200, 60)])
def test_the_main_screens_fit_a_small_and_a_big_terminal(
    daemon: Daemon, size: tuple[int, int]
) -> None:
    daemon.submit("rotate the zfs snapshots", capabilities=["zfs"], priority=5)
    daemon.call("schedule-add", name="nightly-backup",
                schedule={"cron": "0 3 * * *", "tz": "Europe/Paris",
                          "task": {"text": "back up the pools"}})  # fmt: skip

    async def scenario(app: ColibriApp, pilot: Pilot[None]) -> None:
        words = ("1 pending", "rotate the zfs", "spent", "quit", "STATE")
        # (Until: the first frames may not have every widget drawn yet.)
        await until(pilot, lambda: all(word in shown_on(app) for word in words))
        await pilot.press("3")
        await until(pilot, lambda: "nightly-backup" in shown_on(app))
        schedules = shown_on(app)
        assert "03:00:00 CET" in schedules or "03:00:00 CEST" in schedules
        await pilot.press("question_mark")
        await until(pilot, lambda: "pause / resume dispatch" in shown_on(app))

    run(scenario, daemon.root, size)


def test_a_task_text_cannot_drive_the_terminal(daemon: Daemon) -> None:
    """Control characters and bidi overrides in what others wrote are shown as escapes."""
    task = daemon.submit("clear\x1b[2J the screen \u202eesrever", capabilities=["x"])

    async def scenario(app: ColibriApp, pilot: Pilot[None]) -> None:
        await until(pilot, lambda: "\\x1b[2J the screen \\u202eesrever" in shown_on(app))
        await pilot.press("c")
        confirm = await until(pilot, lambda: isinstance(app.screen, Confirm) and app.screen)
        assert "\x1b" not in confirm.question and "\\x1b" in confirm.question
        await pilot.press("n")
        await pilot.press("enter")
        detail = await until(pilot, lambda: isinstance(app.screen, TaskScreen) and app.screen)
        assert "\x1b" not in detail.body.plain and "\u202e" not in detail.body.plain
        assert task["id"] in detail.body.plain

    run(scenario, daemon.root)


def test_workspaces_show_their_harness(root: Path) -> None:
    """A workspace's harness, started by the daemon: its agent, pid and restarts."""
    import json

    (root / "api").mkdir()
    (root / "colibri.jsonc").write_text(json.dumps({"workspaces": {
        "api": {"capabilities": ["python"], "session": {"command": ["cat"]}},
    }}))  # fmt: skip
    daemon = Daemon(root)
    daemon.start()
    try:

        async def scenario(app: ColibriApp, pilot: Pilot[None]) -> None:
            await pilot.press("2")
            await until(pilot, lambda: "0 restarts" in shown_on(app), timeout=20)
            line = next(line for line in shown_on(app).splitlines() if "restarts" in line)
            assert "api" in line and "pid " in line
            await until(pilot, lambda: "0/1" in shown_on(app), timeout=20)  # its agent came

        run(scenario, root)
    finally:
        daemon.stop()


def test_a_harness_that_cannot_start_says_why_on_the_agents_view(root: Path) -> None:
    """A workspace whose session command is not installed: the agents view shows its harness
    restarting and its last failure in its own words, as the daemon hears of each exit."""
    import json

    (root / "colibri.jsonc").write_text(json.dumps({"workspaces": {
        "alpha": {"session": {"command": ["no-such-agent-here", "-p"]}},
    }}))  # fmt: skip
    daemon = Daemon(root)
    daemon.start()
    said = "its command 'no-such-agent-here' is not found on PATH"
    try:

        async def scenario(app: ColibriApp, pilot: Pilot[None]) -> None:
            def row() -> str | None:
                lines = shown_on(app).splitlines()
                return next((line for line in lines if said in line and "no agent" in line), None)

            await pilot.press("2")
            line = await until(pilot, row, timeout=20)
            assert "restarting" in line and "last failure: agent alpha: " in line
            # The status line notes each exit too (the next one, if it failed before the TUI
            # subscribed).
            noted = f"harness alpha exited: agent alpha: {said}"
            await until(pilot, lambda: noted in shown_on(app), timeout=20)

        run(scenario, root, size=(240, 40))
    finally:
        daemon.stop()


def test_attach_needs_a_running_task_and_a_terminal(daemon: Daemon) -> None:
    agent = FakeAgent(daemon, "term-1", ["interactive"])
    try:
        waiting = daemon.submit("nobody takes this", capabilities=["nobody-has-this"])
        running = daemon.submit("runs now", capabilities=["interactive"])
        agent.next_assign()

        async def scenario(app: ColibriApp, pilot: Pilot[None]) -> None:
            await until(pilot, lambda: app.board.tasks.get(running["id"]) is not None
                        and app.board.tasks[running["id"]].state == "running")  # fmt: skip
            app.set_filter("nobody")
            assert app.selected_id() == waiting["id"]
            await pilot.press("t")
            await until(pilot, lambda: "put the cursor on a running task" in notes(app))
            app.set_filter("runs now")
            await pilot.press("t")  # headless: no terminal to hand over to tmux
            await until(pilot, lambda: "cannot hand itself over to tmux" in notes(app))
            assert app.is_running

        run(scenario, daemon.root)
    finally:
        agent.close()


def agent_row(app: ColibriApp, name: str) -> list[str]:
    """The cells of an agent's row on the agents tab."""
    table = app.query_one("#agent-table", DataTable)
    for row in range(table.row_count):
        cells = [str(cell) for cell in table.get_row_at(row)]
        if cells[:1] == [name]:
            return cells
    return []


def test_the_agents_tab_follows_a_task_through_its_life(daemon: Daemon) -> None:
    """Started while the agent is idle: its slots and its session change as its task is
    assigned and ends, and its ready pool as its heartbeats say (from the events; nothing is
    read on a timer)."""
    agent = FakeAgent(daemon, "bsd-1", ["zfs"], workspace="bsd")
    try:

        async def scenario(app: ColibriApp, pilot: Pilot[None]) -> None:
            await pilot.press("2")
            await until(pilot, lambda: agent_row(app, "bsd-1")[:5] == [
                "bsd-1", "online", "bsd", "0/1", "-"])  # fmt: skip
            daemon.call("toggle-swarm", paused=True)
            task = daemon.submit("upgrade the pool", capabilities=["zfs"])
            await until(pilot, lambda: task["id"] in app.rows)
            assert app.board.tasks[task["id"]].state == "pending"
            assert agent_row(app, "bsd-1")[3:5] == ["0/1", "-"]
            daemon.call("toggle-swarm", paused=False)
            assign = agent.next_assign()
            session = short_id(task["id"])
            await until(pilot, lambda: agent_row(app, "bsd-1")[3:5] == ["1/1", session])
            assert app.board.tasks[task["id"]].state == "running"
            agent.client.call("heartbeat", ready=2)
            await until(pilot, lambda: agent_row(app, "bsd-1")[5] == "-, 2 ready")
            await until(pilot, lambda: "-, 2 ready" in shown_on(app))  # its column widened
            agent.out(assign, output="upgraded")
            await until(pilot, lambda: agent_row(app, "bsd-1")[3:5] == ["0/1", "-"])
            assert app.board.tasks[task["id"]].outcome == "done"

        run(scenario, daemon.root)
    finally:
        agent.close()


def test_a_tui_started_during_a_run_sees_the_agent_go_idle(daemon: Daemon) -> None:
    agent = FakeAgent(daemon, "slow-1", ["build"], slots=2)
    try:
        task = daemon.submit("a long build", capabilities=["build"])
        assign = agent.next_assign()

        async def scenario(app: ColibriApp, pilot: Pilot[None]) -> None:
            await pilot.press("2")
            session = short_id(task["id"])
            await until(pilot, lambda: agent_row(app, "slow-1")[1:5] == [
                "online", "-", "1/2", session])  # fmt: skip
            agent.fail(assign, error="the build broke")
            await until(pilot, lambda: agent_row(app, "slow-1")[3:5] == ["0/2", "-"])
            assert app.board.tasks[task["id"]].outcome == "failed"

        run(scenario, daemon.root)
    finally:
        agent.close()


def test_the_agents_tab_shows_a_breaker_open_and_keeps_its_cursor(daemon: Daemon) -> None:
    """Sessions that never become ready open the agent's breaker: the agents tab says so as
    it happens; redrawn meanwhile, the table's cursor stays on the agent it was on."""
    flaky = FakeAgent(daemon, "flaky", ["f"], workspace="ws")
    steady = FakeAgent(daemon, "steady", ["g"])
    try:

        async def scenario(app: ColibriApp, pilot: Pilot[None]) -> None:
            await pilot.press("2")
            await until(pilot, lambda: agent_row(app, "steady")[1:2] == ["online"])
            table = app.query_one("#agent-table", DataTable)
            await pilot.press("down")
            assert table.cursor_row == 1  # on steady (flaky sorts first)
            task = daemon.submit("never ready", capabilities=["f"])
            for _ in range(BREAKER_AFTER):
                assign = flaky.next_assign()
                flaky.client.call("requeue", task=task["id"], epoch=assign["epoch"],
                                  reason="not ready in time")  # fmt: skip
            await until(pilot, lambda: agent_row(app, "flaky")[1] == "breaker open")
            assert agent_row(app, "flaky")[3:5] == ["0/1", "-"]
            assert agent_row(app, "steady")[1:2] == ["online"]
            assert table.cursor_row == 1

        run(scenario, daemon.root)
    finally:
        flaky.close()
        steady.close()


def test_new_rows_come_into_view_at_the_top_and_leave_a_chosen_task_where_it_is(
    daemon: Daemon,
) -> None:
    """With the cursor on the first row, a new task takes the first row and the cursor, in
    view (also after the cursor went down and came back). With the cursor moved down, its
    task stays highlighted on the same line of the screen however many rows arrive above; Home
    goes back to the newest."""
    first = [daemon.submit(f"task {n}", capabilities=["nobody-has-this"]) for n in range(30)]

    def submit(text: str) -> dict[str, Any]:
        return daemon.submit(text, capabilities=["nobody-has-this"])

    async def scenario(app: ColibriApp, pilot: Pilot[None]) -> None:
        task_list = app.task_list

        def line_of_cursor() -> int:
            return task_list.cursor - int(task_list.scroll_offset.y)

        await until(pilot, lambda: len(app.rows) == 30)
        assert app.selected_id() == first[-1]["id"]
        await pilot.press("down", "up")  # the cursor moved, and is back on the first row
        newer = submit("newer")
        await until(pilot, lambda: app.rows[:1] == [newer["id"]])
        assert app.selected_id() == newer["id"] and task_list.scroll_offset.y == 0
        assert "newer" in shown_on(app)

        await pilot.press("down", "down")
        chosen = app.selected_id()
        assert chosen == first[-2]["id"] and line_of_cursor() == 2
        height = task_list.size.height
        burst = [submit(f"burst {n}") for n in range(height + 3)]  # more than a screen
        await until(pilot, lambda: app.rows[:1] == [burst[-1]["id"]])
        assert app.selected_id() == chosen and line_of_cursor() == 2
        assert task_list.scroll_offset.y == len(burst)
        assert "task 28" in shown_on(app)

        await pilot.press("home")
        assert app.selected_id() == burst[-1]["id"] and task_list.scroll_offset.y == 0
        newest = submit("newest")
        await until(pilot, lambda: app.rows[:1] == [newest["id"]])
        assert app.selected_id() == newest["id"] and task_list.scroll_offset.y == 0
        assert "newest" in shown_on(app)

    run(scenario, daemon.root, size=(100, 20))


def test_the_detail_screen_shows_what_a_task_waits_for_and_its_branch(daemon: Daemon) -> None:
    agent = FakeAgent(daemon, "worker-1", ["python"])
    try:
        first = daemon.submit("write the plan", capabilities=["python"])
        second = daemon.submit("implement the plan", capabilities=["nobody-has-this"],
                               after=[first["id"]])  # fmt: skip
        assign = agent.next_assign()
        change = {"branch": "colibri/0f3a9b2c-write-the-plan", "base": "1" * 40, "head": "2" * 40,
                  "files": 2, "insertions": 30, "deletions": 4}  # fmt: skip
        assert agent.out(assign, output="PLAN.md written", change=change)["ok"]
        daemon.wait_closed(first["id"])
        why = daemon.call("why", task=first["id"])["summary"]
        assert why == ("it ended done; nothing waits; its session left branch "
                       "colibri/0f3a9b2c-write-the-plan at 222222222: 2 files, +30 -4")

        async def scenario(app: ColibriApp, pilot: Pilot[None]) -> None:
            await until(pilot, lambda: second["id"] in app.rows and first["id"] in app.rows)
            await until(pilot, lambda: app.board.tasks[first["id"]].state == "closed")
            app.set_filter("implement")
            await pilot.press("enter")
            detail = await until(pilot, lambda: isinstance(app.screen, TaskScreen) and app.screen)
            assert f"after:        {short_id(first['id'])} (done)" in detail.body.plain
            assert "if one fails: cancel" in detail.body.plain
            await pilot.press("escape")
            await until(pilot, lambda: not isinstance(app.screen, TaskScreen))
            app.set_filter("write the plan")
            await pilot.press("enter")
            detail = await until(pilot, lambda: isinstance(app.screen, TaskScreen) and app.screen)
            said = "branch colibri/0f3a9b2c-write-the-plan at 222222222: 2 files, +30 -4"
            assert f"change:       {said}" in detail.body.plain
            assert f"out; {said}" in detail.body.plain  # its ledger row says it too

        run(scenario, daemon.root)
    finally:
        agent.close()


def test_a_task_that_waits_for_others_is_shown_blocked_until_it_is_released(
    daemon: Daemon,
) -> None:
    first = daemon.submit("the gate", capabilities=["gatekeeper"])
    second = daemon.submit("behind the gate", capabilities=["nobody-has-this"],
                           after=[first["id"]])  # fmt: skip

    def row_of(app: ColibriApp, task_id: str) -> str:
        return next(ln for ln in shown_on(app).splitlines() if short_id(task_id) in ln)

    async def scenario(app: ColibriApp, pilot: Pilot[None]) -> None:
        await until(pilot, lambda: second["id"] in app.rows)
        await until(pilot, lambda: "blocked" in row_of(app, second["id"]))
        assert "pending" in row_of(app, first["id"])
        agent = FakeAgent(daemon, "keeper", ["gatekeeper"])
        try:
            agent.out(agent.next_assign())
        finally:
            agent.close()
        await until(pilot, lambda: app.board.tasks[first["id"]].state == "closed")
        await until(pilot, lambda: "pending" in row_of(app, second["id"]))

    run(scenario, daemon.root)
