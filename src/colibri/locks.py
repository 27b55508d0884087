"""Process locks: who holds a root or a workspace, held with flock for a process's life.

The kernel drops a flock when its holder dies, however it dies, so a lock left by a killed
process never blocks the next one, and a lock that is held proves its holder is alive.
"""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

from colibri import host
from colibri.core.errors import LockHeld, RootError
from colibri.privatefiles import open_private, private_dir


def store_lock(location: str) -> Path:
    """The lock beside an SQLite board, held by the daemon that has it open: two roots whose
    ``--store`` or ``store.path`` name one file never both serve it. Beside, not on, the board:
    SQLite takes POSIX locks on the board itself, which any close of it would drop."""
    return Path(location + ".lock")


#: How long a lock found held is read again for its holder's pid, not yet written (seconds).
HOLDER_PATIENCE = 1.0


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


def hold_lock(path: Path, *, own_folder: bool = True) -> int:
    """Take the lock at ``path`` for the life of the process (writing our pid), or raise
    LockHeld. The daemon holds its root's and its board's; a harness its workspace's. A link,
    or a file that is not a regular file of ours, at ``path`` is refused (RootError), never
    written through.

    ``own_folder``: the folder is one of ours under ``.colibri/``, made (0700) if missing. A
    board's lock (``store_lock``) lies wherever the board does, in a folder left as it is.
    """
    if own_folder:
        private_dir(path.parent)
    try:
        fd = open_private(path, os.O_RDWR | os.O_CREAT)
    except OSError as exc:
        if os.path.islink(path):
            raise RootError(f"{path} is a symbolic link; remove it, then start again") from None
        raise RootError(f"{path} cannot be opened ({exc.strerror}); nothing was started") from None
    give_up = time.monotonic() + HOLDER_PATIENCE
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            text = os.pread(fd, 32, 0).decode(errors="replace").strip()
        # The holder writes its pid just after it takes the lock: until then the file is
        # empty, or names the last holder, gone. Read again, briefly, for the pid to name.
        if (text.isdigit() and host.alive(int(text))) or time.monotonic() > give_up:
            os.close(fd)
            holder = text or "unknown"
            raise LockHeld(holder, f"{path} is held by pid {holder}") from None
        time.sleep(0.01)
    os.ftruncate(fd, 0)
    os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
    return fd
