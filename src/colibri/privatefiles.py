"""Files and folders under ``.colibri/``: made and opened without following links, and only
used when they are what they should be — a regular file or folder of the user running us.

A session runs as the same user as its harness and daemon, so it could plant a symbolic link
where the daemon writes (``daemon.lock`` → a file elsewhere, to be truncated; ``ledger.jsonl`` →
one to be appended to and chmodded). Every path the daemon and the harness create or open there
goes through these functions, which refuse a link, a file of another type or owner, and set the
mode to 0600 (0700 for folders) whatever the umask.
"""

from __future__ import annotations

import contextlib
import os
import stat
from pathlib import Path

from colibri.core.errors import RootError

_NOFOLLOW = os.O_NOFOLLOW | os.O_CLOEXEC


def what(info: os.stat_result) -> str:
    """A file's type, as a person says it."""
    mode = info.st_mode
    for test, name in ((stat.S_ISLNK, "a symbolic link"), (stat.S_ISDIR, "a directory"),
                       (stat.S_ISSOCK, "a socket"), (stat.S_ISFIFO, "a named pipe"),
                       (stat.S_ISREG, "a file")):  # fmt: skip
        if test(mode):
            return name
    return "a device or other special file"


def private_dir(path: Path) -> Path:
    """``path`` as a folder of ours, mode 0700: made if missing, refused if it is a link, not
    a folder, or another user's."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    info = os.lstat(path)
    if not stat.S_ISDIR(info.st_mode):
        raise RootError(f"{path} is {what(info)}, not a folder; move it away and start again")
    if info.st_uid != os.getuid():
        raise RootError(f"{path} belongs to uid {info.st_uid}, not to us (uid {os.getuid()})")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700, follow_symlinks=False)
    return path


def open_private(path: Path, flags: int) -> int:
    """Open (or create, with ``os.O_CREAT`` in ``flags``) a regular file of ours, mode 0600,
    never through a link; return its descriptor. OSError (ELOOP for a link) or RootError
    otherwise, with the file untouched."""
    # Non-blocking for the open itself: a FIFO planted here would otherwise block it (and the
    # daemon's loop with it) until a writer or reader came. Blocking again once it is known to
    # be a regular file.
    fd = os.open(path, flags | _NOFOLLOW | os.O_NONBLOCK, 0o600)
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise RootError(f"{path} is {what(info)}, not a file; move it away")
        os.set_blocking(fd, True)
        if info.st_uid != os.getuid():
            raise RootError(f"{path} belongs to uid {info.st_uid}, not to us (uid {os.getuid()})")
        if stat.S_IMODE(info.st_mode) != 0o600:
            os.fchmod(fd, 0o600)
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_private(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Write ``path`` whole, 0600: into a new file beside it, then renamed over it, so a link
    planted at ``path`` is replaced, never followed, and a reader never sees half of it.
    ``mode`` is for a file that others may read (a certificate), set before the rename."""
    partial = path.with_name(f".{path.name}.{os.getpid()}.partial")
    with contextlib.suppress(FileNotFoundError):
        os.unlink(partial)  # left by a writer of ours that died
    fd = os.open(partial, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o600)
    try:
        if mode != 0o600:
            # Not os.open's mode, which the umask cuts; the descriptor, which no link replaces.
            os.fchmod(fd, mode)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    os.replace(partial, path)


def touch_private(path: Path) -> None:
    """Make sure a regular file of ours is at ``path``; a link there is removed first."""
    try:
        os.close(open_private(path, os.O_WRONLY | os.O_CREAT))
    except OSError:
        if not os.path.islink(path):
            raise
        os.unlink(path)  # the link itself, not what it points to
        os.close(open_private(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
