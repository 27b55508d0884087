"""Submit → assign latency at low load: one agent, one submitter, one task at a time.

Both ends live in this process, on one asyncio loop and one clock: the latency of a task is
the time from writing its ``submit`` on the submitter's connection to the moment the agent's
connection receives the ``assign`` for it. The agent answers with ``out`` at once, and the next
task is submitted only after both the submit reply and the out reply arrived, so every task
meets an idle daemon and a free slot. The daemon runs with durability full, so each submit
costs a durable commit (the assign leaves after that commit). Also reported: the submit round
trip (until its acknowledgement) and the whole cycle (until the out reply, task closed).

    .venv/bin/python bench/latency.py --tasks 2000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import sys
import time
from typing import Any

from _support import (
    Daemon,
    Failure,
    LineProtocol,
    Message,
    PgBoard,
    check,
    connect,
    decode_message,
    emit,
    encode,
    median,
    note,
    percentile,
    pin_self,
)

TARGET_P50_MS = 0.5
TARGET_P99_MS = 2.0


class Waiter(LineProtocol):
    """Hands replies and events to whoever waits for the next one."""

    def __init__(self) -> None:
        super().__init__()
        self.reply: asyncio.Future[tuple[float, Message]] | None = None
        self.assign: asyncio.Future[tuple[float, Message]] | None = None
        self.answer_assign = False
        self.next_id = 0

    def expect_reply(self) -> asyncio.Future[tuple[float, Message]]:
        self.reply = asyncio.get_running_loop().create_future()
        return self.reply

    def expect_assign(self) -> asyncio.Future[tuple[float, Message]]:
        self.assign = asyncio.get_running_loop().create_future()
        return self.assign

    def on_lines(self, lines: list[bytes]) -> None:
        now = time.perf_counter()
        for line in lines:
            m = decode_message(line)
            if m.event == "assign":
                if self.answer_assign:
                    assert m.task is not None and not isinstance(m.task, str)
                    self.send(
                        b'{"cmd":"out","id":%d,"task":"%s","epoch":%d,"output":"ok"}\n'
                        % (self.next_id + 1, m.task.id.encode(), m.epoch)
                    )
                if self.assign is not None and not self.assign.done():
                    self.assign.set_result((now, m))
            elif m.event is None and self.reply is not None and not self.reply.done():
                self.reply.set_result((now, m))

    def send(self, line: bytes) -> None:
        self.next_id += 1
        self.write(line)


async def measure_once(daemon: Daemon, tasks: int, warmup: int) -> dict[str, Any]:
    agent = await connect(daemon.socket, Waiter)
    submitter = await connect(daemon.socket, Waiter)
    assert isinstance(agent, Waiter) and isinstance(submitter, Waiter)
    registered = agent.expect_reply()
    agent.send(
        encode({"cmd": "register-agent", "id": 1, "name": "lat-1", "capabilities": ["bench"]})
        + b"\n"
    )
    check((await asyncio.wait_for(registered, 30))[1], "register-agent")
    agent.answer_assign = True
    assign_ms: list[float] = []
    ack_ms: list[float] = []
    cycle_ms: list[float] = []
    gc.collect()
    gc.disable()
    try:
        for n in range(warmup + tasks):
            assigned = agent.expect_assign()
            out_reply = agent.expect_reply()
            acked = submitter.expect_reply()
            start = time.perf_counter()
            submitter.send(
                b'{"cmd":"submit","id":%d,"text":"latency probe %d","capabilities":["bench"]}\n'
                % (n, n)
            )
            t_assign, m = await asyncio.wait_for(assigned, 30)
            t_ack, reply = await asyncio.wait_for(acked, 30)
            check(reply, "submit")
            assert m.task is not None and not isinstance(m.task, str)
            assert isinstance(reply.task, type(m.task)) and reply.task.id == m.task.id
            t_out, out = await asyncio.wait_for(out_reply, 30)
            check(out, "out")
            if n >= warmup:
                assign_ms.append((t_assign - start) * 1000)
                ack_ms.append((t_ack - start) * 1000)
                cycle_ms.append((t_out - start) * 1000)
    finally:
        gc.enable()
    for proto in (agent, submitter):
        assert proto.transport is not None
        proto.transport.close()
    status = await asyncio.to_thread(daemon.call, "status")
    if status["tasks"]["closed"] != warmup + tasks:
        raise Failure(f"status says {status['tasks']['closed']} closed")

    def summary(values: list[float]) -> dict[str, float]:
        values.sort()
        return {
            "p50": round(percentile(values, 50), 3),
            "p90": round(percentile(values, 90), 3),
            "p99": round(percentile(values, 99), 3),
            "max": round(values[-1], 3),
        }

    return {
        "submit_to_assign_ms": summary(assign_ms),
        "submit_ack_ms": summary(ack_ms),
        "submit_to_closed_ms": summary(cycle_ms),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", type=int, default=2000, help="measured tasks per run")
    ap.add_argument("--warmup", type=int, default=200)
    ap.add_argument("--durability", choices=["full", "relaxed"], default="full")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument(
        "--pin", action="store_true", help="pin the daemon to CPU 0 and this load to CPU 1"
    )
    ap.add_argument(
        "--store", choices=["sqlite", "postgresql"], default="sqlite",
        help="the board: an SQLite file, or a fresh schema on the PostgreSQL of PG_DSN",
    )  # fmt: skip
    args = ap.parse_args()
    pin_self(1 if args.pin else None)
    runs = []
    for n in range(args.repeat):
        with contextlib.ExitStack() as stack:
            extra: list[str] = []
            if args.store == "postgresql":
                extra = ["--store", stack.enter_context(PgBoard()).dsn]
            daemon = stack.enter_context(
                Daemon(durability=args.durability, cpu=0 if args.pin else None, extra_args=extra)
            )
            result = asyncio.run(measure_once(daemon, args.tasks, args.warmup))
        note(f"latency run {n + 1}/{args.repeat}: {result}")
        runs.append(result)

    def med(key: str, q: str) -> float:
        return round(median([r[key][q] for r in runs]), 3)

    p50, p99 = med("submit_to_assign_ms", "p50"), med("submit_to_assign_ms", "p99")
    emit(
        {
            "bench": "latency",
            "params": {"tasks": args.tasks, "warmup": args.warmup, "durability": args.durability,
                       "store": args.store},  # fmt: skip
            "runs": runs,
            "submit_to_assign_p50_ms": p50,
            "submit_to_assign_p99_ms": p99,
            "submit_ack_p50_ms": med("submit_ack_ms", "p50"),
            "submit_ack_p99_ms": med("submit_ack_ms", "p99"),
            "submit_to_closed_p50_ms": med("submit_to_closed_ms", "p50"),
            "submit_to_closed_p99_ms": med("submit_to_closed_ms", "p99"),
            "target": {"p50_ms": TARGET_P50_MS, "p99_ms": TARGET_P99_MS},
            "met": p50 <= TARGET_P50_MS and p99 <= TARGET_P99_MS,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
