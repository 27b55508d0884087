"""Keep one harness running per workspace of colibri.jsonc.

Each harness (``colibri agent --workspace NAME``) holds an exclusive lock on
``.colibri/harness/NAME.lock`` for its whole life and writes its pid there. The supervisor asks
the lock, not its own memory, whether a harness is alive — so a daemon that crashed and started
again finds the harnesses that outlived it and adopts them instead of starting duplicates, while
their sessions (an AI agent may be an hour into its task) run on.

A harness that exits is started again after a backoff (1 s, 2 s, 4 s … up to ``max_backoff``);
the restarts are counted. One that exits ``crash_loop`` times within ``crash_window`` is marked
degraded and left alone until ``cool_down`` has passed (``supervisor`` in colibri.jsonc).

Why a harness exited is read from its log, ``.colibri/harness/NAME.log``, which is its stdout
and stderr: the last line it wrote there since it started (a refusal's one line, a traceback's
last) — a channel that holds whatever the harness could say, even when it could not reach the
daemon, import colibri, or parse its workspace. Only the log's end is read, the line is cut
short and made printable, and the signal that killed a harness that could say nothing is named
instead. ``status``, ``why`` and a submission's ``waits`` say it; subscribers hear of each exit
(``HarnessExited``). A
clean daemon stop (SIGTERM) stops every harness; a daemon crash stops none. A harness whose
daemon is gone for good — no daemon has held the root for ``orphan_after`` — stops its sessions
and exits by itself (``--orphan-after``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from colibri.config import HOST_ENV, Config
from colibri.core import backoff
from colibri.core.errors import RootError
from colibri.core.events import HarnessExited
from colibri.core.model import HarnessStatus, rfc3339
from colibri.core.text import one_line
from colibri.daemon.clock import Clock
from colibri.host import alive
from colibri.leftovers import stop_leftover_sessions
from colibri.locks import holder_pid
from colibri.privatefiles import open_private, private_dir
from colibri.workspaces import session_environment

log = logging.getLogger(__name__)

CHECK_EVERY = 0.5
STOP_GRACE = 10.0
#: The pause before a harness that exited is started again, doubled at each exit since.
RESTART_FIRST = 1.0
#: The end of a harness's log read for why it exited (bytes), and the longest reason kept.
FAILURE_TAIL = 4096
FAILURE_LENGTH = 300

#: Where a harness's output begins in its log: the file (device, inode) and the offset.
LogMark = tuple[int, int, int]


@dataclass
class Harness:
    workspace: str
    pid: int | None = None
    process: subprocess.Popen[bytes] | None = None
    #: Its start, under way off the loop: what it starts is ours to stop, even if the daemon
    #: stops while it is under way.
    starting: asyncio.Future[subprocess.Popen[bytes]] | None = None
    restarts: int = 0
    exits: deque[float] = field(default_factory=deque)
    next_start: float = 0.0
    degraded_until: float = 0.0
    #: It holds its workspace's lock: it runs (it may still fail to register).
    locked: bool = False
    #: Where what this harness wrote begins in its log; None: it writes to no log of ours.
    log_mark: LogMark | None = None
    last_failure: str | None = None
    last_failure_at: str | None = None

    def status(self, now: float) -> HarnessStatus:
        degraded = now < self.degraded_until
        if degraded:
            state = "degraded"
        elif self.locked:
            state = "running"
        else:
            state = "restarting" if self.exits or self.last_failure else "starting"
        return HarnessStatus(
            workspace=self.workspace,
            pid=self.pid,
            restarts=self.restarts,
            degraded=degraded,
            state=state,
            last_failure=self.last_failure,
            last_failure_at=self.last_failure_at,
        )


def log_mark(path: Path) -> LogMark:
    """Where the next line written to the log at ``path`` will be (a missing log: its start)."""
    try:
        info = os.stat(path, follow_symlinks=False)
    except OSError:
        return (0, 0, 0)
    return (info.st_dev, info.st_ino, info.st_size)


def last_words(path: Path, mark: LogMark) -> str | None:
    """The last line written to the log at ``path`` since ``mark``, as one printable line of
    at most ``FAILURE_LENGTH`` characters; None if nothing was. A log renamed meanwhile (the
    harness rotates it) is a new file: read from its start. Only its last ``FAILURE_TAIL``
    bytes are read, and never through a link."""
    try:
        fd = open_private(path, os.O_RDONLY)
    except (OSError, RootError):
        return None
    with os.fdopen(fd, "rb") as log:
        info = os.fstat(log.fileno())
        start = mark[2] if (info.st_dev, info.st_ino) == mark[:2] else 0
        begin = max(start, info.st_size - FAILURE_TAIL)
        log.seek(begin)
        data = log.read(FAILURE_TAIL)
    lines = data.decode("utf-8", errors="replace").splitlines()
    if begin > start and lines:
        lines = lines[1:]  # begun inside a line: not all of it
    said = next((line for line in reversed(lines) if line.strip()), None)
    if said is None:
        return None
    return one_line(said.strip().removeprefix("colibri: "), FAILURE_LENGTH)


def exit_reason(code: int | None, said: str | None) -> str:
    """Why a harness exited: the signal that killed it (it could say nothing), else the last
    line it wrote, else its exit code."""
    if code is not None and code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    if said is not None:
        return said
    if code is None:
        return "the adopted harness is gone, and wrote nothing to its log"
    return f"exit code {code}, and nothing written to its log"


class Supervisor:
    def __init__(
        self,
        config: Config,
        clock: Clock,
        announce: Callable[[HarnessExited], None] | None = None,
    ) -> None:
        self.config = config
        self.clock = clock
        #: Tells subscribers a harness exited (the daemon broadcasts it).
        self.announce = announce or (lambda event: None)
        self.settings = config.supervisor
        self.harnesses = {
            name: Harness(name, exits=deque(maxlen=self.settings.crash_loop))
            for name in config.workspaces
        }
        private_dir(config.layout.harnesses)

    def status(self) -> list[HarnessStatus]:
        now = self.clock.monotonic()
        return [h.status(now) for h in self.harnesses.values()]

    async def run(self) -> None:
        while True:
            for harness in self.harnesses.values():
                await self._tend(harness, self.clock.monotonic())
            await asyncio.sleep(CHECK_EVERY)

    async def _tend(self, harness: Harness, now: float) -> None:
        if harness.process is not None and harness.process.poll() is not None:
            code = harness.process.returncode
            harness.process = None
            self._exited(harness, now, code)
        pid = holder_pid(self.config.layout.harness_lock(harness.workspace))
        if pid is not None:
            harness.locked = True
            if pid < 0:
                # Held, its pid not written yet: a harness we started is the process we know;
                # one we adopt is named on the next look, never as -1.
                if harness.process is not None:
                    harness.pid = harness.process.pid
                return
            if harness.pid != pid:
                if harness.process is None:
                    log.info(
                        "adopted a running harness",
                        extra={"event": "harness_adopted", "workspace": harness.workspace,
                               "pid": pid},
                    )  # fmt: skip
                    harness.log_mark = log_mark(self._log(harness))
                harness.pid = pid
            return
        harness.locked = False
        if harness.pid is not None and harness.process is None:
            self._exited(harness, now, None)
        if harness.process is not None:
            return  # started, not holding its lock yet
        if now < harness.degraded_until or now < harness.next_start:
            return
        await self._start(harness)

    def _log(self, harness: Harness) -> Path:
        return self.config.layout.harness_log(harness.workspace)

    def _exited(self, harness: Harness, now: float, code: int | None) -> None:
        """``harness`` exited (``code``: its exit status, negative for a signal; None for an
        adopted one, whose status is its parent's to know)."""
        mark = harness.log_mark
        said = None if mark is None else last_words(self._log(harness), mark)
        why = exit_reason(code, said)
        harness.last_failure = why
        harness.last_failure_at = rfc3339(self.clock.time())
        harness.pid = None
        harness.locked = False
        harness.exits.append(now)
        limits = self.settings
        delay = backoff.delay(len(harness.exits), RESTART_FIRST, limits.max_backoff)
        harness.next_start = now + delay
        if len(harness.exits) == limits.crash_loop and now - harness.exits[0] < limits.crash_window:
            harness.degraded_until = now + limits.cool_down
            harness.exits.clear()
            log.error(
                "harness crash-loops; marked degraded",
                extra={"event": "harness_degraded", "workspace": harness.workspace, "why": why,
                       "cool_down": limits.cool_down},
            )  # fmt: skip
        else:
            log.warning(
                "harness exited; restarting after backoff",
                extra={"event": "harness_exited", "workspace": harness.workspace, "why": why,
                       "backoff": delay},
            )  # fmt: skip
        status = harness.status(now)
        self.announce(
            HarnessExited(
                workspace=harness.workspace, restarts=status.restarts, degraded=status.degraded,
                reason=why,
            )
        )  # fmt: skip

    async def _start(self, harness: Harness) -> None:
        if harness.next_start:
            harness.restarts += 1
        private_dir(self.config.layout.harnesses)
        logfile = self._log(harness)
        logged = True
        try:  # the harness's own log: 0600, never through a link planted in its place
            fd = open_private(logfile, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        except (OSError, RootError) as exc:
            logged = False
            log.error(
                "cannot open the harness log; the harness logs nowhere",
                extra={"event": "harness_log_failed", "workspace": harness.workspace,
                       "error": str(exc)},
            )  # fmt: skip
            fd = os.open(os.devnull, os.O_WRONLY)
        info = os.fstat(fd)
        harness.log_mark = (info.st_dev, info.st_ino, info.st_size) if logged else None
        harness.locked = False
        command = [
            sys.executable, "-m", "colibri", "--root", str(self.config.root), "agent",
            "--workspace", harness.workspace,
            "--orphan-after", f"{self.settings.orphan_after:g}",
        ]  # fmt: skip
        limit = int(self.settings.harness_log_mib * 2**20)
        if limit and logged:  # the harness renames its log past the limit, and opens a new one
            command += ["--log-file", str(logfile), "--log-rotate-bytes", str(limit)]
        out = os.fdopen(fd, "ab")
        env = self._environment(harness.workspace)

        def start() -> subprocess.Popen[bytes]:
            with out:
                return subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL, stdout=out, stderr=out,
                    start_new_session=True,  # its own group: it outlives a crash of the daemon
                    env=env,
                )  # fmt: skip

        # A fork and exec take milliseconds: off the loop, which serves meanwhile. Shielded: a
        # daemon that stops now cancels this wait, not the start; ``stop_all`` stops what it
        # started (else a harness would run on, unseen, until it found itself orphaned).
        harness.starting = asyncio.ensure_future(asyncio.to_thread(start))
        harness.process = await asyncio.shield(harness.starting)
        harness.starting = None
        harness.pid = harness.process.pid
        log.info(
            "harness started",
            extra={"event": "harness_started", "workspace": harness.workspace,
                   "pid": harness.pid},
        )  # fmt: skip

    def _environment(self, workspace: str) -> dict[str, str]:
        """A harness's environment: what ``session_environment`` lets through, and the
        daemon's ``COLIBRI_HOST``, so that both ask the system the same way."""
        env = session_environment(self.config.environ, self.config.workspaces[workspace].pass_env)
        if self.config.host != "auto":
            env[HOST_ENV] = self.config.host
        return env

    async def stop_all(self) -> None:
        """A clean stop: SIGTERM every harness (it stops its sessions), SIGKILL stragglers."""
        pids: dict[int, str] = {}  # harness pid → its workspace (its agent's name)
        for harness in self.harnesses.values():
            if harness.starting is not None:  # a start the stop interrupted: finished first
                with contextlib.suppress(Exception):  # (one that failed started nothing)
                    harness.process = await harness.starting
                harness.starting = None
            started = harness.process.pid if harness.process is not None else harness.pid
            pid = holder_pid(self.config.layout.harness_lock(harness.workspace))
            pid = pid if pid and pid > 0 else started
            if pid:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(pid, signal.SIGTERM)
                pids[pid] = harness.workspace
        deadline = self.clock.monotonic() + STOP_GRACE
        while pids and self.clock.monotonic() < deadline:
            for harness in self.harnesses.values():
                if harness.process is not None:
                    harness.process.poll()
            pids = {pid: workspace for pid, workspace in pids.items() if alive(pid)}
            await asyncio.sleep(0.05)
        for pid, workspace in pids.items():
            log.warning(
                f"a harness did not stop within {STOP_GRACE:g}s; killed",
                extra={"event": "harness_killed", "pid": pid, "workspace": workspace},
            )
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        for harness in self.harnesses.values():  # reap them, waiting without blocking
            for _ in range(20):
                if harness.process is None or harness.process.poll() is not None:
                    break
                await asyncio.sleep(0.05)
        for pid, workspace in pids.items():  # killed: what its sessions run, nobody else stops
            for _ in range(20):  # once it is gone (a harness adopted is reaped by init)
                if not alive(pid):
                    break
                await asyncio.sleep(0.05)
            await asyncio.to_thread(stop_leftover_sessions, self.config.root, workspace)
