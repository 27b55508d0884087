"""Test helpers: drive a real daemon process and speak the protocol as agents do."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from colibri.client import Client, socket_path
from colibri.core.model import DEFAULT_MAX_LINE

if TYPE_CHECKING:
    from tests.prestarted import Forked

PYTHON = sys.executable

#: Coverage.py's settings when the suite is measured (bench/coverage.sh), for the processes a
#: test starts in an environment of its own: with them, those are measured too. Empty otherwise.
COVERAGE_ENV = {name: value for name, value in os.environ.items() if name.startswith("COVERAGE_")}

#: ``COLIBRI_TEST_STORE=postgresql`` runs every test daemon on a PostgreSQL board (a schema of
#: its own on ``COLIBRI_TEST_PG``'s server) instead of its root's SQLite file. Read here, at
#: import: each test's environment is cleared of COLIBRI_* variables.
STORE_BACKEND = os.environ.get("COLIBRI_TEST_STORE", "sqlite")


#: A test that reads or plants rows in the board's SQLite file itself.
def sqlite_only(test: Callable[..., Any]) -> Callable[..., Any]:
    import pytest

    return pytest.mark.skipif(
        STORE_BACKEND != "sqlite", reason="reads or writes the SQLite file itself"
    )(test)


def set_next_fire(root: Path, seconds_ago: float) -> None:
    """Move every schedule's next fire ``seconds_ago`` back (to a whole minute), in the SQLite
    board of a stopped daemon: as if it had been down that long."""
    import sqlite3

    from colibri.core.model import rfc3339

    stamp = rfc3339((time.time() // 60) * 60 - seconds_ago)
    with sqlite3.connect(root / ".colibri" / "colibri.sqlite") as db:
        db.execute(
            "UPDATE schedules SET next_fire_at = ?, doc = json_set(doc, '$.next_fire_at', ?)",
            (stamp, stamp),
        )


#: How to drop the PostgreSQL boards the test daemons made (at the end of the session).
PG_BOARDS_TO_DROP: list[Callable[[], None]] = []


def pong(request_id: Any) -> dict[str, Any]:
    """The daemon's reply to ``ping`` (with the default line limit)."""
    return {"id": request_id, "ok": True, "pong": True, "max_line": DEFAULT_MAX_LINE}


def write_config(
    root: Path, *, tick: str = "30s", agent_ttl: str = "30s", **scheduler: Any
) -> None:
    """Write colibri.jsonc with the given scheduler settings (short ones make tests fast)."""
    settings = {"tick": tick, "agent_ttl": agent_ttl, **scheduler}
    (root / "colibri.jsonc").write_text(json.dumps({"scheduler": settings}, indent=2))


