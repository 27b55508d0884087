"""A cancel cascade: cancelling the root of a 5,461-task family (depth 6, fan-out 4).

Each repetition starts a daemon on a fresh root, builds the family with pipelined submits, and
times the ``cancel`` round trip of its root: every open member cancelled with a ledger row and
closed, all in one transaction, the reply sent after the commit. The reliability plan's bound
(D5) is one second on SQLite.

    .venv/bin/python bench/cascade.py --repeat 5
    .venv/bin/python bench/cascade.py --depth 4 --repeat 3      # 341 tasks
"""

from __future__ import annotations

import argparse
import threading
import time

from _support import Daemon, emit, median, note
from colibri.client import Client

FANOUT = 4
TARGET_S = 1.0


def submit_level(client: Client, parents: list[str]) -> list[str]:
    """FANOUT children under each parent, pipelined: a thread writes while this one reads."""
    wanted = [parent for parent in parents for _ in range(FANOUT)]
    sender = threading.Thread(
        target=lambda: [
            client.send("submit", text="member", parent=p, capabilities=["nobody"]) for p in wanted
        ]
    )
    sender.start()
    ids = []
    for _ in wanted:
        reply = client.read()
        if not reply.get("ok"):
            raise SystemExit(f"submit refused: {reply}")
        ids.append(reply["task"]["id"])
    sender.join()
    return ids


def one_run(depth: int) -> tuple[int, float]:
    """(tasks cancelled, seconds of the cancel round trip) on a fresh daemon."""
    with Daemon() as daemon, Client(daemon.socket, timeout=120) as client:
        level = [client.call("submit", text="root", capabilities=["nobody"])["task"]["id"]]
        root = level[0]
        for _ in range(depth):
            level = submit_level(client, level)
        began = time.perf_counter()
        reply = client.call("cancel", task=root, reason="benchmark")
        took = time.perf_counter() - began
        if not reply.get("ok"):
            raise SystemExit(f"cancel refused: {reply}")
        return len(reply["cancelled"]), took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--depth", type=int, default=6, help="levels below the root (default 6)")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    times = []
    cancelled = 0
    for n in range(args.repeat):
        cancelled, took = one_run(args.depth)
        times.append(took)
        note(f"run {n + 1}: {cancelled} tasks cancelled in {took * 1000:.0f} ms")
    seconds = median(times)
    emit(
        {
            "bench": "cascade",
            "tasks": cancelled,
            "repeat": args.repeat,
            "cancel_s": round(seconds, 3),
            "per_task_us": round(seconds / cancelled * 1e6, 1),
            "target_s": TARGET_S,
            "met": seconds <= TARGET_S,
        }
    )


if __name__ == "__main__":
    main()
