"""The floor under the daemon on this machine: a durable SQLite commit and a socket round trip.

* ``sqlite_commit_us`` — one small INSERT + COMMIT in WAL mode with ``synchronous=FULL`` (what
  the daemon's store does per batch), on a file under /tmp like the benchmarks' roots; and the
  same with ``synchronous=NORMAL`` (durability relaxed) for comparison.
* ``socket_rtt_us`` — one short line to an asyncio echo server in another process over a Unix
  socket and back, with an asyncio client: the least any request/reply to the daemon costs.

Medians of ``--repeat`` runs; p50 within each run.

    .venv/bin/python bench/baseline.py --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sqlite3
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

from _support import PYTHON, emit, median, note

ECHO_SERVER = textwrap.dedent(
    """
    import asyncio, sys

    class Echo(asyncio.Protocol):
        def connection_made(self, transport):
            self.transport = transport
        def data_received(self, data):
            self.transport.write(data)

    async def main(path):
        loop = asyncio.get_running_loop()
        server = await loop.create_unix_server(Echo, path)
        print("ready", flush=True)
        await asyncio.sleep(3600)

    asyncio.run(main(sys.argv[1]))
    """
)


def sqlite_commit_us(directory: Path, synchronous: str, commits: int) -> float:
    path = directory / f"commit-{synchronous}.sqlite"
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={synchronous}")
        conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, body TEXT NOT NULL)")
        times = []
        for n in range(commits):
            start = time.perf_counter()
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("INSERT INTO t (body) VALUES (?)", (f"row {n}",))
            conn.execute("COMMIT")
            times.append(time.perf_counter() - start)
        return median(times) * 1e6
    finally:
        conn.close()


class Client(asyncio.Protocol):
    def __init__(self) -> None:
        self.waiter: asyncio.Future[None] | None = None

    def data_received(self, data: bytes) -> None:
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)


async def socket_rtt_us(path: Path, trips: int) -> float:
    loop = asyncio.get_running_loop()
    transport, client = await loop.create_unix_connection(Client, str(path))
    times = []
    try:
        for _ in range(trips):
            client.waiter = loop.create_future()
            start = time.perf_counter()
            transport.write(b'{"cmd":"ping","id":1}\n')
            await client.waiter
            times.append(time.perf_counter() - start)
    finally:
        transport.close()
    return median(times[100:]) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--commits", type=int, default=2000)
    ap.add_argument("--trips", type=int, default=5000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    directory = Path(tempfile.mkdtemp(prefix="cbb", dir="/tmp"))
    server: subprocess.Popen[str] | None = None
    runs: list[dict[str, Any]] = []
    try:
        sock = directory / "echo.sock"
        server = subprocess.Popen(
            [PYTHON, "-c", ECHO_SERVER, str(sock)], stdout=subprocess.PIPE, text=True
        )
        assert server.stdout is not None
        server.stdout.readline()
        for n in range(args.repeat):
            sub = directory / str(n)
            sub.mkdir()
            runs.append(
                {
                    "sqlite_commit_full_us": round(sqlite_commit_us(sub, "FULL", args.commits), 1),
                    "sqlite_commit_normal_us": round(
                        sqlite_commit_us(sub, "NORMAL", args.commits), 1
                    ),
                    "socket_rtt_us": round(asyncio.run(socket_rtt_us(sock, args.trips)), 1),
                }
            )
            note(f"baseline run {n + 1}/{args.repeat}: {runs[-1]}")
    finally:
        if server is not None:
            server.terminate()
            try:
                server.wait(timeout=10)
            except subprocess.TimeoutExpired:
                server.kill()
                server.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)
    emit(
        {
            "bench": "baseline",
            "params": {"commits": args.commits, "trips": args.trips},
            "runs": runs,
            **{key: median([r[key] for r in runs]) for key in runs[0]},
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
