"""No orphans: what a session started dies with it, and with a harness that is killed."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

from colibri.processes import alive
from tests.helpers import Daemon, wait_until

#: Starts a grandchild that would live 1000 s, records its pid and group, then waits or exits.
SPAWNS = (
    "import os, subprocess, sys, time\n"
    "child = subprocess.Popen(['sleep', '1000'])\n"
    "open(os.environ['COLIBRI_TASK_ID'] + '.pids', 'w').write(f'{child.pid} {os.getpgid(0)}')\n"
    "if 'wait' in sys.stdin.read():\n"
    "    time.sleep(1000)\n"
    "print('leaving my child behind')\n"
)


def group_members(pgid: int) -> list[int]:
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                fields = Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, IndexError):
                continue
            if fields[0] != "Z" and int(fields[2]) == pgid:
                members.append(int(entry))
    return members


def start(root: Path) -> Daemon:
    (root / "colibri.jsonc").write_text(json.dumps({"workspaces": {"w": {
        "session": {"command": [sys.executable, "-c", SPAWNS]}}}}))  # fmt: skip
    daemon = Daemon(root)
    daemon.start()
    return daemon


def pids(root: Path, task_id: str) -> tuple[int, int]:
    marker = root / "w" / f"{task_id}.pids"
    text = wait_until(lambda: marker.exists() and marker.read_text())
    child, pgid = (int(x) for x in text.split())
    return child, pgid


def test_a_finished_session_leaves_no_process_behind(root: Path) -> None:
    daemon = start(root)
    try:
        task = daemon.call("submit", text="go", workspace="w")["task"]
        child, pgid = pids(root, task["id"])
        wait_until(lambda: daemon.call("get", task=task["id"])["task"]["state"] == "closed")
        wait_until(lambda: not alive(child), timeout=10)
        assert group_members(pgid) == []
    finally:
        daemon.stop()


def test_sessions_of_a_killed_harness_are_gone_within_10s(root: Path) -> None:
    daemon = start(root)
    try:
        task = daemon.call("submit", text="wait", workspace="w")["task"]
        child, pgid = pids(root, task["id"])
        harness = next(h["pid"] for h in daemon.call("status")["harnesses"])
        os.killpg(harness, signal.SIGKILL)  # the harness dies; the supervisor starts another
        wait_until(lambda: not alive(child) and not group_members(pgid), timeout=10)
        final = wait_until(
            lambda: (t := daemon.call("get", task=task["id"])["task"])["state"] == "closed" and t,
            timeout=40,
        )
        assert final["outcome"] == "failed" and "session lost" in (final["error"] or "")
    finally:
        daemon.stop()
