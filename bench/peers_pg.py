"""PostgreSQL side by side: Colibri on a PostgreSQL board next to pgqueuer and procrastinate.

Run through ``bench/peers.py --peers pgqueuer,procrastinate``. Same server (``COLIBRI_TEST_PG``,
default postgresql://postgres@127.0.0.1:5432/test), same no-op work, each system in a fresh
schema of its own (dropped after), the systems taking turns run by run (the order rotating), so
the ratios compare figures taken under the same conditions. Two figures for each:

* **drain** — ``--tasks`` tasks are queued first with nothing consuming them, then the
  consumer starts; tasks/s from the first task started to the last (start-up not counted).
  Colibri: one daemon on the board, the tasks submitted with no agent registered, then
  bench/throughput.py's 10 stub agents (32 slots each, answering every ``assign`` with ``out``
  at once); a task counts when its ``out`` is acknowledged (closed, committed). pgqueuer: one
  ``QueueManager`` with its defaults (batches of 10, no concurrency cap) on asyncpg
  (``--pgqueuer-driver``). procrastinate: one
  worker, its default concurrency 1 (``--procrastinate-concurrency``). The peers' consumers run
  in a process of their own (bench/_pg_worker.py), like the daemon.
* **latency** — submit → start, one task at a time: the time from the producer's submit call to
  the moment the consumer starts the task, p50/p90/p99/max of ``--probes`` tasks. Colibri: bench/
  latency.py's submit → ``assign`` (the next task only once the previous one is closed); the
  peers: the enqueue/defer call to the job function's first line, then a 20 ms pause so the
  consumer's own bookkeeping of the finished job is not in the next probe.

With ``--daemons 1,2,3`` Colibri's drain is also measured with two and three daemons on the same
board: one serves it (it holds the lease) and the others stand by, so the figure says what
standbys cost the serving one, not a gain: they take no tasks.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import os
import queue
import subprocess
import threading
import time
import uuid
from pathlib import Path
from typing import Any

import latency
import throughput
from _support import (
    PG_DSN,
    PYTHON,
    Daemon,
    Failure,
    PgBoard,
    connect,
    median,
    note,
    percentile,
)

PEERS = ("pgqueuer", "procrastinate")
WORKER = Path(__file__).with_name("_pg_worker.py")
INSTALL = f"{Path(PYTHON).parent / 'pip'} install -e '.[peers]'"
PROBE_PAUSE = 0.02


def unavailable(peers: list[str], pgqueuer_driver: str) -> tuple[str | None, list[str]]:
    """Why the PostgreSQL comparison cannot run at all (or None), and the peers it can run."""
    if importlib.util.find_spec("psycopg") is None:
        return f"psycopg is not installed ({INSTALL})", []
    import psycopg

    try:
        with psycopg.connect(PG_DSN, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as e:
        return f"PostgreSQL at {PG_DSN} is unreachable: {str(e).strip().splitlines()[0]}", []
    ready = []
    for peer in peers:
        needs = [peer, pgqueuer_driver] if peer == "pgqueuer" else [peer]
        missing = [m for m in needs if importlib.util.find_spec(m) is None]
        if missing:
            note(f"{peer} is skipped: {' and '.join(missing)} not installed ({INSTALL})")
        else:
            ready.append(peer)
    return None, ready


# -- the peers' consumers ----------------------------------------------------------------------


class Consumer:
    """bench/_pg_worker.py as a process; its stdout lines read by a thread into a queue."""

    def __init__(
        self, system: str, schema: PgBoard, mode: str, count: int, args: argparse.Namespace
    ) -> None:
        self.log = Path(f"/tmp/peers-{uuid.uuid4().hex[:8]}.log")
        env = {**os.environ, **peer_env(schema, args)}
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [PYTHON, str(WORKER), system, schema.dsn, mode, str(count),
                 str(args.procrastinate_concurrency)],
                stdout=subprocess.PIPE, stderr=log, stdin=subprocess.DEVNULL, env=env,
                start_new_session=True,
            )  # fmt: skip
        self.lines: queue.Queue[str] = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.put(line.decode().strip())
        self.lines.put("")  # it exited

    def expect(self, word: str, timeout: float) -> float:
        """The time on the next line starting with ``word`` (0.0 for ``ready``)."""
        try:
            line = self.lines.get(timeout=timeout)
        except queue.Empty:
            raise Failure(f"no '{word}' from the consumer in {timeout}s: {self.tail()}") from None
        if not line.startswith(word):
            raise Failure(f"the consumer said {line!r}, not {word!r}: {self.tail()}")
        return float(line.split()[1]) if word != "ready" else 0.0

    def tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:]

    def stop(self) -> None:
        self.process.terminate()
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=10)
        self.log.unlink(missing_ok=True)


class Producer:
    """The submitting side of a peer, in this process: its schema, then jobs into it."""

    def __init__(self, system: str, schema: PgBoard, args: argparse.Namespace) -> None:
        self.system, self.schema, self.args = system, schema, args
        self.handle: Any = None

    async def open(self) -> None:
        env = peer_env(self.schema, self.args)
        os.environ.update(env)
        if self.system == "pgqueuer":
            from pgqueuer import Queries
            from pgqueuer.domain.settings import db_settings

            from _pg_worker import pgqueuer_connect

            # Its settings are read from the environment once per process, so each run's
            # channel (its trigger's NOTIFY) needs the cache cleared.
            db_settings.cache_clear()
            self.driver = await pgqueuer_connect(self.schema.dsn)
            self.handle = Queries(self.driver)
            await self.handle.install()
        else:
            import procrastinate

            self.app = procrastinate.App(
                connector=procrastinate.PsycopgConnector(conninfo=self.schema.dsn)
            )
            self.handle = self.app.task(name="noop", queue=env["PEERS_QUEUE"])(_never_run)
            await self.app.open_async()
            await self.app.schema_manager.apply_schema_async()

    async def fill(self, n: int, chunk: int = 1000) -> None:
        for start in range(0, n, chunk):
            k = min(chunk, n - start)
            if self.system == "pgqueuer":
                await self.handle.enqueue(["noop"] * k, [None] * k, [0] * k)
            else:
                await self.handle.batch_defer_async(*([{}] * k))

    async def submit(self) -> None:
        if self.system == "pgqueuer":
            await self.handle.enqueue("noop", None)
        else:
            await self.handle.defer_async()

    async def close(self) -> None:
        if self.system == "pgqueuer":
            connection = getattr(self.driver, "_connection", None)  # neither driver closes it
            if connection is not None:
                await connection.close()
        else:
            await self.app.close_async()


async def _never_run() -> None:
    """The producer's registration of the no-op task; the consumer process runs its own."""


