"""What the harness and the supervisor need to know about processes, read from /proc.

Linux only where it must be: without /proc (FreeBSD, macOS) ``alive`` answers from ``kill(pid,
0)``, and the subreaper calls and the scans for a process's children and environment answer
"not available" (``become_subreaper`` is False, the others empty), so a harness there keeps the
process-group guarantee but not the one for descendants that leave their group.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

PROC = Path("/proc")
#: prctl option that makes this process the reaper of its orphaned descendants (Linux 3.4+).
PR_SET_CHILD_SUBREAPER = 36


def alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie counts as gone."""
    stat = _stat(pid)
    if stat is None:
        if PROC.is_dir():
            return False
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return stat[0] != "Z"


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        # Gone before the open (FileNotFoundError) or between the open and the read
        # (ProcessLookupError): either way, not there.
        return None


def start_time(pid: int) -> int | None:
    """When ``pid`` started, in clock ticks since boot: with the pid, it names one process
    (a pid alone may be reused). None if it is gone or there is no /proc."""
    stat = _stat(pid)
    return int(stat[19]) if stat is not None and len(stat) > 19 else None


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants: a session's process that
    double-forks into a new session of its own is then re-parented here, not to init, and
    can be found and stopped. False where the platform cannot."""
    if not sys.platform.startswith("linux"):
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def children_of(parent: int) -> list[tuple[int, str]]:
    """``(pid, state)`` of every process whose parent is ``parent``: from the kernel's list of
    each of its threads' children where it keeps one, else from a scan of all of /proc."""
    found: list[tuple[int, str]] = []
    try:
        threads = os.listdir(f"/proc/{parent}/task")
        listed = [Path(f"/proc/{parent}/task/{tid}/children").read_text() for tid in threads]
    except OSError:
        listed = None  # no such lists (CONFIG_PROC_CHILDREN), or no /proc
    if listed is not None:
        for pid in {int(word) for text in listed for word in text.split()}:
            stat = _stat(pid)
            if stat is not None and len(stat) > 1 and stat[1] == str(parent):
                found.append((pid, stat[0]))
        return found
    try:
        entries = os.listdir(PROC)
    except OSError:
        return found
    for name in entries:
        if not name.isdigit():
            continue
        stat = _stat(int(name))
        if stat is not None and len(stat) > 1 and stat[1] == str(parent):
            found.append((int(name), stat[0]))
    return found


def environ_of(pid: int, key: str) -> str | None:
    """The value of ``key`` in the environment ``pid`` was started with; None if it has none
    (or it is a zombie, gone, or not ours to read)."""
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    prefix = key.encode() + b"="
    for entry in raw.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode(errors="replace")
    return None


def processes_with(**wanted: str) -> list[int]:
    """Live processes (of this user: others' environments cannot be read) whose environment
    has every ``key=value`` of ``wanted``."""
    found: list[int] = []
    try:
        entries = os.listdir(PROC)
    except OSError:
        return found
    own = os.getpid()
    for name in entries:
        if not name.isdigit() or int(name) == own:
            continue
        if all(environ_of(int(name), k) == v for k, v in wanted.items()) and alive(int(name)):
            found.append(int(name))
    return found
