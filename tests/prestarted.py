"""``python -m colibri …`` processes started by forking, not by starting Python again.

A test run starts about a thousand daemons and as many CLI commands; each fresh interpreter
spends most of its life importing (asyncio, click, msgspec, colibri: ~0.15 s of CPU on these
machines), which made that the suite's largest cost. Here one process per test process imports
colibri once and stays (the *forker*); each ``colibri`` a test starts is forked from it, as
``fork`` servers do (multiprocessing's forkserver, Zygote in Android).

What a test sees is still a process of its own: its own pid, session, signals, sockets, files,
exit status and command line (written over the forker's, so that ``/proc/PID/cmdline`` and
``ps`` show ``python -m colibri …`` as for a process started the usual way). What it is not:
a fresh interpreter. So a start that depends on how the interpreter itself starts — an
environment with ``LD_PRELOAD`` (libfaketime), ``PYTHON*`` variables, or another program than
``python -m colibri`` or the installed ``colibri`` script — is started the usual way (``start``
decides).

Under the forker each start is two forks: a *waiter*, whose one job is to fork the command, wait
for it and write its exit status into a pipe the test holds, and the command itself. The forker
reaps its waiters automatically (SIGCHLD ignored) and so never blocks; the test reads the
status from the pipe (``Forked.poll``, ``Forked.wait``), as ``Popen`` reads it from ``waitpid``.
"""

from __future__ import annotations

import array
import atexit
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO, Any, NoReturn

#: The pid of each forker of this test process: a test's leak check leaves it alone.
LONG_LIVED_PIDS: set[int] = set()
#: The descriptor of the connection to each forker: the leak check leaves it alone too.
LONG_LIVED_FDS: set[int] = set()

#: Names in an environment that change how an interpreter starts: such a start is a fresh one.
_FRESH_ONLY = ("LD_PRELOAD", "PYTHON")

#: The ``colibri`` program pip installed beside this interpreter (its console script).
SCRIPT = str(Path(sys.executable).parent / "colibri")

#: Room for the command line the forked command shows (written over the forker's own).
_CMDLINE_ROOM = 8192


