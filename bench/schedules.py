"""Schedules at scale: 10,000 loaded schedules.

Measures, on a real daemon with a temporary root:
- start-up time with 10,000 schedules in the store (spawn → first ping answered);
- next-due for all 10,000: as the daemon does it at start-up (ordering the stored next fire
  times), and recomputed from scratch with cronsim (``next_after`` per schedule);
- the daemon's idle CPU between fires (CPU seconds per wall second over a quiet window).

    .venv/bin/python bench/schedules.py --repeat 5
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from colibri.client import Client, socket_path
from colibri.config import init_root
from colibri.core.model import parse_rfc3339
from colibri.core.schedules import jitter_offset, next_after

ZONES = ["UTC", "Europe/Ljubljana", "America/New_York", "Asia/Kolkata", "Australia/Lord_Howe"]


def start(root: Path) -> tuple[subprocess.Popen[bytes], float]:
    began = time.perf_counter()
    process = subprocess.Popen(
        [sys.executable, "-m", "colibri", "--root", str(root), "run", "--log-level", "warning"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    while True:
        try:
            with Client(socket_path(root), timeout=5) as client:
                client.call("ping")
            return process, time.perf_counter() - began
        except Exception:
            if process.poll() is not None:
                raise SystemExit("daemon exited") from None
            time.sleep(0.005)


def stop(process: subprocess.Popen[bytes]) -> None:
    process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        process.kill()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def populate(root: Path, count: int) -> None:
    process, _ = start(root)
    try:
        with Client(socket_path(root), timeout=60) as client:
            sent = 0
            while sent < count:
                batch = min(500, count - sent)
                for i in range(sent, sent + batch):
                    minute, hour = i % 60, (i // 60) % 24
                    spec = {
                        "cron": f"{minute} {hour} * * *" if i % 3 else f"*/{i % 29 + 1} * * * *",
                        "tz": ZONES[i % len(ZONES)],
                        "task": {"text": f"scheduled work {i}", "capabilities": ["bench"]},
                    }
                    if i % 3 == 0:
                        spec["overlap"] = "skip"
                    client.send("schedule-add", name=f"s{i:05d}", schedule=spec)
                for _ in range(batch):
                    reply = client.read()
                    if not reply.get("ok"):
                        raise SystemExit(f"schedule-add failed: {reply}")
                sent += batch
    finally:
        stop(process)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--schedules", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--idle", type=float, default=10.0, help="seconds of idle CPU measurement")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="cbs", dir="/tmp"))
    try:
        init_root(root)
        populate(root, args.schedules)
        starts = []
        for _ in range(args.repeat):
            process, took = start(root)
            starts.append(took)
            stop(process)
        from colibri.store import open_store

        store = open_store(str(root / ".colibri" / "colibri.sqlite"))
        schedules = store.schedules()
        store.close()
        now = time.time()
        heaps = []
        for _ in range(args.repeat):
            # what the daemon does at start-up: order the stored next fire times
            began = time.perf_counter()
            heap = [
                (parse_rfc3339(s.next_fire_at) + jitter_offset(s.name, 0.0, s.jitter), s.name)
                for s in schedules
                if s.next_fire_at
            ]
            heapq.heapify(heap)
            heaps.append(time.perf_counter() - began)
        computes = []
        for _ in range(args.repeat):
            began = time.perf_counter()
            for schedule in schedules:
                next_after(schedule, now)
            computes.append(time.perf_counter() - began)
        process, _ = start(root)
        time.sleep(1.0)
        cpu0, wall0 = cpu_seconds(process.pid), time.perf_counter()
        time.sleep(args.idle)
        idle = (cpu_seconds(process.pid) - cpu0) / (time.perf_counter() - wall0)
        rss_kb = int(
            next(
                line
                for line in Path(f"/proc/{process.pid}/status").read_text().splitlines()
                if line.startswith("VmRSS")
            ).split()[1]
        )
        stop(process)
        print(
            json.dumps(
                {
                    "bench": "schedules",
                    "schedules": len(schedules),
                    "repeat": args.repeat,
                    "start_s_median": round(statistics.median(starts), 3),
                    "next_due_from_store_ms_median": round(statistics.median(heaps) * 1000, 1),
                    "next_due_recompute_all_ms_median": round(
                        statistics.median(computes) * 1000, 1
                    ),
                    "idle_cpu_percent": round(idle * 100, 2),
                    "rss_mb": round(rss_kb / 1024, 1),
                }
            )
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
