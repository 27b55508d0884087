"""Where a task's session works, and what it is told beyond its task.

Before the session starts (``prepare``): what the tasks it waited for came to
(``dependencies.py``), and — in a workspace of worktrees — its own worktree, the copied files,
the setup command (``worktrees.py``). After it (``settle``, whichever way it ended): its
worktree closed, and what it left there (a ``Change``) put on its report.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from colibri.agent import worktrees
from colibri.agent.backends.base import new_sid
from colibri.agent.capture import Capture, ended_how
from colibri.agent.dependencies import DependencyUnread, as_json, fetch, header_lines
from colibri.agent.git import GitFailed
from colibri.agent.reaping import spawn
from colibri.agent.session import Report, Session
from colibri.agent.spec import AgentSpec
from colibri.client import AsyncClient
from colibri.core.agent_protocol import Fail, Out, Reclaimed
from colibri.core.model import Change, Task
from colibri.layout import RootLayout
from colibri.leftovers import mark_group, sessions_dir, unmark_group
from colibri.privatefiles import write_private

log = logging.getLogger(__name__)

#: What a setup command says that is kept, for the task's error (its last line).
SETUP_TAIL = 4096


class SetupFailed(Exception):
    """The workspace's setup command failed in the worktree; the message says how."""


#: What makes a task fail before its session starts, each saying why in one line.
NOT_PREPARED = (worktrees.WorktreeRefused, GitFailed, DependencyUnread, SetupFailed)


@dataclass
class Setting:
    """What a task's session is started with beyond the agent's own."""

    #: Its working directory (None: the agent's).
    cwd: Path | None = None
    env: dict[str, str] = field(default_factory=dict)
    #: The body's ``after`` lines.
    after: tuple[str, ...] = ()


class Workplaces:
    def __init__(
        self,
        spec: AgentSpec,
        root: Path,
        connection: Callable[[], AsyncClient | None],
        environment: Callable[[], dict[str, str]],
    ) -> None:
        self.spec = spec
        self.root = root
        #: The harness's connection to the daemon, as it is now (None while it has none).
        self.connection = connection
        #: The agent's environment for its sessions (a setup command runs in it too).
        self.environment = environment

    async def prepare(self, session: Session, task: Task) -> Setting:
        """Everything ``task``'s session needs before it starts; raises one of NOT_PREPARED."""
        setting = Setting()
        dependencies: list[Task] = []
        if task.after:
            dependencies = await fetch(self.connection, task.after)
            sessions_dir(self.root)
            path = RootLayout(self.root).dependencies_file(session.task)
            write_private(path, as_json(dependencies))
            setting.env["COLIBRI_DEPENDENCIES"] = str(path)
            setting.after = header_lines(dependencies)
        config, folder = self.spec.worktree, self.spec.cwd
        if config is None or folder is None or self.spec.workspace is None:
            return setting
        ref, why = worktrees.choose_base(task, dependencies, config.base)
        worktree = await worktrees.plan(
            self.root, self.spec.workspace, folder, task, session.epoch, ref, why,
            config.refuse_dirty,
        )  # fmt: skip
        session.worktree = worktree
        try:
            await worktrees.add(self.root, worktree)
        finally:
            if not worktree.path.is_dir():
                session.worktree = None  # never made: nothing to close
        setting.cwd = worktree.cwd
        setting.env.update(
            COLIBRI_WORKTREE=str(worktree.path), COLIBRI_BRANCH=worktree.branch,
            COLIBRI_BASE=worktree.base,
        )  # fmt: skip
        await worktrees.copy_in(folder, worktree, config.copy)
        if config.setup:
            await run_setup(
                config.setup, worktree.cwd, {**self.environment(), **setting.env},
                marked=(self.root, self.spec.name),
            )  # fmt: skip
        return setting

    async def settle(
        self, session: Session, task: Task, report: Report | None, stopped: bool
    ) -> Report | None:
        """The session is over: close its worktree, if it had one, and put what it left there
        on ``report``. A failed task's worktree is kept with ``keep_failed`` (a session
        stopped with its harness, ``stopped``, failed)."""
        worktree, config = session.worktree, self.spec.worktree
        if worktree is None or config is None:
            return report
        session.worktree = None
        failed = isinstance(report, Fail) or (report is None and stopped)
        message = worktrees.commit_message(task)
        try:
            change = await worktrees.close(
                worktree, message, keep=failed and config.keep_failed, task_id=session.task
            )
        except (GitFailed, OSError) as exc:
            log.error(
                "could not close a worktree: %s", exc,
                extra={"event": "worktree_failed", "task": session.task},
            )  # fmt: skip
            if isinstance(report, Out):
                why = f"what the session left in {worktree.path} was not kept: {exc}"
                return Fail(task=session.task, epoch=session.epoch, error=why)
            return report
        session.change = change
        return with_change(report, change)

    def release(self, session: Session) -> None:
        RootLayout(self.root).dependencies_file(session.task).unlink(missing_ok=True)

    async def sweep(self) -> None:
        """At the start of the workspace's one harness: the worktrees a killed one left."""
        if self.spec.worktree is not None and self.spec.workspace and self.spec.cwd:
            await worktrees.sweep(self.root, self.spec.workspace, self.spec.cwd)


def with_change(report: Report | None, change: Change | None) -> Report | None:
    if change is None or not isinstance(report, (Out, Fail, Reclaimed)):
        return report
    return msgspec.structs.replace(report, change=change)


async def run_setup(
    command: list[str], cwd: Path, env: dict[str, str], marked: tuple[Path, str] | None = None
) -> None:
    """Run the workspace's setup command in the worktree, in a process group of its own that
    is killed once it has exited (or is cancelled); raise SetupFailed when it fails.
    ``marked``: the root and agent whose leftover sessions its group counts among while it
    runs, so the harness that replaces a killed one stops it too."""
    env = {**env, "COLIBRI_SESSION": new_sid()}  # what it leaves running is not the harness's
    try:
        process = await spawn(
            *command, cwd=cwd, env=env, stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, process_group=0,
        )  # fmt: skip
    except OSError as exc:
        raise SetupFailed(f"worktree setup: could not start {command[0]}: {exc}") from None
    if marked is not None:
        mark_group(*marked, process.pid)
    said = Capture(0, SETUP_TAIL)
    assert process.stdout is not None
    reading = asyncio.ensure_future(said.read(process.stdout))
    waiting = asyncio.ensure_future(process.wait())
    try:
        # Its exit, not its pipes' end: what it left running may hold them.
        while process.returncode is None:
            await asyncio.wait({waiting}, timeout=0.05)
    finally:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        if marked is not None:
            unmark_group(*marked, process.pid)
        await asyncio.wait({reading, waiting}, timeout=1.0)
        reading.cancel()
        waiting.cancel()
    if process.returncode != 0:
        lines = [line.strip() for line in said.text().splitlines() if line.strip()]
        last = f": {lines[-1]}" if lines else ""
        raise SetupFailed(f"worktree setup failed ({ended_how(process.returncode)}){last}")
