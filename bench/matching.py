"""Picking an agent: ``AgentIndex.pick`` against the reference scan ``pick_agent``.

Pure core, in process, no daemon: 1,000 agents with 50 capabilities each, drawn from a universe
of 200, each with a free slot; tasks require 1 to 5 capabilities drawn from the same universe.
With 50 of 200 capabilities an agent holds all of k required ones with probability about
(1/4)^k, so tasks needing 4–5 capabilities rarely have a full match and take the partial-score
path, the slow one. Reported: µs per pick overall (mixed 1–5), and per number of required
capabilities; median over ``--repeat`` runs of ``--picks`` picks each. Both implementations are
asked the same shapes and must give the same answers (checked).

    .venv/bin/python bench/matching.py --repeat 5
"""

from __future__ import annotations

import argparse
import random
import sys
import time
from typing import Any

from _support import emit, median, note
from colibri.core.matching import AgentIndex, AgentView, Shape, pick_agent

TARGET_US = 50.0


def build(
    agents: int, caps_per_agent: int, universe: int, seed: int
) -> tuple[AgentIndex, list[AgentView], list[str]]:
    rng = random.Random(seed)
    names = [f"cap-{n:03d}" for n in range(universe)]
    index = AgentIndex()
    views: list[AgentView] = []
    for n in range(agents):
        caps = frozenset(rng.sample(names, caps_per_agent))
        name = f"agent-{n:04d}"
        index.add(name, caps, 1, None)
        views.append(AgentView(name, caps, 1))
    return index, views, names


def shapes(names: list[str], count: int, sizes: list[int], seed: int) -> list[Shape]:
    rng = random.Random(seed)
    return [Shape(frozenset(rng.sample(names, rng.choice(sizes)))) for _ in range(count)]


def per_pick_us(fn: Any, items: list[Shape]) -> float:
    start = time.perf_counter()
    for shape in items:
        fn(shape)
    return (time.perf_counter() - start) / len(items) * 1e6


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--agents", type=int, default=1000)
    ap.add_argument("--caps-per-agent", type=int, default=50)
    ap.add_argument("--universe", type=int, default=200)
    ap.add_argument("--picks", type=int, default=2000, help="picks per run (index)")
    ap.add_argument("--scan-picks", type=int, default=300, help="picks per run (reference scan)")
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=7)
    args = ap.parse_args()

    index, views, names = build(args.agents, args.caps_per_agent, args.universe, args.seed)

    def scan(shape: Shape) -> str | None:
        return pick_agent(shape, views)

    mixed = shapes(names, args.picks, [1, 2, 3, 4, 5], args.seed + 1)
    for shape in mixed[: args.scan_picks]:
        if index.pick(shape) != scan(shape):
            raise SystemExit(f"index and reference disagree for {sorted(shape.capabilities)}")

    by_size: dict[str, dict[str, float]] = {}
    index_runs: list[float] = []
    scan_runs: list[float] = []
    for n in range(args.repeat):
        index_runs.append(per_pick_us(index.pick, mixed))
        scan_runs.append(per_pick_us(scan, mixed[: args.scan_picks]))
        note(
            f"matching run {n + 1}/{args.repeat}: index {index_runs[-1]:.1f} µs, "
            f"scan {scan_runs[-1]:.1f} µs"
        )
    for k in range(1, 6):
        items = shapes(names, args.picks, [k], args.seed + 10 + k)
        idx = median([per_pick_us(index.pick, items) for _ in range(args.repeat)])
        ref = median([per_pick_us(scan, items[: args.scan_picks]) for _ in range(args.repeat)])
        full = sum(1 for s in items[:200] if score_full(index, s)) / 200
        by_size[str(k)] = {
            "index_us": round(idx, 2),
            "scan_us": round(ref, 2),
            "full_match_share": round(full, 3),
        }
    value = median(index_runs)
    emit(
        {
            "bench": "matching",
            "params": {
                "agents": args.agents,
                "caps_per_agent": args.caps_per_agent,
                "universe": args.universe,
                "picks": args.picks,
                "required": "1-5",
            },
            "index_us": {"runs": [round(x, 2) for x in index_runs], "median": round(value, 2)},
            "scan_us": {
                "runs": [round(x, 2) for x in scan_runs],
                "median": round(median(scan_runs), 2),
            },
            "speedup": round(median(scan_runs) / value, 1),
            "by_required": by_size,
            "pick_us": round(value, 2),
            "target": TARGET_US,
            "met": value <= TARGET_US,
        }
    )
    return 0


def score_full(index: AgentIndex, shape: Shape) -> bool:
    """Whether some agent has every required capability (the fast path)."""
    strict = Shape(shape.capabilities, min_score=1.0)
    return index.pick(strict) is not None


if __name__ == "__main__":
    sys.exit(main())