def colibri(
    root: Path | None,
    *args: str,
    env: dict[str, str] | None = None,
    timeout: float = 60.0,
    cwd: Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """``python -m colibri`` run to its end (forked: tests/prestarted.py), ``--root`` given
    unless ``root`` is None, with ``env`` added to our environment, in ``cwd``; what it printed
    is captured."""
    from tests import prestarted

    argv = [PYTHON, "-m", "colibri", *(["--root", str(root)] if root is not None else []), *args]
    return prestarted.run(argv, env={**os.environ, **(env or {})}, cwd=cwd, timeout=timeout)


def run_refused(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``colibri run`` that is expected to refuse: it must exit by itself (no daemon)."""
    return colibri(root, "run", *args)


def one_line(stderr: str) -> str:
    """The one line of a message (a refusal is one line on stderr, never a traceback)."""
    lines = stderr.strip().splitlines()
    assert len(lines) == 1, f"expected a one-line message, got:\n{stderr}"
    return lines[0]


def error_code(call: Callable[[], Any]) -> str:
    """The code of the error ``call`` raises (it must raise one of ours)."""
    import pytest

    from colibri.core.errors import ColibriError

    with pytest.raises(ColibriError) as caught:
        call()
    return caught.value.code


def on_a_terminal(
    args: list[str], timeout: float = 120.0, *, stdout_too: bool = False
) -> tuple[subprocess.CompletedProcess[str], bytes]:
    """Run ``args`` with stderr on a pseudo-terminal (stdout piped, as when a person pipes a
    command on, unless ``stdout_too``: then both are on the terminal, as a command typed
    alone): the finished process, and what it wrote to the terminal."""
    import selectors

    leader, follower = os.openpty()
    try:
        process = subprocess.Popen(
            args, stdout=follower if stdout_too else subprocess.PIPE, stderr=follower
        )
        os.close(follower)
        # Both read as they come: a pipe left unread fills up and stops the command.
        piped = process.stdout.fileno() if process.stdout is not None else None
        read = {fd: bytearray() for fd in (leader, piped) if fd is not None}
        with selectors.DefaultSelector() as selector:
            for fd in read:
                selector.register(fd, selectors.EVENT_READ)
            while selector.get_map():
                for key, _ in selector.select():
                    try:
                        chunk = os.read(key.fd, 65536)
                    except OSError:  # the terminal's other end is closed: all of it was read
                        chunk = b""
                    if chunk:
                        read[key.fd] += chunk
                    else:
                        selector.unregister(key.fd)
        process.communicate(timeout=timeout)
    finally:
        os.close(leader)
    out = read[piped].decode() if piped is not None else ""
    return subprocess.CompletedProcess(args, process.returncode, out, ""), bytes(read[leader])


def screen(shown: bytes) -> list[str]:
    """The lines a terminal shows once it has been written ``shown``: a carriage return goes
    back to the line's start, ``ESC [ K`` erases from there to its end, and what is written
    over a line replaces it, as a person sees it when the command is done."""
    text = shown.decode()
    lines: list[str] = []
    line: list[str] = []
    column = 0
    i = 0
    while i < len(text):
        if text.startswith("\x1b[K", i):
            del line[column:]
            i += 3
            continue
        char = text[i]
        if char == "\r":
            column = 0
        elif char == "\n":
            lines.append("".join(line))
            line, column = [], 0
        elif column < len(line):
            line[column] = char
            column += 1
        else:
            line.append(char)
            column += 1
        i += 1
    if line:
        lines.append("".join(line))
    return lines


def wait_until(predicate: Callable[[], Any], timeout: float = 10.0, interval: float = 0.02) -> Any:
    """Poll until ``predicate`` returns something truthy; fail the test on timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"condition not met within {timeout}s: {predicate}")
        time.sleep(interval)


class Daemon:
    """``python -m colibri run`` on a root, as a real process."""

    #: How long a request through ``call`` (and ``task``, ``ledger``, ``submit``) may take.
    timeout: float = 10.0

    def __init__(
        self,
        root: Path,
        *extra_args: str,
        env: dict[str, str] | None = None,
        log_level: str = "debug",
    ) -> None:
        self.root = root
        self.extra_args = list(extra_args)
        #: Extra environment variables for the daemon process (e.g. COLIBRI_CRASHPOINT).
        self.env = dict(env or {})
        self.log_level = log_level
        self.process: subprocess.Popen[bytes] | Forked | None = None
        self.log_path = root / "daemon.log"
        self._pg_board: str | None = None
        #: The same board as its tables' owner, for a test's own reads (RLS binds the daemon's).
        self.pg_owner_board: str | None = None

    @property
    def socket(self) -> Path:
        return socket_path(self.root)

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def command(self) -> list[str]:
        """How the daemon is started (a subclass may wrap it)."""
        store: list[str] = []
        if STORE_BACKEND == "postgresql" and "--store" not in self.extra_args:
            # A short lease: a daemon started again after a kill waits it out.
            store = ["--store", self.pg_board(), "--lease-ttl", "2s"]
        return [PYTHON, "-m", "colibri", "--root", str(self.root), "run",
                "--log-level", self.log_level, *store, *self.extra_args]  # fmt: skip

    def pg_board(self) -> str:
        """This daemon's PostgreSQL board, made on first use and kept across restarts (its
        schema is dropped with the test server's other test schemas, by name ``t_…``)."""
        if self._pg_board is None:
            from tests.store.conftest import as_app_role, pg_schema

            self.pg_owner_board, drop = pg_schema()
            PG_BOARDS_TO_DROP.append(drop)
            # The daemon connects as the role the hive's daemons should: row-level security
            # binds it, so every path it takes is shown to keep to the policies.
            self._pg_board = as_app_role(self.pg_owner_board)
        return self._pg_board

    def start(self, timeout: float = 15.0) -> None:
        from tests import prestarted

        with open(self.log_path, "ab") as log:
            self.process = prestarted.start(
                self.command(), stdout=log.fileno(), stderr=log.fileno(),
                start_new_session=True, env={**os.environ, **self.env} if self.env else None,
            )  # fmt: skip
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise AssertionError(f"daemon exited with {self.process.returncode}:\n{self.log()}")
            try:
                with Client(self.socket, timeout=5) as client:
                    client.call("ping")
                return
            except Exception:
                time.sleep(0.02)
        # Never leave it behind: the test fails here, before anything would stop it.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(timeout=10)
        raise AssertionError(f"daemon did not become ready:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def client(self, timeout: float | None = 10.0) -> Client:
        return Client(self.socket, timeout=timeout)

    def call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        with self.client(self.timeout) as client:
            return client.call(cmd, **fields)

    def submit(self, text: str = "a task", **fields: Any) -> dict[str, Any]:
        """Submit a task; the task as the daemon took it."""
        return self.call("submit", text=text, **fields)["task"]

    def task(self, task_id: str) -> dict[str, Any]:
        """The task ``task_id`` as the board has it now."""
        return self.call("get", task=task_id)["task"]

    def ledger(self, task_id: str | None = None) -> list[dict[str, Any]]:
        """The ledger rows of ``task_id`` (of every task with None), oldest first."""
        return self.call("ledger", task=task_id, limit=10_000)["entries"]

    def wait_closed(self, task_id: str, timeout: float = 10.0) -> dict[str, Any]:
        """Wait until the task is ``closed``; the task then."""

        def closed() -> dict[str, Any] | None:
            task = self.task(task_id)
            return task if task["state"] == "closed" else None

        return wait_until(closed, timeout=timeout)

    def stop(self) -> None:
        """SIGTERM; the daemon must exit 0 and leave no process of its group behind."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=15)
        assert code == 0, f"daemon exited with {code}:\n{self.log()}"

    def stop_with(self, *others: Daemon) -> None:
        """Stop this daemon and ``others`` (a test's teardown): each one, even when an earlier
        one fails to stop cleanly — a daemon left running would be reported in whichever test
        runs next. The first failure is raised after."""
        failures: list[BaseException] = []
        for daemon in (self, *others):
            try:
                daemon.stop()
            except BaseException as exc:  # every one is stopped regardless
                failures.append(exc)
            finally:
                if daemon.process is not None and daemon.process.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(daemon.process.pid, signal.SIGKILL)  # its whole group
                    daemon.process.wait(timeout=10)
        if failures:
            raise failures[0]

    def kill(self) -> None:
        """SIGKILL, as a crash."""
        assert self.process is not None
        self.process.kill()
        self.process.wait(timeout=10)

    def restart(self) -> None:
        self.kill()
        self.start()


def harness_pid(root: Path, workspace: str) -> int | None:
    """The pid of the harness that holds ``workspace``'s lock: the one running its sessions.
    (The supervisor's ``status`` may for a moment name one it has just started that found the
    lock held.)"""
    from colibri.layout import RootLayout
    from colibri.locks import holder_pid

    return holder_pid(RootLayout(root).harness_lock(workspace))


def online(daemon: Daemon, *names: str) -> bool:
    """Every agent of ``names`` is registered and online."""
    agents = {a["name"]: a for a in daemon.call("agents")["agents"]}
    return all(name in agents and agents[name]["online"] for name in names)


class RawConnection:
    """A socket speaking raw bytes, for malformed input."""

    def __init__(self, path: Path, timeout: float = 10.0) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.settimeout(timeout)
        self.sock.connect(str(path))
        self.file = self.sock.makefile("rb")

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def reply(self) -> dict[str, Any]:
        line = self.file.readline()
        assert line, "connection closed"
        return json.loads(line)

    def closed(self) -> bool:
        """True once the daemon has closed the connection (EOF)."""
        return self.file.readline() == b""

    def close(self) -> None:
        self.file.close()
        self.sock.close()


class FakeAgent:
    """An agent speaking the protocol by hand, so a test controls every report."""

    def __init__(
        self,
        daemon: Daemon,
        name: str,
        capabilities: list[str] | None = None,
        slots: int = 1,
        ttl: float | None = None,
        running: list[dict[str, Any]] | None = None,
        **extra: Any,
    ) -> None:
        self.name = name
        self.client = daemon.client()
        self.registration = self.client.call(
            "register-agent",
            name=name,
            capabilities=capabilities or [],
            slots=slots,
            ttl=ttl,
            running=running or [],
            **extra,
        )
        self.events: list[dict[str, Any]] = []

    def next_event(self, kind: str | None = None, timeout: float = 10.0) -> dict[str, Any]:
        self.client._sock.settimeout(timeout)
        while True:
            message = self.client.read()
            if "event" in message and (kind is None or message["event"] == kind):
                self.events.append(message)
                return message

    def next_assign(self, timeout: float = 10.0) -> dict[str, Any]:
        return self.next_event("assign", timeout)

    def out(self, assign: dict[str, Any], output: str = "ok", **extra: Any) -> dict[str, Any]:
        return self.client.call(
            "out", task=assign["task"]["id"], epoch=assign["epoch"], output=output, **extra
        )

    def fail(self, assign: dict[str, Any], error: str = "boom", **extra: Any) -> dict[str, Any]:
        return self.client.call(
            "fail", task=assign["task"]["id"], epoch=assign["epoch"], error=error, **extra
        )

    def close(self) -> None:
        self.client.close()


def claim_of(daemon: Daemon, task_id: str, epoch: int) -> str:
    """The secret of a claim, as its session is given it: from the board's key, read from the
    store (a test plays a session whose environment it did not keep)."""
    import sqlite3

    from colibri.core.claims import claim_secret

    if daemon.pg_owner_board is not None:
        import psycopg

        with psycopg.connect(daemon.pg_owner_board) as pg:
            row = pg.execute("SELECT value FROM meta WHERE name = 'claim_key'").fetchone()
            assert row is not None
            return claim_secret(bytes(row[0]), task_id, epoch)
    path = daemon.root / ".colibri" / "colibri.sqlite"
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        (key,) = db.execute("SELECT value FROM meta WHERE name = 'claim_key'").fetchone()
    finally:
        db.close()
    return claim_secret(bytes(key), task_id, epoch)


def harness(
    root: Path, name: str, caps: list[str], command: list[str], *extra: str
) -> subprocess.Popen[bytes]:
    """Start a real ``colibri agent`` harness process in its own process group."""
    cmd = [
        PYTHON,
        "-m",
        "colibri",
        "--root",
        str(root),
        "agent",
        "--name",
        name,
        "--log-level",
        "debug",
        *extra,
    ]
    for cap in caps:
        cmd += ["--cap", cap]
    log = open(root / f"agent-{name}.log", "ab")
    process = subprocess.Popen(
        [*cmd, "--", *command], stdout=log, stderr=log, start_new_session=True, cwd=root
    )
    log.close()
    return process


def stop_process(process: subprocess.Popen[bytes], timeout: float = 15.0) -> int:
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
    return process.wait(timeout=timeout)


def group_members(pgid: int) -> list[int]:
    """Live processes of the process group ``pgid``, read from /proc.

    Zombies do not count: an orphan that died waits for init to reap it, and kill(2) would
    still find it.
    """
    members: list[int] = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        state, pgrp = fields[0], int(fields[2])
        if pgrp == pgid and state not in ("Z", "X"):
            members.append(int(entry.name))
    return members


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True


#: A uid that is not ours, for tests run as root: the conventional "nobody".
NOBODY = 65534


def run_as_nobody(
    script: str, *args: str, timeout: float = 30, group: int = NOBODY
) -> subprocess.CompletedProcess[bytes]:
    """Run a Python ``script`` as uid 65534 with gid ``group`` and no other groups (needs
    root); skip the test if no Python is reachable for that user (a virtual environment under
    /root may not be)."""
    import shutil

    import pytest

    found = [os.path.realpath(sys.executable), "/usr/bin/python3", shutil.which("python3") or ""]
    for python in dict.fromkeys(p for p in found if p and os.path.exists(p)):
        try:
            return subprocess.run(
                [python, "-I", "-c", script, *args],
                user=NOBODY,
                group=group,
                extra_groups=[],
                cwd="/",
                capture_output=True,
                timeout=timeout,
                check=False,
            )
        except PermissionError:
            continue
    pytest.skip(f"no Python interpreter that uid {NOBODY} may run")


_PEER_SCRIPT = """
import json, socket, sys
path, line, until_closed = sys.argv[1], sys.argv[2], sys.argv[3] == "closed"
s = socket.socket(socket.AF_UNIX)
s.settimeout(10)
try:
    s.connect(path)
except OSError as exc:
    print(json.dumps({"connect": exc.__class__.__name__}))
    raise SystemExit(0)
try:
    s.sendall(line.encode() + b"\\n")
except OSError:
    pass  # refused and closed before the request went out: the refusal is still to be read
data, closed = b"", False
while until_closed or not data.endswith(b"\\n"):
    try:
        chunk = s.recv(65536)
    except ConnectionResetError:
        chunk = b""
    if not chunk:
        closed = True
        break
    data += chunk
print(json.dumps({"reply": data.decode(), "closed": closed}))
"""


def connect_as_nobody(
    path: Path, line: str, *, until_closed: bool = False, group: int = NOBODY
) -> dict[str, Any]:
    """Connect to the socket ``path`` as uid 65534 (``run_as_nobody``), send ``line``, and read one
    reply line, or everything until the daemon closes the connection: ``{"connect": error}``
    if the connect failed, else ``{"reply": text read, "closed": whether it was closed}``."""
    mode = "closed" if until_closed else "line"
    done = run_as_nobody(_PEER_SCRIPT, str(path), line, mode, group=group)
    assert done.returncode == 0, done.stderr.decode()
    result: dict[str, Any] = json.loads(done.stdout)
    return result


#: A scrape: each sample by its name and its labels (sorted ``(name, value)`` pairs).
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(url: str) -> Samples:
    """GET ``url`` (a daemon's ``/metrics``) and read it with Prometheus's own parser."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as response:
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain; version=")
        text = response.read().decode()
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def sample(samples: Samples, name: str, **labels: str) -> float | None:
    """The value of sample ``name`` with exactly ``labels``; None when the scrape has none."""
    return samples.get((name, tuple(sorted(labels.items()))))


def metrics_url(daemon: Daemon) -> str:
    """Where the daemon serves its metrics, as ``status`` says (``--metrics HOST:0`` too)."""
    url = daemon.call("status")["daemon"]["metrics"]
    assert isinstance(url, str) and url.startswith("http://"), url
    return url


#: Sockets holding the ports ``free_port`` gave, until ``release_ports``.
_reserved: list[socket.socket] = []


def free_port() -> int:
    """A loopback port nobody else is given until ``release_ports`` (a test's teardown).

    A port probed and closed could be handed to another test's server, or to an outgoing
    connection's end, before the daemon that is to listen there binds it (a standby binds only
    when it takes over). The probe stays bound instead, with SO_REUSEADDR and never listening:
    the kernel then picks it for no one, and our servers, which bind with SO_REUSEADDR too,
    still can."""
    probe = socket.socket()
    probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    probe.bind(("127.0.0.1", 0))
    _reserved.append(probe)
    return int(probe.getsockname()[1])


def release_ports() -> None:
    while _reserved:
        _reserved.pop().close()


class RecordingProxy:
    """A real socket in front of the daemon's: forwards every line both ways, and keeps what
    each connection sent, so a test sees exactly which reports a harness made."""

    def __init__(self, path: Path, upstream: Path) -> None:
        self.path, self.upstream = path, upstream
        self.sent: list[list[dict[str, Any]]] = []
        self.sockets: list[socket.socket] = []
        #: Set by ``close``: a connection accepted as it closes is closed, not forwarded.
        self.closing = False
        self.lock = threading.Lock()
        self.listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.listener.bind(str(path))
        self.listener.listen()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while True:
            try:
                down, _ = self.listener.accept()
            except OSError:
                return
            up = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            with self.lock:
                closing = self.closing
                if not closing:
                    self.sockets += [down, up]
            try:
                if closing:
                    raise ConnectionAbortedError
                up.connect(str(self.upstream))
            except OSError:  # closing, or the daemon gone: so is this connection
                down.close()
                up.close()
                continue
            lines: list[dict[str, Any]] = []
            self.sent.append(lines)
            threading.Thread(target=self._pipe, args=(down, up, lines), daemon=True).start()
            threading.Thread(target=self._pipe, args=(up, down, None), daemon=True).start()

    @staticmethod
    def _pipe(src: socket.socket, dst: socket.socket, lines: list[dict[str, Any]] | None) -> None:
        pending = b""
        with contextlib.suppress(OSError):
            while data := src.recv(65536):
                if lines is not None:
                    pending += data
                    *whole, pending = pending.split(b"\n")
                    lines.extend(json.loads(line) for line in whole if line.strip())
                dst.sendall(data)
        with contextlib.suppress(OSError):
            dst.shutdown(socket.SHUT_WR)

    def harness_reports(self, task_id: str) -> list[str]:
        """The reports about ``task_id`` that the harness's own connection (the one that
        registered) sent."""
        return [
            line["cmd"]
            for lines in self.sent
            if lines and lines[0].get("cmd") == "register-agent"
            for line in lines
            if line.get("task") == task_id and line.get("cmd") in ("out", "fail", "reclaimed")
        ]

    def close(self) -> None:
        with self.lock:
            self.closing = True
        for sock in [self.listener, *self.sockets]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)
            sock.close()
