"""``colibri agent``: register with the daemon, run each assigned task as a session, report.

The harness is the agent's connection: it registers, heartbeats, and routes the daemon's
events. Each ``assign`` becomes a session that the runner (``runner.py``) runs with the
workspace's backend (``backends/``), warm from the ready pool (``pool.py``) or started for the
task; the runner returns its report, and ``_deliver`` here is the one place reports go out.
The harness outlives the daemon: when the connection drops it keeps its sessions running,
reconnects with backoff, registers again listing what it still holds, and delivers the reports
that were made meanwhile.

On another machine (``colibri agent --connect``) the daemon is a ``Remote``: the harness
connects over TLS with its agent token, trying the addresses in turn, and its sessions reach the
daemon through the relay (``relay.py``) at its state folder's socket.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import Any

import msgspec

from colibri import host
from colibri.agent.backends import backend_for
from colibri.agent.lifetime import first_of, hold_harness_locks, stop_once_orphaned
from colibri.agent.reaping import Reaper
from colibri.agent.reports import SETTLE_PATIENCE, fitted, report_pauses, send_last_reports
from colibri.agent.runner import Runner
from colibri.agent.session import Pending, Session
from colibri.agent.spec import AgentSpec
from colibri.client import AsyncClient, Remote
from colibri.core import events
from colibri.core import protocol as p
from colibri.core.backoff import Backoff
from colibri.core.errors import (
    BadRequest,
    ColibriError,
    ConnectionClosed,
    Elsewhere,
    IllegalTransition,
    LineTooLong,
)
from colibri.core.model import DEFAULT_MAX_LINE, Task
from colibri.layout import RootLayout

log = logging.getLogger(__name__)

#: A connection that lasted this long was a good one: the next reconnect starts fast again.
STABLE_CONNECTION = 5.0
#: The pauses between tries to register, after the first that failed: 50 ms, doubled up to 5 s.
RECONNECT_FIRST_PAUSE = 0.05
RECONNECT_LONGEST_PAUSE = 5.0


class Harness:
    def __init__(self, spec: AgentSpec, daemon: Path | Remote, root: Path) -> None:
        self.spec = spec
        #: This root's socket, or a daemon on another machine.
        self.daemon = daemon
        self.root = root
        self.sessions: dict[str, Session] = {}
        self.client: AsyncClient | None = None
        self.stopping = asyncio.Event()
        self._reregister = asyncio.Event()
        self._group: asyncio.TaskGroup | None = None
        #: The daemon's request line limit (from its registration reply): reports fit it.
        self.max_line = DEFAULT_MAX_LINE
        self.reaper = Reaper(root, spec.name)
        self.backend = backend_for(spec, root, self.reaper)
        # Sessions reach the daemon through the root's socket: the daemon's own, or the relay.
        self.runner = Runner(
            spec, RootLayout(root).socket, root, self.backend, self.reaper, lambda: self.client
        )
        self.pool = self.runner.pool
        #: Whether heartbeats say how full the ready pool is (a daemon that refuses it: no).
        self._tell_ready = True

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        # SIGHUP too: a harness killed by its terminal closing would leave its sessions (each in
        # a process group of its own) running, their tasks held.
        for signum in host.stop_signals():
            loop.add_signal_handler(signum, self.stopping.set)
        self.reaper.begin()
        if self.spec.exclusive:
            self.reaper.reap_leftovers()
            await self.runner.places.sweep()  # the worktrees of the killed one's sessions
        async with asyncio.TaskGroup() as group:
            self._group = group
            connection = group.create_task(self._stay_connected(), name="connection")
            pool = group.create_task(self.pool.run(), name="pool") if self.pool else None
            reaper = group.create_task(self.reaper.keep_reaping(), name="reaper")
            if self.spec.orphan_after is not None and not isinstance(self.daemon, Remote):
                watch = stop_once_orphaned(self.root, self.spec.orphan_after, self.stopping)
                group.create_task(watch, name="orphaned")
            relay = None
            if isinstance(self.daemon, Remote):
                from colibri.agent.relay import Relay

                serving = Relay(self.daemon, RootLayout(self.root).socket).serve()
                relay = group.create_task(serving, name="relay")
            await self.stopping.wait()
            # Leave first: while its sessions stop, the agent must not be given the tasks their
            # reports free slots for (it would start them, and not stop).
            connection.cancel()
            await asyncio.wait({connection})
            if pool is not None and self.pool is not None:
                pool.cancel()
                await self.pool.drain()
            await self._stop_sessions()
            if relay is not None:
                relay.cancel()
            reaper.cancel()
            self.reaper.reap_inherited(everything=True)

    async def _stay_connected(self) -> None:
        pauses = Backoff(RECONNECT_FIRST_PAUSE, RECONNECT_LONGEST_PAUSE)
        waiting_logged = False
        while True:
            client = AsyncClient(self.daemon, on_event=self._on_event)
            try:
                await client.connect()
                reply = await client.request(
                    p.RegisterAgent(
                        name=self.spec.name,
                        capabilities=self.spec.capabilities,
                        slots=self.spec.slots,
                        ttl=self.spec.ttl,
                        workspace=self.spec.workspace,
                        tenant=self.spec.tenant,
                        running=[
                            p.Held(task=s.task, epoch=s.epoch, claim=s.claim)
                            for s in self.sessions.values()
                        ],
                    )
                )
            except (ColibriError, OSError) as exc:
                # A transient refusal (the store away for a moment, no daemon serving the
                # tenant yet: ``not_owner``) is waited out; any other stops the harness.
                if isinstance(exc, ColibriError) and not exc.transient:
                    log.error(
                        "registration refused: %s", exc.message, extra={"event": "register_refused"}
                    )
                    raise
                if not waiting_logged:
                    log.info(
                        "waiting for the daemon: %s", exc, extra={"event": "daemon_unreachable"}
                    )
                    waiting_logged = True
                await client.close()
                await asyncio.sleep(pauses.next())
                continue
            waiting_logged = False
            connected = time.monotonic()
            self.max_line = reply.max_line
            self.client = client
            log.info(
                "registered",
                extra={
                    "event": "registered",
                    "agent": self.spec.name,
                    "adopted": len(reply.adopted),
                },
            )
            for held in reply.rejected:
                session = self.sessions.get(held.task)
                if session is not None and session.report is None:
                    await self.runner.kill(session)
                self.sessions.pop(held.task, None)
            for session in self.sessions.values():
                # A question still waiting is asked again on this daemon, which says "asking"
                # again; one whose asker died meanwhile must not stop the clock for good.
                session.resume_clock()
            for session in list(self.sessions.values()):
                if session.report is not None:
                    self._deliver_soon(session)
            interval = reply.heartbeat
            self._reregister.clear()
            try:
                while not client.closed.is_set() and not self._reregister.is_set():
                    await first_of(interval, client.closed, self._reregister)
                    if not client.closed.is_set():
                        await self._heartbeat(client)
            finally:
                self.client = None
                await client.close()
            log.info("lost the daemon; reconnecting", extra={"event": "daemon_lost"})
            if time.monotonic() - connected >= STABLE_CONNECTION:
                pauses.reset()
            else:  # a connection that ends at once (a refused report?) must not spin
                await asyncio.sleep(pauses.next())

    async def _heartbeat(self, client: AsyncClient) -> None:
        """Say the agent is alive, and how many warm sessions its ready pool holds."""
        ready = self.pool.ready_count if self.pool and self._tell_ready else None
        try:
            await client.request(p.Heartbeat(ready=ready))
        except BadRequest:
            # A daemon older than the field refuses it: plain heartbeats to it from now on.
            self._tell_ready = False
        except ColibriError:
            pass

    def _on_event(self, message: dict[str, Any]) -> None:
        try:
            event = events.convert(message)
        except msgspec.ValidationError as exc:  # a newer daemon's event: not ours to act on
            log.debug("event not understood: %s", exc, extra={"event": "unknown_event"})
            return
        assert self._group is not None
        match event:
            case events.Assign(task=task, epoch=epoch, claim=claim):
                session = Session(task.id, epoch, claim)
                self.sessions[session.task] = session
                if self.stopping.is_set():
                    return  # never started: reported failed with the others by _stop_sessions
                session.runner = self._group.create_task(
                    self._run_session(session, task), name=f"session-{session.task}"
                )
            case events.Cancel(task=task_id):
                held = self.sessions.get(task_id)
                if held is not None:
                    held.cancelled = True
                    self._group.create_task(self._cancel(held), name=f"cancel-{held.task}")
            case events.AskingStarted(task=task_id):
                held = self.sessions.get(task_id)
                if held is not None and held.paused_since is None:
                    held.paused_since = time.monotonic()
            case events.Answered(task=task_id) | events.QuestionWithdrawn(task=task_id):
                held = self.sessions.get(task_id)
                if held is not None:
                    held.resume_clock()
            case events.SessionReady(task=task_id):
                waiting = self.sessions.get(task_id)
                if waiting is not None:
                    waiting.ready.set()
            case events.Expired():
                self._reregister.set()

    async def _run_session(self, session: Session, task: Task) -> None:
        """Run the task as a session; deliver its report (none if its task was cancelled)."""
        try:
            report = await self.runner.run(session, task)
            report = await self.runner.settle(session, task, report, self.stopping.is_set())
            if report is not None and not session.cancelled:
                session.report = Pending(report)
                await self._deliver(session)
        finally:
            session.settled.set()  # whatever happened: nobody waits for it for ever
            self.runner.release(session)

    def _deliver_soon(self, session: Session) -> None:
        """Deliver ``session``'s report in a task of its own: one whose delivery waits out a
        transient refusal must not hold up the registration, nor the heartbeats after it."""
        assert self._group is not None
        self._group.create_task(self._deliver(session), name=f"report-{session.task}")

    async def _deliver(self, session: Session) -> None:
        """Send ``session``'s report until the daemon has taken it or refused it for good.

        The report is the agent's to keep until then: a transient answer (``busy``, the store
        unavailable, a rolled-back batch, another daemon serving the tenant now — see
        ``ColibriError.transient``) keeps it and sends it again after a growing pause, over
        whatever connection the harness has by then (another daemon's after a takeover). A
        report that went through but whose answer was lost is taken once: the daemon answers
        the same report again as taken. One delivery per session at a time: a registration
        meanwhile leaves it to the one under way."""
        if session.delivering:
            return
        session.delivering = True
        try:
            pauses = report_pauses()
            while await self._deliver_once(session):
                try:
                    async with asyncio.timeout(pauses.next()):
                        await self.stopping.wait()
                    return  # stopping: _stop_sessions sends what is left
                except TimeoutError:
                    pass
        finally:
            session.delivering = False

    async def _deliver_once(self, session: Session) -> bool:
        """Send the report once; True if it is to be sent again after a pause."""
        client = self.client
        if (
            session.report is None
            or client is None
            or self.sessions.get(session.task) is not session
        ):
            return False  # delivered after the next registration (or already)
        report = session.report.request
        try:
            await client.request(fitted(report, self.max_line))
        except ColibriError as exc:
            if isinstance(exc, ConnectionClosed):
                return False  # sent again once registered again
            if exc.transient:
                log.warning(
                    "report not taken yet; sending it again: %s",
                    exc.message,
                    extra={"event": "report_deferred", "task": session.task, "code": exc.code},
                )
                if isinstance(exc, Elsewhere) and client is self.client:
                    # This daemon no longer serves the tenant (or is about to stop): register
                    # again where it is served, and deliver there.
                    self._reregister.set()
                return True
            reported = isinstance(report, (p.Out, p.Fail))
            if isinstance(exc, (LineTooLong, BadRequest)) and reported:
                # Never sent again as it is (the daemon would refuse it again, for ever): the
                # task fails, saying why, in a report short enough for any line. It goes now
                # if the connection still serves (bad_request), else after registering again
                # (line_too_long closed it); a refusal of that one is the end of it.
                log.error(
                    "report refused; the task is reported failed instead: %s",
                    exc.message,
                    extra={"event": "report_refused", "task": session.task},
                )
                if session.report.refused is not None:
                    self._forget(session)
                    return False
                cmd = type(report).__struct_config__.tag
                why = f"the session's {cmd} report was refused: {exc.message[:300]}"
                instead = p.Fail(
                    task=session.task, epoch=session.epoch, error=why, change=session.change
                )
                session.report = Pending(instead, refused=exc.message)
                return isinstance(exc, BadRequest)
            if isinstance(exc, IllegalTransition) and reported:
                # The session reported by itself (``colibri out`` in a one-shot command): its
                # end closes the task.
                ended = p.Reclaimed(task=session.task, epoch=session.epoch, change=session.change)
                with contextlib.suppress(ColibriError):
                    await client.request(ended)
                self._forget(session)
                return False
            log.warning(
                "report refused: %s",
                exc.message,
                extra={"event": "report_refused", "task": session.task},
            )
        self._forget(session)
        return False

    def _forget(self, session: Session) -> None:
        """Done with ``session``: its report taken (or refused for good). Only if it is still
        the one held for its task: the daemon may have assigned the task again meanwhile (a
        requeue's assign can come before its reply), and that session is another's to end."""
        if self.sessions.get(session.task) is session:
            del self.sessions[session.task]

    async def _cancel(self, session: Session) -> None:
        """The daemon cancelled the session's task: stop it, and say its session is gone — a
        report like any other, kept until taken (the task's slot is freed by it)."""
        await self.runner.kill(session)
        if session.runner is not None:
            await session.settled.wait()  # its worktree closed: what it left goes with this
        ended = p.Reclaimed(task=session.task, epoch=session.epoch, change=session.change)
        session.report = Pending(ended)
        await self._deliver(session)

    async def _stop_sessions(self) -> None:
        """On SIGINT/SIGTERM, once the agent's connection is closed: stop every session and
        report it failed (or the report it had ready, if it had ended: ``send_last_reports``)."""
        stopped = f"agent {self.spec.name} stopped"
        sessions = list(self.sessions.values())
        for session in sessions:
            session.cancelled = True
        # All at once: each may take its grace period, and whoever stops this harness (the
        # supervisor) waits only so long before it SIGKILLs it.
        await asyncio.gather(*(self.runner.kill(session) for session in sessions))
        with contextlib.suppress(TimeoutError):  # their worktrees closed, if git is quick
            async with asyncio.timeout(SETTLE_PATIENCE):
                await asyncio.gather(*(s.settled.wait() for s in sessions if s.runner))
        try:
            await send_last_reports(self.daemon, sessions, stopped, self.max_line)
        finally:
            self.sessions.clear()


def run_agent(spec: AgentSpec, daemon: Path | Remote, root: Path) -> int:
    """Run the harness until SIGINT/SIGTERM, once it holds its locks (``hold_harness_locks``)."""
    hold_harness_locks(spec, daemon, root)
    try:
        asyncio.run(Harness(spec, daemon, root).run())
    except BaseExceptionGroup as group:
        refused = group.subgroup(ColibriError)
        if refused is None:
            raise
        raise refused.exceptions[0] from None
    return 0
