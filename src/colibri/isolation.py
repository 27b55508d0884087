"""A workspace's isolation: its sessions share its folder (``shared``), or each works in a git
worktree of its own, on a branch of its own (``worktree``; the harness's side is
``colibri/agent/worktrees.py``).

    "isolation": "worktree",
    "worktree": { "base": "main", "copy": [".env"], "setup": ["npm", "ci"],
                  "keep_failed": false, "refuse_dirty": false }
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Annotated, Literal

import msgspec

from colibri.core.errors import shown

Isolation = Literal["shared", "worktree"]


class WorktreeSpec(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    #: The branch or commit each worktree starts from; None: the repository's HEAD at assign.
    base: Annotated[str, msgspec.Meta(min_length=1, max_length=200)] | None = None
    #: Files of the workspace folder that git ignores (``.env``) copied into each worktree.
    copy: list[str] = []
    #: Run in the worktree before the session starts; failing it fails the task.
    setup: list[str] | None = None
    #: A failed task's worktree is kept for inspection (its path in the task's change).
    keep_failed: bool = False
    #: A task whose base is the repository's HEAD fails while its checkout has uncommitted
    #: changes (they would not be in the worktree).
    refuse_dirty: bool = False


def worktree_problem(isolation: str, worktree: WorktreeSpec, warm: int) -> str | None:
    """What is wrong with a workspace's worktree settings, as ``KEY: what``, if anything."""
    if isolation != "worktree":
        return None
    if warm:
        return (
            "warm: a warm session starts before its task, in no worktree; with isolation "
            '"worktree" set warm to 0 (or isolation to "shared")'
        )
    base = worktree.base
    if base is not None and (base.startswith("-") or "\0" in base or base != base.strip()):
        return f"worktree.base {shown(base)} is not a branch or commit name"
    for i, path in enumerate(worktree.copy):
        parts = PurePosixPath(path).parts
        if not path or "\0" in path or path.startswith("/") or ".." in parts:
            return (
                f"worktree.copy[{i}] {shown(path)} must be a path inside the workspace folder, "
                "relative to it (no .., not absolute)"
            )
    setup = worktree.setup
    if setup is not None:
        if not setup or not setup[0]:
            return (
                "worktree.setup: give a command (an argv list whose first element is the program)"
            )
        for i, arg in enumerate(setup):
            if "\0" in arg:
                return f"worktree.setup[{i}] {shown(arg)} holds a NUL character"
    return None
