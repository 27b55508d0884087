"""The tmux backend: interactive agents an operator can attach to.

Each task runs as a tmux session (named by the task id) on the agent's own tmux server
(``agent/tmux.py``: ``.colibri/tmux/<agent>.sock``); ``colibri attach-session TASK`` (or plain
``tmux -S … attach -t TASK``) shows it live. The agent's command starts first; the task is typed
into it once it is ready — when the session runs ``colibri ready``, or when ``ready_pattern``
appears on its screen. The session reports by itself with ``colibri out``; its end says nothing,
and the harness says ``reclaimed`` (a session that ended without out fails its task). One not
ready within ``ready_timeout`` is killed and its task goes back to pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import re
from pathlib import Path

from colibri.agent import tmux
from colibri.agent.backends.base import Ending, Running, StartFailed, new_sid
from colibri.agent.reaping import Reaper
from colibri.agent.session import SESSION_VARIABLES
from colibri.agent.spec import AgentSpec


class TmuxBackend:
    def __init__(self, spec: AgentSpec, root: Path, reaper: Reaper) -> None:
        self.spec = spec
        self.reaper = reaper
        self.socket = tmux.socket_for(root, spec.name)
        #: Every variable a tmux session of this agent may be given (PATH: the harness's own
        #: ``colibri`` first on it, ``agent/shim.py``; the rest comes from the tmux server).
        self.names = [*SESSION_VARIABLES, "PATH", *spec.env]
        self.pattern = re.compile(spec.ready_pattern) if spec.ready_pattern else None

    async def start(
        self, name: str, env: dict[str, str], task_file: Path, cwd: Path | None = None
    ) -> Running:
        sid = env["COLIBRI_SESSION"] = new_sid()
        own = {k: v for k, v in env.items() if k.startswith("COLIBRI_") or k in self.names}
        try:
            pid = await tmux.start(self.socket, name, self.spec.command_in(cwd), own,
                                   cwd or self.spec.cwd, self.names)  # fmt: skip
            running = Running(pid, name, task_file, sid=sid)
            self.reaper.track(running)
        except (RuntimeError, OSError, ValueError) as exc:
            raise StartFailed(f"could not start the tmux session: {exc}") from exc
        return running

    async def warmed(self, running: Running) -> bool:
        if self.pattern is None:
            return True  # nothing to wait for: ready once started
        try:
            return self.pattern.search(await tmux.screen(self.socket, running.name)) is not None
        except RuntimeError:
            return False

    async def adopt(self, running: Running, task: str) -> None:
        with contextlib.suppress(RuntimeError):
            await tmux.tmux(self.socket, "rename-session", "-t", running.name, task)
        running.name = task

    async def wait_ready(self, running: Running, told: asyncio.Event) -> bool:
        return await tmux.wait_ready(
            self.socket, running.name, running.pgid, told, self.spec.ready_pattern
        )

    async def hand_over(self, running: Running, text: str) -> None:
        await tmux.type_text(self.socket, running.name, text)

    async def wait_end(self, running: Running) -> Ending | None:
        await tmux.wait_exit(running.pgid)
        return None

    async def kill(self, running: Running, *, grace: float) -> None:
        await tmux.kill(self.socket, running.name, running.pgid, grace)
