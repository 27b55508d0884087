"""``colibri.host``: what the system says of processes and socket peers, asked natively
(Linux: /proc, SO_PEERCRED) and the portable way (kill and waitid, ps, LOCAL_PEERCRED or
getpeereid), the portable calls forced here on Linux. Real processes, real sockets."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from colibri import host
from colibri.host import alive, children_of, environ_of, processes_with, start_time
from tests.helpers import PYTHON, wait_until

HAS_GETPEEREID = hasattr(ctypes.CDLL(None), "getpeereid")


@pytest.fixture(params=["native", "portable"])
def mode(request: pytest.FixtureRequest) -> Iterator[str]:
    host.select("auto" if request.param == "native" else "portable")
    try:
        yield request.param
    finally:
        host.select("auto")


def test_running_zombie_and_reaped(mode: str) -> None:
    assert alive(os.getpid())
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    os.waitid(os.P_PID, child.pid, os.WEXITED | os.WNOWAIT)  # exited, not reaped: a zombie
    assert not alive(child.pid)
    child.wait()
    assert not alive(child.pid)
    assert not alive(0) and not alive(-1)  # never a question about a process group


def test_a_process_that_is_not_our_child(mode: str) -> None:
    """A grandchild, re-parented when its parent exits: alive until killed, then gone once
    its new parent (init, or a subreaper) has reaped it."""
    # The test process is a subreaper (tests/leaks.py) and would adopt the orphan: it is not
    # one while the shell starts it, so init, or a subreaper above the test run, takes it.
    with _not_a_subreaper():
        shell = subprocess.run(
            ["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"], capture_output=True, text=True
        )
    orphan = int(shell.stdout)
    try:
        assert alive(orphan)
        assert orphan not in [pid for pid, _ in children_of(os.getpid())]
    finally:
        os.kill(orphan, signal.SIGKILL)
    wait_until(lambda: not alive(orphan), timeout=10)


@contextlib.contextmanager
def _not_a_subreaper() -> Iterator[None]:
    libc = ctypes.CDLL(None)
    flag = ctypes.c_int(0)
    libc.prctl(37, ctypes.byref(flag), 0, 0, 0)  # PR_GET_CHILD_SUBREAPER
    libc.prctl(36, 0, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    try:
        yield
    finally:
        libc.prctl(36, flag.value, 0, 0, 0)


def test_processes_exiting_under_the_reader_never_raise(mode: str) -> None:
    """Polling pids while they exit hits the window between opening /proc/PID/stat and
    reading it (ProcessLookupError), or between waitid and kill: that must read as "not
    alive", never raise."""
    errors: list[BaseException] = []
    children = [subprocess.Popen(["true"]) for _ in range(200)]
    pids = [child.pid for child in children]

    def poll() -> None:
        try:
            for _ in range(50):
                for pid in pids:
                    alive(pid)
        except BaseException as exc:  # any escape is the failure
            errors.append(exc)

    pollers = [threading.Thread(target=poll) for _ in range(2)]
    for poller in pollers:
        poller.start()
    for child in children:
        child.wait()
    for poller in pollers:
        poller.join()
    assert errors == []
    assert not any(alive(pid) for pid in pids)


def test_a_start_time_names_one_process(mode: str) -> None:
    first = subprocess.Popen(["sleep", "30"])
    started = time.time()
    try:
        when = start_time(first.pid)
        assert when is not None and start_time(first.pid) == when  # the same each time
        if mode == "portable":  # seconds since the epoch, to the second
            assert abs(when - started) <= 2
        time.sleep(1.1)  # the portable clock counts whole seconds
        second = subprocess.Popen(["sleep", "30"])
        try:
            later = start_time(second.pid)
            assert later is not None and later > when
        finally:
            second.kill()
            second.wait()
    finally:
        first.kill()
        first.wait()
    assert start_time(first.pid) is None  # gone
    assert start_time(0) is None


def test_children_and_their_states(mode: str) -> None:
    running = subprocess.Popen(["sleep", "30"])
    ended = subprocess.Popen(["true"])
    os.waitid(os.P_PID, ended.pid, os.WEXITED | os.WNOWAIT)  # a zombie until reaped
    try:
        found = dict(children_of(os.getpid()))
        assert found.get(running.pid) in ("S", "R")
        assert found.get(ended.pid) == "Z"
        assert children_of(running.pid) == []
    finally:
        running.kill()
        running.wait()
        ended.wait()


