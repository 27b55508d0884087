"""Fixtures of the CLI tests: ``colibri demo`` processes, stopped whatever the test did."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.sessions.support import sweep


@dataclass
class Demo:
    """A ``colibri demo`` process and the lines it printed so far."""

    target: Path
    process: subprocess.Popen[str]
    lines: list[str] = field(default_factory=list)

    def saw(self, text: str) -> bool:
        return any(text in line for line in self.lines)


@pytest.fixture
def demo() -> Iterator[Callable[..., Demo]]:
    """``demo(*args, env=…, program=…)`` starts ``colibri demo`` on a fresh folder — by
    ``program`` (``[this python, "-m", "colibri"]`` unless given: an installed ``colibri``
    script, say) — in a session of its own (as a terminal's job), with the signal dispositions
    of the tests' own children (tests/conftest.py: the defaults). Afterwards, however the test
    went: a demo still running is stopped (SIGTERM, then SIGKILL), and every process naming its
    root is killed — its workspace harnesses run in sessions of their own, which no kill of the
    demo's group reaches."""
    started: list[Demo] = []

    def start(
        *args: str, env: dict[str, str] | None = None, program: list[str] | None = None
    ) -> Demo:
        target = Path(tempfile.mkdtemp(prefix="cbdemo", dir="/tmp")) / "demo"
        process = subprocess.Popen(
            [*(program or [sys.executable, "-m", "colibri"]), "demo", str(target), *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,
            env={**os.environ, **(env or {})},
        )
        running = Demo(target, process)
        started.append(running)

        def read() -> None:
            assert process.stdout is not None
            for line in process.stdout:
                running.lines.append(line.rstrip("\n"))

        threading.Thread(target=read, daemon=True).start()
        return running

    yield start
    for running in started:
        process = running.process
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait()
        sweep(running.target)
        for stream in (process.stdout, process.stderr):
            if stream is not None:
                stream.close()
        shutil.rmtree(running.target.parent, ignore_errors=True)
