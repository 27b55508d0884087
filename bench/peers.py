"""A peer side by side: Colibri against Huey on SQLite, no-op tasks, same machine, same run.

Huey (``SqliteHuey``) is run twice: as it comes (WAL and SQLite's default
``synchronous=FULL``, so each enqueue and each dequeue is a durable commit of its own), and
with ``fsync=False`` (``synchronous=OFF``: nothing is fsynced; its fastest setting, not
durable). Huey runs its own consumer, ``huey_consumer`` with thread
workers, as a separate process: the counterpart of the daemon. This process is the producer,
enqueueing ``--tasks`` no-op tasks as fast as it can — the counterpart of the submitters.
Measured like bench/throughput.py: tasks / seconds from the first enqueue to the moment the
consumer has completed the last task (a ``complete`` signal handler in the consumer counts
tasks and writes a marker file with the time, on the same clock). A warm-up batch goes first.
Two ways are reported for Huey:

* ``e2e`` — producer and consumer run together, as for Colibri (the comparable figure);
* ``drain`` — the queue is filled with no consumer running, then a fresh consumer drains it;
  timed from its first completed task to its last (its start-up is not counted): the
  consumer's own draining rate, with no producer competing for the database.

Colibri is measured by bench/throughput.py's code with the same task count, alternating with
Huey run by run, so the ratio compares figures taken under the same conditions.

Huey is not a dependency of Colibri. Install it into the virtualenv to run this comparison:

    .venv/bin/pip install -e '.[peers]'
    .venv/bin/python bench/peers.py --tasks 20000 --repeat 3

``--peers pgqueuer,procrastinate`` runs the PostgreSQL comparison instead (bench/peers_pg.py):
Colibri on a PostgreSQL board next to pgqueuer and procrastinate on the same server, drain
rate and submit → start latency:

    .venv/bin/python bench/peers.py --peers pgqueuer,procrastinate --tasks 5000 --repeat 3
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import peers_pg
import throughput
from _support import PYTHON, emit, median, note

#: Huey's SqliteHuey as it comes (synchronous=FULL: a durable commit per enqueue and per
#: dequeue), and with ``fsync=False`` (synchronous=OFF: not durable, its fastest setting).
HUEY_MODES = ("default", "off")
INSTALL = f"{Path(PYTHON).parent / 'pip'} install -e '.[peers]'"
#: Who can be compared: Huey on SQLite (peers.py itself), the rest on PostgreSQL (peers_pg.py).
PEERS = ("huey", *peers_pg.PEERS)

HUEY_MODULE = textwrap.dedent(
    """
    import os, threading, time
    from huey import SqliteHuey
    from huey.signals import SIGNAL_COMPLETE

    _FSYNC = {"default": None, "off": False}[os.environ["HB_FSYNC"]]
    huey = SqliteHuey(filename=os.environ["HB_DB"], fsync=_FSYNC, timeout=60)
    _marks = {int(n) for n in os.environ["HB_MARKS"].split(",")}
    _lock = threading.Lock()
    _count = 0

    @huey.task()
    def noop():
        pass

    @huey.signal(SIGNAL_COMPLETE)
    def _completed(signal, task):
        global _count
        with _lock:
            _count += 1
            if _count in _marks:
                path = os.path.join(os.environ["HB_DIR"], f"done-{_count}")
                with open(path + ".tmp", "w") as f:
                    f.write(repr(time.time()))
                os.rename(path + ".tmp", path)
    """
)


class HueyRun:
    """One Huey database and consumer process on a temporary directory."""

    def __init__(self, workers: int, marks: list[int], fsync: str) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="hb", dir="/tmp"))
        (self.dir / "hbench.py").write_text(HUEY_MODULE)
        self.env = {
            **os.environ,
            "HB_DB": str(self.dir / "huey.db"),
            "HB_DIR": str(self.dir),
            "HB_MARKS": ",".join(map(str, marks)),
            "HB_FSYNC": fsync,
            "PYTHONPATH": os.pathsep.join(
                [str(self.dir), *filter(None, [os.environ.get("PYTHONPATH")])]
            ),
        }
        os.environ.update({k: self.env[k] for k in ("HB_DB", "HB_DIR", "HB_MARKS", "HB_FSYNC")})
        sys.path.insert(0, str(self.dir))
        sys.modules.pop("hbench", None)
        # The producer side imports the same module, for noop() and the database.
        self.module: Any = importlib.import_module("hbench")
        self.workers = workers
        self.consumer: subprocess.Popen[bytes] | None = None

    def start_consumer(self) -> None:
        command = [
            PYTHON, "-m", "huey.bin.huey_consumer", "hbench.huey",
            "-w", str(self.workers), "-k", "thread",
            "-d", "0.001", "-m", "0.01", "-b", "1.0",  # poll the queue often when idle
            "-n", "-C", "-q",
        ]  # fmt: skip
        with open(self.dir / "consumer.log", "ab") as log:
            self.consumer = subprocess.Popen(
                command, cwd=self.dir, env=self.env, stdout=log, stderr=log,
                stdin=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip

    def wait_mark(self, count: int, timeout: float) -> float:
        path = self.dir / f"done-{count}"
        deadline = time.monotonic() + timeout
        while not path.exists():
            if self.consumer is not None and self.consumer.poll() is not None:
                log = (self.dir / "consumer.log").read_text(errors="replace")
                raise RuntimeError(f"huey consumer exited {self.consumer.returncode}:\n{log}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"huey did not complete {count} tasks in {timeout}s")
            time.sleep(0.0005)
        return float(path.read_text())

    def enqueue(self, n: int) -> None:
        noop = self.module.noop
        for _ in range(n):
            noop()

    def stop_consumer(self) -> None:
        consumer, self.consumer = self.consumer, None
        if consumer is None or consumer.poll() is not None:
            return
        try:
            os.killpg(consumer.pid, signal.SIGINT)  # Huey's graceful stop
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
            self.module.huey.storage.close()
            sys.path.remove(str(self.dir))
            shutil.rmtree(self.dir, ignore_errors=True)


def huey_once(tasks: int, warmup: int, workers: int, timeout: float, fsync: str) -> dict[str, Any]:
    run = HueyRun(workers, [warmup, warmup + tasks], fsync)
    try:
        run.start_consumer()
        run.enqueue(warmup)
        run.wait_mark(warmup, timeout)
        # e2e: producer and consumer together.
        start = time.time()
        run.enqueue(tasks)
        enqueued = time.time()
        end = run.wait_mark(warmup + tasks, timeout)
        e2e = tasks / (end - start)
        enqueue_rate = tasks / (enqueued - start)
        # drain: stop the consumer, fill the queue, start a new consumer; time from its first
        # completed task to its last, so its start-up is not counted.
        run.stop_consumer()
        run.enqueue(tasks)
        run.env["HB_MARKS"] = f"1,{tasks}"
        run.start_consumer()
        first = run.wait_mark(1, timeout)
        last = run.wait_mark(tasks, timeout)
        drain = (tasks - 1) / (last - first)
    finally:
        run.close()
    return {
        "e2e_tasks_per_s": round(e2e, 1),
        "drain_tasks_per_s": round(drain, 1),
        "enqueue_per_s": round(enqueue_rate, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", type=int, default=10_000)
    ap.add_argument("--warmup", type=int, default=1_000)
    ap.add_argument("--huey-workers", type=int, default=1, help="Huey consumer thread workers")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument(
        "--peers",
        default="huey",
        help="comma-separated, among: huey (SQLite, the default), pgqueuer, procrastinate "
        "(PostgreSQL, with Colibri on a PostgreSQL board); huey cannot be mixed with the others",
    )
    pg = ap.add_argument_group("the PostgreSQL comparison")
    pg.add_argument("--probes", type=int, default=500, help="submit → start probes per run")
    pg.add_argument("--probe-warmup", type=int, default=50)
    pg.add_argument(
        "--daemons",
        default="1",
        help="Colibri daemons on the board for the drain, comma-separated (1,2,3: one serves, "
        "the others stand by)",
    )
    pg.add_argument(
        "--procrastinate-concurrency",
        type=int,
        default=1,
        help="procrastinate's worker concurrency (its default is 1)",
    )
    pg.add_argument(
        "--pgqueuer-driver",
        choices=["asyncpg", "psycopg"],
        default="asyncpg",
        help="pgqueuer's database driver (asyncpg, its first choice, by default)",
    )
    args = ap.parse_args()
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = sorted(set(peers) - set(PEERS))
    if unknown or not peers or ("huey" in peers and len(peers) > 1):
        ap.error(
            f"--peers {args.peers!r}: name huey alone, or any of pgqueuer, procrastinate "
            f"(unknown: {', '.join(unknown) or 'none'})"
        )
    counts = args.daemons.split(",")
    if not all(c.strip().isdigit() and 1 <= int(c) <= 9 for c in counts):
        ap.error(f"--daemons {args.daemons!r}: daemon counts from 1 to 9, e.g. 1,2,3")
    if args.tasks < 2 or args.probes < 1 or args.probe_warmup < 0:
        ap.error("--tasks must be at least 2, --probes at least 1, --probe-warmup at least 0")
    if args.procrastinate_concurrency < 1:
        ap.error(f"--procrastinate-concurrency {args.procrastinate_concurrency}: at least 1")
    if peers != ["huey"]:
        return postgresql(args, peers)
    if importlib.util.find_spec("huey") is None:
        note(f"huey is not installed; the peer comparison is skipped. Install it with: {INSTALL}")
        emit({"bench": "peers", "skipped": f"huey not installed ({INSTALL})"})
        return 0
    colibri_args = throughput.parser().parse_args(
        ["--tasks", str(args.tasks), "--repeat", "1", "--timeout", str(args.timeout)]
    )
    colibri_runs: list[dict[str, Any]] = []
    huey_runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in HUEY_MODES}
    for n in range(args.repeat):
        colibri_runs.extend(throughput.run(colibri_args))
        for mode in HUEY_MODES:
            huey_runs[mode].append(
                huey_once(args.tasks, args.warmup, args.huey_workers, args.timeout, mode)
            )
        note(
            f"peers run {n + 1}/{args.repeat}: colibri {colibri_runs[-1]['tasks_per_s']} "
            f"tasks/s, huey " + ", ".join(f"{m} {r[-1]}" for m, r in huey_runs.items())
        )
    colibri = median([r["tasks_per_s"] for r in colibri_runs])
    huey: dict[str, dict[str, float]] = {}
    for mode, runs in huey_runs.items():
        e2e = median([r["e2e_tasks_per_s"] for r in runs])
        drain = median([r["drain_tasks_per_s"] for r in runs])
        huey[mode] = {
            "e2e_tasks_per_s": e2e,
            "drain_tasks_per_s": drain,
            "enqueue_per_s": median([r["enqueue_per_s"] for r in runs]),
            "ratio_e2e": round(colibri / e2e, 2),
            "ratio_drain": round(colibri / drain, 2),
        }
    emit(
        {
            "bench": "peers",
            "params": {
                "tasks": args.tasks,
                "huey_workers": args.huey_workers,
                "huey_version": huey_version(),
                "colibri": {k: getattr(colibri_args, k) for k in ("agents", "slots", "durability")},
            },
            "colibri_runs": colibri_runs,
            "huey_runs": huey_runs,
            "colibri_tasks_per_s": colibri,
            "huey": huey,
        }
    )
    return 0


def postgresql(args: argparse.Namespace, peers: list[str]) -> int:
    """The PostgreSQL comparison; skipped with one line when it cannot run."""
    reason, ready = peers_pg.unavailable(peers, args.pgqueuer_driver)
    if reason is None and not ready:
        reason = f"none of {', '.join(peers)} is installed ({INSTALL})"
    if reason is not None:
        note(f"the PostgreSQL peer comparison is skipped: {reason}")
        emit({"bench": "peers-postgresql", "skipped": reason})
        return 0
    emit(peers_pg.compare(args, ready))
    return 0


def huey_version() -> str:
    from importlib.metadata import version

    return version("huey")


if __name__ == "__main__":
    sys.exit(main())
