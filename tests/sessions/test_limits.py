"""max_sessions: the supervised workspaces of a host never run more sessions than the cap."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from tests.helpers import Daemon, wait_until

#: A session that runs until a file named after its task appears in the workspace directory.
WAITS = (
    "import os, sys, time\n"
    "flag = os.environ['COLIBRI_TASK_ID'] + '.go'\n"
    "while not os.path.exists(flag):\n"
    "    time.sleep(0.05)\n"
    "print('finished')\n"
)


def test_max_sessions_caps_sessions_across_workspaces(root: Path) -> None:
    session = {"command": [sys.executable, "-c", WAITS]}
    (root / "colibri.jsonc").write_text(json.dumps({
        "scheduler": {"max_sessions": 2},
        "workspaces": {"a": {"slots": 3, "session": session},
                       "b": {"slots": 3, "session": session}},
    }))  # fmt: skip
    daemon = Daemon(root)
    daemon.start()
    try:
        ids = [daemon.call("submit", text=f"job {n}", workspace="ab"[n % 2])["task"]["id"]
               for n in range(5)]  # fmt: skip

        def running() -> list[str]:
            return [t["id"] for t in daemon.call("list", state="running")["tasks"]]

        first = wait_until(lambda: len(r := running()) == 2 and r)
        wait_until(lambda: all(h["pid"] for h in daemon.call("status")["harnesses"]))
        assert len(running()) == 2  # 6 slots in all, but the host runs 2 sessions at most
        done_one = first[0]
        workspace = daemon.call("get", task=done_one)["task"]["workspace"]
        (root / workspace / f"{done_one}.go").write_text("")
        wait_until(lambda: daemon.call("get", task=done_one)["task"]["state"] == "closed")
        wait_until(lambda: len(r := running()) == 2 and done_one not in r)
        for task_id in ids:  # let everything finish
            ws = daemon.call("get", task=task_id)["task"]["workspace"]
            (root / ws).mkdir(exist_ok=True)  # its harness may not have made it yet
            (root / ws / f"{task_id}.go").write_text("")
        wait_until(
            lambda: all(daemon.call("get", task=t)["task"]["state"] == "closed" for t in ids),
            timeout=20,
        )
        outcomes = {daemon.call("get", task=t)["task"]["outcome"] for t in ids}
        assert outcomes == {"done"}
    finally:
        daemon.stop()


def test_a_lost_session_frees_its_place_under_max_sessions(root: Path) -> None:
    """With max_sessions 1, the harness of the one running task is killed and started again:
    its task fails as lost, and the place it held goes to the other workspace's waiting task
    at once — not never (the lost session's slot was once left counted)."""
    session = {"command": [sys.executable, "-c", WAITS]}
    (root / "colibri.jsonc").write_text(json.dumps({
        "scheduler": {"max_sessions": 1, "agent_ttl": "30s"},
        "workspaces": {"a": {"session": session}, "b": {"session": session}},
    }))  # fmt: skip
    daemon = Daemon(root)
    daemon.start()
    try:
        wait_until(lambda: all(h["pid"] for h in daemon.call("status")["harnesses"]))
        first = daemon.call("submit", text="runs in a", workspace="a")["task"]["id"]
        wait_until(lambda: daemon.call("get", task=first)["task"]["state"] == "running")
        waiting = daemon.call("submit", text="waits for the place", workspace="b")["task"]["id"]
        harness_a = next(h["pid"] for h in daemon.call("status")["harnesses"]
                         if h["workspace"] == "a")  # fmt: skip
        os.kill(harness_a, signal.SIGKILL)  # the supervisor starts a new one, which registers
        lost = daemon.wait_closed(first, timeout=20)
        assert lost["outcome"] == "failed" and "session lost" in lost["error"]
        wait_until(lambda: daemon.call("get", task=waiting)["task"]["state"] == "running")
        (root / "b" / f"{waiting}.go").write_text("")
        wait_until(lambda: daemon.call("get", task=waiting)["task"]["outcome"] == "done")
    finally:
        daemon.stop()
