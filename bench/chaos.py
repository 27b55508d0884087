"""Chaos, long form: the submit storm (A1) at full size, every crash point (A2) ×50, and the
Board state machine (D4) at 2,000 sequences × 50 steps.

    .venv/bin/python bench/chaos.py                      # about 8 minutes on 2 cores
    .venv/bin/python bench/chaos.py --runs 5 --submits 250 --kills 5 --d4-examples 200   # quick

A1: 8 clients submit 1,250 tasks each with idempotency keys, 20 stub agents run them, the
daemon is SIGKILLed at 20 seeded instants and restarted; clients retry what was not
acknowledged with the same key. Then the history checker (tests/reliability/history.py) counts
lost acknowledgements, duplicate executions, illegal transitions, stuck tasks and mirror faults.

A2: each crash point (COLIBRI_CRASHPOINT) runs ``--runs`` seeded scenarios from
tests/reliability/crash_scenarios.py, each asserting its pass criterion and running the checker.

D4: tests/reliability/test_board_state_machine.py's Hypothesis machine with more examples.

Prints progress on stderr, then a Markdown table of the figures and one JSON line on stdout.
Everything runs on fresh roots under /tmp, removed afterwards (kept, and named, on a failure).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

from _support import REPO, emit, machine, note

sys.path.insert(0, str(REPO))

from tests.helpers import write_config
from tests.reliability.crash_scenarios import SCENARIOS
from tests.reliability.fleet import submit_storm

from colibri.config import init_root

CRITERIA = {
    "K1": "task absent, client saw EOF",
    "K2": "task present, retry with the key returns the same id",
    "K3": "ledger.jsonl = store after start-up, 0 fused lines",
    "K4": "torn line cut; ledger.jsonl = store, 0 fused lines",
    "K5": 'claimed task failed "session lost" ≤ TTL + 5 s, 0 re-spawns',
    "K7": "cascade all-or-nothing; 0 open descendants after cancel",
    "K8": "exactly 1 task per nominal fire time",
}


def fresh_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="cb", dir="/tmp"))
    init_root(root)
    write_config(root)
    return root


def run_storm(args: argparse.Namespace) -> dict[str, Any]:
    root = fresh_root()
    note(
        f"A1: {args.clients} clients × {args.submits} submits, {args.agents} agents, "
        f"{args.kills} kills (root {root})"
    )
    started = time.monotonic()
    result = submit_storm(
        root,
        clients=args.clients,
        submits=args.submits,
        agents=args.agents,
        kills=args.kills,
        seed=args.seed,
        agent_ttl=3.0,
        log=note,
    )
    figures = dict(result.figures, seconds=round(time.monotonic() - started, 1))
    problems = result.report.problems()
    figures["passed"] = not problems and figures["quiescent"]
    if problems:
        note(f"A1 found problems (root kept at {root}): {str(problems)[:2000]}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return figures


def run_points(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    for point in args.points:
        scenario = SCENARIOS[point]
        passed, failures, runs = 0, [], []
        started = time.monotonic()
        for seed in range(1, args.runs + 1):
            root = fresh_root()
            try:
                figures = scenario(root, seed)
            except Exception as exc:  # counted and shown, the next seed goes on
                failures.append({"seed": seed, "root": str(root), "error": repr(exc)[:500]})
                note(f"{point} seed {seed} FAILED (root kept at {root}):")
                note("".join(traceback.format_exception(exc))[-1500:])
                continue
            passed += 1
            runs.append(figures)
            shutil.rmtree(root, ignore_errors=True)
        results[point] = {
            "runs": args.runs,
            "passed": passed,
            "failures": failures,
            "seconds": round(time.monotonic() - started, 1),
            "figures": summarise(runs),
        }
        note(f"{point}: {passed}/{args.runs} passed in {results[point]['seconds']} s")
    return results


#: Outcome figures, summed over the runs; the others describe the runs' set-ups (shown as a range).
SUMMED = {"crashed_task_present", "retry_same_id", "fused_lines", "respawns", "open_descendants"}


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per figure over the runs: a sum (outcomes), a max (times, maxima) or a min–max range."""
    summary: dict[str, Any] = {}
    for key in dict.fromkeys(k for figures in runs for k in figures):
        values = [figures[key] for figures in runs if key in figures]
        if key in SUMMED:
            summary[key] = sum(values)
        elif key.endswith("_s") or key.endswith("_max"):
            summary[key] = max(values)
        elif all(isinstance(v, bool) for v in values):
            summary[key] = f"{sum(values)} of {len(values)} runs"
        else:
            summary[key] = f"{min(values)}–{max(values)}"
    return summary


