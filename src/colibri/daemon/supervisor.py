"""Keep one harness running per workspace of colibri.jsonc.

Each harness (``colibri agent --workspace NAME``) holds an exclusive lock on
``.colibri/harness/NAME.lock`` for its whole life and writes its pid there. The supervisor asks
the lock, not its own memory, whether a harness is alive — so a daemon that crashed and started
again finds the harnesses that outlived it and adopts them instead of starting duplicates, while
their sessions (an AI agent may be an hour into its task) run on.

A harness that exits is started again after a backoff (1 s, 2 s, 4 s … up to ``max_backoff``);
the restarts are counted. One that exits ``crash_loop`` times within ``crash_window`` is marked
degraded and left alone until ``cool_down`` has passed (``supervisor`` in colibri.jsonc). A
clean daemon stop (SIGTERM) stops every harness; a daemon crash stops none. A harness whose
daemon is gone for good — no daemon has held the root for ``orphan_after`` — stops its sessions
and exits by itself (``--orphan-after``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections import deque
from dataclasses import dataclass, field
from typing import Any

from colibri.config import HOST_ENV, Config
from colibri.core.errors import RootError
from colibri.daemon.clock import Clock
from colibri.host import alive
from colibri.locks import holder_pid
from colibri.privatefiles import open_private, private_dir
from colibri.workspaces import session_environment

log = logging.getLogger(__name__)

CHECK_EVERY = 0.5
STOP_GRACE = 10.0


@dataclass
class Harness:
    workspace: str
    pid: int | None = None
    process: subprocess.Popen[bytes] | None = None
    restarts: int = 0
    exits: deque[float] = field(default_factory=deque)
    next_start: float = 0.0
    degraded_until: float = 0.0

    def status(self, now: float) -> dict[str, Any]:
        return {
            "workspace": self.workspace,
            "pid": self.pid,
            "restarts": self.restarts,
            "degraded": now < self.degraded_until,
        }


class Supervisor:
    def __init__(self, config: Config, clock: Clock) -> None:
        self.config = config
        self.clock = clock
        self.settings = config.supervisor
        self.harnesses = {
            name: Harness(name, exits=deque(maxlen=self.settings.crash_loop))
            for name in config.workspaces
        }
        private_dir(config.layout.harnesses)

    def status(self) -> list[dict[str, Any]]:
        now = self.clock.monotonic()
        return [h.status(now) for h in self.harnesses.values()]

    async def run(self) -> None:
        while True:
            for harness in self.harnesses.values():
                await self._tend(harness, self.clock.monotonic())
            await asyncio.sleep(CHECK_EVERY)

    async def _tend(self, harness: Harness, now: float) -> None:
        if harness.process is not None and harness.process.poll() is not None:
            code = harness.process.returncode
            harness.process = None
            self._exited(harness, now, f"exit code {code}")
        pid = holder_pid(self.config.layout.harness_lock(harness.workspace))
        if pid is not None:
            if harness.pid != pid:
                if harness.process is None:
                    log.info(
                        "adopted a running harness",
                        extra={"event": "harness_adopted", "workspace": harness.workspace,
                               "pid": pid},
                    )  # fmt: skip
                harness.pid = pid
            return
        if harness.pid is not None and harness.process is None:
            self._exited(harness, now, "the adopted harness is gone")
        if harness.process is not None:
            return  # started, not holding its lock yet
        if now < harness.degraded_until or now < harness.next_start:
            return
        await self._start(harness)

    def _exited(self, harness: Harness, now: float, why: str) -> None:
        harness.pid = None
        harness.exits.append(now)
        limits = self.settings
        delay = min(limits.max_backoff, 2.0 ** (len(harness.exits) - 1))
        harness.next_start = now + delay
        if len(harness.exits) == limits.crash_loop and now - harness.exits[0] < limits.crash_window:
            harness.degraded_until = now + limits.cool_down
            harness.exits.clear()
            log.error(
                "harness crash-loops; marked degraded",
                extra={"event": "harness_degraded", "workspace": harness.workspace,
                       "cool_down": limits.cool_down},
            )  # fmt: skip
        else:
            log.warning(
                "harness exited; restarting after backoff",
                extra={"event": "harness_exited", "workspace": harness.workspace, "why": why,
                       "backoff": delay},
            )  # fmt: skip

    async def _start(self, harness: Harness) -> None:
        if harness.next_start:
            harness.restarts += 1
        private_dir(self.config.layout.harnesses)
        logfile = self.config.layout.harness_log(harness.workspace)
        logged = True
        try:  # the harness's own log: 0600, never through a link planted in its place
            fd = open_private(logfile, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        except (OSError, RootError) as exc:
            logged = False
            log.error(
                "cannot open the harness log; the harness logs nowhere",
                extra={"event": "harness_log_failed", "workspace": harness.workspace,
                       "error": str(exc)},
            )  # fmt: skip
            fd = os.open(os.devnull, os.O_WRONLY)
        command = [
            sys.executable, "-m", "colibri", "--root", str(self.config.root), "agent",
            "--workspace", harness.workspace,
            "--orphan-after", f"{self.settings.orphan_after:g}",
        ]  # fmt: skip
        limit = int(self.settings.harness_log_mib * 2**20)
        if limit and logged:  # the harness renames its log past the limit, and opens a new one
            command += ["--log-file", str(logfile), "--log-rotate-bytes", str(limit)]
        with os.fdopen(fd, "ab") as out:
            # A fork and exec take milliseconds: off the loop, which serves meanwhile.
            harness.process = await asyncio.to_thread(
                subprocess.Popen,
                command,
                stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                start_new_session=True,  # its own group: it outlives a crash of the daemon
                env=self._environment(harness.workspace),
            )  # fmt: skip
        harness.pid = harness.process.pid
        log.info(
            "harness started",
            extra={"event": "harness_started", "workspace": harness.workspace,
                   "pid": harness.pid},
        )  # fmt: skip

    def _environment(self, workspace: str) -> dict[str, str]:
        """A harness's environment: what ``session_environment`` lets through, and the
        daemon's ``COLIBRI_HOST``, so that both ask the system the same way."""
        env = session_environment(self.config.environ, self.config.workspaces[workspace].pass_env)
        if self.config.host != "auto":
            env[HOST_ENV] = self.config.host
        return env

    async def stop_all(self) -> None:
        """A clean stop: SIGTERM every harness (it stops its sessions), SIGKILL stragglers."""
        pids: list[int] = []
        for harness in self.harnesses.values():
            pid = holder_pid(self.config.layout.harness_lock(harness.workspace))
            pid = pid if pid and pid > 0 else harness.pid
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGTERM)
                pids.append(pid)
        deadline = self.clock.monotonic() + STOP_GRACE
        while pids and self.clock.monotonic() < deadline:
            for harness in self.harnesses.values():
                if harness.process is not None:
                    harness.process.poll()
            pids = [pid for pid in pids if alive(pid)]
            await asyncio.sleep(0.05)
        for pid in pids:
            log.warning(
                f"a harness did not stop within {STOP_GRACE:g}s; killed",
                extra={"event": "harness_killed", "pid": pid},
            )
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        for harness in self.harnesses.values():  # reap them, waiting without blocking
            for _ in range(20):
                if harness.process is None or harness.process.poll() is not None:
                    break
                await asyncio.sleep(0.05)
