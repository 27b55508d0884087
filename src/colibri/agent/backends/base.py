"""The session backend contract: how a session's processes start, take a task, end and die.

A backend knows its kind of session (a one-shot subprocess, an interactive tmux session) and
nothing of the daemon: it says how a session ended, and the runner makes the report of that.
The harness, the ready pool and the reaper see every session as a ``Running``, the same for
every backend.
"""

from __future__ import annotations

import asyncio
import secrets
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from colibri.host import alive

#: How a session ended, as its backend tells it: ``("out", {"output": …, "cost": …})`` or
#: ``("fail", {"error": …})``; the runner makes the report for the daemon of it.
Ending = tuple[str, dict[str, Any]]


def new_sid() -> str:
    """A ``COLIBRI_SESSION``: names one session's processes (an id, no secret)."""
    return secrets.token_hex(8)


@dataclass(eq=False)
class Running:
    """A session's processes, as its backend started them: one process group."""

    #: The leader of its process group (the subprocess; tmux: the pane's process).
    pgid: int
    #: The session's name where its backend names sessions (tmux: the tmux session's).
    name: str
    #: The task file its ``COLIBRI_TASK_FILE`` names (a warm session's own, before its task).
    task_file: Path
    #: ``COLIBRI_SESSION`` of its processes: what their descendants are known by.
    sid: str = field(default_factory=new_sid)
    #: It runs a task (not a warm session waiting for one).
    has_task: bool = False
    #: Its processes are gone: what they left behind may be stopped.
    ended: bool = False

    def alive(self) -> bool:
        return alive(self.pgid)


class StartFailed(Exception):
    """A session could not start; the message says why, for its task's error."""


class SessionBackend(Protocol):
    """One kind of session. Every method may be given a ``Running`` of this backend only."""

    async def start(
        self, name: str, env: dict[str, str], task_file: Path, cwd: Path | None = None
    ) -> Running:
        """Start the agent's command as session ``name``, in its own process group, with
        ``env`` as its environment and ``COLIBRI_SESSION`` the new ``Running``'s ``sid``, in
        ``cwd`` (None: the agent's folder); the reaper tracks its group. Raises StartFailed
        when it cannot start."""
        ...

    async def warmed(self, running: Running) -> bool:
        """Whether a session started ahead of its task can take one now. Nothing tells a warm
        session it is ready (``colibri ready`` needs a task): a subprocess is at once, a tmux
        session once its ``ready_pattern`` shows (at once without one). Polls once."""
        ...

    async def adopt(self, running: Running, task: str) -> None:
        """A warm session takes task ``task`` (tmux: renamed after it, so that
        ``colibri attach-session TASK`` finds it)."""
        ...

    async def wait_ready(self, running: Running, told: asyncio.Event) -> bool:
        """Until the session can take its task: at once for a subprocess; tmux when it runs
        ``colibri ready`` (``told`` is set) or shows ``ready_pattern``. False if it ended
        first. Unbounded: the caller holds it to ``ready_timeout``."""
        ...

    async def hand_over(self, running: Running, text: str) -> None:
        """Give the session its task's text (stdin, or typed into it), never through a shell."""
        ...

    async def wait_end(self, running: Running) -> Ending | None:
        """Until the session has ended, then how: out or fail from what it said, or
        None when its end says nothing (the session reports by itself, with ``colibri out``;
        the harness then says ``reclaimed``). A backend whose session's output still flows
        once it has exited (pipes held by what it left) sets ``running.ended`` and stops those
        meanwhile; ``Reaper.reclaim`` does the rest for every backend."""
        ...

    async def kill(self, running: Running, *, grace: float) -> None:
        """Stop the session's whole process group: SIGTERM, and SIGKILL after ``grace``
        seconds (at once with 0); then whatever held it (tmux: its tmux session)."""
        ...
