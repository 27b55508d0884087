"""``colibri mcp``: the MCP SDK's own stdio client spawns the server as a subprocess and drives
a real daemon with real sessions through its tools and resources."""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests import mcp_client
from tests.helpers import Daemon, colibri, one_line, online, wait_until
from tests.mcp_client import call, refusal
from tests.sessions.support import ECHO, alive, gated

if TYPE_CHECKING:  # the SDK is imported by the tests that use it (half a second)
    from mcp.client.session import ClientSession

Fleet = Callable[..., Daemon]

TOOLS = {"submit", "list", "show", "wait", "cancel", "answer", "why", "cost", "status", "agents",
         "schedule_list", "schedule_add", "schedule_pause", "schedule_resume"}  # fmt: skip


def mcp_session(root: Path) -> AbstractAsyncContextManager[ClientSession]:
    """``colibri --root ROOT mcp``, through the SDK's stdio client."""
    return mcp_client.mcp_session(root / "mcp.log", "--root", str(root))


async def until(predicate: Callable[[], Any], timeout: float = 10.0) -> None:
    async with asyncio.timeout(timeout):
        while not predicate():
            await asyncio.sleep(0.02)


def test_the_sdk_client_drives_real_sessions_through_the_tools(root: Path, fleet: Fleet) -> None:
    daemon = fleet({
        "build": {"capabilities": ["python"], "session": {"command": ECHO}},
        "slow": {"capabilities": ["slow"], "session": {"command": gated(root)}},
    })  # fmt: skip
    wait_until(lambda: online(daemon, "build", "slow"))

    async def drive() -> None:
        async with mcp_session(root) as session:
            tools = {tool.name: tool for tool in (await session.list_tools()).tools}
            assert set(tools) == TOOLS
            submit_schema = tools["submit"].input_schema
            assert submit_schema["required"] == ["text"]
            assert submit_schema["properties"]["capabilities"]["type"] == "array"
            assert tools["wait"].input_schema["required"] == ["task_id"]
            read_only = tools["list"].annotations
            assert read_only is not None and read_only.read_only_hint

            submitted = await call(session, "submit", text="say hello", capabilities=["python"])
            task = submitted["task"]
            waited = await call(session, "wait", task_id=task["id"])
            assert waited["ended"] is True
            done = waited["task"]
            assert done["outcome"] == "done" and done["agent"] == "build"
            assert "say hello" in done["output"]
            # the id's end, as the TUI and colibri attach show it, names the task too
            shown = await call(session, "show", task_id=task["id"][-8:])
            assert shown["task"]["output"] == done["output"]
            listed = await call(session, "list", agent="build")
            assert [t["id"] for t in listed["tasks"]] == [task["id"]]

            held = (await call(session, "submit", text="hold on", workspace="slow"))["task"]
            started = root / f"started-{held['id']}"
            await until(started.exists)
            cancelled = await call(session, "cancel", task_id=held["id"], reason="not needed")
            assert cancelled["cancelled"] == [held["id"]]
            ended = await call(session, "wait", task_id=held["id"])
            assert ended["task"]["outcome"] == "cancelled"
            await until(lambda: not alive(int(started.read_text())))

            # a task no agent can take: a bounded wait says it has not ended, and why says so
            stuck = (await call(session, "submit", text="x", capabilities=["gpu"]))["task"]
            waited = await call(session, "wait", task_id=stuck["id"], timeout_seconds=0.3)
            assert waited["ended"] is False and waited["task"]["state"] == "pending"
            why = await call(session, "why", task_id=stuck["id"][-8:])
            assert {a["agent"] for a in why["agents"]} == {"build", "slow"}
            assert all("gpu" in a["missing"] for a in why["agents"])
            await call(session, "cancel", task_id=stuck["id"])

            for tool in ("show", "wait", "cancel", "why"):
                error = await refusal(session, tool, task_id="no-such-task")
                assert error["code"] == "unknown_task" and "no-such-task" in error["message"]
            error = await refusal(session, "cancel", task_id=task["id"])
            assert error["code"] == "illegal_transition"

            status = await call(session, "status")
            assert status["agents"]["online"] == 2
            agents = await call(session, "agents")
            assert {a["name"] for a in agents["agents"]} == {"build", "slow"}

            resource = await session.read_resource(f"colibri://tasks/{task['id']}")
            assert json.loads(resource.contents[0].text)["task"]["output"] == done["output"]  # type: ignore[union-attr]
            listed_resources = {str(r.uri) for r in (await session.list_resources()).resources}
            assert {"colibri://tasks", "colibri://agents", "colibri://status"} <= listed_resources
            everything = await session.read_resource("colibri://tasks")
            ids = [t["id"] for t in json.loads(everything.contents[0].text)["tasks"]]  # type: ignore[union-attr]
            assert ids == [task["id"], held["id"], stuck["id"]]
            from mcp.shared.exceptions import MCPError

            with pytest.raises(MCPError, match="unknown_task"):
                await session.read_resource("colibri://tasks/no-such-task")

    asyncio.run(drive())