class Forked:
    """A command forked by the forker, with the part of ``subprocess.Popen`` the tests use."""

    def __init__(self, args: list[str], pid: int, report: int) -> None:
        self.args = args
        self.pid = pid
        self.returncode: int | None = None
        self.stdout: IO[Any] | None = None
        self.stderr: IO[Any] | None = None
        self._report = report  # read end: the waiter writes the exit status here, then closes
        self._lock = threading.Lock()

    def _read_status(self, timeout: float | None) -> int | None:
        with self._lock:
            if self.returncode is not None:
                return self.returncode
            ready, _, _ = select.select([self._report], [], [], timeout)
            if not ready:
                return None
            data = b""
            while True:  # the waiter writes one short line and closes: read to its end
                chunk = os.read(self._report, 64)
                if not chunk:
                    break
                data += chunk
            os.close(self._report)
            # An empty report: the waiter itself was killed (it never is, but say something).
            self.returncode = int(data) if data.strip() else -signal.SIGKILL
            return self.returncode

    def poll(self) -> int | None:
        return self._read_status(0)

    def wait(self, timeout: float | None = None) -> int:
        code = self._read_status(timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return code

    def send_signal(self, signum: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def __del__(self) -> None:
        if self.returncode is None:
            with contextlib.suppress(OSError):
                os.close(self._report)


class _Forker:
    """The forker process of this test process, and the connection to it."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        padding = "-" * _CMDLINE_ROOM  # the room ``_show_command_line`` writes into
        self.environment = {k: v for k, v in os.environ.items() if not k.startswith("COLIBRI_")}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "tests.prestarted", str(theirs.fileno()), padding],
            pass_fds=[theirs.fileno()],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
            env=self.environment,
            cwd=Path(__file__).resolve().parent.parent,
        )
        theirs.close()
        self.socket = ours
        self.owner = os.getpid()
        self.lock = threading.Lock()
        LONG_LIVED_PIDS.add(self.process.pid)
        LONG_LIVED_FDS.add(self.socket.fileno())

    def start(
        self, argv: list[str], env: dict[str, str], cwd: str, fds: tuple[int, int, int],
        new_session: bool,
    ) -> Forked:  # fmt: skip
        report_r, report_w = os.pipe()
        script, args = _program_and_args(argv)
        request = json.dumps(
            {"script": script, "args": args, "env": env, "cwd": cwd, "session": new_session}
        )
        try:
            with self.lock:
                ancillary = array.array("i", [*fds, report_w])
                self.socket.sendmsg(
                    [request.encode() + b"\n"],
                    [(socket.SOL_SOCKET, socket.SCM_RIGHTS, ancillary.tobytes())],
                )
                os.close(report_w)
                report_w = -1
                pid_line = b""
                while not pid_line.endswith(b"\n"):  # the waiter writes the pid first
                    chunk = os.read(report_r, 1)
                    if not chunk:
                        raise RuntimeError("the forker ended before it started the command")
                    pid_line += chunk
        except BaseException:
            os.close(report_r)
            if report_w != -1:
                os.close(report_w)
            raise
        return Forked(argv, int(pid_line), report_r)

    def close(self) -> None:
        LONG_LIVED_FDS.discard(self.socket.fileno())
        self.socket.close()  # the forker reads its end of the connection and exits
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=10)
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        LONG_LIVED_PIDS.discard(self.process.pid)


_forker: _Forker | None = None
_forker_lock = threading.Lock()


def _the_forker() -> _Forker:
    """This test process's forker, started on first use (and again if it ended). It lives as
    long as the test process: it ends by itself once its connection closes with it."""
    global _forker
    with _forker_lock:
        ours = _forker is not None and _forker.owner == os.getpid()
        if _forker is not None and ours and _forker.process.poll() is not None:
            _forker.close()  # ended: its pid and connection are no longer long-lived helpers
        if _forker is None or not ours or _forker.process.poll() is not None:
            _forker = _Forker()
        return _forker


def _program_and_args(argv: list[str]) -> tuple[bool, list[str]]:
    """Whether ``argv`` starts the ``colibri`` script (else ``python -m colibri``), and the
    arguments it gives colibri."""
    return (True, argv[1:]) if argv[0] == SCRIPT else (False, argv[3:])


def forkable(argv: list[str], env: dict[str, str] | None) -> bool:
    """Whether ``argv`` is ``python -m colibri …`` or the ``colibri`` script in an environment
    that does not change how an interpreter starts (``env``: the whole environment it runs
    with, None for ours)."""
    if argv[:3] != [sys.executable, "-m", "colibri"] and argv[:1] != [SCRIPT]:
        return False
    return _interpreter_settings(os.environ if env is None else env) == _interpreter_settings(
        _forker.environment if _forker is not None else os.environ
    )


def _interpreter_settings(env: Mapping[str, str]) -> dict[str, str]:
    return {name: value for name, value in env.items() if name.startswith(_FRESH_ONLY)}


def start(
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    stdin: int | None = None,
    stdout: int | None = None,
    stderr: int | None = None,
    start_new_session: bool = False,
) -> Forked | subprocess.Popen[bytes]:
    """``argv`` started with the given file descriptors (None: /dev/null for stdin, ours for
    the others), forked when ``forkable``, else as ``subprocess.Popen`` would."""
    if not forkable(argv, env):
        return subprocess.Popen(
            argv, stdin=subprocess.DEVNULL if stdin is None else stdin, stdout=stdout,
            stderr=stderr, start_new_session=start_new_session, env=env, cwd=cwd,
        )  # fmt: skip
    if subprocess.PIPE in (stdin, stdout, stderr):
        raise ValueError("a forked command takes file descriptors, not pipes made for it")
    with open(os.devnull, "r+b") as devnull:

        def given(fd: int | None, ours: int) -> int:
            """The descriptor to give: ours where None (as Popen leaves them), /dev/null's."""
            return ours if fd is None else devnull.fileno() if fd == subprocess.DEVNULL else fd

        fds = (given(stdin, devnull.fileno()), given(stdout, 1), given(stderr, 2))
        return _the_forker().start(
            argv, dict(os.environ if env is None else env), os.fspath(cwd or os.getcwd()),
            fds, start_new_session,
        )  # fmt: skip


def run(
    argv: list[str],
    *,
    env: dict[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float | None = None,
    input: str | bytes | None = None,
    text: bool = True,
) -> subprocess.CompletedProcess[Any]:
    """As ``subprocess.run(argv, capture_output=True, text=text, …)``: ``argv`` run to its end
    (killed past ``timeout``, raising ``TimeoutExpired``), ``input`` on its stdin."""
    with tempfile.TemporaryFile() as given, tempfile.TemporaryFile() as out, \
            tempfile.TemporaryFile() as err:  # fmt: skip
        given.write(input.encode() if isinstance(input, str) else input or b"")
        given.seek(0)
        process = start(
            argv, env=env, cwd=cwd, stdin=given.fileno() if input is not None else None,
            stdout=out.fileno(), stderr=err.fileno(),
        )  # fmt: skip
        try:
            code = process.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
            raise
        out.seek(0)
        err.seek(0)
        if not text:
            return subprocess.CompletedProcess(argv, code, out.read(), err.read())
        return subprocess.CompletedProcess(argv, code, _text(out.read()), _text(err.read()))


def _text(data: bytes) -> str:
    """As ``text=True`` reads a pipe: decoded, with universal newlines."""
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")


# --- the forker's side ------------------------------------------------------------------------


def _preload() -> None:
    """What ``colibri`` imports on its way to any command, and the daemon's own modules."""
    import colibri.cli.main
    import colibri.daemon.app  # noqa: F401

    for name in (
        "colibri.cli.agents", "colibri.cli.bulk", "colibri.cli.completion", "colibri.cli.daemon",
        "colibri.cli.hive", "colibri.cli.init", "colibri.cli.ledger", "colibri.cli.schedules",
        "colibri.cli.session", "colibri.cli.store", "colibri.cli.submit", "colibri.cli.supervise",
        "colibri.cli.tasks", "colibri.cli.tls",
        "colibri.cli.tokens", "colibri.cli.watch", "colibri.cli.workspaces", "colibri.logs",
        "colibri.store.sqlite", "colibri.store.postgres", "colibri.agent.harness", "uvloop",
        "psycopg", "ssl",
    ):  # fmt: skip
        with contextlib.suppress(ImportError):
            __import__(name)


def _show_command_line(argv: list[str]) -> None:
    """Write ``argv`` over this process's command line (the forker's, padded for it), so that
    ``/proc/self/cmdline`` names the command as a process started with it would."""
    try:
        fields = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        start, end = int(fields[45]), int(fields[46])  # arg_start, arg_end (fields 48, 49)
        text = b"\0".join(arg.encode() for arg in argv) + b"\0"
        if len(text) > end - start:
            return
        with open("/proc/self/mem", "r+b", buffering=0) as memory:
            memory.seek(start)
            memory.write(text + b"\0" * (end - start - len(text)))
    except (OSError, ValueError, IndexError):
        pass  # the forker's command line stays: nothing else depends on it


def _run(request: dict[str, Any], fds: list[int], connection: socket.socket) -> None:
    """In the forked command: become it and run it (never returns: the interpreter exits as
    after ``python -m colibri``)."""
    connection.close()
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    if request["session"]:
        os.setsid()
    for target, fd in enumerate(fds[:3]):
        os.dup2(fd, target)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    if request["script"]:
        sys.argv = [SCRIPT, *request["args"]]  # as the script sets it
        _show_command_line([sys.executable, SCRIPT, *request["args"]])
    else:
        import importlib.util

        entry = importlib.util.find_spec("colibri.__main__")
        assert entry is not None and entry.origin is not None
        sys.argv = [entry.origin, *request["args"]]  # as ``python -m colibri`` sets it
        _show_command_line([sys.executable, "-m", "colibri", *request["args"]])
    from colibri.cli.main import main

    try:
        main()
        code = 0
    except SystemExit as end:
        code = _exit_code(end.code)
    except KeyboardInterrupt:
        code = -signal.SIGINT
    except BaseException:
        sys.excepthook(*sys.exc_info())
        code = 1
    _exit(code)


def _exit_code(code: object) -> int:
    """The exit status the interpreter gives ``SystemExit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _exit(code: int) -> NoReturn:
    """End as the interpreter ends a program — its other threads joined, its ``atexit``
    handlers run, its output flushed — without tearing down every module the forker loaded,
    which a process started afresh would not have (that alone took longer than the rest)."""
    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    if code < 0:  # ended by a signal (Ctrl+C): die by it, as the interpreter does
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    os._exit(code)


def _serve(fd: int) -> None:
    connection = socket.socket(fileno=fd)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # waiters are reaped by the kernel
    buffer = b""
    while True:
        fds = array.array("i")
        data, ancillary, _, _ = connection.recvmsg(65536, socket.CMSG_SPACE(4 * fds.itemsize))
        for level, kind, payload in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
        if not data:
            return  # the test process closed its end (or ended)
        buffer += data
        line, _, buffer = buffer.partition(b"\n")
        request = json.loads(line)
        stdin, stdout, stderr, report = fds
        if os.fork() == 0:  # the waiter
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            pid = os.fork()
            if pid == 0:
                os.close(report)
                _run(request, [stdin, stdout, stderr], connection)
            connection.close()
            for fd in (stdin, stdout, stderr):
                os.close(fd)
            os.write(report, f"{pid}\n".encode())
            _, status = os.waitpid(pid, 0)
            os.write(report, str(os.waitstatus_to_exitcode(status)).encode())
            os._exit(0)
        for fd in fds:
            os.close(fd)


if __name__ == "__main__":
    _preload()
    _serve(int(sys.argv[1]))
