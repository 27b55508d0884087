"""No orphans: what a session started dies with it, and with a killed harness.

Three nets, each for what the one before misses:

- a session's process group is killed when the session ends (``Reaper.reclaim``);
- each group is noted in a marker, ``.colibri/sessions/AGENT.PGID.pgid`` (its leader's pid
  and start time), so a harness that replaces a killed one stops what it left
  (``Reaper.reap_leftovers``, ``colibri.leftovers``; the daemon too, after it had to kill a
  harness at a clean stop), also what left those groups, found by its environment;
- as a subreaper (Linux), the harness inherits the descendants that left their session's
  group, and stops those whose session has ended, known by the ``COLIBRI_SESSION`` they
  inherited (``Reaper.reap_inherited``).

Processes the harness starts itself (sessions, tmux commands) are started with ``spawn``:
until asyncio has waited for them they are never taken for leftovers, nor reaped here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import secrets
import signal
from pathlib import Path
from typing import Any

from colibri.agent.backends.base import Running
from colibri.host import become_subreaper, children_of, environ_of
from colibri.leftovers import (
    mark_group,
    process_name,
    stop_leftover_sessions,
    unmark_group,
)

log = logging.getLogger(__name__)

#: How often descendants that left their session are looked for (with a subreaper).
REAP_EVERY = 1.0

#: Processes started here that asyncio waits for, and how many are being started (not yet
#: known by their pid): never reaped by ``reap_inherited``.
_waited: set[asyncio.subprocess.Process] = set()
_starting = 0


async def spawn(*command: str, **options: Any) -> asyncio.subprocess.Process:
    """``asyncio.create_subprocess_exec``, the process known as the harness's own."""
    global _starting
    _direct_children()  # forget those waited for (also where reap_inherited never runs)
    _starting += 1
    try:
        process = await asyncio.create_subprocess_exec(*command, **options)
    finally:
        _starting -= 1
    _waited.add(process)
    return process


def _direct_children() -> set[int]:
    for process in [p for p in _waited if p.returncode is not None]:
        _waited.discard(process)  # waited for: its pid is no longer ours
    return {p.pid for p in _waited}


class Reaper:
    """The process groups of one harness's sessions, and what they leave behind."""

    def __init__(self, root: Path, agent: str) -> None:
        self.root = root
        self.agent = agent
        #: With a subreaper: descendants that left their session are re-parented here.
        self.subreaper = False
        #: ``COLIBRI_SESSION`` of the harness's own helpers (tmux and its server), which are
        #: never taken for a session's leftovers.
        self.own_sid = f"harness-{secrets.token_hex(8)}"
        #: Every session started and not yet reclaimed (warm ones too).
        self.groups: set[Running] = set()

    def begin(self) -> None:
        """At the harness's start: name it to its children, become their subreaper."""
        # Children inherit these; sessions replace the first with their own (reap_inherited).
        # The second names this harness (pid and start time) to whoever finds them later.
        os.environ["COLIBRI_SESSION"] = self.own_sid
        os.environ["COLIBRI_HARNESS"] = process_name(os.getpid())
        self.subreaper = become_subreaper()

    def track(self, running: Running) -> None:
        """Note a session's process group, so a harness that replaces a killed one can stop it:
        its leader's pid and start time, which together name that one process."""
        mark_group(self.root, self.agent, running.pgid)
        self.groups.add(running)

    def reclaim(self, running: Running) -> None:
        """The session is over: nothing it started outlives it (reclaim means kill)."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(running.pgid, signal.SIGKILL)
        unmark_group(self.root, self.agent, running.pgid)
        self.groups.discard(running)
        running.ended = True
        self.reap_inherited()

    def reap_leftovers(self) -> None:
        """Kill what the sessions of a predecessor that was killed left running."""
        stop_leftover_sessions(self.root, self.agent)

    async def keep_reaping(self) -> None:
        if not self.subreaper:
            return
        while True:
            await asyncio.sleep(REAP_EVERY)
            self.reap_inherited()

    def reap_inherited(self, *, everything: bool = False) -> None:
        """Stop the processes re-parented to this harness (a subreaper) whose session has
        ended: each is known by the ``COLIBRI_SESSION`` it inherited. One that cleared its
        environment is stopped once no task's session runs here (or at once, ``everything``);
        the harness's own helpers (tmux) keep theirs. Zombies among them are reaped."""
        if not self.subreaper or _starting:
            return  # a process being started is not yet known as ours
        live = {r.sid for r in self.groups if not r.ended}
        busy = any(r.has_task and not r.ended for r in self.groups)
        ours = _direct_children()
        for pid, state in children_of(os.getpid()):
            if pid in ours:
                continue
            if state == "Z":
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(pid, os.WNOHANG)
                continue
            sid = environ_of(pid, "COLIBRI_SESSION")
            if sid == self.own_sid or (sid in live and not everything):
                continue
            if sid is None and busy and not everything:
                continue  # whose it is cannot be told; it goes when no task's session is left
            log.warning(
                "stopped a process its session left behind",
                extra={"event": "descendant_killed", "pid": pid, "session": sid},
            )
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError, PermissionError, OSError):
                group = os.getpgid(pid)
                if group == pid and group != os.getpgrp():
                    os.killpg(group, signal.SIGKILL)  # and what it started in its group
