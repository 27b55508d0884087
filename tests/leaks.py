"""The suite's check that a test leaves nothing behind: no process, no socket, no PostgreSQL
schema or private server. A test that does fails (an error at its teardown, naming what it left),
and what it left is ended there, so that the next test starts clean and is not the one blamed.

Processes: each test process (an xdist worker, or pytest itself without workers) is made a child
subreaper (Linux), so every orphan a test makes (a harness whose daemon was SIGKILLed, a
``run --detach`` daemon, a tmux server) is re-parented to it rather than to init. Around each
test, the processes under the test process are listed from ``/proc``: one alive after the test
that was not before is left behind. Those that were there before are the wider fixtures' and
are not looked into; the long-lived helpers named in ``LONG_LIVED_PIDS`` (of ``tests.prestarted``,
the forker colibri's commands are started from) are not blamed, though
what they start is (their descendants are looked into), and neither are the sockets to them
(``LONG_LIVED_FDS``).

Sockets: the test process's socket descriptors are listed around each test; when there are more
after it, the garbage collector runs (a socket it finds unclosed is a ``ResourceWarning``) and a
socket still open, or one only the collector closed, is left behind. What a fixture of wider
scope opens while it is set up is that fixture's, however it is set up.

At the end of a run (in pytest's own process, after every worker is done): a PostgreSQL schema
of this run still in the test database, or a private server of this run still running, fails
the run. Schemas and private servers carry the run's id in their names (``run_id``).
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
import warnings
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import pytest

#: The run's id, given by pytest's own process to its xdist workers through the environment
#: (not a ``COLIBRI_`` name: the suite clears those for every test).
RUN_ID_VARIABLE = "SUITE_RUN_ID"
#: How long what a test left is given to end by itself (a process on its way out, a socket a
#: thread is closing) before the test is blamed. A clean test never waits.
GRACE = 1.0

_run_id: str | None = None
_LINUX = sys.platform.startswith("linux")


def run_id() -> str:
    """This run's id: shared by pytest and its workers, different for every run (a pytest run
    inside a test is a run of its own)."""
    global _run_id
    if _run_id is None:
        _run_id = os.environ.get(RUN_ID_VARIABLE) or uuid.uuid4().hex[:8]
    return _run_id


def _is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def pytest_configure(config: pytest.Config) -> None:
    global _run_id
    if not _is_worker(config) and _run_id is None:
        _run_id = uuid.uuid4().hex[:8]
        os.environ[RUN_ID_VARIABLE] = _run_id  # the workers, started after this, inherit it
    # The process that runs the tests adopts their orphans; xdist's controller runs none, and
    # adopting would keep what it never reaps (a test's orphan, when its worker is not a
    # subreaper for a moment) from ever being gone.
    if _LINUX and (_is_worker(config) or not config.getoption("numprocesses", None)):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER


# --- processes ---------------------------------------------------------------------------------


class Proc(NamedTuple):
    pid: int
    ppid: int
    pgid: int
    state: str
    #: When it started (clock ticks since boot): with the pid, which process this is.
    start: int

    @property
    def key(self) -> tuple[int, int]:
        return (self.pid, self.start)

    @property
    def alive(self) -> bool:
        return self.state not in ("Z", "X", "x")


def processes() -> dict[int, Proc]:
    """Every process of the machine, from ``/proc/*/stat``."""
    table: dict[int, Proc] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            fd = os.open(f"/proc/{name}/stat", os.O_RDONLY)
            try:
                data = os.read(fd, 4096)
            finally:
                os.close(fd)
        except OSError:  # gone meanwhile
            continue
        fields = data[data.rindex(b")") + 2 :].split(None, 20)  # from field 3 (state) on
        table[int(name)] = Proc(
            int(name), int(fields[1]), int(fields[2]), fields[0].decode(), int(fields[19])
        )
    return table


def command_line(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as cmdline:
            words = cmdline.read().rstrip(b"\0").split(b"\0")
    except OSError:
        return "?"
    return " ".join(word.decode(errors="replace") for word in words)[:200] or "?"


_TICKS = os.sysconf("SC_CLK_TCK") if _LINUX else 100


def now() -> int:
    """Now, in the units and from the origin of a process's start (``Proc.start``)."""
    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * _TICKS)


def _long_lived(name: str) -> set[int]:
    """``tests.prestarted``'s set ``name``: its forker, if this test process started one (it
    is not imported, or holds none, where no test started a colibri command)."""
    return set(getattr(sys.modules.get("tests.prestarted"), name, ()))


def long_lived_pids() -> set[int]:
    """The helper processes kept for many tests (the forker each test process starts colibri's
    commands from)."""
    return _long_lived("LONG_LIVED_PIDS")


def left_behind(
    table: dict[int, Proc], known: Callable[[Proc], bool], long_lived: set[int]
) -> list[Proc]:
    """The live processes under this one that are not ``known`` (there before the test, or a
    wider fixture's) and not long-lived helpers. Under a known process nothing is looked at (it
    is its owner's), under a long-lived helper everything is."""
    children: dict[int, list[Proc]] = {}
    for proc in table.values():
        children.setdefault(proc.ppid, []).append(proc)
    found: list[Proc] = []
    stack = [os.getpid()]
    while stack:
        for child in children.get(stack.pop(), []):
            if child.pid in long_lived:
                stack.append(child.pid)
            elif child.alive and not known(child):
                found.append(child)
                stack.append(child.pid)
    return found


def _owned_pids() -> set[int]:
    """The children some object of ours will wait for (a ``Popen`` not yet waited)."""
    import multiprocessing.popen_fork as popen_fork

    owned: set[int] = set()
    for obj in gc.get_objects():
        if isinstance(obj, (subprocess.Popen, popen_fork.Popen)):
            if getattr(obj, "returncode", 0) is None and isinstance(obj.pid, int):
                owned.add(obj.pid)
    return owned


def reap_orphans(table: dict[int, Proc], long_lived: set[int]) -> None:
    """Wait for the zombies that are ours and that nothing of ours will wait for: orphans that
    were re-parented here and have ended."""
    me = os.getpid()
    zombies = [p.pid for p in table.values() if p.ppid == me and p.state == "Z"]
    zombies = [pid for pid in zombies if pid not in long_lived]
    if not zombies:
        return
    owned = _owned_pids()
    for pid in zombies:
        if pid not in owned:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def end_processes(procs: list[Proc], known: Callable[[Proc], bool], long_lived: set[int]) -> None:
    """SIGKILL each of ``procs`` and its process group (when that group holds none but them),
    again for what they started meanwhile, and wait until they are gone."""
    me = os.getpid()
    deadline = time.monotonic() + 10
    while procs and time.monotonic() < deadline:
        table = processes()
        doomed = {proc.pid for proc in procs}
        groups = {proc.pgid for proc in procs}
        for proc in table.values():
            if proc.pgid in groups and proc.pid not in doomed and proc.alive:
                groups.discard(proc.pgid)  # somebody else is in it: never the whole group
        groups.discard(os.getpgrp())
        for proc in procs:
            with contextlib.suppress(OSError):
                os.kill(proc.pid, signal.SIGKILL)
        for pgid in groups:
            with contextlib.suppress(OSError):
                os.killpg(pgid, signal.SIGKILL)
        for proc in procs:
            if proc.ppid == me:
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(proc.pid, 0)
        time.sleep(0.01)
        table = processes()
        reap_orphans(table, long_lived)
        procs = left_behind(table, known, long_lived)


# --- sockets -----------------------------------------------------------------------------------


def sockets() -> dict[str, int]:
    """This process's open sockets: ``socket:[inode]`` to its descriptor."""
    found: dict[str, int] = {}
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{name}")
            if target.startswith("socket:"):
                found[target] = int(name)
    return found


def _describe_socket(fd: int) -> str:
    try:
        sock = socket.socket(fileno=os.dup(fd))
    except OSError:
        return f"fd {fd}"
    try:
        family = getattr(sock.family, "name", str(sock.family))
        ends = []
        for end in (sock.getsockname, sock.getpeername):
            with contextlib.suppress(OSError):
                ends.append(str(end()) or "''")
        return f"fd {fd} {family} {' -> '.join(ends)}"
    finally:
        sock.close()


def long_lived_sockets() -> set[str]:
    """The sockets to long-lived helpers (``LONG_LIVED_FDS``, descriptors, beside their pids)."""
    found = set()
    for fd in _long_lived("LONG_LIVED_FDS"):
        with contextlib.suppress(OSError):
            found.add(os.readlink(f"/proc/self/fd/{fd}"))
    return found


# --- around each test --------------------------------------------------------------------------

#: What the fixtures of wider scope started or opened while they were set up (they end it).
_wide_processes: set[tuple[int, int]] = set()
_wide_sockets: set[str] = set()
#: The processes the last check saw (after it ended what it found).
_last_seen: set[tuple[int, int]] = set()


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(fixturedef: pytest.FixtureDef[Any]) -> Iterator[None]:
    if fixturedef.scope == "function" or not _LINUX:
        return (yield)
    procs_before = {proc.key for proc in processes().values()}
    sockets_before = set(sockets())
    try:
        return (yield)
    finally:
        _wide_processes.update({proc.key for proc in processes().values()} - procs_before)
        _wide_sockets.update(set(sockets()) - sockets_before)


def _until_gone(find: Any) -> Any:
    """``find()`` again until it finds nothing, for at most ``GRACE``; what it last found."""
    found = find()
    deadline = time.monotonic() + GRACE
    while found and time.monotonic() < deadline:
        time.sleep(0.02)
        found = find()
    return found


@pytest.fixture(autouse=True)
def _leaves_nothing_behind(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail the test (at teardown) for a process or socket it left behind, and end those."""
    global _last_seen
    if not _LINUX:
        yield
        return
    # What was there before the test: what started before it (no list of the machine's
    # processes needed), and what the last test's check saw (started in the same tick).
    started = now()
    seen_before = _last_seen

    def known(proc: Proc) -> bool:
        return proc.start < started or proc.key in seen_before or proc.key in _wide_processes

    sockets_before = set(sockets())
    yield
    problems: list[str] = []

    table = processes()
    long_lived = long_lived_pids()
    reap_orphans(table, long_lived)
    procs = left_behind(table, known, long_lived)
    if procs:
        procs = _until_gone(lambda: left_behind(processes(), known, long_lived))
    if procs:
        shown = ", ".join(f"{p.pid} ({command_line(p.pid)})" for p in procs)
        problems.append(f"left {len(procs)} process(es) running: {shown}")
        end_processes(procs, known, long_lived)
        table = processes()
    _last_seen = {proc.key for proc in table.values()}

    def sockets_left() -> dict[str, int]:
        ignored = sockets_before | _wide_sockets | long_lived_sockets()
        return {name: fd for name, fd in sockets().items() if name not in ignored}

    if sockets_left():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            gc.collect()
        unclosed = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
        if unclosed:
            shown = "; ".join(" ".join(message.split())[:200] for message in unclosed)
            problems.append(f"left to the garbage collector: {shown}")
        still = _until_gone(sockets_left)
        if still:
            shown = ", ".join(_describe_socket(fd) for fd in still.values())
            problems.append(f"left {len(still)} socket(s) open: {shown}")
    if problems:
        pytest.fail(f"{request.node.nodeid} {'; '.join(problems)}", pytrace=False)


# --- at the end of the run ---------------------------------------------------------------------

_LEFT_AT_END = pytest.StashKey[list[str]]()


def private_server_marker() -> str:
    """What the directory of this run's private PostgreSQL servers is named with."""
    return f"colibri-pg-{run_id()}-"


def _private_servers_left() -> list[str]:
    if not _LINUX:
        return []
    marker = private_server_marker()
    found = [p for p in processes().values() if p.alive and marker in command_line(p.pid)]
    left = [f"private PostgreSQL server process {p.pid} ({command_line(p.pid)})" for p in found]
    for proc in found:
        with contextlib.suppress(OSError):
            os.kill(proc.pid, signal.SIGKILL)
    return left


def schema_prefix() -> str:
    """What the PostgreSQL schemas of this run are named with."""
    return f"t_{run_id()}_"


def _schemas_left() -> list[str]:
    """This run's schemas still in the test database (dropped now); none if it is not there."""
    try:
        import psycopg
    except ImportError:
        return []
    from tests.store.conftest import PG_DSN

    prefix = schema_prefix()
    try:
        with psycopg.connect(PG_DSN, autocommit=True, connect_timeout=3) as admin:
            names = [
                row[0]
                for row in admin.execute(
                    "SELECT nspname FROM pg_namespace WHERE left(nspname, %s) = %s",
                    (len(prefix), prefix),
                )
            ]
            for name in names:
                admin.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE')
    except psycopg.Error:
        return []
    return [f"PostgreSQL schema {name} (dropped now)" for name in sorted(names)]


#: The catalogs a run's schemas churn (each board: about 20 tables, their indexes, types,
#: policies and dependencies, made and dropped).
_CHURNED_CATALOGS = (
    "pg_attribute", "pg_class", "pg_depend", "pg_type", "pg_index", "pg_constraint",
    "pg_attrdef", "pg_policy", "pg_init_privs", "pg_sequence", "pg_trigger", "pg_description",
    "pg_shdepend",
)  # fmt: skip


def _vacuum_catalogs() -> None:
    """Where the server runs without autovacuum (as CI's does), vacuum the catalogs the run's
    schemas churned: otherwise their dead rows pile up run after run, and every later run
    (every connection's catalog lookups, every schema made) is slower than the one before."""
    try:
        import psycopg
    except ImportError:
        return
    from tests.store.conftest import PG_DSN

    with contextlib.suppress(psycopg.Error):
        with psycopg.connect(PG_DSN, autocommit=True, connect_timeout=3) as admin:
            on = admin.execute("SELECT current_setting('autovacuum')::bool").fetchone()
            if on is None or on[0]:
                return
            for catalog in _CHURNED_CATALOGS:
                admin.execute(f"VACUUM pg_catalog.{catalog}")


def pytest_sessionfinish(session: pytest.Session) -> None:
    if _is_worker(session.config):
        return  # pytest's own process checks, once every worker is done
    left = _private_servers_left() + _schemas_left()
    _vacuum_catalogs()
    if not left:
        return
    session.config.stash[_LEFT_AT_END] = left
    if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    left = config.stash.get(_LEFT_AT_END, [])
    if left:
        terminalreporter.section("left behind by this run", red=True, bold=True)
        for line in left:
            terminalreporter.line(line, red=True)
