"""Metrics of a real fleet: a workspace's harness, its ready pool, its restarts."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from pathlib import Path

from tests.helpers import PYTHON, Daemon, metrics_url, sample, scrape, wait_until
from tests.sessions.support import ECHO, sweep


def test_a_workspace_s_agent_ready_pool_and_harness_restarts_are_scraped(root: Path) -> None:
    (root / "colibri.jsonc").write_text(json.dumps({
        "scheduler": {"agent_ttl": "3s"},
        "workspaces": {"hot": {"warm": 2, "session": {"command": ECHO, "idle": "60s"}}},
    }))  # fmt: skip
    daemon = Daemon(root, "--metrics", "127.0.0.1:0")
    daemon.start()
    try:
        url = metrics_url(daemon)
        first = scrape(url)
        assert sample(first, "colibri_harness_restarts_total", workspace="hot") == 0
        assert sample(first, "colibri_harness_degraded", workspace="hot") == 0
        # the harness registers, fills its pool, and says so in its heartbeats (every second)
        wait_until(
            lambda: sample(scrape(url), "colibri_ready_sessions", workspace="hot") == 2, timeout=30
        )
        assert sample(scrape(url), "colibri_agents_online", workspace="hot") == 1
        (hot,) = daemon.call("agents")["agents"]  # and agents says it (the TUI shows it)
        assert hot["ready"] == 2 and hot["breaker_open"] is False
        task = daemon.submit("hello", workspace="hot")
        assert daemon.wait_closed(task["id"], timeout=30)["outcome"] == "done"
        done = scrape(url)
        assert sample(done, "colibri_tasks_finished_total", outcome="done") == 1
        assert sample(done, "colibri_submit_to_assign_seconds_count") == 1

        (harness,) = daemon.call("status")["harnesses"]
        os.killpg(harness["pid"], signal.SIGKILL)  # a crash: the supervisor starts it again
        wait_until(
            lambda: sample(scrape(url), "colibri_harness_restarts_total", workspace="hot") == 1,
            timeout=30,
        )
    finally:
        sweep(root, daemon)
        sweep(root)


def test_a_harness_stops_telling_its_ready_pool_to_a_daemon_that_refuses_it(root: Path) -> None:
    """A daemon older than heartbeat's ``ready`` refuses the field: the harness goes on with
    plain heartbeats on the same connection, and stays registered."""
    import socketserver
    import threading

    (root / "colibri.jsonc").write_text(json.dumps({
        "workspaces": {"hot": {"warm": 1, "session": {"command": ECHO, "idle": "60s"}}},
    }))  # fmt: skip
    requests: list[dict[str, object]] = []

    class OldDaemon(socketserver.StreamRequestHandler):
        def handle(self) -> None:
            for line in self.rfile:
                request = json.loads(line)
                requests.append(request)
                reply: dict[str, object] = {"id": request.get("id"), "ok": True}
                if request["cmd"] == "register-agent":
                    reply |= {"agent": {"name": request["name"], "capabilities": []},
                              "adopted": [], "rejected": [], "heartbeat": 0.05,
                              "max_line": 1 << 20}  # fmt: skip
                elif "ready" in request:
                    reply = {"id": request.get("id"), "ok": False, "error": {
                        "code": "bad_request", "message": "Object contains unknown field `ready`"
                    }}  # fmt: skip
                self.wfile.write(json.dumps(reply).encode() + b"\n")

    server = socketserver.ThreadingUnixStreamServer(
        str(root / ".colibri" / "colibri.sock"), OldDaemon
    )
    threading.Thread(target=server.serve_forever, daemon=True).start()
    harness = subprocess.Popen(
        [PYTHON, "-m", "colibri", "--root", str(root), "agent", "--workspace", "hot"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip

    def heartbeats() -> list[dict[str, object]]:
        return [r for r in requests if r["cmd"] == "heartbeat"]

    try:
        wait_until(lambda: len(heartbeats()) >= 5, timeout=30)
        first, *rest = heartbeats()
        assert "ready" in first, first
        assert all("ready" not in beat for beat in rest), rest
        assert [r["cmd"] for r in requests].count("register-agent") == 1
    finally:
        harness.terminate()
        harness.wait(timeout=15)
        server.shutdown()
        server.server_close()
        sweep(root)
