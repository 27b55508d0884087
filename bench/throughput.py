"""End-to-end throughput: submit → assign → out → closed, with 10 agents on a real daemon.

Set-up: one daemon process (``colibri run``, durability full by default: every commit is
fsynced) and one load process — this one — holding every agent and every submitter on a single
asyncio loop, so the daemon gets one core and the load the other. Agents register with
``--slots`` each and answer every ``assign`` with ``out`` at once (a whole received chunk is
answered with one write; nothing waits for a reply before reading the next event). Submitters
pipeline ``submit`` requests, keeping ``--window`` in flight each.

A task counts when the agent receives the reply to its ``out``: the daemon sends it only after
the commit holding both transitions (running → done → closed), so it is durably closed. The
figure is tasks / seconds from the first submit written to the last such reply, after a warm-up
batch; each repetition runs on a fresh daemon and root.

    .venv/bin/python bench/throughput.py --tasks 20000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import gc
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from _support import (
    Daemon,
    Failure,
    LineProtocol,
    Message,
    PgBoard,
    connect,
    cpu_seconds,
    decode_message,
    emit,
    encode,
    median,
    note,
    own_cpu_seconds,
    pin_self,
)

TARGET = 5000.0  # tasks/s, from the issue


class LockSampler:
    """Samples ``pg_stat_activity`` from a thread of its own, as often as it can (a query
    every few milliseconds), while a phase runs: of the daemons' backends seen working
    (``active``), how many wait for a lock (``wait_event_type = 'Lock'``: a row, an advisory
    lock, a tuple). Nothing else may use the server meanwhile: every client backend of the
    database but the sampler's own counts as a daemon's."""

    QUERY = (
        "SELECT count(*) FILTER (WHERE state = 'active') AS active, "
        "count(*) FILTER (WHERE state = 'active' AND wait_event_type = 'Lock') AS waiting, "
        "string_agg(wait_event, ',') FILTER (WHERE state = 'active' "
        "AND wait_event_type = 'Lock') AS events "
        "FROM pg_stat_activity WHERE backend_type = 'client backend' "
        "AND pid <> pg_backend_pid() AND datname = current_database()"
    )

    def __init__(self, dsn: str | None = None) -> None:
        import threading

        from _support import PG_DSN

        self.dsn = dsn or PG_DSN
        self.halt = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.samples = self.active = self.waiting = self.samples_waiting = 0
        #: What the waits were for, by pg_stat_activity's wait_event (tuple, transactionid,
        #: extend, advisory …): how many backend-samples each.
        self.events: dict[str, int] = {}

    def start(self) -> None:
        self.thread.start()

    def stop(self) -> None:
        self.halt.set()
        self.thread.join()

    def sample(self) -> None:
        import psycopg

        with psycopg.connect(self.dsn, autocommit=True) as conn:
            while not self.halt.is_set():
                row = conn.execute(self.QUERY).fetchone()
                assert row is not None
                active, waiting = int(row[0]), int(row[1])
                for event in (row[2] or "").split(","):
                    if event:
                        self.events[event] = self.events.get(event, 0) + 1
                if active:
                    self.samples += 1
                    self.active += active
                    self.waiting += waiting
                    self.samples_waiting += waiting > 0
                self.halt.wait(0.002)

    def figures(self) -> dict[str, Any]:
        return {
            "lock_samples": self.samples,
            # of the daemons' backends seen active, the share waiting for a lock
            "lock_wait_share": round(self.waiting / max(self.active, 1), 4),
            # of the samples with a daemon's backend active, the share with one waiting
            "samples_with_a_lock_wait": round(self.samples_waiting / max(self.samples, 1), 4),
            "lock_waits_by_event": dict(sorted(self.events.items())),
        }


class Tally:
    def __init__(self) -> None:
        self.reset(0)

    def reset(self, target: int) -> None:
        self.target = target
        self.closed = 0
        self.assigned = 0
        self.errors: list[str] = []
        self.end = 0.0
        self.done: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    def failed(self, message: Message, what: str) -> None:
        self.errors.append(f"{what}: {message.error}")
        if not self.done.done():
            self.done.set_exception(Failure(f"{what} refused: {message.error}"))

    def check(self) -> None:
        if self.closed >= self.target and not self.done.done():
            self.end = time.perf_counter()
            self.done.set_result(self.end)


class BenchAgent(LineProtocol):
    """Registers, then answers each assign with out in the same callback."""

    def __init__(self, tally: Tally) -> None:
        super().__init__()
        self.tally = tally
        self.next_id = 1
        self.registered: asyncio.Future[Message] = asyncio.get_running_loop().create_future()

    def register(
        self, name: str, capabilities: list[str], slots: int, tenant: str | None = None
    ) -> None:
        self.write(
            encode(
                {
                    "cmd": "register-agent",
                    "id": 0,
                    "name": name,
                    "capabilities": capabilities,
                    "slots": slots,
                    "tenant": tenant,
                }
            )
            + b"\n"
        )

    def on_lines(self, lines: list[bytes]) -> None:
        tally = self.tally
        outs: list[bytes] = []
        for line in lines:
            m = decode_message(line)
            if m.event is not None:
                if m.event == "assign":
                    assert not isinstance(m.task, str) and m.task is not None
                    self.next_id += 1
                    outs.append(
                        b'{"cmd":"out","id":%d,"task":"%s","epoch":%d,"output":"ok"}\n'
                        % (self.next_id, m.task.id.encode(), m.epoch)
                    )
                    tally.assigned += 1
                continue
            if m.id == 0:
                self.registered.set_result(m)
            elif m.ok and not isinstance(m.task, str) and m.task is not None:
                if m.task.state != "closed":
                    tally.failed(m, f"out left the task {m.task.state}")
                tally.closed += 1
            else:
                tally.failed(m, "out")
        if outs:
            self.write(b"".join(outs))
        tally.check()


class Submitter(LineProtocol):
    """Keeps ``window`` submits in flight until ``count`` are acknowledged."""

    def __init__(self, tally: Tally, capabilities: list[str], tenant: str | None = None) -> None:
        super().__init__()
        self.tally = tally
        self.caps = encode(capabilities)
        self.tenant = encode(tenant)
        self.sent = 0
        self.count = 0
        self.next_id = 0

    def _submits(self, n: int) -> bytes:
        parts = []
        for _ in range(n):
            self.next_id += 1
            parts.append(
                b'{"cmd":"submit","id":%d,"text":"bench task %d","capabilities":%s,"tenant":%s}\n'
                % (self.next_id, self.next_id, self.caps, self.tenant)
            )
        self.sent += n
        return b"".join(parts)

    def start(self, count: int, window: int) -> None:
        self.count = count
        self.sent = 0
        self.write(self._submits(min(window, count)))

    def on_lines(self, lines: list[bytes]) -> None:
        acked = 0
        for line in lines:
            m = decode_message(line)
            if m.event is not None:
                continue
            if not m.ok:
                self.tally.failed(m, "submit")
            acked += 1
        more = min(acked, self.count - self.sent)
        if more > 0:
            self.write(self._submits(more))


async def run_phase(
    tally: Tally, submitters: list[Submitter], tasks: int, window: int, timeout: float
) -> float:
    tally.reset(tasks)
    share, extra = divmod(tasks, len(submitters))
    start = time.perf_counter()
    for n, submitter in enumerate(submitters):
        submitter.start(share + (1 if n < extra else 0), window)
    await asyncio.wait_for(tally.done, timeout)
    return tally.end - start


def served(daemons: int, per_daemon: int) -> list[list[str]]:
    """The tenants each daemon serves: ``t0``, ``t1`` … dealt out ``per_daemon`` each (none
    named for one daemon of one tenant: it serves the whole board)."""
    if daemons == 1 and per_daemon == 1:
        return [[]]
    return [[f"t{d * per_daemon + k}" for k in range(per_daemon)] for d in range(daemons)]


async def measure_once(
    daemons: list[Daemon], args: argparse.Namespace, tenants: list[list[str]] | None = None
) -> dict[str, Any]:
    """One measured run. With several daemons or tenants (``--daemons``, each serving
    ``--tenants-per-daemon`` tenants ``tN``) the agents and submitters are shared out among
    the tenants, each working in its tenant on the daemon serving it, and the figure is every
    daemon's tasks together."""
    tally = Tally()
    agents: list[BenchAgent] = []
    tenants = tenants or [[] for _ in daemons]
    # (daemon, tenant) places, taken in turn by the agents and by the submitters.
    places = [(d, t) for k in range(max(len(ts) for ts in tenants) or 1)
              for d, ts in zip(daemons, tenants, strict=True)
              for t in ([ts[k]] if k < len(ts) else [None] if not ts else [])]  # fmt: skip
    if args.agents < len(places) or args.submitters < len(places):
        raise Failure(f"{len(places)} tenants: give at least as many --agents and --submitters")
    for n in range(args.agents):
        daemon, tenant = places[n % len(places)]
        agent = await connect(daemon.socket, lambda: BenchAgent(tally))
        assert isinstance(agent, BenchAgent)
        agent.register(f"bench-{n:02d}", ["bench", f"host-{n:02d}"], args.slots, tenant)
        agents.append(agent)
    for agent in agents:
        reply = await asyncio.wait_for(agent.registered, 30)
        if not reply.ok:
            raise Failure(f"register-agent refused: {reply.error}")
    submitters: list[Submitter] = []
    for n in range(args.submitters):
        daemon, tenant = places[n % len(places)]
        s = await connect(daemon.socket, functools.partial(Submitter, tally, ["bench"], tenant))
        assert isinstance(s, Submitter)
        submitters.append(s)
    if args.warmup:
        await run_phase(tally, submitters, args.warmup, args.window, args.timeout)
    profiler = start_profiler(daemons[0].pid, args.profile) if args.profile else None
    sampler = LockSampler(getattr(args, "sample_dsn", None)) if args.sample_locks else None
    gc.collect()
    gc.disable()
    try:
        daemon_cpu, load_cpu = sum(cpu_seconds(d.pid) for d in daemons), own_cpu_seconds()
        if sampler is not None:
            sampler.start()
        seconds = await run_phase(tally, submitters, args.tasks, args.window, args.timeout)
        daemon_cpu = sum(cpu_seconds(d.pid) for d in daemons) - daemon_cpu
        load_cpu = own_cpu_seconds() - load_cpu
    finally:
        gc.enable()
        if sampler is not None:
            sampler.stop()
        if profiler is not None:
            stop_profiler(profiler)
    for proto in [*agents, *submitters]:
        assert proto.transport is not None
        proto.transport.close()
    closed = 0
    for daemon in daemons:
        status = await asyncio.to_thread(daemon.call, "status")
        closed += status["tasks"]["closed"]
    if closed != args.tasks + args.warmup:
        raise Failure(f"status says {closed} closed, expected {args.tasks + args.warmup}")
    return {
        "tasks_per_s": round(args.tasks / seconds, 1),
        "seconds": round(seconds, 3),
        "daemon_cpu_share": round(daemon_cpu / seconds, 2),
        "load_cpu_share": round(load_cpu / seconds, 2),
        **(sampler.figures() if sampler is not None else {}),
    }


