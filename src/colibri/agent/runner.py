"""One session, from its task's ``assign`` to its report: the part every backend shares.

The runner has its workplace made (``workplace.py``: the dependencies it waited for, its own
worktree), writes the task body (``build_body``) to ``.colibri/sessions/TASK.task``, takes a
warm session from the ready pool or starts one with the backend (its environment from
``session.task_environment``), waits until it is ready (within ``ready_timeout``), hands the
task over and waits for its end (within ``max_runtime``, paused while it waits for an answer),
and returns the report; ``settle`` closes its worktree and puts what the session left there on
the report, which the harness delivers. Then ``release`` kills what the session left
(``Reaper.reclaim``) and removes its task files.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from pathlib import Path

from colibri.agent.backends.base import Ending, Running, SessionBackend, StartFailed
from colibri.agent.pool import ReadyPool
from colibri.agent.reaping import Reaper
from colibri.agent.session import Report, Session, environment, task_environment, within_runtime
from colibri.agent.shim import write_shim
from colibri.agent.spec import AgentSpec
from colibri.agent.workplace import NOT_PREPARED, Setting, Workplaces
from colibri.client import AsyncClient
from colibri.core.agent_protocol import Fail, Out, Reclaimed, Requeue
from colibri.core.errors import ColibriError
from colibri.core.lineage import Body, build_body
from colibri.core.model import Task
from colibri.core.request_fields import ReportedCost
from colibri.layout import RootLayout
from colibri.leftovers import sessions_dir
from colibri.privatefiles import write_private

log = logging.getLogger(__name__)

#: How long a session stopped by the harness (cancel, max_runtime, stop) has after SIGTERM.
KILL_GRACE = 5.0


class Runner:
    def __init__(
        self,
        spec: AgentSpec,
        socket_path: Path,
        root: Path,
        backend: SessionBackend,
        reaper: Reaper,
        connection: Callable[[], AsyncClient | None],
    ) -> None:
        self.spec = spec
        self.socket_path = socket_path
        self.root = root
        self.backend = backend
        self.reaper = reaper
        #: The folder of this harness's own ``colibri``, first on its sessions' PATH.
        self.shim = write_shim(root)
        self.pool = (
            ReadyPool(spec, root, backend, reaper, self._warm_environment) if spec.warm else None
        )
        self.places = Workplaces(spec, root, connection, self._warm_environment)

    def _warm_environment(self) -> dict[str, str]:
        return environment(self.spec, self.socket_path, self.root, self.spec.workspace, self.shim)

    def _task_file(self, session: Session) -> Path:
        return RootLayout(self.root).task_file(session.task)

    async def run(self, session: Session, task: Task) -> Report | None:
        """Run ``task`` as ``session``: its report, or None if its task was cancelled. A
        session that cannot even start fails its task, saying why (the harness, and the
        other sessions, go on)."""
        task_file = self._task_file(session)
        try:
            session.preparing = asyncio.ensure_future(self.places.prepare(session, task))
            try:
                setting: Setting = await session.preparing
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
                return None  # its task was cancelled (or the harness stops) meanwhile
            finally:
                session.preparing = None
            body = Body(
                task=session.task, text=task.text, parent=task.parent,
                sender=task.sender, workspace=task.workspace,
                epoch=session.epoch, claim=session.claim, after=setting.after,
            )  # fmt: skip
            write_private(sessions_dir(self.root) / task_file.name, build_body(body).encode())
            warm = self.pool.take() if self.pool is not None else None
            if warm is not None:
                # A ready session takes the task at once: its header goes to its own file.
                write_private(warm.task_file, task_file.read_bytes())
                await self.backend.adopt(warm, session.task)
                session.running = warm
            else:
                env = task_environment(
                    self.spec, self.socket_path, self.root, self.shim, session, task, task_file
                )
                env.update(setting.env)
                session.running = await self.backend.start(
                    session.task, env, task_file, setting.cwd
                )
            session.running.has_task = True
            return await self._until_report(session, session.running, task.text, warm)
        except (StartFailed, *NOT_PREPARED) as exc:
            return failed(session, str(exc))
        except (OSError, ValueError, RuntimeError, ColibriError) as exc:
            log.error("could not run a session: %s", exc, extra={"event": "session_failed"})
            return failed(session, f"could not start the session: {exc}")

    async def _until_report(
        self, session: Session, running: Running, text: str, warm: Running | None
    ) -> Report | None:
        if session.cancelled:  # stopped while it was starting
            await self.kill(session)
            return None
        if warm is None:  # a warm session is ready already
            timeout = self.spec.ready_timeout
            try:
                async with asyncio.timeout(timeout):
                    ready = await self.backend.wait_ready(running, session.ready)
            except TimeoutError:
                await self.kill(session)
                reason = f"session not ready within {timeout:g}s"
                return Requeue(task=session.task, epoch=session.epoch, reason=reason)
            if session.cancelled:
                return None
            if not ready:
                return failed(session, "the session ended before it was ready")
        limit = self.spec.max_runtime
        try:
            ending = await within_runtime(session, limit, self._work(running, text, warm))
        except TimeoutError:
            await self.kill(session)
            return failed(session, f"max_runtime: stopped after {limit:g}s")
        if session.cancelled:
            return None
        # A session whose end says nothing (tmux) reported by itself, or not at all: the
        # daemon closes its task, or fails it as ended without out (``Reports.reclaimed``).
        if ending is None:
            return Reclaimed(task=session.task, epoch=session.epoch)
        return report_of(session, ending)

    async def _work(self, running: Running, text: str, warm: Running | None) -> Ending | None:
        await self.backend.hand_over(running, text)
        if warm is not None and self.pool is not None:
            # Only once the task is handed over: starting a process blocks the loop for a
            # moment, and this session should not wait for it.
            self.pool.refill()
        return await self.backend.wait_end(running)

    async def kill(self, session: Session) -> None:
        if session.preparing is not None:
            session.preparing.cancel()  # a setup command running is stopped with it
        if session.running is not None:
            await self.backend.kill(session.running, grace=KILL_GRACE)

    async def settle(self, session: Session, task: Task, report: Report | None,
                     stopped: bool) -> Report | None:  # fmt: skip
        """The session is over: nothing it started may still write in its worktree, which is
        closed; ``report`` carries what it left there. Whoever waits for that is told."""
        try:
            if session.worktree is not None and session.running is not None:
                self.reaper.reclaim(session.running)
            return await self.places.settle(session, task, report, stopped)
        finally:
            session.settled.set()

    def release(self, session: Session) -> None:
        """The session is over: what it left is killed, its task files are removed."""
        task_file = self._task_file(session)
        task_file.unlink(missing_ok=True)
        self.places.release(session)
        if session.running is not None:
            if session.running.task_file != task_file:  # a warm session's own
                session.running.task_file.unlink(missing_ok=True)
            if session.running in self.reaper.groups:  # not reclaimed by settle
                self.reaper.reclaim(session.running)


def failed(session: Session, error: str) -> Fail:
    return Fail(task=session.task, epoch=session.epoch, error=error)


def report_of(session: Session, ending: Ending) -> Report:
    """The report of a session that ended as its backend says."""
    cmd, fields = ending
    if cmd == "out":
        # Not validated here: a cost the daemon cannot take gets the report refused, and the
        # task fails saying why (``Harness._deliver_once``).
        cost = fields.get("cost")
        return Out(
            task=session.task, epoch=session.epoch, output=fields.get("output", ""),
            cost=None if cost is None else ReportedCost(**cost),
        )  # fmt: skip
    return failed(session, fields.get("error", ""))
