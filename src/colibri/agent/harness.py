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
import json
import logging
import os
import re
import signal
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from colibri.agent import tmux
from colibri.client import AsyncClient, RemoteError
from colibri.config import STATE_DIR
from colibri.core.errors import DaemonNotRunning
from colibri.core.lineage import Body, build_body
from colibri.processes import alive

log = logging.getLogger(__name__)
T = TypeVar("T")

OUTPUT_LIMIT = 1 << 20
STDERR_TAIL = 4096
KILL_GRACE = 5.0
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

    def alive(self) -> bool:
        if self.process is not None:
            return self.process.returncode is None
        return self.pane_pid is not None and alive(self.pane_pid)


@dataclass
class Session:
    task: str
    epoch: int
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

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self.stopping.set)
        if self.spec.reap_leftovers:
            self._reap_leftovers()
        async with asyncio.TaskGroup() as group:
            self._group = group
            connection = group.create_task(self._stay_connected(), name="connection")
            pool = group.create_task(self._keep_pool(), name="pool") if self.spec.warm else None
            await self.stopping.wait()
            # Leave first: while its sessions stop, the agent must not be given the tasks their
            # reports free slots for (it would start them, and not stop).
            connection.cancel()
            await asyncio.wait({connection})
            if pool is not None:
                pool.cancel()
            await self._drain_pool()
            await self._stop_sessions()

    async def _stay_connected(self) -> None:
        backoff = 0.05
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
                    running=[{"task": s.task, "epoch": s.epoch} for s in self.sessions.values()],
                )
            except (DaemonNotRunning, RemoteError, OSError) as exc:
                if isinstance(exc, RemoteError) and exc.code not in ("closed",):
                    log.error(
                        "registration refused: %s", exc.message, extra={"event": "register_refused"}
                    )
                    raise
                await client.close()
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            backoff = 0.05
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

    def _on_event(self, message: dict[str, Any]) -> None:
        kind = message["event"]
        assert self._group is not None
        if kind == "assign":
            task = message["task"]
            session = Session(task["id"], message["epoch"])
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

    async def _run_session(self, session: Session, task: dict[str, Any]) -> None:
        sessions_dir = self.root / STATE_DIR / "sessions"
        sessions_dir.mkdir(mode=0o700, exist_ok=True)
        task_file = sessions_dir / f"{session.task}.task"
        body = Body(
            task=session.task, text=task["text"], parent=task.get("parent"),
            sender=task.get("sender"), workspace=task.get("workspace"), epoch=session.epoch,
        )  # fmt: skip
        task_file.write_text(build_body(body), encoding="utf-8")
        env = {
            **os.environ,
            **self.spec.env,
            "COLIBRI_TASK_ID": session.task,
            "COLIBRI_EPOCH": str(session.epoch),
            "COLIBRI_TASK_FILE": str(task_file),
            "COLIBRI_SOCKET": str(self.socket_path),
            "COLIBRI_ROOT": str(self.root),
            "COLIBRI_AGENT": self.spec.name,
        }
        if task.get("workspace"):
            env["COLIBRI_WORKSPACE"] = task["workspace"]
        if task.get("parent"):
            env["COLIBRI_PARENT"] = task["parent"]
        try:
            if self.spec.backend == "tmux":
                await self._run_tmux(session, task, env)
            else:
                await self._run_process(session, task, env)
        finally:
            task_file.unlink(missing_ok=True)
            if session.warm_file is not None:
                session.warm_file.unlink(missing_ok=True)
            pgid = session.process.pid if session.process else session.pane_pid
            if pgid is not None:  # reclaim means kill: nothing the session started outlives it
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
            self._untrack(pgid)

    async def _run_tmux(self, session: Session, task: dict[str, Any], env: dict[str, str]) -> None:
        sock = tmux.socket_for(self.root, self.spec.name)
        warm = self._take_warm() if self.spec.warm else None
        if warm is not None and warm.pane_pid is not None:
            # A ready session takes the task at once; it is renamed after the task, so
            # `colibri attach-session TASK` finds it.
            warm.task_file.write_text(
                Path(env["COLIBRI_TASK_FILE"]).read_text(encoding="utf-8"), encoding="utf-8"
            )
            session.warm_file = warm.task_file
            with contextlib.suppress(RuntimeError):
                await tmux.tmux(sock, "rename-session", "-t", warm.tmux_name, session.task)
            session.pane_pid = pid = warm.pane_pid
            session.ready.set()
            self._pool_changed.set()
        else:
            own = {k: v for k, v in env.items() if k.startswith("COLIBRI_") or k in self.spec.env}
            try:
                pid = await tmux.start(sock, session.task, self.spec.command, own, self.spec.cwd)
                self._track(pid)
            except (RuntimeError, OSError) as exc:
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
        """Note a session's process group, so a harness that replaces a killed one can stop it."""
        marker = self._marker(pgid)
        marker.parent.mkdir(mode=0o700, exist_ok=True)
        marker.touch()

    def _untrack(self, pgid: int | None) -> None:
        if pgid is not None:
            self._marker(pgid).unlink(missing_ok=True)

    def _reap_leftovers(self) -> None:
        """Kill the sessions of a predecessor that was killed (no orphans: their tasks are
        already lost, or will be, with their agent)."""
        folder = self.root / STATE_DIR / "sessions"
        for marker in folder.glob(f"{self.spec.name}.*.pgid"):
            pgid = marker.name.removeprefix(f"{self.spec.name}.").removesuffix(".pgid")
            if pgid.isdigit():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(int(pgid), signal.SIGKILL)
                    log.warning(
                        "killed a session left by a previous harness",
                        extra={"event": "leftover_killed", "pgid": int(pgid)},
                    )
            marker.unlink(missing_ok=True)

    # -- the ready pool ---------------------------------------------------------------------

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
        process = await asyncio.create_subprocess_exec(
            *self.spec.command,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            cwd=self.spec.cwd,
            env=env,
            process_group=0,
        )
        self._track(process.pid)
        return process

    async def _keep_pool(self) -> None:
        """Keep ``warm`` sessions ready; reclaim one idle past ``idle`` (and stop refilling
        until work comes again)."""
        sessions_dir = self.root / STATE_DIR / "sessions"
        sessions_dir.mkdir(mode=0o700, exist_ok=True)
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
                env = {**self._session_env(), "COLIBRI_TASK_FILE": str(task_file)}
                warm = WarmSession(task_file, time.monotonic(), tmux_name=name)
                try:
                    if self.spec.backend == "tmux":
                        own = {k: v for k, v in env.items()
                               if k.startswith("COLIBRI_") or k in self.spec.env}  # fmt: skip
                        sock = tmux.socket_for(self.root, self.spec.name)
                        warm.pane_pid = await tmux.start(
                            sock, name, self.spec.command, own, self.spec.cwd
                        )
                        self._track(warm.pane_pid)
                    else:
                        warm.process = await self._start_process(env)
                        warm.ready = True
                except (OSError, RuntimeError) as exc:
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
                warm.task_file.write_text(
                    Path(env["COLIBRI_TASK_FILE"]).read_text(encoding="utf-8"), encoding="utf-8"
                )
                assert warm.process is not None
                process = warm.process
                session.warm_file = warm.task_file
            else:
                process = await self._start_process(env)
        except OSError as exc:
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
            stdout, stderr = await self._within_runtime(session, self._talk(process, text))
        except TimeoutError:
            await self._kill(session)
            limit = self.spec.max_runtime
            session.report = ("fail", {"error": f"max_runtime: stopped after {limit:g}s"})
            await self._deliver(session)
            return
        if session.cancelled:
            return
        if process.returncode == 0:
            output = stdout.decode(errors="replace")
            limit = self.spec.output_limit
            if len(stdout) > limit:
                output = (
                    stdout[:limit].decode(errors="replace")
                    + f"\n[output truncated: {len(stdout)} bytes in all]"
                )
            output, cost = claude_result(output)
            session.report = ("out", {"output": output, "cost": cost})
        else:
            tail = stderr[-STDERR_TAIL:].decode(errors="replace").strip()
            session.report = (
                "fail",
                {"error": ended_how(process.returncode) + (f": {tail}" if tail else "")},
            )
        await self._deliver(session)

    async def _talk(
        self, process: asyncio.subprocess.Process, text: bytes | None
    ) -> tuple[bytes, bytes]:
        """Give the session its input, collect its output until it exits.

        Unlike ``communicate``, this does not wait for its pipes to close: a process the session
        left running may hold them. Once the session has exited, what it left in its process
        group is killed (reclaim means kill), which closes them.
        """
        assert process.stdout is not None and process.stderr is not None
        out = asyncio.ensure_future(process.stdout.read())
        err = asyncio.ensure_future(process.stderr.read())
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
            _, pending = await asyncio.wait({out, err}, timeout=0.5)
            if pending:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
            result = await out, await err
            await waiting
            return result
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

    async def _deliver(self, session: Session) -> None:
        if session.report is None or self.client is None:
            return  # delivered after the next registration
        cmd, fields = session.report
        try:
            await self.client.call(cmd, task=session.task, epoch=session.epoch, **fields)
        except RemoteError as exc:
            if exc.code == "closed":
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
        stopped = ("fail", {"error": f"agent {self.spec.name} stopped"})
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
                            **fields,
                        )  # fmt: skip
        except (DaemonNotRunning, OSError, TimeoutError):
            pass  # no daemon (or a frozen one): these fail as lost later, unless claimed
        finally:
            self.sessions.clear()
            await client.close()


