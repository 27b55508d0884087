"""Tasks that wait for others, at size: releasing them costs no more than submitting them.

On a real daemon (SQLite, durability full), each repetition on a fresh root:

- **fan-out**: one gate task, and N tasks after it, submitted in one ``submit-all`` (one
  transaction); then the gate's ``out`` round trip, whose commit releases all N (a ledger row
  each, every one queued). Beside them, N tasks with no dependency in one ``submit-all``: the
  price of submitting as many.
- **fan-in**: N tasks, and one task after all N (its ``submit`` round trip checks every one);
  then the N are run by an agent, each ``out`` telling the one that waits; the drain of the N
  is timed, and beside it the drain of N tasks nothing waits for.

The waiting tasks need a capability no agent has, so releasing them is all that is timed.

    .venv/bin/python bench/dependencies.py --tasks 1000 --repeat 5
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from _support import Daemon, FakeAgent, emit, median, note
from colibri.client import Client


def submit_all(client: Client, items: list[dict[str, Any]]) -> tuple[list[str], float]:
    began = time.perf_counter()
    reply = client.call("submit-all", tasks=items)
    took = time.perf_counter() - began
    if not reply.get("ok"):
        raise SystemExit(f"submit-all refused: {reply}")
    return [t["task"]["id"] for t in reply["tasks"]], took


def drain(agent: FakeAgent, n: int) -> float:
    """Run ``n`` tasks as they are assigned, each ended done; the seconds it took."""
    began = time.perf_counter()
    for _ in range(n):
        assign = agent.next_assign(timeout=60)
        reply = agent.out(assign)
        if not reply.get("ok"):
            raise SystemExit(f"out refused: {reply}")
    return time.perf_counter() - began


def fan_out(n: int) -> dict[str, float]:
    with Daemon() as daemon, Client(daemon.socket, timeout=120) as client:
        gate = client.call("submit", text="gate", capabilities=["gate"])["task"]["id"]
        waiting = [{"text": f"after the gate {i}", "after": [gate], "capabilities": ["nobody"]}
                   for i in range(n)]  # fmt: skip
        _, submit_after = submit_all(client, waiting)
        plain = [{"text": f"plain {i}", "capabilities": ["nobody"]} for i in range(n)]
        _, submit_plain = submit_all(client, plain)
        agent = FakeAgent(daemon, "gatekeeper", ["gate"])
        try:
            assign = agent.next_assign(timeout=60)
            began = time.perf_counter()
            reply = agent.out(assign)
            release = time.perf_counter() - began
        finally:
            agent.close()
        if not reply.get("ok"):
            raise SystemExit(f"out refused: {reply}")
        blocked = client.call("status")["blocked"]
        if blocked:
            raise SystemExit(f"{blocked} tasks still wait after the gate closed")
        return {"submit_plain_s": submit_plain, "submit_after_s": submit_after,
                "release_s": release}  # fmt: skip


def fan_in(n: int) -> dict[str, float]:
    with Daemon() as daemon, Client(daemon.socket, timeout=120) as client:
        sources, _ = submit_all(client, [{"text": f"source {i}", "capabilities": ["src"]}
                                         for i in range(n)])  # fmt: skip
        began = time.perf_counter()
        join = client.call("submit", text="join", after=sources, capabilities=["nobody"])
        submit_join = time.perf_counter() - began
        if not join.get("ok"):
            raise SystemExit(f"join refused: {join}")
        began = time.perf_counter()
        client.call("submit", text="plain", capabilities=["nobody"])
        submit_plain = time.perf_counter() - began
        agent = FakeAgent(daemon, "worker", ["src"])
        try:
            drained = drain(agent, n)
        finally:
            agent.close()
        if client.call("status")["blocked"]:
            raise SystemExit("the join still waits after every source closed")
    with Daemon() as daemon, Client(daemon.socket, timeout=120) as client:
        submit_all(client, [{"text": f"source {i}", "capabilities": ["src"]} for i in range(n)])
        agent = FakeAgent(daemon, "worker", ["src"])
        try:
            drained_alone = drain(agent, n)
        finally:
            agent.close()
    return {"submit_join_s": submit_join, "submit_one_s": submit_plain,
            "drain_waited_for_s": drained, "drain_alone_s": drained_alone}  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", type=int, default=1000, help="N: the fan's width")
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    runs: dict[str, list[float]] = {}
    for round_ in range(args.repeat):
        for name, value in {**fan_out(args.tasks), **fan_in(args.tasks)}.items():
            runs.setdefault(name, []).append(value)
        note(f"round {round_ + 1}/{args.repeat}: " + ", ".join(
            f"{k} {v[-1] * 1000:.1f} ms" for k, v in runs.items()))  # fmt: skip
    medians = {k: median(v) for k, v in runs.items()}
    emit({
        "benchmark": "dependencies",
        "tasks": args.tasks,
        "repeat": args.repeat,
        "medians_ms": {k: round(v * 1000, 2) for k, v in medians.items()},
        "release_vs_submit": round(medians["release_s"] / medians["submit_plain_s"], 3),
        "fan_in_drain_ratio": round(
            medians["drain_waited_for_s"] / medians["drain_alone_s"], 3
        ),
    })  # fmt: skip


if __name__ == "__main__":
    main()
