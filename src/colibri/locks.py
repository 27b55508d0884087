"""Process locks: who holds a root or a workspace, held with flock for a process's life.

The kernel drops a flock when its holder dies, however it dies, so a lock left by a killed
process never blocks the next one, and a lock that is held proves its holder is alive.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from colibri.core.errors import LockHeld, RootError
from colibri.privatefiles import open_private, private_dir


def harness_lock(state_dir: Path, workspace: str) -> Path:
    return state_dir / "harness" / f"{workspace}.lock"


def holder_pid(path: Path) -> int | None:
    """The pid of the harness holding the lock at ``path``, or None if nobody holds it (or
    something that is not our lock file stands there: a link is never followed)."""
    try:
        fd = open_private(path, os.O_RDWR)
    except (OSError, RootError):
        return None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
            return int(text) if text.isdigit() else -1
        fcntl.flock(fd, fcntl.LOCK_UN)
        return None
    finally:
        os.close(fd)


def hold_lock(path: Path) -> int:
    """Take the lock at ``path`` for the life of the process (writing our pid), or raise
    LockHeld. The daemon holds its root's; a harness its workspace's. A link, or a file that
    is not a regular file of ours, at ``path`` is refused (RootError), never written through."""
    private_dir(path.parent)
    try:
        fd = open_private(path, os.O_RDWR | os.O_CREAT)
    except OSError as exc:
        what = "a symbolic link" if os.path.islink(path) else f"unusable ({exc.strerror})"
        raise RootError(f"{path} is {what}; remove it, then start again") from None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        holder = os.pread(fd, 32, 0).decode(errors="replace").strip() or "unknown"
        os.close(fd)
        raise LockHeld(holder, f"{path} is held by pid {holder}") from None
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
