"""One session as the harness holds it: its task, its claim, its clock, its report.

A ``Session`` lives from the ``assign`` until its report is delivered (or its task taken
back); its processes are a ``Running`` of the backend (``backends/base.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from colibri.agent.backends.base import Running
from colibri.agent.shim import first_on_path
from colibri.agent.spec import AgentSpec
from colibri.agent.worktrees import Worktree
from colibri.core.agent_protocol import Fail, Out, Reclaimed, Requeue
from colibri.core.model import Change, Task

T = TypeVar("T")

#: The variables the harness sets in a session's environment.
SESSION_VARIABLES = (
    "COLIBRI_TASK_ID", "COLIBRI_EPOCH", "COLIBRI_CLAIM", "COLIBRI_TASK_FILE", "COLIBRI_SOCKET",
    "COLIBRI_ROOT", "COLIBRI_AGENT", "COLIBRI_WORKSPACE", "COLIBRI_PARENT", "COLIBRI_SESSION",
    "COLIBRI_HARNESS", "COLIBRI_DEPENDENCIES", "COLIBRI_WORKTREE", "COLIBRI_BRANCH",
    "COLIBRI_BASE",
)  # fmt: skip

#: The harness's own way to the daemon (its token above all): never a session's. A session
#: reaches the daemon through ``COLIBRI_ROOT``'s socket — on another machine, its harness's
#: relay — and proves its reports with its claim.
HARNESS_ONLY = frozenset(
    {"COLIBRI_CONNECT", "COLIBRI_TOKEN", "COLIBRI_TLS_CA", "COLIBRI_INSECURE_LOOPBACK"}
)


#: A session's report, the request as the harness sends it on its connection (a stopping
#: harness sends an out or fail as the session's own: ``from_session``, with the claim).
Report = Out | Fail | Reclaimed | Requeue


@dataclass(frozen=True)
class Pending:
    """A report still to deliver, and what the harness knows of it beside the request."""

    request: Report
    #: Why the daemon refused the report this one (a fail saying so) stands in for: one
    #: refused too is given up, not replaced again.
    refused: str | None = None


@dataclass
class Session:
    task: str
    epoch: int
    #: The claim's secret, from the assign: the session's own reports carry it.
    claim: str | None = None
    #: Its processes, once started (or taken from the ready pool).
    running: Running | None = None
    runner: asyncio.Task[None] | None = None
    #: The report still to deliver, once the session has ended.
    report: Pending | None = None
    #: Whether a delivery of the report is under way (``Harness._deliver``).
    delivering: bool = False
    cancelled: bool = False
    #: Set by a ``ready`` event: the session ran ``colibri ready``.
    ready: asyncio.Event = field(default_factory=asyncio.Event)
    #: Time spent waiting for an answer does not count against max_runtime.
    paused_since: float | None = None
    paused_total: float = 0.0
    #: Made ready for its session: its dependencies read, its worktree made (``workplace.py``).
    preparing: asyncio.Future[Any] | None = None
    #: Its own git worktree, until it is closed; then what the session left there.
    worktree: Worktree | None = None
    change: Change | None = None
    #: Set once the session is over and its worktree closed: its last report may be made.
    settled: asyncio.Event = field(default_factory=asyncio.Event)

    def resume_clock(self) -> None:
        """The session no longer waits for an answer: max_runtime counts again."""
        if self.paused_since is not None:
            self.paused_total += time.monotonic() - self.paused_since
            self.paused_since = None

    def paused(self) -> float:
        """Seconds spent waiting for answers so far."""
        since = self.paused_since
        return self.paused_total + (time.monotonic() - since if since is not None else 0.0)


def environment(
    spec: AgentSpec, socket_path: Path, root: Path, workspace: str | None, shim: Path | None
) -> dict[str, str]:
    """What every session of this agent is given, warm or not (``COLIBRI_SESSION`` is added
    by its backend): ``shim``, the folder of the harness's own ``colibri``, first on PATH."""
    inherited = {k: v for k, v in os.environ.items() if k not in HARNESS_ONLY}
    env = {
        **inherited,
        **spec.env,
        "COLIBRI_SOCKET": str(socket_path),
        "COLIBRI_ROOT": str(root),
        "COLIBRI_AGENT": spec.name,
    }
    if shim is not None:
        env["PATH"] = first_on_path(shim, env.get("PATH"))
    if workspace:
        env["COLIBRI_WORKSPACE"] = workspace
    return env


def task_environment(
    spec: AgentSpec, socket_path: Path, root: Path, shim: Path | None, session: Session,
    task: Task, task_file: Path,
) -> dict[str, str]:  # fmt: skip
    """A session's environment for ``task``: the agent's, plus the task's own variables."""
    env = environment(spec, socket_path, root, task.workspace, shim)
    env["COLIBRI_TASK_ID"] = session.task
    env["COLIBRI_EPOCH"] = str(session.epoch)
    env["COLIBRI_CLAIM"] = session.claim or ""
    env["COLIBRI_TASK_FILE"] = str(task_file)
    if task.parent:
        env["COLIBRI_PARENT"] = task.parent
    return env


async def within_runtime(session: Session, limit: float | None, work: Awaitable[T]) -> T:
    """Await ``work`` within ``limit`` seconds (max_runtime), not counting time spent waiting
    for an answer (``colibri ask``); raise TimeoutError past it."""
    job = asyncio.ensure_future(work)
    if limit is None:
        return await job
    started = time.monotonic()
    while True:
        left = limit - (time.monotonic() - started - session.paused())
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
