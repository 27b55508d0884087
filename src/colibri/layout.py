"""Where everything of a root lives: ``colibri.jsonc`` and the ``.colibri/`` state folder.

    ROOT/colibri.jsonc                    the configuration
    ROOT/.colibri/colibri.sock            the daemon's socket
    ROOT/.colibri/daemon.lock             held by the daemon for its life (its pid inside)
    ROOT/.colibri/daemon.log              the daemon's output, when it runs detached
    ROOT/.colibri/colibri.sqlite          the board, unless store.path or --store say otherwise
    ROOT/.colibri/ledger.jsonl[.N]        the ledger's mirror, and its rotated files
    ROOT/.colibri/harness/NAME.lock       held by workspace NAME's harness (its pid inside)
    ROOT/.colibri/harness/NAME.log[.1]    output of a harness the daemon started, and the older one
    ROOT/.colibri/sessions/TASK.task      a running session's task (header and text)
    ROOT/.colibri/sessions/TASK.after.json  what the tasks it waited for came to
    ROOT/.colibri/sessions/AGENT.PGID.pgid  a session's process group, for a successor to stop
    ROOT/.colibri/tmux/AGENT.sock         the tmux server of an agent's tmux sessions
    ROOT/.colibri/bin/DIGEST/colibri      the colibri a harness puts first on its sessions' PATH
    ROOT/.colibri/worktrees/WS/LEAF       a session's git worktree (workspace WS, branch LEAF)
    ROOT/.colibri/.gitignore              ``*``: a root that is a repository ignores its state

Nothing else builds these paths.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

CONFIG_NAME = "colibri.jsonc"
STATE_DIR = ".colibri"


@dataclass(frozen=True, slots=True)
class RootLayout:
    root: Path

    @property
    def config(self) -> Path:
        return self.root / CONFIG_NAME

    @property
    def state(self) -> Path:
        return self.root / STATE_DIR

    @property
    def socket(self) -> Path:
        return self.state / "colibri.sock"

    @property
    def daemon_lock(self) -> Path:
        return self.state / "daemon.lock"

    @property
    def daemon_log(self) -> Path:
        return self.state / "daemon.log"

    @property
    def store(self) -> Path:
        return self.state / "colibri.sqlite"

    @property
    def ledger(self) -> Path:
        return self.state / "ledger.jsonl"

    @property
    def harnesses(self) -> Path:
        return self.state / "harness"

    def harness_lock(self, workspace: str) -> Path:
        return self.harnesses / f"{workspace}.lock"

    def harness_log(self, workspace: str) -> Path:
        return self.harnesses / f"{workspace}.log"

    @property
    def sessions(self) -> Path:
        return self.state / "sessions"

    def task_file(self, name: str) -> Path:
        """``name``: a task id, or a warm session's name before it has a task."""
        return self.sessions / f"{name}.task"

    def dependencies_file(self, task: str) -> Path:
        """What the tasks ``task`` waited for came to (``COLIBRI_DEPENDENCIES``)."""
        return self.sessions / f"{task}.after.json"

    def group_marker(self, agent: str, pgid: int) -> Path:
        return self.sessions / f"{agent}.{pgid}.pgid"

    def tmux_socket(self, agent: str) -> Path:
        return self.state / "tmux" / f"{agent}.sock"

    def shim(self, digest: str) -> Path:
        """The folder of one harness's ``colibri`` for its sessions (``agent/shim.py``)."""
        return self.state / "bin" / digest

    @property
    def gitignore(self) -> Path:
        return self.state / ".gitignore"

    @property
    def all_worktrees(self) -> Path:
        return self.state / "worktrees"

    def worktrees(self, workspace: str) -> Path:
        """The folder of workspace ``workspace``'s sessions' git worktrees."""
        return self.all_worktrees / workspace
