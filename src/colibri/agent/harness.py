"""``colibri agent``: register with the daemon, run each assigned task as a session, report.

A session is one run of the configured command in its own process group, with the task text
on stdin and ``COLIBRI_TASK_ID``/``COLIBRI_SOCKET``/``COLIBRI_ROOT`` in its environment. Exit 0
reports ``out`` with stdout; any other exit reports ``fail`` with the exit code and the tail of
stderr. The harness outlives the daemon: when the connection drops it keeps its sessions
running, reconnects with backoff, registers again listing what it still holds, and delivers the
results that finished meanwhile.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import secrets
import signal
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from colibri.agent import tmux
from colibri.agent.capture import STDERR_TAIL, Capture, ended_how
from colibri.agent.claude import claude_result
from colibri.client import AsyncClient, RemoteError
from colibri.config import STATE_DIR
from colibri.core.errors import ColibriError, DaemonNotRunning, RootError
from colibri.core.lineage import Body, build_body
from colibri.core.model import DEFAULT_MAX_LINE
from colibri.core.protocol import fit_report
from colibri.privatefiles import open_private, private_dir, write_private
from colibri.processes import (
    alive,
    become_subreaper,
    children_of,
    environ_of,
    processes_with,
    start_time,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

OUTPUT_LIMIT = 1 << 20
KILL_GRACE = 5.0
#: A connection that lasted this long was a good one: the next reconnect starts fast again.
STABLE_CONNECTION = 5.0
#: How often descendants that left their session are looked for (with a subreaper).
REAP_EVERY = 1.0
#: The variables the harness sets in a session's environment.
SESSION_VARIABLES = (
    "COLIBRI_TASK_ID", "COLIBRI_EPOCH", "COLIBRI_CLAIM", "COLIBRI_TASK_FILE", "COLIBRI_SOCKET",
    "COLIBRI_ROOT", "COLIBRI_AGENT", "COLIBRI_WORKSPACE", "COLIBRI_PARENT", "COLIBRI_SESSION",
    "COLIBRI_HARNESS",
)  # fmt: skip
#: Refusals of a registration worth waiting out; any other stops the harness.
RETRY_REGISTER = frozenset({"closed", "busy"})
#: How long a stopping harness tries to deliver its sessions' last reports (after the kills,
#: within the supervisor's 10 s before it SIGKILLs the harness).
REPORT_TIMEOUT = 4.0


@dataclass
class AgentSpec:
    name: str
    command: list[str]
    capabilities: list[str] = field(default_factory=list)
    slots: int = 1
    ttl: float | None = None
    workspace: str | None = None
    tenant: str | None = None
    cwd: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    output_limit: int = OUTPUT_LIMIT
    #: A session running longer than this is stopped and its task fails.
    max_runtime: float | None = None
    backend: str = "subprocess"
    ready_timeout: float = 120.0
    ready_pattern: str | None = None
    #: Sessions started ahead of any task (subprocess backend), and how long one may wait.
    warm: int = 0
    idle: float = 60.0
    #: This harness is the only one of its agent (it holds the workspace lock): at start it
    #: kills sessions a killed predecessor left behind.
    reap_leftovers: bool = False


@dataclass(eq=False)
class WarmSession:
    """A session started before its task, waiting in the pool for one.

    A subprocess one is ready at once (it waits on stdin); a tmux one once ``ready_pattern``
    shows on its screen.
    """

    task_file: Path
    since: float
    process: asyncio.subprocess.Process | None = None
    pane_pid: int | None = None
    tmux_name: str = ""
    ready: bool = False
    #: ``COLIBRI_SESSION`` of its processes: what their descendants are known by.
    sid: str = field(default_factory=lambda: secrets.token_hex(8))

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.returncode is None
        return self.pane_pid is not None and alive(self.pane_pid)


@dataclass
class Session:
    task: str
    epoch: int
    #: The claim's secret, from the assign: the session's own reports carry it.
    claim: str | None = None
    process: asyncio.subprocess.Process | None = None
    runner: asyncio.Task[None] | None = None
    #: (cmd, fields) of the report still to deliver, once the session has ended.
    report: tuple[str, dict[str, Any]] | None = None
    cancelled: bool = False
    #: tmux backend: the pane's process (a group leader) and the session's readiness.
    pane_pid: int | None = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    #: Time spent waiting for an answer does not count against max_runtime.
    paused_since: float | None = None
    paused_total: float = 0.0
    #: The task file of the warm session that took this task, if one did.
    warm_file: Path | None = None
    #: ``COLIBRI_SESSION`` of its processes (a warm session's, if one took the task).
    sid: str = field(default_factory=lambda: secrets.token_hex(8))
    #: Its processes are gone: what they left behind may be stopped.
    ended: bool = False

    def resume_clock(self) -> None:
        """The session no longer waits for an answer: max_runtime counts again."""
        if self.paused_since is not None:
            self.paused_total += time.monotonic() - self.paused_since
            self.paused_since = None


class Harness:
    def __init__(self, spec: AgentSpec, socket_path: Path, root: Path) -> None:
        self.spec = spec
        self.socket_path = socket_path
        self.root = root
        self.sessions: dict[str, Session] = {}
        self.client: AsyncClient | None = None
        self.stopping = asyncio.Event()
        self._reregister = asyncio.Event()
        self._group: asyncio.TaskGroup | None = None
        #: The ready pool, and whether to keep it full (it empties after an idle spell and
        #: fills again when work comes).
        self.pool: list[WarmSession] = []
        self._pool_wanted = spec.warm > 0
        self._warm_count = 0
        self._pool_changed = asyncio.Event()
        #: The daemon's request line limit (from its registration reply): reports fit it.
        self.max_line = DEFAULT_MAX_LINE
        #: With a subreaper: descendants that left their session are re-parented here.
        self.subreaper = False
        #: ``COLIBRI_SESSION`` of the harness's own helpers (tmux and its server), which are
        #: never taken for a session's leftovers.
        self.own_sid = f"harness-{secrets.token_hex(8)}"
        #: Processes this harness started and waits for itself (asyncio reaps them).
        self._spawning = 0

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self.stopping.set)
        # Children inherit these; sessions replace the first with their own (_reap_inherited).
        # The second names this harness (pid and start time) to whoever finds them later.
        os.environ["COLIBRI_SESSION"] = self.own_sid
        os.environ["COLIBRI_HARNESS"] = _process_name(os.getpid())
        self.subreaper = become_subreaper()
        if self.spec.reap_leftovers:
            self._reap_leftovers()
        async with asyncio.TaskGroup() as group:
            self._group = group
            connection = group.create_task(self._stay_connected(), name="connection")
            pool = group.create_task(self._keep_pool(), name="pool") if self.spec.warm else None
            reaper = group.create_task(self._keep_reaping(), name="reaper")
            await self.stopping.wait()
            # Leave first: while its sessions stop, the agent must not be given the tasks their
            # reports free slots for (it would start them, and not stop).
            connection.cancel()
            await asyncio.wait({connection})
            if pool is not None:
                pool.cancel()
            await self._drain_pool()
            await self._stop_sessions()
            reaper.cancel()
            self._reap_inherited(everything=True)

    async def _stay_connected(self) -> None:
        backoff = 0.05
        waiting_logged = False
        while True:
            client = AsyncClient(self.socket_path, on_event=self._on_event)
            try:
                await client.connect()
                reply = await client.call(
                    "register-agent",
                    name=self.spec.name,
                    capabilities=self.spec.capabilities,
                    slots=self.spec.slots,
                    ttl=self.spec.ttl,
                    workspace=self.spec.workspace,
                    tenant=self.spec.tenant,
                    running=[
                        {"task": s.task, "epoch": s.epoch, "claim": s.claim}
                        for s in self.sessions.values()
                    ],
                )
            except (DaemonNotRunning, RemoteError, OSError) as exc:
                if isinstance(exc, RemoteError) and exc.code not in RETRY_REGISTER:
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
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            waiting_logged = False
            connected = time.monotonic()
            self.max_line = int(reply.get("max_line", DEFAULT_MAX_LINE))
            self.client = client
            log.info(
                "registered",
                extra={
                    "event": "registered",
                    "agent": self.spec.name,
                    "adopted": len(reply["adopted"]),
                },
            )
            for held in reply["rejected"]:
                session = self.sessions.get(held["task"])
                if session is not None and session.report is None:
                    await self._kill(session)
                self.sessions.pop(held["task"], None)
            for session in self.sessions.values():
                # A question still waiting is asked again on this daemon, which says "asking"
                # again; one whose asker died meanwhile must not stop the clock for good.
                session.resume_clock()
            for session in list(self.sessions.values()):
                if session.report is not None:
                    await self._deliver(session)
            interval = float(reply.get("heartbeat", 10.0))
            self._reregister.clear()
            try:
                while not client.closed.is_set() and not self._reregister.is_set():
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(interval):
                            await client.closed.wait()
                    if not client.closed.is_set():
                        with contextlib.suppress(RemoteError):
                            await client.call("heartbeat")
            finally:
                self.client = None
                await client.close()
            log.info("lost the daemon; reconnecting", extra={"event": "daemon_lost"})
            if time.monotonic() - connected >= STABLE_CONNECTION:
                backoff = 0.05
            else:  # a connection that ends at once (a refused report?) must not spin
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)

    def _on_event(self, message: dict[str, Any]) -> None:
        kind = message["event"]
        assert self._group is not None
        if kind == "assign":
            task = message["task"]
            session = Session(task["id"], message["epoch"], message.get("claim"))
            self.sessions[session.task] = session
            if self.stopping.is_set():
                return  # never started: reported failed with the others by _stop_sessions
            session.runner = self._group.create_task(
                self._run_session(session, task), name=f"session-{session.task}"
            )
        elif kind == "cancel":
            held = self.sessions.get(message["task"])
            if held is not None:
                held.cancelled = True
                self._group.create_task(self._cancel(held), name=f"cancel-{held.task}")
        elif kind in ("asking", "answered", "question_withdrawn"):
            held = self.sessions.get(message["task"])
            if held is not None:
                if kind == "asking" and held.paused_since is None:
                    held.paused_since = time.monotonic()
                elif kind != "asking":
                    held.resume_clock()
        elif kind == "ready":
            waiting = self.sessions.get(message["task"])
            if waiting is not None:
                waiting.ready.set()
        elif kind == "expired":
            self._reregister.set()

    def _sessions_dir(self) -> Path:
        return private_dir(self.root / STATE_DIR / "sessions")

    async def _run_session(self, session: Session, task: dict[str, Any]) -> None:
        task_file = self.root / STATE_DIR / "sessions" / f"{session.task}.task"
        try:
            body = Body(
                task=session.task, text=task["text"], parent=task.get("parent"),
                sender=task.get("sender"), workspace=task.get("workspace"),
                epoch=session.epoch, claim=session.claim,
            )  # fmt: skip
            write_private(self._sessions_dir() / task_file.name, build_body(body).encode())
            env = {
                **os.environ,
                **self.spec.env,
                "COLIBRI_TASK_ID": session.task,
                "COLIBRI_EPOCH": str(session.epoch),
                "COLIBRI_CLAIM": session.claim or "",
                "COLIBRI_TASK_FILE": str(task_file),
                "COLIBRI_SOCKET": str(self.socket_path),
                "COLIBRI_ROOT": str(self.root),
                "COLIBRI_AGENT": self.spec.name,
                "COLIBRI_SESSION": session.sid,
            }
            if task.get("workspace"):
                env["COLIBRI_WORKSPACE"] = task["workspace"]
            if task.get("parent"):
                env["COLIBRI_PARENT"] = task["parent"]
            if self.spec.backend == "tmux":
                await self._run_tmux(session, task, env)
            else:
                await self._run_process(session, task, env)
        except (OSError, ValueError, RuntimeError, ColibriError) as exc:
            # A session that cannot even start fails its task, saying why; the harness, and
            # the other sessions, go on (before, the harness died, and the task was lost with
            # a misleading "registered again without it").
            log.error("could not run a session: %s", exc, extra={"event": "session_failed"})
            if session.report is None and not session.cancelled:
                session.report = ("fail", {"error": f"could not start the session: {exc}"})
                await self._deliver(session)
        finally:
            task_file.unlink(missing_ok=True)
            if session.warm_file is not None:
                session.warm_file.unlink(missing_ok=True)
            pgid = session.process.pid if session.process else session.pane_pid
            if pgid is not None:  # reclaim means kill: nothing the session started outlives it
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
            self._untrack(pgid)
            session.ended = True
            self._reap_inherited()

    async def _run_tmux(self, session: Session, task: dict[str, Any], env: dict[str, str]) -> None:
        sock = tmux.socket_for(self.root, self.spec.name)
        warm = self._take_warm() if self.spec.warm else None
        if warm is not None and warm.pane_pid is not None:
            # A ready session takes the task at once; it is renamed after the task, so
            # `colibri attach-session TASK` finds it.
            write_private(warm.task_file, Path(env["COLIBRI_TASK_FILE"]).read_bytes())
            session.warm_file = warm.task_file
            session.sid = warm.sid
            with contextlib.suppress(RuntimeError):
                await tmux.tmux(sock, "rename-session", "-t", warm.tmux_name, session.task)
            session.pane_pid = pid = warm.pane_pid
            session.ready.set()
            self._pool_changed.set()
        else:
            own = {k: v for k, v in env.items() if k.startswith("COLIBRI_") or k in self.spec.env}
            try:
                pid = await tmux.start(
                    sock, session.task, self.spec.command, own, self.spec.cwd, self._tmux_names()
                )
                self._track(pid)
            except (RuntimeError, OSError, ValueError) as exc:
                session.report = ("fail", {"error": f"could not start the tmux session: {exc}"})
                await self._deliver(session)
                return
            session.pane_pid = pid
        if session.cancelled:  # stopped while it was starting
            await self._kill(session)
            return
        try:
            async with asyncio.timeout(self.spec.ready_timeout):
                ready = await tmux.wait_ready(
                    sock, session.task, pid, session.ready, self.spec.ready_pattern
                )
        except TimeoutError:
            await self._kill(session)
            reason = f"session not ready within {self.spec.ready_timeout:g}s"
            session.report = ("requeue", {"reason": reason})
            await self._deliver(session)
            return
        if session.cancelled:
            return
        if not ready:
            session.report = ("fail", {"error": "the session ended before it was ready"})
            await self._deliver(session)
            return
        await tmux.type_text(sock, session.task, task["text"])
        try:
            await self._within_runtime(session, tmux.wait_exit(pid))
        except TimeoutError:
            await self._kill(session)
            limit = self.spec.max_runtime
            session.report = ("fail", {"error": f"max_runtime: stopped after {limit:g}s"})
            await self._deliver(session)
            return
        if session.cancelled:
            return
        # Refused if the session reported by itself (colibri out): then it is just closed.
        session.report = ("fail", {"error": "the session ended without out"})
        await self._deliver(session)

    # -- session process groups ---------------------------------------------------------------

    def _marker(self, pgid: int) -> Path:
        return self.root / STATE_DIR / "sessions" / f"{self.spec.name}.{pgid}.pgid"

    def _track(self, pgid: int) -> None:
        """Note a session's process group, so a harness that replaces a killed one can stop it:
        its leader's pid and start time, which together name that one process."""
        self._sessions_dir()
        write_private(self._marker(pgid), f"{pgid} {start_time(pgid)}\n".encode())

    def _untrack(self, pgid: int | None) -> None:
        if pgid is not None:
            self._marker(pgid).unlink(missing_ok=True)

    def _reap_leftovers(self) -> None:
        """Kill the sessions of a predecessor that was killed (no orphans: their tasks are
        already lost, or will be, with their agent): the process groups its markers name —
        only where the group's leader is still the process the marker was written for (a pid
        is reused; a marker may be planted) — and, found by their environment, whatever its
        sessions left running outside those groups."""
        try:
            folder = self._sessions_dir()
        except RootError as exc:  # each session will fail, saying so; the harness stays
            log.error("cannot look for leftover sessions: %s", exc, extra={"event": "unsafe"})
            return
        for marker in folder.glob(f"{self.spec.name}.*.pgid"):
            name = marker.name.removeprefix(f"{self.spec.name}.").removesuffix(".pgid")
            pgid = int(name) if name.isdigit() else 0
            try:
                fd = open_private(marker, os.O_RDONLY)
                with os.fdopen(fd, "rb") as handle:
                    written = handle.read(64).split()
            except (OSError, RootError):
                written = []
            started = start_time(pgid) if pgid > 1 else None
            if started is not None and written == [str(pgid).encode(), str(started).encode()]:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
                    log.warning(
                        "killed a session left by a previous harness",
                        extra={"event": "leftover_killed", "pgid": pgid},
                    )
            with contextlib.suppress(FileNotFoundError, IsADirectoryError):
                marker.unlink()
        for pid in processes_with(COLIBRI_ROOT=str(self.root), COLIBRI_AGENT=self.spec.name):
            owner = (environ_of(pid, "COLIBRI_HARNESS") or "").partition(":")[0]
            if owner.isdigit() and environ_of(pid, "COLIBRI_HARNESS") == _process_name(int(owner)):
                continue  # its harness is alive (one started by hand under the same name)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                log.warning(
                    "killed a process a previous harness's session left",
                    extra={"event": "leftover_killed", "pid": pid},
                )

    # -- descendants that left their session --------------------------------------------

    async def _keep_reaping(self) -> None:
        if not self.subreaper:
            return
        while True:
            await asyncio.sleep(REAP_EVERY)
            self._reap_inherited()

    def _direct_children(self) -> set[int]:
        """The processes this harness started itself (asyncio waits for them)."""
        pids = {s.process.pid for s in self.sessions.values() if s.process is not None}
        pids.update(w.process.pid for w in self.pool if w.process is not None)
        return pids | tmux.CLIENTS

    def _reap_inherited(self, *, everything: bool = False) -> None:
        """Stop the processes re-parented to this harness (a subreaper) whose session has
        ended: each is known by the ``COLIBRI_SESSION`` it inherited. One that cleared its
        environment is stopped once no session runs here (or at once, ``everything``);
        the harness's own helpers (tmux) keep theirs. Zombies among them are reaped."""
        if not self.subreaper or tmux.SPAWNING or self._spawning:
            return  # a process being started is not yet known as ours
        running = {s.sid for s in self.sessions.values() if not s.ended}
        live = running | {w.sid for w in self.pool}
        ours = self._direct_children()
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
            if sid is None and running and not everything:
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

    # -- the ready pool ---------------------------------------------------------------------

    def _tmux_names(self) -> list[str]:
        """Every variable a tmux session of this harness may be given."""
        return [*SESSION_VARIABLES, *self.spec.env]

    def _session_env(self) -> dict[str, str]:
        env = {
            **os.environ,
            **self.spec.env,
            "COLIBRI_SOCKET": str(self.socket_path),
            "COLIBRI_ROOT": str(self.root),
            "COLIBRI_AGENT": self.spec.name,
        }
        if self.spec.workspace:
            env["COLIBRI_WORKSPACE"] = self.spec.workspace
        return env

    async def _start_process(self, env: dict[str, str]) -> asyncio.subprocess.Process:
        self._spawning += 1
        try:
            process = await asyncio.create_subprocess_exec(
                *self.spec.command,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=self.spec.cwd,
                env=env,
                process_group=0,
            )
        finally:
            self._spawning -= 1
        self._track(process.pid)
        return process

    async def _keep_pool(self) -> None:
        """Keep ``warm`` sessions ready; reclaim one idle past ``idle`` (and stop refilling
        until work comes again)."""
        sessions_dir = self._sessions_dir()
        while True:
            now = time.monotonic()
            for warm in list(self.pool):
                idle = warm.ready and now - warm.since > self.spec.idle
                late = not warm.ready and now - warm.since > self.spec.ready_timeout
                if not warm.alive() or idle or late:
                    self.pool.remove(warm)
                    self._pool_wanted = self._pool_wanted and not idle
                    await self._discard(warm)
                    why = "idle" if idle else "not ready in time" if late else "ended"
                    log.info(
                        "reclaimed a warm session",
                        extra={"event": "session_reclaimed", "why": why},
                    )
            while self._pool_wanted and len(self.pool) < self.spec.warm:
                self._warm_count += 1
                name = f"{self.spec.name}-warm-{self._warm_count}"
                task_file = sessions_dir / f"{name}.task"
                warm = WarmSession(task_file, time.monotonic(), tmux_name=name)
                env = {**self._session_env(), "COLIBRI_TASK_FILE": str(task_file),
                       "COLIBRI_SESSION": warm.sid}  # fmt: skip
                try:
                    if self.spec.backend == "tmux":
                        own = {k: v for k, v in env.items()
                               if k.startswith("COLIBRI_") or k in self.spec.env}  # fmt: skip
                        sock = tmux.socket_for(self.root, self.spec.name)
                        warm.pane_pid = await tmux.start(
                            sock, name, self.spec.command, own, self.spec.cwd, self._tmux_names()
                        )
                        self._track(warm.pane_pid)
                    else:
                        warm.process = await self._start_process(env)
                        warm.ready = True
                except (OSError, RuntimeError, ValueError) as exc:
                    log.error("could not start a warm session: %s", exc)
                    self._pool_wanted = False
                    break
                self.pool.append(warm)
            for warm in self.pool:  # tmux: ready once its pattern shows
                if not warm.ready and warm.pane_pid is not None:
                    warm.ready = await self._pattern_shown(warm)
                    if warm.ready:
                        warm.since = time.monotonic()
            self._pool_changed.clear()
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(0.5, self.spec.idle / 4)):
                    await self._pool_changed.wait()  # a warm session was taken: refill now

    async def _pattern_shown(self, warm: WarmSession) -> bool:
        if self.spec.ready_pattern is None:
            return True  # nothing to wait for: ready once started
        sock = tmux.socket_for(self.root, self.spec.name)
        try:
            return (
                re.search(self.spec.ready_pattern, await tmux.screen(sock, warm.tmux_name))
                is not None
            )
        except RuntimeError:
            return False

    def _take_warm(self) -> WarmSession | None:
        self._pool_wanted = self.spec.warm > 0  # work came: keep the pool full again
        for warm in list(self.pool):
            if warm.ready and warm.alive():
                self.pool.remove(warm)
                return warm
        return None

    async def _discard(self, warm: WarmSession) -> None:
        if warm.process is not None:
            await self._kill_process(warm.process)
            self._untrack(warm.process.pid)
        elif warm.pane_pid is not None:
            self._untrack(warm.pane_pid)
            await tmux.kill(
                tmux.socket_for(self.root, self.spec.name), warm.tmux_name, warm.pane_pid
            )
        warm.task_file.unlink(missing_ok=True)

    async def _drain_pool(self) -> None:
        for warm in self.pool:
            await self._discard(warm)
        self.pool.clear()

    async def _kill_process(self, process: asyncio.subprocess.Process) -> None:
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
        await process.wait()

    async def _run_process(
        self, session: Session, task: dict[str, Any], env: dict[str, str]
    ) -> None:
        warm = self._take_warm() if self.spec.warm else None
        assert warm is None or warm.process is not None
        try:
            if warm is not None:
                # A ready session takes the task at once: its header goes to its own file.
                write_private(warm.task_file, Path(env["COLIBRI_TASK_FILE"]).read_bytes())
                assert warm.process is not None
                process = warm.process
                session.warm_file = warm.task_file
                session.sid = warm.sid
            else:
                process = await self._start_process(env)
        except (OSError, ValueError) as exc:
            session.report = ("fail", {"error": f"could not start {self.spec.command[0]}: {exc}"})
            await self._deliver(session)
            return
        session.process = process
        if session.cancelled:  # stopped while it was starting
            await self._kill(session)
            return
        text: bytes | None = task["text"].encode()
        if warm is not None and process.stdin is not None:
            # Hand the task over first; only then refill the pool (starting a process blocks
            # the loop for a moment, and this session should not wait for it).
            with contextlib.suppress(ConnectionError):
                process.stdin.write(text or b"")
                await process.stdin.drain()
                process.stdin.close()
            text = None
            self._pool_changed.set()
        try:
            stdout, stderr = await self._within_runtime(session, self._talk(session, process, text))
        except TimeoutError:
            await self._kill(session)
            limit = self.spec.max_runtime
            session.report = ("fail", {"error": f"max_runtime: stopped after {limit:g}s"})
            await self._deliver(session)
            return
        if session.cancelled:
            return
        if process.returncode == 0:
            output, cost = claude_result(stdout.text())
            session.report = ("out", {"output": output, "cost": cost})
        else:
            tail = stderr.text().strip()
            session.report = (
                "fail",
                {"error": ended_how(process.returncode) + (f": {tail}" if tail else "")},
            )
        await self._deliver(session)

    async def _talk(
        self, session: Session, process: asyncio.subprocess.Process, text: bytes | None
    ) -> tuple[Capture, Capture]:
        """Give the session its input, collect its output until it exits: stdout within
        ``output_limit`` (its head and tail), stderr's tail, each capped as it is read.

        Unlike ``communicate``, this does not wait for its pipes to close: a process the session
        left running may hold them. Once the session has exited, what it left — in its process
        group, and (with a subreaper) outside it — is killed (reclaim means kill), which closes
        them; whatever still holds them after that is not waited for.
        """
        assert process.stdout is not None and process.stderr is not None
        limit = self.spec.output_limit
        stdout, stderr = Capture(limit - limit // 2, limit // 2), Capture(0, STDERR_TAIL)
        out = asyncio.ensure_future(stdout.read(process.stdout))
        err = asyncio.ensure_future(stderr.read(process.stderr))
        try:
            if process.stdin is not None:
                with contextlib.suppress(ConnectionError):
                    if text:
                        process.stdin.write(text)
                        await process.stdin.drain()
                    process.stdin.close()
            # ``process.wait()`` also waits for the pipes, which a leftover child may hold open:
            # watch the process itself instead.
            waiting = asyncio.ensure_future(process.wait())
            while not waiting.done() and alive(process.pid):
                await asyncio.wait({waiting}, timeout=0.05)
            session.ended = True
            for _ in range(3):
                _, pending = await asyncio.wait({out, err}, timeout=0.5)
                if not pending:
                    break
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                self._reap_inherited()
            await waiting
            return stdout, stderr
        finally:
            for reader in (out, err):
                reader.cancel()

    async def _within_runtime(self, session: Session, work: Awaitable[T]) -> T:
        """Await ``work`` within max_runtime, not counting time spent waiting for an answer
        (``colibri ask``); raise TimeoutError past it."""
        job = asyncio.ensure_future(work)
        limit = self.spec.max_runtime
        if limit is None:
            return await job
        started = time.monotonic()
        while True:
            paused = session.paused_total + (
                time.monotonic() - session.paused_since if session.paused_since else 0.0
            )
            left = limit - (time.monotonic() - started - paused)
            if session.paused_since is not None:
                left = max(left, 0.0) + 0.5  # the clock stands still while it waits
            if left <= 0:
                job.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await job
                raise TimeoutError
            done, _ = await asyncio.wait({job}, timeout=min(left, 0.5))
            if done:
                return job.result()

    def _fitted(self, session: Session, cmd: str, fields: dict[str, Any]) -> dict[str, Any]:
        """A report's fields, its long text (an out's output, a fail's error) cut to fit one
        request line of the daemon."""
        fields = {k: v for k, v in fields.items() if k != "refused"}  # ours, not the wire's
        field = {"out": "output", "fail": "error"}.get(cmd)
        if field is None or not fields.get(field):
            return fields
        rest = {k: v for k, v in fields.items() if k != field}
        where = {"task": session.task, "epoch": session.epoch, "claim": session.claim}
        text = fit_report(fields[field], self.max_line, cmd, {**where, **rest}, field)
        return {**rest, field: text}

    async def _deliver(self, session: Session) -> None:
        if session.report is None or self.client is None:
            return  # delivered after the next registration
        cmd, fields = session.report
        try:
            await self.client.call(
                cmd, task=session.task, epoch=session.epoch, **self._fitted(session, cmd, fields)
            )
        except RemoteError as exc:
            if exc.code == "closed":
                return
            if exc.code in ("line_too_long", "bad_request") and cmd in ("out", "fail"):
                # Never sent again as it is (the daemon would refuse it again, for ever): the
                # task fails, saying why, in a report short enough for any line. It goes now
                # if the connection still serves (bad_request), else after registering again
                # (line_too_long closed it); a refusal of that one is the end of it.
                log.error(
                    "report refused; the task is reported failed instead: %s",
                    exc.message,
                    extra={"event": "report_refused", "task": session.task},
                )
                if fields.get("refused"):
                    self.sessions.pop(session.task, None)
                    return
                why = f"the session's {cmd} report was refused: {exc.message[:300]}"
                session.report = ("fail", {"error": why, "refused": True})
                if exc.code == "bad_request":
                    await self._deliver(session)
                return
            if exc.code == "illegal_transition":
                # The session reported by itself (``colibri out``); its end closes the task.
                with contextlib.suppress(RemoteError):
                    await self.client.call("reclaimed", task=session.task, epoch=session.epoch)
                self.sessions.pop(session.task, None)
                return
            log.warning(
                "report refused: %s",
                exc.message,
                extra={"event": "report_refused", "task": session.task},
            )
        self.sessions.pop(session.task, None)

    async def _cancel(self, session: Session) -> None:
        await self._kill(session)
        self.sessions.pop(session.task, None)
        if self.client is not None:
            with contextlib.suppress(RemoteError):
                await self.client.call("reclaimed", task=session.task, epoch=session.epoch)

    async def _kill(self, session: Session) -> None:
        if session.pane_pid is not None:
            await tmux.kill(
                tmux.socket_for(self.root, self.spec.name), session.task, session.pane_pid
            )
            return
        process = session.process
        if process is None or process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            async with asyncio.timeout(KILL_GRACE):
                await process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()

    async def _stop_sessions(self) -> None:
        """On SIGINT/SIGTERM, once the agent's connection is closed: stop every session and
        report it failed (or the report it had ready, if it had ended).

        The reports go on a plain connection, as a session's own do: the daemon takes them for
        the agent holding the task, checking the epoch, and gives the agent no new work."""
        stopped: tuple[str, dict[str, Any]] = ("fail", {"error": f"agent {self.spec.name} stopped"})
        sessions = list(self.sessions.values())
        for session in sessions:
            session.cancelled = True
        # All at once: each may take its grace period, and whoever stops this harness (the
        # supervisor) waits only so long before it SIGKILLs it.
        await asyncio.gather(*(self._kill(session) for session in sessions))
        client = AsyncClient(self.socket_path)
        try:
            async with asyncio.timeout(REPORT_TIMEOUT):
                await client.connect()
                for session in sessions:
                    report = session.report
                    cmd, fields = report if report and report[0] in ("out", "fail") else stopped
                    with contextlib.suppress(RemoteError):
                        await client.call(
                            cmd, task=session.task, epoch=session.epoch, from_session=True,
                            claim=session.claim, **self._fitted(session, cmd, fields),
                        )  # fmt: skip
        except (DaemonNotRunning, OSError, TimeoutError):
            pass  # no daemon (or a frozen one): these fail as lost later, unless claimed
        finally:
            self.sessions.clear()
            await client.close()


def _process_name(pid: int) -> str:
    """``pid:start time``: one process, even once its pid is reused."""
    return f"{pid}:{start_time(pid)}"


def run_agent(spec: AgentSpec, socket_path: Path, root: Path) -> int:
    try:
        asyncio.run(Harness(spec, socket_path, root).run())
    except BaseExceptionGroup as group:
        refused = group.subgroup(RemoteError)
        if refused is None:
            raise
        raise refused.exceptions[0] from None
    return 0
