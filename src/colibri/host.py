"""What the operating system says about processes and socket peers: the one module that makes
calls only some systems have, each with a portable fallback.

Two ways of asking, chosen per facility:

- *native*, on Linux: ``/proc`` for processes (state, start time, children, environment),
  ``SO_PEERCRED`` for the peer of a Unix socket, ``prctl(PR_SET_CHILD_SUBREAPER)``;
- *portable*, on any other Unix (FreeBSD, macOS …): ``kill(pid, 0)`` and ``waitid`` for
  liveness, ``ps(1)`` for start times and children, ``LOCAL_PEERCRED`` (a ``struct xucred``)
  or else ``getpeereid(3)`` for the peer.

``select`` picks them: ``"auto"`` (the default) takes native where the system has it;
``"portable"`` forces the fallback for both, ``"portable-processes"`` and ``"portable-peers"``
for one (``COLIBRI_HOST``, read by ``config.host_mode``; the tests run the fallback on Linux
this way, with real processes and sockets).

What the portable calls cannot give, and what degrades with it:

- a zombie that is not our child counts as alive until its parent reaps it (ours are told
  apart by ``waitid(WNOWAIT)``, which reaps nothing);
- start times come from ``ps -o lstart`` to the second, in a unit of their own: the markers
  of a harness that ran in the other mode do not match, so their groups are left alone
  (never a wrong process killed); without ``ps``, none match;
- another process's environment cannot be read (``environ_of`` is None, ``processes_with``
  empty): a harness replacing a killed one still kills the process groups its markers name,
  but not what a session left outside its group;
- there is no subreaper (``become_subreaper`` is False): descendants that leave their
  session's process group are not found while the harness runs;
- a peer's pid is known only where ``xucred`` carries it (FreeBSD 13 and later; else -1), and
  where neither ``LOCAL_PEERCRED`` nor ``getpeereid`` exists (glibc Linux) the peer cannot be
  told, so the daemon refuses every connection (``forbidden``), and the client every daemon
  (``trust.check_daemon``): both fail closed;
- who holds a ``flock`` (``flock_holders``) and what files a process has open
  (``open_files``) cannot be told: ``colibri stop`` believes the pid in a lock it has checked
  is its user's (or root's) own if the daemon answering on the socket has that pid (or does
  not say its pid, or does not answer yet), and ``backup`` keeps out of the state folder but
  may replace a file the daemon has open elsewhere.
"""

from __future__ import annotations

import calendar
import contextlib
import os
import signal
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

PROC = Path("/proc")
#: prctl option that makes this process the reaper of its orphaned descendants (Linux 3.4+).
PR_SET_CHILD_SUBREAPER = 36
#: prctl option: whether processes of the same user may read this one's memory and environment.
PR_SET_DUMPABLE = 4
#: prctl option: the signal this process gets when its parent dies.
PR_SET_PDEATHSIG = 1
MODES = ("auto", "portable", "portable-processes", "portable-peers")

#: Forced to the portable calls (``select``); otherwise native where the system has it.
PORTABLE_PROCESSES = False
PORTABLE_PEERS = False

_LINUX = sys.platform.startswith("linux")
_HAS_PROC = _LINUX and PROC.is_dir()


def select(mode: str) -> None:
    """Choose how to ask: one of ``MODES``."""
    global PORTABLE_PROCESSES, PORTABLE_PEERS
    if mode not in MODES:
        raise ValueError(f"unknown host mode {mode!r}; modes: {', '.join(MODES)}")
    PORTABLE_PROCESSES = mode in ("portable", "portable-processes")
    PORTABLE_PEERS = mode in ("portable", "portable-peers")


def _native_processes() -> bool:
    return _HAS_PROC and not PORTABLE_PROCESSES


# -- processes ---------------------------------------------------------------------------------


def alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie counts as gone (see above for one not our child)."""
    if pid <= 0:
        return False  # kill(0) and kill(-1) would ask about groups
    if _native_processes():
        stat = _stat(pid)
        return stat is not None and stat[0] != "Z"
    waitid = getattr(os, "waitid", None)
    if waitid is not None:
        try:
            exited = waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            pass  # not our child (or reaped already): kill tells
        except OSError:
            pass
        else:
            return exited is None  # our child: running, or a zombie waiting to be reaped
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # someone else's: it exists
    return True


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/PID/stat after the command name (state first), or None."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        # Gone before the open (FileNotFoundError) or between the open and the read
        # (ProcessLookupError): either way, not there.
        return None


def start_time(pid: int) -> int | None:
    """When ``pid`` started: with the pid, it names one process (a pid alone may be reused).
    Native: clock ticks since boot; portable: seconds since the epoch. None if it is gone
    (or, portable, there is no ``ps``)."""
    if pid <= 0:
        return None
    if _native_processes():
        stat = _stat(pid)
        return int(stat[19]) if stat is not None and len(stat) > 19 else None
    text = _ps("-o", "lstart=", "-p", str(pid))
    try:
        return calendar.timegm(time.strptime(text.strip(), "%a %b %d %H:%M:%S %Y"))
    except ValueError:  # gone (ps printed nothing), or no ps
        return None


def started_at(pid: int) -> float | None:
    """When ``pid`` started, in seconds since the epoch (to the clock tick natively, to the
    second the portable way); None if it is gone or cannot be told."""
    ticks = start_time(pid)
    if ticks is None or not _native_processes():
        return None if ticks is None else float(ticks)
    try:
        with open("/proc/stat", "rb") as stat:
            boot = next(int(line.split()[1]) for line in stat if line.startswith(b"btime "))
    except (OSError, StopIteration, ValueError):
        return None
    return boot + ticks / os.sysconf("SC_CLK_TCK")


def flock_holders(device: int, inode: int) -> set[int] | None:
    """The pids holding a ``flock`` on the file ``device``/``inode`` (a process's own lock: a
    pid file names one process, this says whether it holds the lock), from ``/proc/locks``;
    None where that cannot be told (portable). A holder outside our pid namespace is not
    listed: its pid would mean nothing here either."""
    if not _native_processes():
        return None
    try:
        text = (PROC / "locks").read_text()
    except OSError:
        return None
    # "1: FLOCK  ADVISORY  WRITE 3845 fe:00:1474578 0 EOF" (a waiter's has "->" after "1:")
    key = f"{os.major(device):02x}:{os.minor(device):02x}:{inode}"
    return {
        int(fields[4])
        for fields in map(str.split, text.splitlines())
        if len(fields) > 5 and fields[1] == "FLOCK" and fields[5] == key and fields[4].isdigit()
    }


def open_files(pid: int) -> set[tuple[int, int]] | None:
    """The files ``pid`` has open, each as its (device, inode); None where that cannot be told
    (portable, or not ours to look at)."""
    if not _native_processes():
        return None
    folder = PROC / str(pid) / "fd"
    try:
        names = os.listdir(folder)
    except OSError:
        return None
    found = set()
    for name in names:
        try:
            info = os.stat(folder / name)  # the open file itself, through the fd's link
        except OSError:
            continue  # closed meanwhile
        found.add((info.st_dev, info.st_ino))
    return found


def _ps(*args: str) -> str:
    """What ``ps ARGS`` prints, in the C locale and UTC; "" if it fails or there is none."""
    command = next((p for p in ("/bin/ps", "/usr/bin/ps") if os.path.exists(p)), "ps")
    try:
        done = subprocess.run(
            [command, *args], capture_output=True, text=True, timeout=10,
            env={"LC_ALL": "C", "TZ": "UTC", "PATH": "/bin:/usr/bin"},
        )  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return ""
    return done.stdout if done.returncode == 0 else ""


def hide_from_own_user() -> bool:
    """Keep processes of this user — a harness's sessions — from reading this one's memory and
    environment (``/proc/PID/environ``, ``ptrace``): where a token lives. Root still can; the
    sessions' own programs are not affected (``execve`` makes them dumpable again). False where
    the platform cannot (elsewhere, BSDs keep other processes' environments from ``ps`` users
    only by their own rules)."""
    if not _LINUX:
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def stop_signals() -> tuple[signal.Signals, ...]:
    """The signals that ask a process of ours to stop cleanly, as Ctrl+C does: SIGINT, SIGTERM,
    and SIGHUP — a closed terminal stops what it ran rather than kill it, which would leave
    what it started behind — unless SIGHUP was ignored when the process started (``nohup``:
    it is to outlive its terminal)."""
    hangup = () if signal.getsignal(signal.SIGHUP) == signal.SIG_IGN else (signal.SIGHUP,)
    return (signal.SIGINT, signal.SIGTERM, *hangup)


def stop_with_parent() -> None:
    """In a child between fork and exec (``preexec_fn``): SIGTERM it when its parent dies,
    however the parent dies (SIGKILL too). Linux only; elsewhere a parent killed outright
    leaves it running."""
    if not _LINUX:
        return
    import ctypes

    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)


def become_subreaper() -> bool:
    """Make this process the reaper of its orphaned descendants: a session's process that
    double-forks into a new session of its own is then re-parented here, not to init, and
    can be found and stopped. False where the platform cannot (portable: always)."""
    if not _LINUX or PORTABLE_PROCESSES:
        return False
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def children_of(parent: int) -> list[tuple[int, str]]:
    """``(pid, state)`` of every process whose parent is ``parent``. Native: from the kernel's
    list of each of its threads' children where it keeps one, else from a scan of all of
    /proc; portable: from ``ps``."""
    if not _native_processes():
        found = []
        for line in _ps("-A", "-o", "pid=", "-o", "ppid=", "-o", "stat=").splitlines():
            fields = line.split()
            if len(fields) == 3 and fields[1] == str(parent) and fields[0].isdigit():
                found.append((int(fields[0]), fields[2][0]))
        return found
    found = []
    try:
        threads = os.listdir(f"/proc/{parent}/task")
        listed = [Path(f"/proc/{parent}/task/{tid}/children").read_text() for tid in threads]
    except OSError:
        listed = None  # no such lists (CONFIG_PROC_CHILDREN)
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
    (or it is a zombie, gone, or not ours to read; portable: always)."""
    if not _native_processes():
        return None
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
    has every ``key=value`` of ``wanted``; portable: none can be told."""
    if not _native_processes():
        return []
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


# -- socket peers ------------------------------------------------------------------------------

#: ``struct xucred`` of FreeBSD (sys/ucred.h): cr_version, cr_uid, cr_ngroups, cr_groups[16],
#: then a union of a pointer and cr_pid (FreeBSD 13+). macOS's ends after cr_groups.
XUCRED = struct.Struct("@IIh16I")
XUCRED_PID = struct.calcsize("@IIh16I0P")  # the union's offset: cr_groups, aligned for a pointer
XUCRED_SIZE = struct.calcsize("@IIh16IP")
XUCRED_VERSION = 0
#: LOCAL_PEERCRED, at level SOL_LOCAL (0), where Python does not name it (FreeBSD, macOS and
#: DragonFly all use 1).
_BSD = sys.platform.startswith(("freebsd", "darwin", "dragonfly"))
LOCAL_PEERCRED: int | None = getattr(socket, "LOCAL_PEERCRED", 1 if _BSD else None)


def peer_credentials(sock: socket.socket) -> tuple[int, int, int]:
    """The connected peer's (uid, gid, pid) of a Unix socket, from the kernel: not forgeable.
    The pid is -1 where the system does not say it. OSError where the peer cannot be told."""
    if _LINUX and not PORTABLE_PEERS:
        creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        pid, uid, gid = struct.unpack("3i", creds)
        return int(uid), int(gid), int(pid)
    if LOCAL_PEERCRED is not None:
        return parse_xucred(sock.getsockopt(0, LOCAL_PEERCRED, XUCRED_SIZE))
    return _getpeereid(sock)


def parse_xucred(data: bytes) -> tuple[int, int, int]:
    """(uid, gid, pid) of a ``struct xucred``; its first group is the effective gid."""
    if len(data) < XUCRED.size:
        raise OSError(f"LOCAL_PEERCRED gave {len(data)} bytes, not a struct xucred")
    version, uid, ngroups, *groups = XUCRED.unpack_from(data)
    if version != XUCRED_VERSION or ngroups < 1:
        raise OSError(f"struct xucred of version {version} with {ngroups} groups")
    pid = -1
    if len(data) >= XUCRED_PID + 4:
        (pid,) = struct.unpack_from("@i", data, XUCRED_PID)
        pid = pid if pid > 0 else -1  # before FreeBSD 13 the union held an unused pointer
    return int(uid), int(groups[0]), int(pid)


def _getpeereid(sock: socket.socket) -> tuple[int, int, int]:
    import ctypes

    try:
        function = ctypes.CDLL(None, use_errno=True).getpeereid
    except (OSError, AttributeError):
        raise OSError(
            "this system says nothing of a socket's peer (no SO_PEERCRED, LOCAL_PEERCRED or "
            "getpeereid)"
        ) from None
    uid, gid = ctypes.c_uint32(), ctypes.c_uint32()
    if function(sock.fileno(), ctypes.byref(uid), ctypes.byref(gid)) != 0:
        error = ctypes.get_errno()
        raise OSError(error, os.strerror(error))
    return int(uid.value), int(gid.value), -1
