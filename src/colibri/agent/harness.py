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
import signal
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from colibri.client import AsyncClient, RemoteError
from colibri.core.errors import DaemonNotRunning

log = logging.getLogger(__name__)

OUTPUT_LIMIT = 1 << 20
STDERR_TAIL = 4096
KILL_GRACE = 5.0


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


@dataclass
class Session:
    task: str
    epoch: int
    process: asyncio.subprocess.Process | None = None
    runner: asyncio.Task[None] | None = None
    #: (cmd, fields) of the report still to deliver, once the session has ended.
    report: tuple[str, dict[str, Any]] | None = None
    cancelled: bool = False


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

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, self.stopping.set)
        async with asyncio.TaskGroup() as group:
            self._group = group
            connection = group.create_task(self._stay_connected(), name="connection")
            await self.stopping.wait()
            await self._stop_sessions()
            connection.cancel()

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
            session.runner = self._group.create_task(
                self._run_session(session, task), name=f"session-{session.task}"
            )
        elif kind == "cancel":
            held = self.sessions.get(message["task"])
            if held is not None:
                held.cancelled = True
                self._group.create_task(self._cancel(held), name=f"cancel-{held.task}")
        elif kind == "expired":
            self._reregister.set()

    async def _run_session(self, session: Session, task: dict[str, Any]) -> None:
        env = {
            **os.environ,
            "COLIBRI_TASK_ID": session.task,
            "COLIBRI_SOCKET": str(self.socket_path),
            "COLIBRI_ROOT": str(self.root),
            "COLIBRI_AGENT": self.spec.name,
        }
        if task.get("workspace"):
            env["COLIBRI_WORKSPACE"] = task["workspace"]
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
        except OSError as exc:
            session.report = ("fail", {"error": f"could not start {self.spec.command[0]}: {exc}"})
            await self._deliver(session)
            return
        session.process = process
        stdout, stderr = await process.communicate(task["text"].encode())
        if session.cancelled:
            return
        if process.returncode == 0:
            output = stdout.decode(errors="replace")
            if len(stdout) > OUTPUT_LIMIT:
                output = (
                    stdout[:OUTPUT_LIMIT].decode(errors="replace")
                    + f"\n[output truncated: {len(stdout)} bytes in all]"
                )
            session.report = ("out", {"output": output})
        else:
            tail = stderr[-STDERR_TAIL:].decode(errors="replace").strip()
            session.report = (
                "fail",
                {"error": f"exit {process.returncode}" + (f": {tail}" if tail else "")},
            )
        await self._deliver(session)

    async def _deliver(self, session: Session) -> None:
        if session.report is None or self.client is None:
            return  # delivered after the next registration
        cmd, fields = session.report
        try:
            await self.client.call(cmd, task=session.task, epoch=session.epoch, **fields)
        except RemoteError as exc:
            if exc.code == "closed":
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
        """On SIGINT/SIGTERM: stop every session and report it failed while still connected."""
        for session in list(self.sessions.values()):
            session.cancelled = True
            await self._kill(session)
            if session.report is None:
                session.report = ("fail", {"error": f"agent {self.spec.name} stopped"})
            await self._deliver(session)


def run_agent(spec: AgentSpec, socket_path: Path, root: Path) -> int:
    try:
        asyncio.run(Harness(spec, socket_path, root).run())
    except BaseExceptionGroup as group:
        refused = group.subgroup(RemoteError)
        if refused is None:
            raise
        raise refused.exceptions[0] from None
    return 0
