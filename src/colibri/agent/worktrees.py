"""A git worktree per session, for a workspace with ``"isolation": "worktree"``.

At assign the harness finds the repository of the workspace's folder, picks the base (the
task's ``base``; else the branch of the last of its ``after`` tasks that left a change; else
the workspace's ``worktree.base``; else HEAD), and adds a worktree on a new branch,
``colibri/<last 12 of the task id>-<slug of its text>``, under
``.colibri/worktrees/<workspace>/``. After the session, what it left uncommitted is committed
on the branch, the change is measured, and the worktree is removed (the branch stays) — or
kept, for a failed task of a workspace with ``keep_failed``. Nothing here changes the
repository's own checkout: its files, its index, its HEAD.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import re
import shutil
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from colibri.agent.git import GitFailed, git
from colibri.core.model import Change, Task
from colibri.layout import RootLayout
from colibri.privatefiles import private_dir, write_private

log = logging.getLogger(__name__)

BRANCH_PREFIX = "colibri/"
#: The most characters of a task's text a branch name carries.
SLUG_MOST = 40
#: Beside a kept worktree ``LEAF``: ``LEAF.kept`` (the task's id), which the sweep leaves be.
KEPT = ".kept"
#: Who commits what a session left, where the repository names nobody.
IDENTITY = {"user.name": "colibri", "user.email": "colibri@localhost"}
_SHORTSTAT = re.compile(
    r"(\d+) files? changed(?:, (\d+) insertions?\(\+\))?(?:, (\d+) deletions?\(-\))?"
)


class WorktreeRefused(Exception):
    """The task cannot have its worktree; the message says why, for its error."""


def slug(text: str, most: int = SLUG_MOST) -> str:
    """The first words of ``text`` as a branch name's part: ``fix-the-login-page``."""
    plain = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode().lower()
    made = ""
    for word in re.findall(r"[a-z0-9]+", plain):
        longer = f"{made}-{word}" if made else word
        if len(longer) > most:
            made = made or word[:most]
            break
        made = longer
    return made or "task"


#: The characters of a task's id a branch carries: its end (random in a UUIDv7), long enough
#: that the tasks of a schedule firing the same text for years never meet (48 bits), and
#: ending with the 8 every list shows.
BRANCH_ID = 12


def branch_name(task_id: str, text: str, epoch: int = 1) -> str:
    """The branch of ``task_id``'s session: a later attempt of the task (a new epoch) starts
    a branch of its own, ``…-2``, and never takes over the last one's."""
    short = re.sub(r"[^a-z0-9]", "", task_id.lower())[-BRANCH_ID:] or "task"
    again = f"-{epoch}" if epoch > 1 else ""
    return f"{BRANCH_PREFIX}{short}-{slug(text)}{again}"


def parse_shortstat(text: str) -> tuple[int, int, int]:
    """Files, insertions and deletions of ``git diff --shortstat`` (nothing: no change)."""
    found = _SHORTSTAT.search(text)
    if found is None:
        return 0, 0, 0
    files, added, removed = found.groups()
    return int(files), int(added or 0), int(removed or 0)


def choose_base(
    task: Task, dependencies: Sequence[Task], configured: str | None
) -> tuple[str, str]:
    """The ref a task's worktree starts from, and where it comes from (for a message)."""
    if task.base:
        return task.base, "the task's base"
    for dependency in reversed(dependencies):
        if dependency.change is not None:
            # Its head as it was reported, not the branch as it is now: a branch moves.
            change = dependency.change
            return change.head, f"the head of {change.branch}, task {dependency.id}'s branch"
    if configured:
        return configured, "the workspace's worktree.base"
    return "HEAD", "the repository's HEAD"


@dataclass
class Worktree:
    """One session's worktree: the repository it belongs to, where it is, its branch."""

    repo: Path
    path: Path
    branch: str
    #: The commit it started from.
    base: str
    #: Where the session starts: the workspace's folder inside the worktree.
    cwd: Path