def ended_how(code: int | None) -> str:
    """How a session ended, for its task's error: ``exit 3``, or ``killed by SIGKILL`` when a
    signal ended it (asyncio gives those as negative codes, which read like exit codes)."""
    if code is None or code >= 0:
        return f"exit {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"killed by {name}"


def claude_result(stdout: str) -> tuple[str, dict[str, Any] | None]:
    """Output and cost of a one-shot agent that ends with a JSON result object.

    Claude Code's ``-p --output-format json`` prints one object with ``result``,
    ``total_cost_usd`` and ``usage.input_tokens``/``output_tokens``: its ``result`` becomes the
    output and the rest the session's cost. Anything else is returned as it is, without cost.
    """
    text = stdout.strip()
    if not text.endswith("}"):
        return stdout, None
    start = text.rfind("\n{") + 1  # the last line that opens an object, or the whole output
    try:
        doc = json.loads(text[start:])
    except ValueError:
        try:
            doc = json.loads(text)
        except ValueError:
            return stdout, None
    if not isinstance(doc, dict) or ("total_cost_usd" not in doc and "usage" not in doc):
        return stdout, None
    usage: dict[str, Any] = doc["usage"] if isinstance(doc.get("usage"), dict) else {}
    cost: dict[str, Any] = {}
    for key, value in (
        ("usd", doc.get("total_cost_usd")),
        ("tokens_in", usage.get("input_tokens")),
        ("tokens_out", usage.get("output_tokens")),
        ("model", doc.get("model")),
    ):
        if value is not None:
            cost[key] = value
    output = doc["result"] if isinstance(doc.get("result"), str) else stdout
    return output, cost or None


def run_agent(spec: AgentSpec, socket_path: Path, root: Path) -> int:
    try:
        asyncio.run(Harness(spec, socket_path, root).run())
    except BaseExceptionGroup as group:
        refused = group.subgroup(RemoteError)
        if refused is None:
            raise
        raise refused.exceptions[0] from None
    return 0
