"""``processes.alive``: running, zombie and gone, also when a process exits while being read."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from colibri.processes import alive


def test_running_zombie_and_reaped() -> None:
    assert alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
    assert not alive(child.pid)
    child.wait()
    assert not alive(child.pid)


def test_processes_exiting_under_the_reader_never_raise() -> None:
    """Polling pids while they exit hits the window between opening /proc/PID/stat and
    reading it (ProcessLookupError); that must read as "not alive", never raise."""
    errors: list[BaseException] = []
    children = [subprocess.Popen(["true"]) for _ in range(200)]
    pids = [child.pid for child in children]

    def poll() -> None:
        try:
            for _ in range(50):
                for pid in pids:
                    alive(pid)
        except BaseException as exc:  # any escape is the failure
            errors.append(exc)

    pollers = [threading.Thread(target=poll) for _ in range(2)]
    for poller in pollers:
        poller.start()
    for child in children:
        child.wait()
    for poller in pollers:
        poller.join()
    assert errors == []
    assert not any(alive(pid) for pid in pids)