def start_profiler(pid: int, out: str) -> subprocess.Popen[bytes]:
    """py-spy sampling the daemon during the measured phase (``--profile``; adds overhead)."""
    py_spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    fmt = "speedscope" if out.endswith(".json") else "raw"
    command = [py_spy, "record", "-p", str(pid), "-r", "200", "-f", fmt, "-o", out]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # let it attach
    return process


def stop_profiler(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGINT)
    try:
        _, err = process.communicate(timeout=30)
        if err.strip():
            note(err.decode(errors="replace").strip())
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run(args: argparse.Namespace) -> list[dict[str, Any]]:
    """``--repeat`` runs, each on a fresh daemon; returns one dict per run. With ``--store
    both`` each repeat runs SQLite and PostgreSQL one after the other (the order flipping)."""
    pin_self(1 if args.pin else None)
    runs = []
    stores = ["sqlite", "postgresql"] if args.store == "both" else args.store.split(",")
    for n in range(args.repeat):
        for store in stores if n % 2 == 0 else stores[::-1]:
            result = once(args, store)
            note(f"throughput run {n + 1}/{args.repeat} ({store}): {result}")
            runs.append(result)
    return runs


def once(args: argparse.Namespace, store: str) -> dict[str, Any]:
    cpu = 0 if args.pin else None
    metrics = ["--metrics", "127.0.0.1:0"] if args.metrics else []
    if store == "sqlite":
        with Daemon(durability=args.durability, cpu=cpu, extra_args=metrics) as daemon:
            with scraping(daemon, args.metrics):
                return {"store": store, **asyncio.run(measure_once([daemon], args))}
    tenants = served(args.daemons, args.tenants_per_daemon)
    separate = args.boards == "separate"
    with contextlib.ExitStack() as held:
        boards = [held.enter_context(PgBoard()) for _ in range(args.daemons if separate else 1)]
        started = []
        for n, serving in enumerate(tenants):
            board = boards[n if separate else 0]
            dsn = board.as_app_role() if store == "postgresql-rls" else board.dsn
            named = ["--tenants", ",".join(serving)] if serving else []
            extra = ["--store", dsn, *named, *metrics]
            started.append(
                held.enter_context(Daemon(durability=args.durability, cpu=cpu, extra_args=extra))
            )
        with scraping(started[0], args.metrics):
            label = store
            if args.daemons > 1 or args.tenants_per_daemon > 1:
                label += f"x{args.daemons}d{args.tenants_per_daemon}t"
                label += "-separate" if separate else ""
            return {"store": label, **asyncio.run(measure_once(started, args, tenants))}