async def repository_of(folder: Path) -> Path:
    code, out = await git("rev-parse", "--show-toplevel", cwd=folder, check=False)
    if code != 0:
        raise WorktreeRefused(
            f"the workspace folder {folder} is not in a git repository, and isolation "
            '"worktree" needs one: git init it, or set isolation to "shared"'
        )
    return Path(out.strip())


async def plan(
    root: Path, workspace: str, folder: Path, task: Task, epoch: int, ref: str, why: str,
    refuse_dirty: bool,
) -> Worktree:  # fmt: skip
    """Check what the task's worktree needs (a repository, an existing base, a clean
    checkout with ``refuse_dirty``, a free branch name); the worktree it will be."""
    repo = await repository_of(folder)
    code, out = await git(
        "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}",
        cwd=repo, check=False,
    )  # fmt: skip
    if code != 0:
        raise WorktreeRefused(f"the worktree's base {ref!r} ({why}) does not exist in {repo}")
    base = out.strip()
    if refuse_dirty:
        _, head = await git("rev-parse", "--verify", "--quiet", "HEAD", cwd=repo, check=False)
        # Files git does not track are no one's work in progress here (the root's own config).
        _, dirty = await git("status", "--porcelain", "--untracked-files=no", cwd=repo)
        if head.strip() == base and dirty.strip():
            raise WorktreeRefused(
                f"the checkout of {repo} has uncommitted changes, and the worktree would start "
                "from its HEAD without them (refuse_dirty): commit or stash them"
            )
    branch = branch_name(task.id, task.text, epoch)
    code, _ = await git("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}", cwd=repo,
                        check=False)  # fmt: skip
    if code == 0:
        raise WorktreeRefused(
            f"the branch {branch} exists already in {repo}, and a task's branch is never "
            "reused: rename or delete it (git branch -m / -D), then retry the task"
        )
    path = RootLayout(root).worktrees(workspace) / branch.removeprefix(BRANCH_PREFIX)
    inside = os.path.relpath(os.path.realpath(folder), os.path.realpath(repo))
    return Worktree(repo, path, branch, base, path if inside == "." else path / inside)


async def add(root: Path, worktree: Worktree) -> None:
    """Add the worktree on its new branch (git refuses a branch that exists meanwhile)."""
    layout = RootLayout(root)
    ignore_state(layout)
    private_dir(layout.all_worktrees)
    private_dir(worktree.path.parent)
    if os.path.lexists(worktree.path):
        raise WorktreeRefused(f"{worktree.path} exists already: move it away")
    await git("worktree", "add", "--quiet", "-b", worktree.branch, str(worktree.path),
              worktree.base, cwd=worktree.repo)  # fmt: skip
    worktree.cwd.mkdir(parents=True, exist_ok=True)  # a folder the base does not have


def ignore_state(layout: RootLayout) -> None:
    """A root that is a git repository (or in one) ignores its ``.colibri/``: the repository's
    own ``git status`` stays clean however many worktrees are in there."""
    if not layout.gitignore.exists():
        write_private(layout.gitignore, b"*\n")


async def copy_in(folder: Path, worktree: Worktree, paths: Sequence[str]) -> None:
    """Copy the workspace folder's ``paths`` (files git ignores, such as ``.env``) into the
    worktree; a missing one is skipped, one the worktree has (tracked) is left as it is."""
    for relative in paths:
        source, target = folder / relative, worktree.cwd / relative
        if os.path.lexists(source) and not os.path.lexists(target):
            await asyncio.to_thread(_copy, source, target)


