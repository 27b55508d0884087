"""Run every benchmark with several repetitions and print the medians as a Markdown table.

Each benchmark runs as its own process (``bench/NAME.py --repeat N``) and prints one JSON line;
those lines are kept (``--json-out``) and summarised here. The peer comparison is skipped with
a note when Huey is not installed (``.venv/bin/pip install huey``).

    .venv/bin/python bench/run_all.py                 # everything, --repeat 5
    .venv/bin/python bench/run_all.py --quick         # smaller runs, a quick look
    .venv/bin/python bench/run_all.py --only throughput latency
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from _support import PYTHON, machine, median, note

HERE = Path(__file__).resolve().parent

#: name → extra arguments (full run, quick run)
BENCHES: dict[str, tuple[list[str], list[str]]] = {
    "baseline": ([], ["--commits", "500", "--trips", "2000"]),
    "throughput": ([], ["--tasks", "5000", "--warmup", "500"]),
    "throughput-relaxed": (["--durability", "relaxed"], ["--tasks", "5000", "--warmup", "500"]),
    "latency": ([], ["--tasks", "500", "--warmup", "100"]),
    "latency-relaxed": (["--durability", "relaxed"], ["--tasks", "500", "--warmup", "100"]),
    "matching": ([], ["--picks", "500", "--scan-picks", "100"]),
    "memory": ([], ["--tasks", "20000"]),
    "cli_startup": ([], ["--runs", "10"]),
    "config_load": ([], ["--runs", "2"]),
    # The two Huey peers on SQLite, as before; bench/peers.py alone runs the whole peer table.
    "peers": (["--peers", "huey-sqlite,huey-sqlite-nofsync", "--tasks", "10000"],
              ["--tasks", "3000", "--probes", "100"]),  # fmt: skip
    "schedules": ([], ["--schedules", "2000", "--idle", "3"]),
    "sessions": ([], ["--tasks", "50", "--burst", "50"]),
    "abuse": ([], ["--pings", "500"]),
    "cascade": ([], ["--depth", "5"]),
    "dependencies": ([], ["--tasks", "300"]),
}


def run_bench(name: str, repeat: int, quick: bool) -> dict[str, Any]:
    script = name.split("-")[0]
    full, small = BENCHES[name]
    command = [PYTHON, str(HERE / f"{script}.py"), "--repeat", str(repeat), *full]
    if quick:
        command += small
    note(f"== {' '.join(command[1:])}")
    done = subprocess.run(command, stdout=subprocess.PIPE, text=True)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"bench": name, "error": f"exit {done.returncode}"}
    result: dict[str, Any] = json.loads(lines[-1])
    result["bench"] = name
    return result


def yes(met: Any) -> str:
    return "" if met is None else ("yes" if met else "**no**")


def rows(result: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    """(figure, median, target, met) rows for one benchmark's result."""
    name = result["bench"]
    if "error" in result:
        return [(name, f"failed ({result['error']})", "", "")]
    if "skipped" in result:
        return [(name, f"skipped: {result['skipped']}", "", "")]
    if name == "baseline":
        return [
            (
                "SQLite commit, synchronous=FULL",
                f"{result['sqlite_commit_full_us']:.0f} µs",
                "",
                "",
            ),
            (
                "SQLite commit, synchronous=NORMAL",
                f"{result['sqlite_commit_normal_us']:.0f} µs",
                "",
                "",
            ),
            ("asyncio Unix-socket round trip", f"{result['socket_rtt_us']:.0f} µs", "", ""),
        ]
    if name.startswith("throughput"):
        p = result["params"]
        cpu = median([r["daemon_cpu_share"] for r in result["runs"]])
        return [
            (
                f"end to end, {p['agents']} agents, durability {p['durability']}",
                f"{result['tasks_per_s']:,.0f} tasks/s (daemon CPU {cpu:.0%})",
                "≥ 5,000 tasks/s" if p["durability"] == "full" else "",
                yes(result["met"]) if p["durability"] == "full" else "",
            )
        ]
    if name == "latency-relaxed":
        return [
            (
                "submit → assign p50 / p99, durability relaxed",
                f"{result['submit_to_assign_p50_ms']:.3f} / "
                f"{result['submit_to_assign_p99_ms']:.3f} ms",
                "",
                "",
            )
        ]
    if name == "latency":
        return [
            (
                "submit → assign p50",
                f"{result['submit_to_assign_p50_ms']:.3f} ms",
                "≤ 0.5 ms",
                yes(result["submit_to_assign_p50_ms"] <= 0.5),
            ),
            (
                "submit → assign p99",
                f"{result['submit_to_assign_p99_ms']:.3f} ms",
                "≤ 2 ms",
                yes(result["submit_to_assign_p99_ms"] <= 2.0),
            ),
            (
                "submit → ack p50 / p99",
                f"{result['submit_ack_p50_ms']:.3f} / {result['submit_ack_p99_ms']:.3f} ms",
                "",
                "",
            ),
            (
                "submit → closed p50 / p99",
                f"{result['submit_to_closed_p50_ms']:.3f} / "
                f"{result['submit_to_closed_p99_ms']:.3f} ms",
                "",
                "",
            ),
        ]
    if name == "matching":
        worst = result["by_required"]["5"]
        return [
            (
                "pick among 1,000 agents (index, 1–5 caps)",
                f"{result['pick_us']:.1f} µs",
                "≤ 50 µs",
                yes(result["met"]),
            ),
            ("  same, 5 required caps", f"{worst['index_us']:.1f} µs", "", ""),
            ("  reference scan pick_agent", f"{result['scan_us']['median']:.1f} µs", "", ""),
        ]
    if name == "memory":
        tasks = result["params"]["tasks"]
        return [
            (
                f"daemon RSS, {tasks:,} pending tasks",
                f"{result['rss_mb']:.1f} MB "
                f"(peak {result['hwm_mb']:.1f}, idle {result['rss_start_mb']:.1f})",
                "≤ 150 MB" if tasks == 100_000 else "",
                yes(result["met"]) if tasks == 100_000 else "",
            ),
            ("intake, no agents", f"{result['intake_per_s']:,.0f} submits/s", "", ""),
        ]
    if name == "cli_startup":
        return [
            ("`colibri --help`", f"{result['help_ms']:.0f} ms", "≤ 150 ms", yes(result["met"])),
            ("`colibri status` (live daemon)", f"{result['status_ms']:.0f} ms", "", ""),
            ("`python -c pass` (interpreter alone)", f"{result['python_ms']:.0f} ms", "", ""),
        ]
    if name == "config_load":
        return [
            ("colibri.jsonc of 1 MiB read", f"{result['read_1mib_ms']:.0f} ms", "", ""),
            ("the same, a mistake at its end", f"{result['mistake_at_end_ms']:.0f} ms", "", ""),
            ("a file past 1 MiB, refused", f"{result['over_limit_ms']:.1f} ms", "", ""),
            ("100,000 open brackets, refused", f"{result['nested_100k_ms']:.1f} ms", "", ""),
        ]
    if name == "peers":
        m, ratios = result["medians"], result["colibri_vs"]
        out = [("Colibri end to end (same run)", f"{m['colibri']['e2e']:,.0f} tasks/s")]
        for peer, label in (("huey-sqlite", "as it comes, durable"),
                            ("huey-sqlite-nofsync", "fsync=False")):  # fmt: skip
            if peer not in m:
                continue
            out += [
                (f"Huey SqliteHuey ({label}) end to end", f"{m[peer]['e2e']:,.0f} tasks/s"),
                (f"Huey ({label}) consumer drain only", f"{m[peer]['drain']:,.0f} tasks/s"),
                (
                    f"ratio Colibri / Huey ({label}): e2e, drain (10 agents)",
                    f"{ratios[peer]['e2e']:.2f}×, {ratios[peer]['drain_10x32']:.2f}×",
                ),
            ]
        return [(figure, value, "", "") for figure, value in out]
    if name == "schedules":
        n = f"{result['schedules']:,}"
        return [
            (f"daemon start-up with {n} schedules", f"{result['start_s_median']:.2f} s", "", ""),
            (
                f"next due for {n}: from the store / recomputed",
                f"{result['next_due_from_store_ms_median']:.1f} / "
                f"{result['next_due_recompute_all_ms_median']:.1f} ms",
                "",
                "",
            ),
            (
                "idle daemon CPU, RSS",
                f"{result['idle_cpu_percent']:.2f} %, {result['rss_mb']:.1f} MB",
                "",
                "",
            ),
        ]
    if name == "sessions":
        return [
            ("submit → session running (subprocess), p50 / p99",
             f"{result['cold_submit_to_session_p50_ms']:.1f} / "
             f"{result['cold_submit_to_session_p99_ms']:.1f} ms", "p50 ≤ 20 ms",
             yes(result["cold_submit_to_session_p50_ms"] <= 20)),
            ("submit → a warm session has the task, p50 / p99",
             f"{result['warm_submit_to_session_p50_ms']:.1f} / "
             f"{result['warm_submit_to_session_p99_ms']:.1f} ms", "p50 ≤ 5 ms",
             yes(result["warm_submit_to_session_p50_ms"] <= 5)),
            (f"{result['burst_sessions']} concurrent sessions (sleep 1 each), all done",
             f"{result['burst_seconds_median']:.2f} s, {result['burst_errors']} errors", "0 errors",
             yes(result["burst_errors"] == 0)),
        ]  # fmt: skip
    if name == "abuse":
        scenarios = result["scenarios"]
        return [
            (f"ping beside {label}, p50 / p99 (× quiet p99)",
             f"{scenarios[key]['p50_ms']:.2f} / {scenarios[key]['p99_ms']:.2f} ms "
             f"(× {scenarios[key]['p99_vs_quiet']:g})",
             "p99 < 100 ms" if key != "quiet" else "",
             yes(scenarios[key]["p99_ms"] < result["target_p99_ms"]) if key != "quiet" else "")
            for key, label in (("quiet", "nobody"), ("garbage", "a garbage flood"),
                               ("slowloris", "200 slowloris peers"),
                               ("churn", "connection churn"))
        ]  # fmt: skip
    if name == "cascade":
        return [
            (
                f"cancel a family of {result['tasks']:,} tasks (one transaction, round trip)",
                f"{result['cancel_s'] * 1000:.0f} ms ({result['per_task_us']:.0f} µs a task)",
                f"≤ {result['target_s']:g} s",
                yes(result["met"]),
            )
        ]
    if name == "dependencies":
        medians = result["medians_ms"]
        return [
            (
                f"release {result['tasks']:,} waiting tasks (one out), against submitting as many",
                f"{medians['release_s']:.1f} ms against {medians['submit_plain_s']:.1f} ms "
                f"({result['release_vs_submit']:g}×)",
                "≤ 1×",
                yes(result["release_vs_submit"] <= 1.0),
            ),
            (
                f"drain {result['tasks']:,} tasks one waits for, against nothing waiting",
                f"{result['fan_in_drain_ratio']:g}×", "", "",
            ),
        ]  # fmt: skip
    return [(name, json.dumps(result), "", "")]


def table(results: list[dict[str, Any]]) -> str:
    lines = ["| benchmark | figure | median | target | met |", "| --- | --- | --- | --- | --- |"]
    for result in results:
        for figure, value, target, met in rows(result):
            lines.append(f"| {result['bench']} | {figure} | {value} | {target} | {met} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5, help="repetitions of each benchmark")
    ap.add_argument("--quick", action="store_true", help="smaller runs (not for the record)")
    ap.add_argument("--only", nargs="+", choices=list(BENCHES), help="run only these")
    ap.add_argument("--json-out", type=Path, help="also write every result here (JSON lines)")
    args = ap.parse_args()
    results = [run_bench(name, args.repeat, args.quick) for name in (args.only or BENCHES)]
    if args.json_out:
        args.json_out.write_text("".join(json.dumps(r) + "\n" for r in results))
    info = machine()
    print(
        f"\nMedians of {args.repeat} runs{' (quick)' if args.quick else ''}; "
        f"{info['nproc']} × {info['cpu']}, Python {info['python']}, {info['date']}, "
        f"load average at the end {info['loadavg']}.\n"
    )
    print(table(results))
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
