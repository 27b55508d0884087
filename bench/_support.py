"""Shared pieces of the benchmarks: a real daemon on a temporary root, a fast protocol speaker,
process statistics and the machine description.

Every benchmark starts ``python -m colibri --root R run --log-level warning`` on a fresh root
under /tmp (short, so the socket path fits) — the tests' ``Daemon`` of ``tests/helpers.py``,
which the repository's root on ``sys.path`` makes importable — talks to it over its Unix
socket, and removes the root afterwards, even on error or Ctrl+C (SIGTERM, then SIGKILL after
a grace period).
"""

from __future__ import annotations

import asyncio
import datetime
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import msgspec

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tests.helpers import PYTHON as PYTHON  # noqa: E402  (the benchmarks import it from here)
from tests.helpers import Daemon as TestDaemon  # noqa: E402
from tests.helpers import FakeAgent as FakeAgent  # noqa: E402

CLK_TCK = os.sysconf("SC_CLK_TCK")


def _exit_on_sigterm(signum: int, frame: object) -> None:
    raise SystemExit(128 + signum)


# SIGTERM unwinds like Ctrl+C (KeyboardInterrupt), so the finally
# blocks stop the daemon and remove the temporary root instead of leaving them behind.
if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
    signal.signal(signal.SIGTERM, _exit_on_sigterm)


# -- the daemon --------------------------------------------------------------------------------


class Daemon(TestDaemon):
    """The tests' daemon (``tests/helpers.py``) on a fresh temporary root, logging warnings only
    and with no exit-code check; a context manager that removes the root when it ends.
    ``extra_args`` go to ``colibri run`` after the durability (``--listen`` and the like)."""

    #: Benchmark requests (a status of 100,000 tasks) may take a while.
    timeout = 60.0

    def __init__(
        self,
        *,
        durability: str = "full",
        config: dict[str, Any] | None = None,
        cpu: int | None = None,
        extra_args: Sequence[str] = (),
    ) -> None:
        root = Path(tempfile.mkdtemp(prefix="cb", dir="/tmp"))
        super().__init__(root, "--durability", durability, *extra_args, log_level="warning")
        if config is not None:
            (root / "colibri.jsonc").write_text(json.dumps(config))
        self.cpu = cpu

    def __enter__(self) -> Daemon:
        try:
            self.start(timeout=30.0)
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def command(self) -> list[str]:
        command = super().command()
        return command if self.cpu is None else ["taskset", "-c", str(self.cpu), *command]

    def stop(self, grace: float = 15.0) -> None:
        """SIGTERM to its process group, SIGKILL after ``grace``."""
        process = self.process
        if process is None or process.poll() is not None:
            return
        try:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=10)
        except ProcessLookupError:
            pass

    def close(self) -> None:
        try:
            self.stop()
        finally:
            shutil.rmtree(self.root, ignore_errors=True)


# -- /proc -------------------------------------------------------------------------------------


#: The PostgreSQL server the benchmarks use with ``--store postgresql``.
PG_DSN = os.environ.get("COLIBRI_TEST_PG") or "postgresql://postgres@127.0.0.1:5432/test"


class PgBoard:
    """A fresh schema on ``PG_DSN`` for one run's board, dropped at the end."""

    def __init__(self) -> None:
        import uuid

        import psycopg

        self.schema = "bench_" + uuid.uuid4().hex[:12]
        with psycopg.connect(PG_DSN, autocommit=True) as admin:
            admin.execute(f"CREATE SCHEMA {self.schema}")
        self.dsn = f"{PG_DSN}?options=-csearch_path%3D{self.schema}"

    def __enter__(self) -> PgBoard:
        return self

    def __exit__(self, *exc: object) -> None:
        import psycopg

        with psycopg.connect(PG_DSN, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE")

    def as_app_role(self) -> str:
        """The board granted to the role ``colibri hive grant`` makes, as the suite's
        (tests/store/conftest.py): the connection string of a daemon held to row-level
        security."""
        from tests.store.conftest import as_app_role

        return as_app_role(self.dsn)


def proc_status(pid: int) -> dict[str, int]:
    """VmRSS, VmHWM and friends of a process, in KiB."""
    out: dict[str, int] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key.startswith("Vm") and value.strip().endswith("kB"):
            out[key] = int(value.split()[0])
    return out


def cpu_seconds(pid: int) -> float:
    """User + system CPU time a process has used so far."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def own_cpu_seconds() -> float:
    t = os.times()
    return t.user + t.system


# -- statistics and output ---------------------------------------------------------------------


def median(values: Sequence[float]) -> float:
    return statistics.median(values)


def percentile(sorted_values: Sequence[float], p: float) -> float:
    """Nearest-rank percentile of already sorted values (p in 0..100)."""
    if not sorted_values:
        return float("nan")
    rank = max(1, min(len(sorted_values), round(p / 100 * len(sorted_values) + 0.5)))
    return sorted_values[rank - 1]


def machine() -> dict[str, Any]:
    model = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "nproc": os.cpu_count(),
        "cpu": model,
        "python": platform.python_version(),
        "kernel": platform.release(),
        "loadavg": [round(x, 2) for x in os.getloadavg()],
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def emit(result: dict[str, Any]) -> None:
    """The one JSON line on stdout that run_all.py collects."""
    result.setdefault("machine", machine())
    print(json.dumps(result), flush=True)


def note(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def pin_self(cpu: int | None) -> None:
    if cpu is not None:
        os.sched_setaffinity(0, {cpu})


# -- a fast protocol speaker -------------------------------------------------------------------
#
# The load generator must not be the bottleneck: it runs on one core and has to keep up with the
# daemon. So it is written on asyncio.Protocol (callbacks, no task per message), decodes only the
# fields it needs into small msgspec structs, and answers a whole received chunk with one write.


class TaskRef(msgspec.Struct):
    id: str
    state: str = ""


class Message(msgspec.Struct):
    """The few fields of a daemon message the benchmarks look at."""

    id: int | None = None
    ok: bool | None = None
    event: str | None = None
    epoch: int = 0
    task: TaskRef | str | None = None
    error: dict[str, Any] | None = None


decode_message = msgspec.json.Decoder(Message).decode
encode = msgspec.json.Encoder().encode


class LineProtocol(asyncio.Protocol):
    """Splits the stream into lines and hands each chunk's lines to ``on_lines``."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self._tail = b""
        self.connected: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.lost: asyncio.Future[None] = asyncio.get_running_loop().create_future()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.connected.set_result(None)

    def data_received(self, data: bytes) -> None:
        if self._tail:
            data = self._tail + data
        lines = data.split(b"\n")
        self._tail = lines.pop()
        self.on_lines(lines)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(None)

    def on_lines(self, lines: list[bytes]) -> None:
        raise NotImplementedError

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)


async def connect(path: Path, factory: Callable[[], LineProtocol]) -> LineProtocol:
    loop = asyncio.get_running_loop()
    _, protocol = await loop.create_unix_connection(factory, str(path))
    await protocol.connected
    return protocol


class Failure(Exception):
    """The daemon answered a benchmark request with an error."""


def check(message: Message, what: str) -> None:
    if not message.ok:
        raise Failure(f"{what} refused: {message.error}")
