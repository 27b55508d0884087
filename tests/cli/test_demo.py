"""``colibri demo`` left running: a living swarm, shown as lines when stdout is not a terminal;
tasks from another terminal show up; Ctrl+C stops everything it started."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from tests.helpers import colibri, wait_until


def test_the_demo_keeps_the_swarm_busy_until_interrupted() -> None:
    target = Path(tempfile.mkdtemp(prefix="cbdemo", dir="/tmp")) / "demo"
    demo = subprocess.Popen(
        [sys.executable, "-m", "colibri", "demo", str(target)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,  # a demo that hangs takes its daemon and agents down with it
        env={**os.environ, "COLUMNS": "200"},
    )
    lines: list[str] = []

    def read() -> None:
        assert demo.stdout is not None
        for line in demo.stdout:
            lines.append(line.rstrip("\n"))

    reader = threading.Thread(target=read, daemon=True)
    reader.start()

    def saw(text: str) -> bool:
        return any(text in line for line in lines)

    try:
        wait_until(lambda: saw("running → done"), timeout=60)
        # Piped: the attach lines, not the TUI; it says what keeps running and how to stop it.
        assert saw("keep running while the demo does")
        assert saw("Ctrl+C")
        mine = colibri(target, "submit", "hello from another terminal", "--cap", "python")
        assert mine.returncode == 0, mine.stderr
        wait_until(lambda: saw("→ done") and saw("hello from another terminal"), timeout=60)
        # Tasks keep arriving, and the schedule fires.
        wait_until(lambda: saw("schedule mirror-check fired"), timeout=30)
        wait_until(lambda: saw("new → pending") and saw("a flaky integration test"), timeout=60)
        demo.send_signal(signal.SIGINT)
        code = demo.wait(timeout=60)
        reader.join(timeout=10)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()
        assert demo.stdout is not None and demo.stderr is not None
        stderr = demo.stderr.read()
        demo.stdout.close()
        demo.stderr.close()
    try:
        assert code == 0, stderr
        assert "nothing of it keeps running" in lines[-1]
        status = colibri(target, "status")
        assert status.returncode == 1 and "no daemon is running" in status.stderr
    finally:
        shutil.rmtree(target.parent, ignore_errors=True)
