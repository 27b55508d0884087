"""The ready pool: warm sessions take tasks at once; idle ones are reclaimed."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

from colibri.host import alive
from tests.helpers import Daemon, wait_until

#: Starts, writes its pid to a file (to prove it was started before its task), then waits for
#: the task on stdin and reports it with `colibri out`, reading its claim from its task file.
WARM = (
    "import os, subprocess, sys\n"
    "open(f'started-{os.getpid()}', 'w').close()\n"
    "text = sys.stdin.read()\n"
    "subprocess.run([sys.executable, '-m', 'colibri', 'out', f'{os.getpid()}: {text}'],"
    " check=True)\n"
)


def start(root: Path, warm: int, idle: str) -> Daemon:
    (root / "colibri.jsonc").write_text(json.dumps({"workspaces": {"hot": {
        "warm": warm, "session": {"command": [sys.executable, "-c", WARM], "idle": idle},
    }}}))  # fmt: skip
    daemon = Daemon(root)
    daemon.start()
    return daemon


def started(root: Path) -> set[int]:
    folder = root / "hot"
    return (
        {int(p.name.split("-")[1]) for p in folder.glob("started-*")} if folder.exists() else set()
    )


def test_a_warm_session_takes_the_task_and_the_pool_refills(root: Path) -> None:
    daemon = start(root, warm=2, idle="60s")
    try:
        warm = wait_until(lambda: len(s := started(root)) == 2 and s, timeout=30)
        task = daemon.call("submit", text="hello", workspace="hot")["task"]
        final = daemon.wait_closed(task["id"], timeout=30)
        pid = int(final["output"].split(":")[0])
        assert pid in warm, "the task ran in a session started before it"
        assert final["outcome"] == "done" and final["output"].endswith(": hello")
        wait_until(lambda: len(started(root)) == 3, timeout=30)  # the pool is full again
        wait_until(lambda: not list((root / ".colibri" / "sessions").glob(f"*{task['id']}*")))
    finally:
        daemon.stop()


def test_idle_sessions_are_reclaimed_and_work_still_gets_done(root: Path) -> None:
    daemon = start(root, warm=1, idle="0.5s")
    try:
        first = wait_until(lambda: started(root))
        (pid,) = first
        wait_until(lambda: not alive(pid))  # reclaimed after the idle timeout
        time.sleep(1.0)
        assert started(root) == first, "an emptied pool is not refilled before work comes"
        task = daemon.call("submit", text="later", workspace="hot")["task"]
        final = daemon.wait_closed(task["id"])
        assert final["outcome"] == "done"
    finally:
        daemon.stop()
    assert all(not alive(p) for p in started(root)), "no session outlives a clean stop"