def _copy(source: Path, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    if source.is_dir() and not source.is_symlink():
        shutil.copytree(source, target, symlinks=True)
    else:
        shutil.copy2(source, target, follow_symlinks=False)


async def is_worktree(path: Path) -> bool:
    """Whether ``path`` is itself the top of a worktree git knows. A folder whose ``.git`` is
    gone (a session may remove it) is not: git would take the repository around it — the
    root's, perhaps — for its own, and its checkout must never be touched."""
    code, top = await git("rev-parse", "--show-toplevel", cwd=path, check=False)
    return code == 0 and os.path.realpath(top.strip()) == os.path.realpath(path)


async def commit_left_over(path: Path, message: str) -> None:
    """Commit whatever is uncommitted in the worktree at ``path``, hooks and signing aside, as
    the repository's user or, where it names none, as colibri."""
    if not await is_worktree(path):
        raise GitFailed(f"{path} is no longer a git worktree (its .git is gone)")
    _, status = await git("status", "--porcelain", cwd=path)
    if not status.strip():
        return
    await git("add", "-A", cwd=path)
    identity: list[str] = []
    for key, value in IDENTITY.items():
        code, said = await git("config", key, cwd=path, check=False)
        if code != 0 or not said.strip():
            identity += ["-c", f"{key}={value}"]
    await git(*identity, "-c", "commit.gpgsign=false", "commit", "--quiet", "--no-verify",
              "-m", message, cwd=path)  # fmt: skip


def commit_message(task: Task) -> str:
    first = next((line.strip() for line in task.text.splitlines() if line.strip()), "")
    subject = first if len(first) <= 60 else first[:59] + "…"
    return (
        f"{subject or 'colibri task'}\n\nLeft uncommitted by the session of colibri task "
        f"{task.id}; committed by its harness.\n"
    )


async def close(worktree: Worktree, message: str, *, keep: bool, task_id: str) -> Change:
    """After the session: commit what it left, measure the change, remove the worktree (its
    branch stays) unless ``keep``. A git failure leaves the worktree where it is."""
    head = worktree.base
    if worktree.path.is_dir():
        await commit_left_over(worktree.path, message)
        _, out = await git("rev-parse", "HEAD", cwd=worktree.path)
        head = out.strip()
        # A session that switched branches, or left HEAD detached, worked elsewhere: the
        # task's branch is moved to where it ended, so no commit of it is left on no branch.
        await git("update-ref", f"refs/heads/{worktree.branch}", head, cwd=worktree.repo)
    _, stat = await git("diff", "--shortstat", worktree.base, head, cwd=worktree.repo)
    files, insertions, deletions = parse_shortstat(stat)
    kept = None
    if keep and worktree.path.is_dir():
        write_private(_kept_marker(worktree.path), f"{task_id}\n".encode())
        kept = str(worktree.path)
    elif worktree.path.is_dir():
        await git("worktree", "remove", "--force", str(worktree.path), cwd=worktree.repo)
    return Change(
        branch=worktree.branch, base=worktree.base, head=head, files=files,
        insertions=insertions, deletions=deletions, worktree=kept,
    )  # fmt: skip


def _kept_marker(path: Path) -> Path:
    return path.with_name(path.name + KEPT)


async def sweep(root: Path, workspace: str, folder: Path) -> None:
    """At a harness's start (its workspace's only one): remove the worktrees its killed
    predecessor's sessions left — what they left uncommitted committed on their branches
    first — except those kept on purpose; then let git forget the ones that are gone."""
    place = RootLayout(root).worktrees(workspace)
    entries = sorted(place.iterdir()) if place.is_dir() else []
    for entry in entries:
        if entry.name.endswith(KEPT):
            if not os.path.lexists(entry.with_name(entry.name.removesuffix(KEPT))):
                entry.unlink(missing_ok=True)
            continue
        if entry.is_symlink() or not entry.is_dir() or _kept_marker(entry).exists():
            continue
        try:
            if not await is_worktree(entry):
                # No worktree git knows (or not one at all): under .colibri/, ours to drop.
                await asyncio.to_thread(shutil.rmtree, entry, True)
                continue
            message = "Left uncommitted by a colibri session whose harness was stopped.\n"
            await commit_left_over(entry, message)
            await git("worktree", "remove", "--force", str(entry), cwd=entry)
            log.info(
                "removed a stale worktree", extra={"event": "worktree_swept", "path": str(entry)}
            )
        except GitFailed as exc:  # what is in it is not dropped: left for the next start
            log.warning(
                "a stale worktree left in place: %s", exc, extra={"event": "worktree_swept"}
            )
    with contextlib.suppress(WorktreeRefused, GitFailed, OSError):
        await git("worktree", "prune", cwd=await repository_of(folder))