@contextlib.contextmanager
def scraping(daemon: Daemon, every: float | None) -> Iterator[None]:
    """With ``--metrics SECONDS``: scrape the daemon's /metrics that often meanwhile, from a
    thread of this process, as Prometheus would."""
    if not every:
        yield
        return
    import threading
    import urllib.request

    url = daemon.call("status")["daemon"]["metrics"]
    stop = threading.Event()

    def scrape() -> None:
        while not stop.wait(every):
            with urllib.request.urlopen(url, timeout=30) as response:
                response.read()

    thread = threading.Thread(target=scrape, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join()


STORES = ("sqlite", "postgresql", "postgresql-rls")


def stores(text: str) -> str:
    """``--store``: one of STORES, several comma-separated, or ``both``."""
    if text == "both" or all(name in STORES for name in text.split(",")):
        return text
    raise argparse.ArgumentTypeError(
        f"{text!r}: give {', '.join(STORES)} (comma-separated), or both"
    )


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", type=int, default=20_000, help="tasks per measured run")
    ap.add_argument("--warmup", type=int, default=2_000, help="tasks before measuring")
    ap.add_argument("--agents", type=int, default=10)
    ap.add_argument("--slots", type=int, default=32, help="slots per agent")
    ap.add_argument("--submitters", type=int, default=4, help="submitting connections")
    ap.add_argument("--window", type=int, default=256, help="submits in flight per connection")
    ap.add_argument("--durability", choices=["full", "relaxed"], default="full")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--store",
        type=stores,
        default="sqlite",
        help="the board: the root's SQLite file, a fresh schema on COLIBRI_TEST_PG's server "
        "(default postgresql://postgres@127.0.0.1:5432/test) as its owner, or as the role "
        "`colibri hive grant` makes (postgresql-rls); several, comma-separated, run in turn; "
        "both: sqlite,postgresql",
    )
    ap.add_argument(
        "--daemons",
        type=int,
        default=1,
        help="on PostgreSQL: this many daemons on the one board, each serving a tenant of its "
        "own (--tenants tN), the agents and submitters shared out among them",
    )
    ap.add_argument(
        "--tenants-per-daemon",
        type=int,
        default=1,
        help="on PostgreSQL: each daemon serves this many tenants (t0, t1 …), the agents and "
        "submitters shared out among all the tenants",
    )
    ap.add_argument(
        "--boards",
        choices=["one", "separate"],
        default="one",
        help="on PostgreSQL with --daemons: every daemon on the one board, or each on a board "
        "(a schema) of its own, the same server",
    )
    ap.add_argument(
        "--sample-locks",
        action="store_true",
        help="sample pg_stat_activity during each measured phase: how often a backend that is "
        "working waits for a lock (lock_wait_share)",
    )
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per phase at most")
    ap.add_argument(
        "--profile",
        metavar="FILE",
        help="sample the daemon with py-spy during each measured phase (raw stacks to FILE, "
        "speedscope if FILE ends in .json); the figures are then not for the record",
    )
    ap.add_argument(
        "--pin", action="store_true", help="pin the daemon to CPU 0 and this load to CPU 1"
    )
    ap.add_argument(
        "--metrics",
        type=float,
        metavar="SECONDS",
        help="run the daemon with --metrics and scrape it every SECONDS during the runs",
    )
    return ap


