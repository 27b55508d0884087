"""The peers of bench/peers.py that keep their queue in SQLite or Redis: Huey and Celery.

Each peer runs as it would in production: its own consumer process (the counterpart of the
daemon), fed by this process (the counterpart of the submitters), configured as its docs
recommend for throughput. The task is a no-op. Three things are measured, all on
``time.monotonic()``, which is the same clock in every process of the machine:

* ``e2e`` — the producer enqueues ``tasks`` as fast as it can while the consumer runs; from the
  first enqueue to the moment the consumer has completed the last task (a completion hook in
  the consumer counts tasks and writes a marker file with the time);
* ``drain`` — the queue is filled with no consumer running, then a fresh consumer drains it,
  timed from its first completed task to its last (its start-up not counted);
* ``latency`` — one task at a time: from the enqueue call to the first line of the task in the
  consumer (the task sends its clock in a UDP datagram to the producer), then a short pause so
  the consumer's bookkeeping of the finished task is not in the next probe.

The peers:

* ``huey-sqlite`` — ``SqliteHuey`` as it comes: WAL and SQLite's default ``synchronous=FULL``,
  so each enqueue and each dequeue is a durable commit of its own;
* ``huey-sqlite-nofsync`` — the same with ``fsync=False`` (``synchronous=OFF``): its fastest
  setting, not durable;
* ``huey-redis`` — ``RedisHuey`` (blocking pops) on this machine's Redis, which keeps nothing
  on disk here: not durable;
* ``celery`` — Celery's ``solo`` pool (one task at a time in the worker's own process, the
  least overhead for no-op tasks), Redis as the broker, results ignored, gossip, mingle and
  heartbeats off, a prefetch multiplier of 128 (its docs' advice for many short tasks).

Both consumers poll or block with the settings their docs give for low latency (Huey:
``-d 0.001 -m 0.01``; Redis: blocking pops).
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from _support import PYTHON

#: The Redis the peers use (a database of its own, emptied before each run).
REDIS_URL = os.environ.get("COLIBRI_BENCH_REDIS") or "redis://127.0.0.1:6379/13"
PEERS = ("huey-sqlite", "huey-sqlite-nofsync", "huey-redis", "celery")
#: After a latency probe, before the next: the consumer finishes its bookkeeping meanwhile.
PROBE_PAUSE = 0.02

#: The consumer's module, shared with the producer (both import it): the queue and the tasks.
_COMMON = textwrap.dedent(
    """
    import os, socket, threading, time

    _marks = {int(n) for n in os.environ["QP_MARKS"].split(",") if n}
    _lock = threading.Lock()
    _count = 0
    _udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)

    def _completed():
        global _count
        with _lock:
            _count += 1
            if _count in _marks:
                path = os.path.join(os.environ["QP_DIR"], f"done-{_count}")
                with open(path + ".tmp", "w") as f:
                    f.write(repr(time.monotonic()))
                os.rename(path + ".tmp", path)

    def _started(port):
        _udp.sendto(repr(time.monotonic()).encode(), ("127.0.0.1", port))
    """
)

HUEY_MODULE = _COMMON + textwrap.dedent(
    """
    from huey import RedisHuey, SqliteHuey
    from huey.signals import SIGNAL_COMPLETE

    if os.environ["QP_STORAGE"] == "redis":
        huey = RedisHuey("qpbench", url=os.environ["QP_REDIS"], blocking=True)
    else:
        huey = SqliteHuey(filename=os.environ["QP_DB"], timeout=60,
                          fsync={"default": None, "off": False}[os.environ["QP_FSYNC"]])

    @huey.task()
    def noop():
        pass

    @huey.task()
    def probe(port):
        _started(port)

    @huey.signal(SIGNAL_COMPLETE)
    def _complete(signal, task):
        _completed()
    """
)

CELERY_MODULE = _COMMON + textwrap.dedent(
    """
    from celery import Celery
    from celery.signals import task_postrun

    app = Celery("qpbench", broker=os.environ["QP_REDIS"])
    app.conf.update(
        task_ignore_result=True,
        worker_prefetch_multiplier=128,
        broker_connection_retry_on_startup=True,
        worker_hijack_root_logger=False,
    )

    @app.task(name="noop")
    def noop():
        pass

    @app.task(name="probe")
    def probe(port):
        _started(port)

    @task_postrun.connect
    def _complete(**kwargs):
        _completed()
    """
)


class Unavailable(Exception):
    """A peer that cannot run here: not installed, or its server does not answer."""


def unavailable(peer: str) -> str | None:
    """Why ``peer`` cannot run on this machine now, in a few words; None if it can."""
    need = {"huey-sqlite": ["huey"], "huey-sqlite-nofsync": ["huey"],
            "huey-redis": ["huey", "redis"], "celery": ["celery", "redis"]}[peer]  # fmt: skip
    missing = [m for m in need if importlib.util.find_spec(m) is None]
    if missing:
        return f"{' and '.join(missing)} not installed"
    if "redis" in need:
        import redis

        try:
            redis.Redis.from_url(REDIS_URL, socket_connect_timeout=2).ping()
        except redis.RedisError as exc:
            return f"Redis at {REDIS_URL} does not answer ({exc})"
    return None


def version(peer: str) -> str:
    from importlib.metadata import version as of

    return of("celery" if peer == "celery" else "huey")


class PeerRun:
    """One peer's queue and consumer process on a temporary directory; this process is the
    producer."""

    def __init__(self, peer: str, marks: list[int]) -> None:
        self.peer = peer
        self.dir = Path(tempfile.mkdtemp(prefix="qp", dir="/tmp"))
        is_celery = peer == "celery"
        (self.dir / "qpbench.py").write_text(CELERY_MODULE if is_celery else HUEY_MODULE)
        self.env = {
            **os.environ,
            "QP_DIR": str(self.dir),
            "QP_DB": str(self.dir / "huey.db"),
            "QP_MARKS": ",".join(map(str, marks)),
            "QP_STORAGE": "redis" if peer in ("huey-redis", "celery") else "sqlite",
            "QP_FSYNC": "off" if peer == "huey-sqlite-nofsync" else "default",
            "QP_REDIS": REDIS_URL,
            "PYTHONPATH": os.pathsep.join(
                [str(self.dir), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        }
        if self.env["QP_STORAGE"] == "redis":
            import redis

            redis.Redis.from_url(REDIS_URL).flushdb()
        os.environ.update({k: v for k, v in self.env.items() if k.startswith("QP_")})
        sys.path.insert(0, str(self.dir))
        sys.modules.pop("qpbench", None)
        self.module: Any = importlib.import_module("qpbench")
        self.consumer: subprocess.Popen[bytes] | None = None

    def start_consumer(self, marks: list[int] | None = None) -> None:
        if marks is not None:
            self.env["QP_MARKS"] = ",".join(map(str, marks))
        if self.peer == "celery":
            command = [
                PYTHON, "-m", "celery", "-A", "qpbench", "worker", "--pool", "solo",
                "--without-gossip", "--without-mingle", "--without-heartbeat",
                "--loglevel", "WARNING",
            ]  # fmt: skip
        else:
            command = [
                PYTHON, "-m", "huey.bin.huey_consumer", "qpbench.huey",
                "-w", "1", "-k", "thread",
                "-d", "0.001", "-m", "0.01", "-b", "1.0",  # poll often when idle
                "-n", "-C", "-q",
            ]  # fmt: skip
        with open(self.dir / "consumer.log", "ab") as log:
            self.consumer = subprocess.Popen(
                command, cwd=self.dir, env=self.env, stdout=log, stderr=log,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip

    def _alive(self) -> None:
        if self.consumer is not None and self.consumer.poll() is not None:
            log = (self.dir / "consumer.log").read_text(errors="replace")[-3000:]
            raise RuntimeError(f"{self.peer} consumer exited {self.consumer.returncode}:\n{log}")

    def wait_mark(self, count: int, timeout: float) -> float:
        path = self.dir / f"done-{count}"
        deadline = time.monotonic() + timeout
        while not path.exists():
            self._alive()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.peer} did not complete {count} tasks in {timeout}s")
            time.sleep(0.0005)
        return float(path.read_text())

    def enqueue(self, n: int) -> None:
        noop = self.module.noop
        send = noop.delay if self.peer == "celery" else noop
        for _ in range(n):
            send()

    def probe(self, port: int) -> None:
        probe = self.module.probe
        (probe.delay if self.peer == "celery" else probe)(port)

    def stop_consumer(self) -> None:
        consumer, self.consumer = self.consumer, None
        if consumer is not None and consumer.poll() is None:
            try:
                os.killpg(consumer.pid, signal.SIGINT if self.peer != "celery" else signal.SIGTERM)
                consumer.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(consumer.pid, signal.SIGKILL)
                consumer.wait(timeout=10)
            except ProcessLookupError:
                pass
        for mark in self.dir.glob("done-*"):
            mark.unlink()

    def close(self) -> None:
        try:
            self.stop_consumer()
        finally:
            if self.peer != "celery" and self.env["QP_STORAGE"] == "sqlite":
                self.module.huey.storage.close()
            sys.path.remove(str(self.dir))
            shutil.rmtree(self.dir, ignore_errors=True)


def e2e_and_drain(peer: str, tasks: int, warmup: int, timeout: float) -> dict[str, float]:
    """Tasks/s end to end (producer and consumer together), then the consumer's drain rate."""
    run = PeerRun(peer, [warmup, warmup + tasks])
    try:
        run.start_consumer()
        run.enqueue(warmup)
        run.wait_mark(warmup, timeout)
        start = time.monotonic()
        run.enqueue(tasks)
        enqueued = time.monotonic()
        end = run.wait_mark(warmup + tasks, timeout)
        run.stop_consumer()
        run.enqueue(tasks)
        run.start_consumer([1, tasks])
        first = run.wait_mark(1, timeout)
        last = run.wait_mark(tasks, timeout)
    finally:
        run.close()
    return {
        "e2e_tasks_per_s": round(tasks / (end - start), 1),
        "drain_tasks_per_s": round((tasks - 1) / (last - first), 1),
        "enqueue_per_s": round(tasks / (enqueued - start), 1),
    }


def latency(peer: str, probes: int, warmup: int) -> list[float]:
    """Milliseconds from each enqueue call to the task's first line in the consumer."""
    udp = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    udp.bind(("127.0.0.1", 0))
    udp.settimeout(30)
    port = udp.getsockname()[1]
    run = PeerRun(peer, [])
    ms: list[float] = []
    try:
        run.start_consumer()
        for n in range(warmup + probes):
            start = time.monotonic()
            run.probe(port)
            try:
                started = float(udp.recv(64))
            except TimeoutError:
                run._alive()
                raise RuntimeError(f"{peer}: a probe did not start within 30 s") from None
            if n >= warmup:
                ms.append((started - start) * 1000)
            time.sleep(PROBE_PAUSE)
    finally:
        udp.close()
        run.close()
    return ms