def test_environments_are_read_natively_and_not_at_all_the_portable_way(mode: str) -> None:
    marker = f"m{os.getpid()}{time.monotonic_ns()}"
    child = subprocess.Popen(["sleep", "30"], env={**os.environ, "COLIBRI_TEST_MARK": marker})
    try:
        wait_until(lambda: mode == "portable" or environ_of(child.pid, "COLIBRI_TEST_MARK"))
        if mode == "native":
            assert environ_of(child.pid, "COLIBRI_TEST_MARK") == marker
            assert processes_with(COLIBRI_TEST_MARK=marker) == [child.pid]
        else:  # what degrades, as host.py says: the environment of another process
            assert environ_of(child.pid, "COLIBRI_TEST_MARK") is None
            assert processes_with(COLIBRI_TEST_MARK=marker) == []
    finally:
        child.kill()
        child.wait()


def test_the_portable_way_has_no_subreaper() -> None:
    host.select("portable")
    try:
        assert host.become_subreaper() is False
    finally:
        host.select("auto")


def test_unknown_modes_are_refused() -> None:
    with pytest.raises(ValueError, match="modes: auto, portable"):
        host.select("fast")


# -- socket peers ------------------------------------------------------------------------------


def _connect_from_a_child(path: str) -> subprocess.Popen[bytes]:
    code = (
        "import socket, sys, time\n"
        "s = socket.socket(socket.AF_UNIX); s.connect(sys.argv[1]); s.recv(1)\n"
    )
    return subprocess.Popen([PYTHON, "-c", code, path])


@pytest.mark.parametrize("forced", ["auto", "portable-peers", "portable"])
def test_peer_credentials_of_a_real_connection(forced: str) -> None:
    folder = tempfile.mkdtemp(prefix="cbh", dir="/tmp")
    path = os.path.join(folder, "s")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.listen()
    peer = _connect_from_a_child(path)
    host.select(forced)
    try:
        conn, _ = listener.accept()
        with conn:
            if forced == "auto":  # SO_PEERCRED: the connecting process itself
                assert host.peer_credentials(conn) == (os.getuid(), os.getgid(), peer.pid)
            elif HAS_GETPEEREID:
                assert host.peer_credentials(conn) == (os.geteuid(), os.getegid(), -1)
            else:  # glibc: no LOCAL_PEERCRED, no getpeereid; the daemon refuses (below)
                with pytest.raises(OSError, match="says nothing of a socket's peer"):
                    host.peer_credentials(conn)
            conn.send(b"x")
    finally:
        host.select("auto")
        listener.close()
        peer.wait(timeout=10)
        os.unlink(path)
        os.rmdir(folder)


@pytest.mark.skipif(struct.calcsize("P") != 8, reason="the layout below is that of LP64")
def test_a_freebsd_xucred_is_read_by_its_offsets() -> None:
    """struct xucred as FreeBSD 13+ lays it out on amd64 and arm64 (sys/ucred.h): u_int
    cr_version at 0, uid_t cr_uid at 4, short cr_ngroups at 8, gid_t cr_groups[16] at 12,
    then, aligned to 8, the union holding pid_t cr_pid at 80; 88 bytes in all."""
    data = bytearray(88)
    struct.pack_into("=I", data, 0, 0)
    struct.pack_into("=I", data, 4, 1001)
    struct.pack_into("=h", data, 8, 3)
    struct.pack_into("=3I", data, 12, 20, 0, 5)
    struct.pack_into("=i", data, 80, 4242)
    assert host.XUCRED_SIZE == 88
    assert host.parse_xucred(bytes(data)) == (1001, 20, 4242)
    # Before FreeBSD 13 the union was an unused pointer: no pid. macOS's ends at cr_groups.
    struct.pack_into("=q", data, 80, 0)
    assert host.parse_xucred(bytes(data)) == (1001, 20, -1)
    assert host.parse_xucred(bytes(data[:76])) == (1001, 20, -1)
    struct.pack_into("=I", data, 0, 1)  # a layout version we do not know
    with pytest.raises(OSError, match="version 1"):
        host.parse_xucred(bytes(data))
    with pytest.raises(OSError, match="not a struct xucred"):
        host.parse_xucred(bytes(data[:40]))


@pytest.mark.skipif(HAS_GETPEEREID, reason="this libc has getpeereid: peers can be told")
@pytest.mark.parametrize("forced", ["portable", "portable-peers"])
def test_a_daemon_that_cannot_tell_its_peers_refuses_them_all(root: Path, forced: str) -> None:
    daemon = subprocess.Popen(
        [PYTHON, "-m", "colibri", "--root", str(root), "run", "--log-level", "warning"],
        env={**os.environ, "COLIBRI_HOST": forced},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip
    sock = root / ".colibri" / "colibri.sock"
    try:
        wait_until(sock.exists, timeout=20)
        with socket.socket(socket.AF_UNIX) as client:
            client.settimeout(10)
            client.connect(str(sock))
            line = client.makefile("rb").readline()
        assert b'"code":"forbidden"' in line
        assert b"cannot tell who is connecting" in line
    finally:
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=20) == 0