def main() -> int:
    ap = parser()
    args = ap.parse_args()
    several = args.daemons > 1 or args.tenants_per_daemon > 1
    if args.daemons < 1 or args.tenants_per_daemon < 1:
        ap.error("--daemons and --tenants-per-daemon: 1 or more")
    if several and "sqlite" in args.store.replace("both", "sqlite"):
        ap.error("--daemons or --tenants-per-daemon past 1: only with a PostgreSQL --store")
    runs = run(args)
    by_store = {
        store: median([r["tasks_per_s"] for r in runs if r["store"] == store])
        for store in sorted({r["store"] for r in runs})
    }
    value = by_store.get("sqlite", by_store.get("postgresql", next(iter(by_store.values()))))
    if len(by_store) > 1:
        note(f"tasks/s by store (medians): {by_store}")
    emit(
        {
            "bench": "throughput",
            "params": {
                k: getattr(args, k)
                for k in ("tasks", "warmup", "agents", "slots", "submitters", "window", "daemons",
                          "tenants_per_daemon", "boards")  # fmt: skip
            }
            | {
                "durability": args.durability,
                "pin": args.pin,
                "store": args.store,
                "metrics": args.metrics,
            },
            "runs": runs,
            "tasks_per_s_by_store": by_store,
            "tasks_per_s": value,
            "target": TARGET,
            "met": value >= TARGET,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
