"""The ready pool: sessions started ahead of work (``warm``), so a task need not wait for its
command to start, nor (tmux) to become ready.

It works over any backend: a warm session is started as a task's would be, without the
task's variables, and with a task file of its own (``AGENT-warm-N.task``) into which the
harness writes the body of the task it takes. One ready and given no task within ``idle``
is reclaimed, and the pool is not refilled until work comes again; one not ready within
``ready_timeout``, or that ended by itself, is dropped and replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from colibri.agent.backends.base import Running, SessionBackend, StartFailed
from colibri.agent.reaping import Reaper
from colibri.agent.spec import AgentSpec
from colibri.layout import RootLayout
from colibri.leftovers import sessions_dir

log = logging.getLogger(__name__)


@dataclass(eq=False)
class WarmSession:
    """A session started before its task, waiting in the pool for one."""

    running: Running
    since: float
    ready: bool = False


class ReadyPool:
    def __init__(
        self,
        spec: AgentSpec,
        root: Path,
        backend: SessionBackend,
        reaper: Reaper,
        environment: Callable[[], dict[str, str]],
    ) -> None:
        self.spec = spec
        self.root = root
        self.backend = backend
        self.reaper = reaper
        #: A warm session's environment (the agent's, without a task).
        self.environment = environment
        self.sessions: list[WarmSession] = []
        #: Whether to keep the pool full: it empties after an idle spell, fills when work comes.
        self.wanted = spec.warm > 0
        self._count = 0
        self._changed = asyncio.Event()

    @property
    def ready_count(self) -> int:
        """Warm sessions ready for a task now (what heartbeats tell the daemon)."""
        return sum(1 for warm in self.sessions if warm.ready)

    def take(self) -> Running | None:
        """The oldest ready warm session, out of the pool; None if none is ready."""
        self.wanted = self.spec.warm > 0  # work came: keep the pool full again
        for warm in list(self.sessions):
            if warm.ready and warm.running.alive():
                self.sessions.remove(warm)
                return warm.running
        return None

    def refill(self) -> None:
        """A warm session was taken and has its task: start its replacement now."""
        self._changed.set()

    async def run(self) -> None:
        """Keep ``warm`` sessions ready; reclaim one idle past ``idle`` (and stop refilling
        until work comes again)."""
        while True:
            now = time.monotonic()
            for warm in list(self.sessions):
                idle = warm.ready and now - warm.since > self.spec.idle
                late = not warm.ready and now - warm.since > self.spec.ready_timeout
                if not warm.running.alive() or idle or late:
                    self.sessions.remove(warm)
                    self.wanted = self.wanted and not idle
                    await self.discard(warm.running)
                    why = "idle" if idle else "not ready in time" if late else "ended"
                    log.info(
                        "reclaimed a warm session",
                        extra={"event": "session_reclaimed", "why": why},
                    )
            while self.wanted and len(self.sessions) < self.spec.warm:
                self._count += 1
                name = f"{self.spec.name}-warm-{self._count}"
                sessions_dir(self.root)  # made private, if it is not yet
                task_file = RootLayout(self.root).task_file(name)
                env = {**self.environment(), "COLIBRI_TASK_FILE": str(task_file)}
                try:
                    running = await self.backend.start(name, env, task_file)
                except (StartFailed, OSError) as exc:
                    log.error("could not start a warm session: %s", exc)
                    self.wanted = False
                    break
                warm = WarmSession(running, time.monotonic())
                warm.ready = await self.backend.warmed(running)
                self.sessions.append(warm)
            for warm in self.sessions:  # ready once it shows it (tmux: its ready_pattern)
                if not warm.ready:
                    warm.ready = await self.backend.warmed(warm.running)
                    if warm.ready:
                        warm.since = time.monotonic()
            self._changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(0.5, self.spec.idle / 4)):
                    await self._changed.wait()  # a warm session was taken: refill now

    async def discard(self, running: Running) -> None:
        """Stop a warm session: it holds no task, so it is killed at once."""
        await self.backend.kill(running, grace=0)
        self.reaper.reclaim(running)
        running.task_file.unlink(missing_ok=True)

    async def drain(self) -> None:
        for warm in self.sessions:
            await self.discard(warm.running)
        self.sessions.clear()
