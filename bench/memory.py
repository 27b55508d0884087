"""Daemon memory with many pending tasks: VmRSS after 100,000 submits and no agent.

A fresh daemon (durability full) takes ``--tasks`` submits over ``--connections`` pipelined
connections (``--window`` in flight each); no agent is registered, so every task stays pending
in the board's memory (task object, pending heap, shape index). Reported: VmRSS of the daemon
right after start, after the last acknowledgement, and its peak (VmHWM), read from
/proc/PID/status; plus the intake rate (acknowledged submits per second) as a by-product.
Task texts are about 60 bytes with two required capabilities, like a short real task.

    .venv/bin/python bench/memory.py --tasks 100000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from typing import Any

from _support import (
    Daemon,
    Failure,
    LineProtocol,
    connect,
    decode_message,
    emit,
    median,
    note,
    proc_status,
)

TARGET_MB = 150.0
CAPS = ["linux", "python", "zfs", "freebsd", "docs", "gpu", "arm64", "x86-64"]


class Intake(LineProtocol):
    def __init__(self, done: asyncio.Future[None], base: int) -> None:
        super().__init__()
        self.done = done
        self.base = base
        self.count = 0
        self.sent = 0
        self.acked = 0

    def _submits(self, n: int) -> bytes:
        parts = []
        for _ in range(n):
            i = self.base + self.sent
            self.sent += 1
            parts.append(
                b'{"cmd":"submit","id":%d,"text":"pending task %07d: rebuild the index and '
                b'report","capabilities":["%s","%s"]}\n'
                % (i, i, CAPS[i % 8].encode(), CAPS[(i // 8) % 8].encode())
            )
        return b"".join(parts)

    def start(self, count: int, window: int) -> None:
        self.count = count
        self.write(self._submits(min(count, window)))

    def on_lines(self, lines: list[bytes]) -> None:
        acked = 0
        for line in lines:
            m = decode_message(line)
            if not m.ok and not self.done.done():
                self.done.set_exception(Failure(f"submit refused: {m.error}"))
            acked += 1
        self.acked += acked
        more = min(acked, self.count - self.sent)
        if more > 0:
            self.write(self._submits(more))
        if self.acked >= self.count and not self.done.done():
            self.done.set_result(None)


async def measure_once(daemon: Daemon, args: argparse.Namespace) -> dict[str, Any]:
    await asyncio.sleep(0.2)
    before = proc_status(daemon.pid)
    loop = asyncio.get_running_loop()
    share = args.tasks // args.connections
    waits: list[asyncio.Future[None]] = []
    conns: list[Intake] = []
    for n in range(args.connections):
        done: asyncio.Future[None] = loop.create_future()
        count = share if n < args.connections - 1 else args.tasks - share * n
        conn = await connect(daemon.socket, lambda: Intake(done, n * 10_000_000))  # noqa: B023
        assert isinstance(conn, Intake)
        conn.count = count
        waits.append(done)
        conns.append(conn)
    start = time.perf_counter()
    for conn in conns:
        conn.start(conn.count, args.window)
    await asyncio.wait_for(asyncio.gather(*waits), args.timeout)
    seconds = time.perf_counter() - start
    after = proc_status(daemon.pid)
    for conn in conns:
        assert conn.transport is not None
        conn.transport.close()
    status = await asyncio.to_thread(daemon.call, "status")
    if status["tasks"]["pending"] != args.tasks:
        raise Failure(f"status says {status['tasks']['pending']} pending, expected {args.tasks}")
    return {
        "rss_start_mb": round(before["VmRSS"] / 1024, 1),
        "rss_mb": round(after["VmRSS"] / 1024, 1),
        "hwm_mb": round(after["VmHWM"] / 1024, 1),
        "bytes_per_task": round((after["VmRSS"] - before["VmRSS"]) * 1024 / args.tasks),
        "intake_per_s": round(args.tasks / seconds, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", type=int, default=100_000)
    ap.add_argument("--connections", type=int, default=4)
    ap.add_argument("--window", type=int, default=512, help="submits in flight per connection")
    ap.add_argument("--durability", choices=["full", "relaxed"], default="full")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=600.0)
    args = ap.parse_args()
    runs = []
    for n in range(args.repeat):
        with Daemon(durability=args.durability) as daemon:
            result = asyncio.run(measure_once(daemon, args))
        note(f"memory run {n + 1}/{args.repeat}: {result}")
        runs.append(result)
    value = median([r["rss_mb"] for r in runs])
    emit(
        {
            "bench": "memory",
            "params": {
                "tasks": args.tasks,
                "connections": args.connections,
                "window": args.window,
                "durability": args.durability,
            },
            "runs": runs,
            "rss_mb": value,
            "hwm_mb": median([r["hwm_mb"] for r in runs]),
            "rss_start_mb": median([r["rss_start_mb"] for r in runs]),
            "intake_per_s": median([r["intake_per_s"] for r in runs]),
            "target": TARGET_MB,
            "met": value <= TARGET_MB,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
