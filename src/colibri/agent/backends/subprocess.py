"""The subprocess backend: one run of a one-shot command (such as ``claude -p``) per task.

The command starts in its own process group with pipes for stdin, stdout and stderr; it is
ready at once (a warm one waits on stdin). The task's text alone goes to stdin, which is then
closed. Exit 0 is ``out`` with stdout (``claude_result`` lifts a trailing JSON result's output
and cost); any other exit is ``fail`` with how it ended and the tail of stderr.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from dataclasses import dataclass, field
from pathlib import Path

from colibri.agent.backends.base import Ending, Running, StartFailed, new_sid
from colibri.agent.capture import STDERR_TAIL, Capture, ended_how
from colibri.agent.claude import claude_result
from colibri.agent.reaping import Reaper, spawn
from colibri.agent.spec import AgentSpec
from colibri.host import alive


@dataclass(eq=False)
class Piped(Running):
    """A subprocess session: the process, and what its pipes have said so far."""

    process: asyncio.subprocess.Process | None = None
    stdout: Capture = field(default_factory=lambda: Capture(0, 0))
    stderr: Capture = field(default_factory=lambda: Capture(0, STDERR_TAIL))
    readers: list[asyncio.Future[None]] = field(default_factory=list)

    def alive(self) -> bool:
        return self.process is not None and self.process.returncode is None


def _piped(running: Running) -> tuple[Piped, asyncio.subprocess.Process]:
    assert isinstance(running, Piped) and running.process is not None
    return running, running.process


class SubprocessBackend:
    def __init__(self, spec: AgentSpec, reaper: Reaper) -> None:
        self.spec = spec
        self.reaper = reaper

    async def start(
        self, name: str, env: dict[str, str], task_file: Path, cwd: Path | None = None
    ) -> Running:
        sid = env["COLIBRI_SESSION"] = new_sid()
        try:
            process = await spawn(
                *self.spec.command_in(cwd),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                cwd=cwd or self.spec.cwd,
                env=env,
                process_group=0,
            )
        except (OSError, ValueError) as exc:
            raise StartFailed(f"could not start {self.spec.command[0]}: {exc}") from exc
        limit = self.spec.output_limit
        running = Piped(
            process.pid, name, task_file, sid=sid, process=process,
            stdout=Capture(limit - limit // 2, limit // 2),
        )  # fmt: skip
        self.reaper.track(running)
        return running

    async def warmed(self, running: Running) -> bool:
        return True

    async def adopt(self, running: Running, task: str) -> None:
        return None

    async def wait_ready(self, running: Running, told: asyncio.Event) -> bool:
        return True

    async def hand_over(self, running: Running, text: str) -> None:
        """Start reading its output (stdout within ``output_limit``, its head and tail;
        stderr's tail; each capped as it is read), then write the text to stdin, close it."""
        piped, process = _piped(running)
        assert process.stdin is not None and process.stdout is not None
        assert process.stderr is not None
        piped.readers = [
            asyncio.ensure_future(piped.stdout.read(process.stdout)),
            asyncio.ensure_future(piped.stderr.read(process.stderr)),
        ]
        with contextlib.suppress(ConnectionError):
            if text:
                process.stdin.write(text.encode())
                await process.stdin.drain()
            process.stdin.close()

    async def wait_end(self, running: Running) -> Ending | None:
        """Until it exits, then its report from its exit code and output.

        Unlike ``communicate``, this does not wait for its pipes to close: a process the session
        left running may hold them. Once the session has exited, what it left — in its process
        group, and (with a subreaper) outside it — is killed (reclaim means kill), which closes
        them; whatever still holds them after that is not waited for.
        """
        piped, process = _piped(running)
        try:
            # ``process.wait()`` also waits for the pipes, which a leftover child may hold open:
            # watch the process itself instead.
            waiting = asyncio.ensure_future(process.wait())
            while not waiting.done() and alive(process.pid):
                await asyncio.wait({waiting}, timeout=0.05)
            running.ended = True
            for _ in range(3):
                _, pending = await asyncio.wait(set(piped.readers), timeout=0.5)
                if not pending:
                    break
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(process.pid, signal.SIGKILL)
                self.reaper.reap_inherited()
            await waiting
        finally:
            for reader in piped.readers:
                reader.cancel()
        if process.returncode == 0:
            output, cost = claude_result(piped.stdout.text())
            return ("out", {"output": output, "cost": cost})
        tail = piped.stderr.text().strip()
        return ("fail", {"error": ended_how(process.returncode) + (f": {tail}" if tail else "")})

    async def kill(self, running: Running, *, grace: float) -> None:
        _, process = _piped(running)
        if process.returncode is not None:
            return
        if grace <= 0:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
        try:
            async with asyncio.timeout(grace):
                await process.wait()
        except TimeoutError:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            await process.wait()