def test_schedules_and_cost_through_the_tools(root: Path, daemon: Daemon) -> None:
    async def drive() -> None:
        async with mcp_session(root) as session:
            added = await call(session, "schedule_add", name="sweep", text="clean caches",
                               every="15m", capabilities=["linux"])  # fmt: skip
            assert added["schedule"]["name"] == "sweep" and len(added["next"]) >= 1
            paused = await call(session, "schedule_pause", name="sweep")
            assert paused["schedule"]["paused"] is True
            listed = await call(session, "schedule_list")
            assert [(s["name"], s["paused"]) for s in listed["schedules"]] == [("sweep", True)]
            resumed = await call(session, "schedule_resume", name="sweep")
            assert resumed["schedule"]["paused"] is False
            error = await refusal(session, "schedule_add", name="twice", text="t", every="1h",
                                  cron="@daily")  # fmt: skip
            assert error["code"] == "bad_request" and "exactly one" in error["message"]
            error = await refusal(session, "schedule_add", name="bad", text="t", every="soon")
            assert error["code"] == "bad_duration"
            error = await refusal(session, "schedule_pause", name="nothing")
            assert error["code"] == "unknown_schedule"
            assert (await call(session, "cost", by="workspace"))["totals"] == []
            error = await refusal(session, "answer", task_id="no-such-task", text="yes")
            assert error["code"] == "unknown_task"

    asyncio.run(drive())


def test_without_a_daemon_every_tool_says_no_daemon(root: Path) -> None:
    async def drive() -> None:
        async with mcp_session(root) as session:
            error = await refusal(session, "status")
            assert error["code"] == "no_daemon" and "colibri run" in error["message"]
            error = await refusal(session, "submit", text="anything")
            assert error["code"] == "no_daemon"

    asyncio.run(drive())


def test_outside_a_root_it_stops_with_one_line(tmp_path: Path) -> None:
    done = colibri(tmp_path / "nowhere", "mcp")
    assert done.returncode == 1
    assert "nowhere" in one_line(done.stderr)


def test_without_the_sdk_it_says_how_to_install_it(root: Path) -> None:
    """The SDK made unimportable, as where the extra is not installed."""
    import subprocess

    script = (
        "import sys; sys.modules['mcp'] = None\n"
        "from colibri.cli.main import main\n"
        f"sys.argv = ['colibri', '--root', {str(root)!r}, 'mcp']\n"
        "main()\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=60, check=False)  # fmt: skip
    assert done.returncode == 1
    assert one_line(done.stderr) == (
        "colibri: colibri mcp needs the MCP SDK, which is not installed: "
        "pip install 'colibri-board[mcp]'"
    )


def test_submit_after_through_the_tools(root: Path, daemon: Daemon) -> None:
    async def drive() -> None:
        async with mcp_session(root) as session:
            first = (await call(session, "submit", text="plan", capabilities=["nobody"]))["task"]
            made = await call(session, "submit", text="build", capabilities=["nobody"],
                              after=[first["id"][-8:]], if_dependency_fails="run")  # fmt: skip
            second = made["task"]
            assert second["after"] == [first["id"]] and second["if_dependency_fails"] == "run"
            why = await call(session, "why", task_id=second["id"])
            assert why["summary"] == f"waits for 1 task: {first['id']} (pending)"
            error = await refusal(session, "submit", text="x", after=["0" * 8])
            assert error["code"] == "unknown_task"

    asyncio.run(drive())
