"""The agents page at the HTTP level: each agent's ready pool and breaker, its harness and
the harness's last failure in its own words, and the workspaces summed up (agents online,
slots busy, sessions, ready)."""

from __future__ import annotations

import os
import re
import signal
from collections.abc import Callable
from pathlib import Path

from colibri.daemon.board import BREAKER_AFTER
from tests.helpers import Daemon, FakeAgent, wait_until
from tests.sessions.conftest import fleet  # noqa: F401  (a fixture)
from tests.sessions.support import ECHO, one_each
from tests.web.conftest import WebServer


def cells(body: str, attribute: str, name: str) -> dict[str, str]:
    """The cells of a row (``data-agent`` or ``data-workspace``), by their class."""
    row = re.search(rf'<tr data-{attribute}="{re.escape(name)}".*?</tr>', body, re.S)
    assert row, f"no row for {name}"
    return {
        klass.split()[0]: re.sub(r"<[^>]+>", "", text).strip()
        for klass, text in re.findall(r'<td class="([^"]+)">(.*?)</td>', row.group(0), re.S)
    }


def test_the_agents_page_shows_ready_pools_breakers_and_the_workspaces(
    daemon: Daemon, web: WebServer
) -> None:
    flaky = FakeAgent(daemon, "flaky", ["f"], workspace="ws")
    warm = FakeAgent(daemon, "warm", ["g"], slots=3)
    try:
        warm.client.call("heartbeat", ready=2)
        held = [warm.next_assign() for _ in range(2) if daemon.submit("hold", capabilities=["g"])]
        task = daemon.submit("never ready", capabilities=["f"])
        for _ in range(BREAKER_AFTER):
            assign = flaky.next_assign()
            flaky.client.call("requeue", task=task["id"], epoch=assign["epoch"],
                              reason="not ready in time")  # fmt: skip
        wait_until(lambda: {a["name"]: a for a in daemon.call("agents")["agents"]}
                   ["flaky"]["breaker_open"])  # fmt: skip
        cookie, _ = web.sign_in()
        status, _, body = web.request("GET", "/agents", cookie=cookie)
        assert status == 200
        assert cells(body, "agent", "warm") == {
            "agent-state": "online", "agent-ready": "2", "agent-breaker": "closed",
            "agent-harness": "-", "agent-failure": "-",
        }  # fmt: skip
        shown = cells(body, "agent", "flaky")
        assert (shown["agent-state"], shown["agent-breaker"]) == ("breaker open", "open")
        assert cells(body, "workspace", "warm") == {
            "ws-agents": "1/1", "ws-slots": "2/3", "ws-sessions": "2", "ws-ready": "2",
            "ws-harness": "-",
        }  # fmt: skip
        assert cells(body, "workspace", "ws")["ws-agents"] == "1/1"
        assert {a["task"]["id"] for a in held} <= set(re.findall(r'/tasks/([0-9a-f-]+)"', body))
    finally:
        flaky.close()
        warm.close()


def test_the_agents_page_shows_a_harness_and_its_last_failure(
    fleet: Callable[..., Daemon],  # noqa: F811
    root: Path,
) -> None:
    daemon = fleet({"web": {"session": {"command": ECHO}}})
    first = wait_until(lambda: one_each(root, ["web"]))
    os.kill(first["web"], signal.SIGKILL)
    wait_until(lambda: daemon.call("status")["harnesses"][0]["last_failure"])
    wait_until(lambda: daemon.call("status")["harnesses"][0]["state"] == "running")
    web = WebServer(root).start()
    try:
        cookie, _ = web.sign_in()
        status, _, body = web.request("GET", "/agents", cookie=cookie)
        assert status == 200
        shown = cells(body, "agent", "web")
        assert shown["agent-failure"].startswith("killed by SIGKILL (at 20")
        assert re.fullmatch(r"pid \d+, 1 restart", shown["agent-harness"]), shown
        assert re.fullmatch(r"pid \d+, 1 restart", cells(body, "workspace", "web")["ws-harness"])
    finally:
        web.stop()
