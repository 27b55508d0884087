"""Git, run by the harness as asyncio subprocesses: never blocking its loop, never killed
half-way, and patient with git's own locks.

A git command that finds another one's lock (``index.lock``, a ref's ``.lock``, the config's)
is run again after a short pause, for up to ``LOCK_PATIENCE`` seconds: the lock belongs to a
git that is working, and is never removed here. Any other failure is a ``GitFailed`` carrying
git's own last word, one line, for a task's error.
"""

from __future__ import annotations

import asyncio
import os
import re
from pathlib import Path

from colibri.agent.reaping import spawn
from colibri.core.backoff import Backoff

#: How long a command that finds one of git's locks taken is tried again.
LOCK_PATIENCE = 10.0
#: What git says when another git holds a lock it needs.
_LOCKED = re.compile(
    r"\.lock'?: File exists|Unable to create '[^']*\.lock'|could not lock config file"
)
#: Variables that would point git at another repository than the one asked about.
_ELSEWHERE = (
    "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_COMMON_DIR", "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_PREFIX", "GIT_CEILING_DIRECTORIES",
)  # fmt: skip


class GitFailed(Exception):
    """A git command failed; the message is git's own last line, for a task's error."""


def git_environment() -> dict[str, str]:
    """The harness's environment, with git's messages in one language (they are parsed) and
    no prompt or optional lock (``git status`` would otherwise take the index's lock)."""
    env = {k: v for k, v in os.environ.items() if k not in _ELSEWHERE}
    env.update(LC_ALL="C", GIT_TERMINAL_PROMPT="0", GIT_OPTIONAL_LOCKS="0")
    return env


def last_word(stderr: str) -> str:
    """The line of git's output that says what went wrong: its last ``fatal:`` or ``error:``
    line, else its last line."""
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    said = [line for line in lines if line.startswith(("fatal:", "error:"))]
    return (said or lines or ["no message"])[-1]


async def git(*args: str, cwd: Path, check: bool = True) -> tuple[int, str]:
    """Run ``git ARGS`` in ``cwd``; its exit status and stdout. A failure (with ``check``)
    raises GitFailed; a lock held by another git is waited for."""
    pauses = Backoff(0.05, 1.0)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + LOCK_PATIENCE
    while True:
        code, out, err = await _run(args, cwd)
        if code != 0 and _LOCKED.search(err) and loop.time() < deadline:
            await asyncio.sleep(pauses.next())
            continue
        if code != 0 and check:
            raise GitFailed(f"git {args[0]}: {last_word(err)}")
        return code, out


async def _run(args: tuple[str, ...], cwd: Path) -> tuple[int, str, str]:
    try:
        process = await spawn(
            "git", *args, cwd=cwd, env=git_environment(), stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )  # fmt: skip
    except OSError as exc:
        if not cwd.is_dir():
            raise GitFailed(f"git {args[0]}: the folder {cwd} does not exist") from None
        if isinstance(exc, FileNotFoundError):
            raise GitFailed("git is not found on PATH: install it") from None
        raise GitFailed(f"git {args[0]}: {exc.strerror or exc}") from None
    talking = asyncio.ensure_future(process.communicate())
    try:
        out, err = await asyncio.shield(talking)
    except asyncio.CancelledError:
        # A git stopped half-way could leave its lock behind, and its work half-done: it is
        # let finish, then the cancellation goes on.
        await asyncio.wait({talking})
        raise
    assert process.returncode is not None
    return process.returncode, out.decode(errors="replace"), err.decode(errors="replace")
