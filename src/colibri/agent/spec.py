"""What one agent is: its name, capabilities and slots, and how its sessions run.

``colibri agent --name …`` builds one from its options; a workspace's harness from the
workspace of ``colibri.jsonc`` (``AgentSpec.from_workspace``), the only place a ``Workspace``
becomes an ``AgentSpec``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from colibri.isolation import WorktreeSpec
    from colibri.workspaces import Workspace

#: stdout kept of a session (its head and tail), unless the workspace says otherwise.
OUTPUT_LIMIT = 1 << 20


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
    #: Sessions started ahead of any task (the ready pool), and how long one may wait.
    warm: int = 0
    idle: float = 60.0
    #: This harness is its workspace's one harness: it takes the workspace's harness lock,
    #: and at start kills the sessions a killed predecessor left behind.
    exclusive: bool = False
    #: Started by a daemon (``supervisor.orphan_after``): stop, sessions and all, once no daemon
    #: has held the root this many seconds. None: wait for a daemon for as long as it takes.
    orphan_after: float | None = None
    #: Each session works in a git worktree of its own, made so (None: in ``cwd``, shared).
    worktree: WorktreeSpec | None = None

    def command_in(self, cwd: Path | None) -> list[str]:
        """The command as run in ``cwd`` (a session's worktree): a relative program path is
        still taken from the agent's own folder, where ``check_command`` found it."""
        program = self.command[0]
        if cwd is None or self.cwd is None or "/" not in program or program.startswith("/"):
            return self.command
        return [str(self.cwd / program), *self.command[1:]]

    def check_command(self) -> None:
        """Refuse, at start, a command that cannot run: otherwise every task it is given
        would fail, one by one, with the same error."""
        import os
        import shutil

        from colibri.core.errors import ConfigError

        program = self.command[0] if self.command else ""
        where = self.cwd or Path.cwd()
        if "/" in program:
            path = where / program
            if path.is_file() and os.access(path, os.X_OK):
                return
            why = "is not an executable file" if path.exists() else "does not exist"
            place = "" if program.startswith("/") else f" (in {where})"
            raise ConfigError(f"agent {self.name}: its command {program} {why}{place}")
        search = self.env.get("PATH", os.environ.get("PATH", os.defpath))
        if not program or shutil.which(program, path=search) is None:
            raise ConfigError(
                f"agent {self.name}: its command {program!r} is not found on PATH; give its "
                "path, or install it"
            )

    @classmethod
    def from_workspace(
        cls,
        workspace: Workspace,
        *,
        name: str | None = None,
        capabilities: list[str] | None = None,
        slots: int | None = None,
        ttl: float | None = None,
        tenant: str | None = None,
    ) -> AgentSpec:
        """The agent of ``workspace`` as colibri.jsonc defines it; the options given (those
        of ``colibri agent --workspace``) replace its name, capabilities and slots."""
        return cls(
            name=name or workspace.name,
            command=workspace.command,
            capabilities=capabilities or workspace.capabilities,
            slots=slots or workspace.slots,
            ttl=ttl,
            workspace=workspace.name,
            tenant=tenant,
            cwd=Path(workspace.path),
            env=workspace.env,
            output_limit=workspace.output_limit,
            max_runtime=workspace.max_runtime,
            backend=workspace.backend,
            ready_timeout=workspace.ready_timeout,
            ready_pattern=workspace.ready_pattern,
            warm=workspace.warm,
            idle=workspace.idle,
            exclusive=True,
            worktree=workspace.worktree,
        )