async def peer_drain(system: str, args: argparse.Namespace) -> float:
    with PgBoard() as schema:
        producer = Producer(system, schema, args)
        await producer.open()
        try:
            await producer.fill(args.tasks)
        finally:
            await producer.close()
        consumer = Consumer(system, schema, "drain", args.tasks, args)
        try:
            consumer.expect("ready", 60)
            first = consumer.expect("first", args.timeout)
            last = consumer.expect("last", args.timeout)
        finally:
            consumer.stop()
    return (args.tasks - 1) / (last - first)


async def peer_latency(system: str, args: argparse.Namespace) -> dict[str, float]:
    with PgBoard() as schema:
        producer = Producer(system, schema, args)
        await producer.open()
        consumer = Consumer(system, schema, "latency", 0, args)
        try:
            consumer.expect("ready", 60)
            await asyncio.sleep(0.5)  # its LISTEN in place before the first probe
            ms: list[float] = []
            for n in range(args.probe_warmup + args.probes):
                start = time.monotonic()
                await producer.submit()
                started = consumer.expect("start", 30)
                if n >= args.probe_warmup:
                    ms.append((started - start) * 1000)
                await asyncio.sleep(PROBE_PAUSE)
        finally:
            consumer.stop()
            await producer.close()
    return quantiles(ms)


def peer_env(schema: PgBoard, args: argparse.Namespace) -> dict[str, str]:
    """What the consumer and the producer of a run agree on: its schema, and its NOTIFY channel
    and queue named after the schema, unique."""
    return {
        "PEERS_BASE_DSN": PG_DSN,
        "PEERS_SCHEMA": schema.schema,
        "PEERS_PGQ_DRIVER": args.pgqueuer_driver,
        "PGQUEUER_CHANNEL": f"ch_{schema.schema}",
        "PEERS_QUEUE": schema.schema,
    }


def quantiles(ms: list[float]) -> dict[str, float]:
    ms.sort()
    return {
        **{f"p{q}": round(percentile(ms, q), 3) for q in (50, 90, 99)},
        "max": round(ms[-1], 3),
    }


# -- Colibri -----------------------------------------------------------------------------------


class DrainTally(throughput.Tally):
    """throughput's tally, also noting when the first task was closed."""

    def reset(self, target: int) -> None:
        super().reset(target)
        self.first = 0.0

    def check(self) -> None:
        if self.closed and not self.first:
            self.first = time.perf_counter()
        super().check()


class Standby(Daemon):
    """A daemon on a board another one serves: its socket answers ``standby``, not ``ping``."""

    def start(self, timeout: float = 30.0) -> None:
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(
            self.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
            start_new_session=True,
        )  # fmt: skip
        log.close()
        deadline = time.monotonic() + timeout
        while True:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise Failure(f"a standby daemon did not start:\n{self.log()}")
            try:
                self.call("ping")
            except Exception as e:  # the one answer a standby gives: its refusal
                if getattr(e, "code", None) == "standby":
                    return
            else:
                raise Failure("a second daemon on the board serves it: it should stand by")
            time.sleep(0.05)


