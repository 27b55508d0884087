"""No orphans: what a session started dies with it, and with a harness that is killed."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path

import pytest

from colibri.host import alive
from tests.helpers import Daemon, group_members, harness_pid, wait_until

#: Starts a grandchild that would live 1000 s, records its pid and group, then waits or exits.
SPAWNS = (
    "import os, subprocess, sys, time\n"
    "child = subprocess.Popen(['sleep', '1000'])\n"
    "open(os.environ['COLIBRI_TASK_ID'] + '.pids', 'w').write(f'{child.pid} {os.getpgid(0)}')\n"
    "if 'wait' in sys.stdin.read():\n"
    "    time.sleep(1000)\n"
    "print('leaving my child behind')\n"
)


#: How the daemon and its harnesses ask about processes: natively (/proc), or the portable
#: way a FreeBSD host does (ps, kill; no environments, no subreaper), forced here on Linux.
HOSTS = pytest.mark.parametrize("host", ["auto", "portable-processes"])


def start(root: Path, host: str = "auto") -> Daemon:
    (root / "colibri.jsonc").write_text(json.dumps({"workspaces": {"w": {
        "session": {"command": [sys.executable, "-c", SPAWNS]}}}}))  # fmt: skip
    daemon = Daemon(root, env={"COLIBRI_HOST": host})
    daemon.start()
    return daemon


def pids(root: Path, task_id: str) -> tuple[int, int]:
    marker = root / "w" / f"{task_id}.pids"
    text = wait_until(lambda: marker.exists() and marker.read_text())
    child, pgid = (int(x) for x in text.split())
    return child, pgid


@HOSTS
def test_a_finished_session_leaves_no_process_behind(root: Path, host: str) -> None:
    daemon = start(root, host)
    try:
        task = daemon.call("submit", text="go", workspace="w")["task"]
        child, pgid = pids(root, task["id"])
        wait_until(lambda: daemon.call("get", task=task["id"])["task"]["state"] == "closed")
        wait_until(lambda: not alive(child), timeout=10)
        assert group_members(pgid) == []
    finally:
        daemon.stop()


@HOSTS
def test_sessions_of_a_killed_harness_are_gone_within_10s(root: Path, host: str) -> None:
    """The harness that replaces a killed one kills the process groups its predecessor's
    markers name, knowing each leader by its pid and start time (from ps, portably)."""
    daemon = start(root, host)
    try:
        task = daemon.call("submit", text="wait", workspace="w")["task"]
        child, pgid = pids(root, task["id"])
        harness = harness_pid(root, "w")
        assert harness is not None
        os.killpg(harness, signal.SIGKILL)  # the harness dies; the supervisor starts another
        wait_until(lambda: not alive(child) and not group_members(pgid), timeout=10)
        final = daemon.wait_closed(task["id"], timeout=40)
        assert final["outcome"] == "failed" and "session lost" in (final["error"] or "")
    finally:
        daemon.stop()


def test_sessions_of_a_harness_killed_at_a_clean_stop_go_with_it(root: Path) -> None:
    """A harness that does not stop within the daemon's grace at a clean stop (frozen here)
    is killed, and the daemon kills what its sessions run: no harness is left to do it."""
    daemon = start(root)
    try:
        task = daemon.call("submit", text="wait", workspace="w")["task"]
        child, pgid = pids(root, task["id"])
        harness = harness_pid(root, "w")
        assert harness is not None
        os.kill(harness, signal.SIGSTOP)  # deaf to SIGTERM until SIGKILL
        assert daemon.process is not None
        daemon.process.send_signal(signal.SIGTERM)
        assert daemon.process.wait(timeout=60) == 0
        assert "event=harness_killed" in daemon.log()
        assert not alive(child) and group_members(pgid) == []
    finally:
        daemon.stop()


#: Leaves a grandchild that escapes its process group: fork, setsid, fork again, the first
#: child exits (so the grandchild is re-parented), and the grandchild ignores SIGTERM and
#: sleeps 1000 s — with the session's environment, or none ("clean"). Then the session waits
#: ("wait") or ends.
DETACHES = (
    "import os, signal, sys, time\n"
    "text = sys.stdin.read()\n"
    "task = os.environ['COLIBRI_TASK_ID']\n"
    "if os.fork() == 0:\n"
    "    os.setsid()\n"
    "    if os.fork() == 0:\n"
    "        signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
    "        open(task + '.detached.tmp', 'w').write(str(os.getpid()))\n"
    "        os.rename(task + '.detached.tmp', task + '.detached')\n"
    "        env = {} if 'clean' in text else dict(os.environ)\n"
    "        os.execve('/bin/sleep', ['sleep', '1000'], env)\n"
    "    os._exit(0)\n"
    "os.wait()\n"
    "while not os.path.exists(task + '.detached'):\n"
    "    time.sleep(0.01)\n"
    "if 'wait' in text:\n"
    "    time.sleep(1000)\n"
    "print('left a detached grandchild')\n"
)


def start_detaching(root: Path, host: str = "auto") -> Daemon:
    (root / "colibri.jsonc").write_text(json.dumps({"workspaces": {"w": {
        "session": {"command": [sys.executable, "-c", DETACHES]}}}}))  # fmt: skip
    daemon = Daemon(root, env={"COLIBRI_HOST": host})
    daemon.start()
    return daemon


def detached(root: Path, task_id: str) -> int:
    marker = root / "w" / f"{task_id}.detached"
    return int(wait_until(lambda: marker.exists() and marker.read_text()))


def test_a_grandchild_in_a_session_of_its_own_dies_when_its_session_ends(root: Path) -> None:
    """setsid and a double fork take a process out of its session's group, so killing the
    group misses it. The harness is its subreaper: the process comes back to it and is
    killed once its session has ended — also with its environment cleared, when no other
    session runs."""
    daemon = start_detaching(root)
    try:
        for text in ("go", "clean go"):
            task = daemon.call("submit", text=text, workspace="w")["task"]
            grandchild = detached(root, task["id"])
            task_id = task["id"]
            wait_until(lambda: daemon.call("get", task=task_id)["task"]["state"] == "closed")  # noqa: B023
            wait_until(lambda: not alive(grandchild), timeout=10)  # noqa: B023
    finally:
        daemon.stop()


def test_a_cancelled_sessions_detached_grandchild_dies(root: Path) -> None:
    daemon = start_detaching(root)
    try:
        task = daemon.call("submit", text="wait", workspace="w")["task"]
        grandchild = detached(root, task["id"])
        daemon.call("cancel", task=task["id"])
        wait_until(lambda: not alive(grandchild), timeout=10)
        final = daemon.wait_closed(task["id"], timeout=15)
        assert final["outcome"] == "cancelled"
    finally:
        daemon.stop()


def test_a_detached_grandchild_of_a_killed_harness_is_found_by_the_next(root: Path) -> None:
    """The harness is SIGKILLed: its orphans go to init. The harness the supervisor starts
    next finds them by the root and agent in their environment, and kills them."""
    daemon = start_detaching(root)
    try:
        task = daemon.call("submit", text="wait", workspace="w")["task"]
        grandchild = detached(root, task["id"])
        harness = harness_pid(root, "w")
        assert harness is not None
        os.killpg(harness, signal.SIGKILL)
        wait_until(lambda: not alive(grandchild), timeout=15)
    finally:
        daemon.stop()


def test_a_detached_grandchild_of_a_harness_killed_at_a_clean_stop_goes_too(root: Path) -> None:
    """As above, for what left its session's group (a double fork into a session of its own,
    ignoring SIGTERM): the daemon finds it by the root and agent in its environment."""
    daemon = start_detaching(root)
    try:
        task = daemon.call("submit", text="wait", workspace="w")["task"]
        grandchild = detached(root, task["id"])
        harness = harness_pid(root, "w")
        assert harness is not None
        os.kill(harness, signal.SIGSTOP)  # deaf to SIGTERM until SIGKILL
        assert daemon.process is not None
        daemon.process.send_signal(signal.SIGTERM)
        assert daemon.process.wait(timeout=60) == 0
        assert "event=harness_killed" in daemon.log()
        wait_until(lambda: not alive(grandchild), timeout=15)  # gone to init: reaped there
    finally:
        daemon.stop()


@HOSTS
def test_a_planted_marker_never_makes_a_harness_kill_a_stranger(root: Path, host: str) -> None:
    """Markers under .colibri/sessions name process groups to kill after a crash. One that
    names a live group the harness never started (planted, or a pid reused since) is removed
    without killing anything."""
    import subprocess

    strangers = [subprocess.Popen(["sleep", "1000"], start_new_session=True) for _ in range(2)]
    try:
        sessions = root / ".colibri" / "sessions"
        sessions.mkdir(mode=0o700, exist_ok=True)
        empty, stale = (sessions / f"w.{s.pid}.pgid" for s in strangers)
        empty.write_text("")  # planted: names the group, says nothing
        stale.write_text(f"{strangers[1].pid} 1\n")  # as for a process long gone (pid reused)
        daemon = start_detaching(root, host)
        try:
            wait_until(lambda: not empty.exists() and not stale.exists())
            assert all(s.poll() is None and alive(s.pid) for s in strangers)
        finally:
            daemon.stop()
    finally:
        for stranger in strangers:
            stranger.kill()
            stranger.wait()
