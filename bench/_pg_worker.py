"""The consumer side of bench/peers_pg.py: a pgqueuer QueueManager or a procrastinate worker,
in a process of its own (the counterpart of Colibri's daemon), running no-op jobs.

    python bench/_pg_worker.py pgqueuer|procrastinate DSN drain|latency COUNT [CONCURRENCY]

It prints on stdout, flushed, on the clock all processes of the machine share
(``time.monotonic``): ``ready`` once it is set up; in ``drain`` mode ``first T`` when the first
job starts and ``last T`` when job COUNT does; in ``latency`` mode ``start T`` as each job
starts. Both use their libraries' default settings (pgqueuer: batches of 10, no concurrency
cap; procrastinate: its worker's concurrency 1 unless CONCURRENCY says otherwise). The jobs
go to ``PGQUEUER_CHANNEL`` / the queue named by ``PEERS_QUEUE``, unique per run, so that
nothing else on the server is woken by them. pgqueuer runs on asyncpg, or on psycopg with
``PEERS_PGQ_DRIVER=psycopg``.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Callable
from typing import Any

ENTRYPOINT = "noop"


def reporter(mode: str, count: int) -> Callable[[], None]:
    done = 0

    def started() -> None:
        nonlocal done
        done += 1
        now = time.monotonic()
        if mode == "latency":
            print(f"start {now!r}", flush=True)
        elif done == 1:
            print(f"first {now!r}", flush=True)
        if mode == "drain" and done == count:
            print(f"last {now!r}", flush=True)

    return started


async def pgqueuer_connect(dsn: str) -> Any:
    """pgqueuer's driver on the run's schema: asyncpg (its own first choice, the default) or
    psycopg, as ``PEERS_PGQ_DRIVER`` says."""
    if os.environ.get("PEERS_PGQ_DRIVER", "asyncpg") == "psycopg":
        import psycopg
        from pgqueuer import PsycopgDriver

        return PsycopgDriver(await psycopg.AsyncConnection.connect(dsn, autocommit=True))
    import asyncpg
    from pgqueuer import AsyncpgDriver

    base, schema = os.environ["PEERS_BASE_DSN"], os.environ["PEERS_SCHEMA"]
    return AsyncpgDriver(await asyncpg.connect(base, server_settings={"search_path": schema}))


async def pgqueuer_worker(dsn: str, report: Callable[[], None]) -> None:
    from pgqueuer import Job, Queries, QueueManager

    manager = QueueManager(Queries(await pgqueuer_connect(dsn)))

    @manager.entrypoint(ENTRYPOINT)
    async def noop(job: Job) -> None:
        report()

    print("ready", flush=True)
    await manager.run()  # its defaults: batch_size=10, dequeue_timeout=30 s, no cap


async def procrastinate_worker(dsn: str, report: Callable[[], None], concurrency: int) -> None:
    import procrastinate

    app = procrastinate.App(connector=procrastinate.PsycopgConnector(conninfo=dsn))
    queue = os.environ["PEERS_QUEUE"]

    @app.task(name=ENTRYPOINT, queue=queue)
    async def noop() -> None:
        report()

    async with app.open_async():
        print("ready", flush=True)
        await app.run_worker_async(queues=[queue], concurrency=concurrency)


def main() -> int:
    system, dsn, mode, count = sys.argv[1:5]
    concurrency = int(sys.argv[5]) if len(sys.argv) > 5 else 1
    report = reporter(mode, int(count))
    if system == "pgqueuer":
        asyncio.run(pgqueuer_worker(dsn, report))
    else:
        asyncio.run(procrastinate_worker(dsn, report, concurrency))
    return 0


if __name__ == "__main__":
    sys.exit(main())