def run_state_machine(examples: int, steps: int) -> dict[str, Any]:
    """D4: the Board state machine (tests/reliability/test_board_state_machine.py), longer."""
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import run_state_machine_as_test
    from tests.reliability.test_board_state_machine import BoardMachine

    logging.getLogger("colibri").setLevel(logging.ERROR)  # refused reports are expected here
    note(f"D4: {examples} sequences × up to {steps} steps")
    started = time.monotonic()
    error = None
    try:
        run_state_machine_as_test(
            BoardMachine,
            settings=settings(
                max_examples=examples,
                stateful_step_count=steps,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
                database=None,
            ),
        )
    except Exception as exc:
        error = repr(exc)[:2000]
        note(f"D4 FAILED: {error}")
    seconds = round(time.monotonic() - started, 1)
    note(f"D4: {'passed' if error is None else 'FAILED'} in {seconds} s")
    return {
        "examples": examples,
        "steps": steps,
        "passed": error is None,
        "error": error,
        "seconds": seconds,
    }


def table(
    storm: dict[str, Any] | None,
    points: dict[str, dict[str, Any]],
    machine_run: dict[str, Any] | None = None,
) -> str:
    lines = ["| test | what must hold | result | figures |", "| --- | --- | --- | --- |"]
    if storm is not None:
        anomalies = {k[8:]: v for k, v in storm.items() if k.startswith("anomaly_")}
        bad = {k: v for k, v in anomalies.items() if (v != 1 if k == "integrity_ok" else v)}
        lines.append(
            f"| A1 | {storm['submits']:,} submits, {storm['kills']} kills: 0 lost, 0 duplicates, "
            f"0 illegal, integrity ok | {'pass' if storm['passed'] else 'FAIL'} | "
            f"{storm['acknowledged']:,} acknowledged, {storm['unknown_outcome']} unknown "
            f"outcomes retried, lost {anomalies['lost']}, duplicate starts "
            f"{anomalies['duplicate_starts']}, re-spawns {anomalies['respawns']}, illegal "
            f"{anomalies['illegal_transitions']}, stuck {anomalies['stuck_running']}, mirror "
            f"faults {anomalies['mirror_missing'] + anomalies['mirror_extra']}, fused "
            f"{anomalies['fused_lines']}, integrity {'ok' if anomalies['integrity_ok'] else 'BAD'}"
            f"; {storm['done']:,} done, {storm['failed']} failed (claim lost to a kill); "
            f"restart to ready ≤ {storm['restart_to_ready_max_s']} s"
            + (f"; other findings {bad}" if bad else "")
            + " |"
        )
    for point, result in points.items():
        figures = ", ".join(f"{k} {v}" for k, v in result["figures"].items())
        lines.append(
            f"| A2 {point} | {CRITERIA[point]} | {result['passed']}/{result['runs']} | {figures} |"
        )
    if machine_run is not None:
        lines.append(
            f"| D4 | legal edges only; ledger replay = store; terminal states absorbing; memory ="
            f" store | {'pass' if machine_run['passed'] else 'FAIL'} | "
            f"{machine_run['examples']:,} sequences × ≤{machine_run['steps']} steps, "
            f"{machine_run['seconds']} s |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--submits", type=int, default=1250, help="per client")
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--runs", type=int, default=50, help="seeded runs per crash point")
    parser.add_argument("--seed", type=int, default=1, help="seed of the storm")
    parser.add_argument("--points", default=",".join(SCENARIOS), help="e.g. K1,K5")
    parser.add_argument("--no-storm", action="store_true", help="skip the submit storm")
    parser.add_argument("--d4-examples", type=int, default=2000, help="0 skips D4")
    parser.add_argument("--d4-steps", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=1, help="accepted for run_all; ignored")
    args = parser.parse_args()
    args.points = [p.strip().upper() for p in args.points.split(",") if p.strip()]
    if unknown := set(args.points) - set(SCENARIOS):
        parser.error(f"unknown crash points {sorted(unknown)}; known: {', '.join(SCENARIOS)}")
    started = time.monotonic()
    storm = None if args.no_storm else run_storm(args)
    points = run_points(args)
    machine_run = run_state_machine(args.d4_examples, args.d4_steps) if args.d4_examples else None
    print(table(storm, points, machine_run), flush=True)
    passed = (
        (storm is None or storm["passed"])
        and all(r["passed"] == r["runs"] for r in points.values())
        and (machine_run is None or machine_run["passed"])
    )
    emit(
        {
            "bench": "chaos",
            "passed": passed,
            "seconds": round(time.monotonic() - started, 1),
            "storm": storm,
            "crash_points": points,
            "state_machine": machine_run,
            "machine": machine(),
        }
    )
    raise SystemExit(0 if passed else 1)


if __name__ == "__main__":
    main()