async def colibri_fill_and_drain(
    daemon: Daemon, args: argparse.Namespace, agents: int = 10, slots: int = 32
) -> float:
    """Tasks/s of ``agents`` stub agents of ``slots`` each draining ``args.tasks`` queued tasks,
    from the first task closed to the last."""
    tally = DrainTally()
    submitters = []
    for _ in range(4):
        s = await connect(daemon.socket, lambda: throughput.Submitter(tally, ["bench"]))
        assert isinstance(s, throughput.Submitter)
        submitters.append(s)
    tally.reset(args.tasks)
    share, extra = divmod(args.tasks, len(submitters))
    for n, s in enumerate(submitters):
        s.start(share + (1 if n < extra else 0), 256)
    deadline = time.monotonic() + args.timeout
    while True:  # every task on the board, pending, before any agent comes
        status = await asyncio.to_thread(daemon.call, "status")
        if status["tasks"].get("pending", 0) >= args.tasks:
            break
        if tally.errors or time.monotonic() > deadline:
            raise Failure(f"filling the board: {tally.errors or status['tasks']}")
        await asyncio.sleep(0.1)
    tally.reset(args.tasks)
    registered = []
    for n in range(agents):
        agent = await connect(daemon.socket, lambda: throughput.BenchAgent(tally))
        assert isinstance(agent, throughput.BenchAgent)
        agent.register(f"bench-{n:02d}", ["bench", f"host-{n:02d}"], slots)
        registered.append(agent)
    await asyncio.wait_for(tally.done, args.timeout)
    for proto in [*registered, *submitters]:
        assert proto.transport is not None
        proto.transport.close()
    return (args.tasks - 1) / (tally.end - tally.first)


def colibri_drain(args: argparse.Namespace, daemons: int) -> float:
    with PgBoard() as board:
        with Daemon(extra_args=["--store", board.dsn]) as daemon:
            standbys = [Standby(extra_args=["--store", board.dsn]) for _ in range(daemons - 1)]
            try:
                for standby in standbys:
                    standby.start()
                return asyncio.run(colibri_fill_and_drain(daemon, args))
            finally:
                for standby in standbys:
                    standby.close()


def colibri_latency(args: argparse.Namespace) -> dict[str, float]:
    with PgBoard() as board:
        with Daemon(extra_args=["--store", board.dsn]) as daemon:
            result = asyncio.run(latency.measure_once(daemon, args.probes, args.probe_warmup))
    return result["submit_to_assign_ms"]


# -- the comparison ----------------------------------------------------------------------------


def compare(args: argparse.Namespace, peers: list[str]) -> dict[str, Any]:
    """``--repeat`` rounds, each system measured once per round, the order rotating."""
    daemon_counts = [int(k) for k in args.daemons.split(",")]
    systems = ["colibri", *peers]
    drains: dict[str, list[float]] = {s: [] for s in systems}
    drains.update({f"colibri x{k}": [] for k in daemon_counts if k > 1})
    latencies: dict[str, list[dict[str, float]]] = {s: [] for s in systems}
    for n in range(args.repeat):
        order = systems[n % len(systems) :] + systems[: n % len(systems)]
        for system in order:
            if system == "colibri":
                drains[system].append(round(colibri_drain(args, 1), 1))
                latencies[system].append(colibri_latency(args))
                for k in daemon_counts:
                    if k > 1:
                        drains[f"colibri x{k}"].append(round(colibri_drain(args, k), 1))
            else:
                drains[system].append(round(asyncio.run(peer_drain(system, args)), 1))
                latencies[system].append(asyncio.run(peer_latency(system, args)))
        note(
            f"peers (PostgreSQL) run {n + 1}/{args.repeat}: drain tasks/s "
            + ", ".join(f"{s} {r[-1]}" for s, r in drains.items())
            + "; submit→start p50/p99 ms "
            + ", ".join(f"{s} {r[-1]['p50']}/{r[-1]['p99']}" for s, r in latencies.items())
        )
    drain = {s: median(r) for s, r in drains.items()}
    lat = {
        s: {q: round(median([x[q] for x in r]), 3) for q in ("p50", "p90", "p99", "max")}
        for s, r in latencies.items()
    }
    return {
        "bench": "peers-postgresql",
        "params": {
            "tasks": args.tasks,
            "probes": args.probes,
            "repeat": args.repeat,
            "daemons": daemon_counts,
            "procrastinate_concurrency": args.procrastinate_concurrency,
            "pgqueuer_driver": args.pgqueuer_driver,
            "versions": versions(peers),
        },
        "drain_runs": drains,
        "latency_runs": latencies,
        "drain_tasks_per_s": drain,
        "latency_ms": lat,
        "colibri_vs": {
            p: {
                "drain_ratio": round(drain["colibri"] / drain[p], 2),
                # Round by round (the same minutes of the host's noise), then their median.
                "drain_ratio_by_round": round(
                    median([c / x for c, x in zip(drains["colibri"], drains[p], strict=True)]), 2
                ),
                "p50_ratio": round(lat["colibri"]["p50"] / lat[p]["p50"], 2),
                "p99_ratio": round(lat["colibri"]["p99"] / lat[p]["p99"], 2),
            }
            for p in peers
        },
    }


def versions(peers: list[str]) -> dict[str, str]:
    from importlib.metadata import version

    with __import__("psycopg").connect(PG_DSN) as conn:
        row = conn.execute("SHOW server_version").fetchone()
    return {"postgresql": row[0] if row else "?", "psycopg": version("psycopg")} | {
        p: version(p) for p in peers
    }
