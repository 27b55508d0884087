"""CLI start-up: wall time of ``colibri --help`` and of ``colibri status`` against a live daemon.

Each command is run ``--runs`` times as a fresh process (the installed ``colibri`` console
script next to this interpreter); the median is reported, with the interpreter's own bare
start-up (``python -c pass``) for reference. ``status`` talks to a real daemon on a temporary
root, so it includes connecting and one round trip.

    .venv/bin/python bench/cli_startup.py --runs 20 --repeat 3
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from _support import PYTHON, Daemon, emit, median, note

TARGET_HELP_MS = 150.0


def colibri_command() -> list[str]:
    script = Path(PYTHON).parent / "colibri"
    if script.exists():
        return [str(script)]
    found = shutil.which("colibri")
    return [found] if found else [PYTHON, "-m", "colibri"]


def wall_ms(command: list[str], runs: int, env: dict[str, str]) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        done = subprocess.run(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
        times.append((time.perf_counter() - start) * 1000)
        if done.returncode != 0:
            raise SystemExit(f"{command} exited {done.returncode}: {done.stderr.decode()}")
    return times


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--runs", type=int, default=20, help="runs of each command per repetition")
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    env = {k: v for k, v in os.environ.items() if k != "COLIBRI_ROOT"}
    colibri = colibri_command()
    results: dict[str, list[float]] = {"python": [], "help": [], "version": [], "status": []}
    with Daemon() as daemon:
        assert daemon.root is not None
        commands = {
            "python": [PYTHON, "-c", "pass"],
            "help": [*colibri, "--help"],
            "version": [*colibri, "--version"],
            "status": [*colibri, "--root", str(daemon.root), "status"],
        }
        for command in commands.values():
            wall_ms(command, 2, env)  # warm the page cache
        for n in range(args.repeat):
            for name, command in commands.items():
                results[name].append(median(wall_ms(command, args.runs, env)))
            note(
                f"cli run {n + 1}/{args.repeat}: "
                + ", ".join(f"{k} {v[-1]:.1f} ms" for k, v in results.items())
            )
    value = median(results["help"])
    emit(
        {
            "bench": "cli_startup",
            "params": {"runs": args.runs, "command": colibri},
            "runs_ms": {k: [round(x, 1) for x in v] for k, v in results.items()},
            "help_ms": round(value, 1),
            "version_ms": round(median(results["version"]), 1),
            "status_ms": round(median(results["status"]), 1),
            "python_ms": round(median(results["python"]), 1),
            "target": TARGET_HELP_MS,
            "met": value <= TARGET_HELP_MS,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
