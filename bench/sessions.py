"""Sessions: how fast a task becomes a running session, cold and warm, and 200 at once.

A real daemon on a temporary root with one workspace; its supervisor starts a real harness.

- cold: submit → the session's first instruction runs. The session is ``sh -c 'date +%s%N; …'``
  (a shell starts in about a millisecond, so what is measured is Colibri, not an interpreter);
  the time it prints is compared with the time the submit was sent (same machine, same clock).
- warm: the same with ``warm: 1``: the session was started ahead and blocks reading stdin; the
  time it prints after the task arrives is compared with the submit.
- burst: 200 tasks at once, each a session of ``sleep 1``, on ``slots: 200``,
  ``max_sessions: 200``: all must end done; the figure is the wall time for all of them.

    .venv/bin/python bench/sessions.py --tasks 200 --repeat 3
"""

from __future__ import annotations

import argparse
import json
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from colibri.client import Client, socket_path
from colibri.config import init_root

COLD = ["sh", "-c", "date +%s%N; cat >/dev/null"]
WARM = ["sh", "-c", "read -r line; date +%s%N; cat >/dev/null"]


def start(root: Path, workspace: dict[str, Any], **scheduler: Any) -> subprocess.Popen[bytes]:
    (root / "colibri.jsonc").write_text(
        json.dumps({"scheduler": scheduler, "workspaces": {"w": workspace}})
    )
    daemon = subprocess.Popen(
        [sys.executable, "-m", "colibri", "--root", str(root), "run", "--log-level", "warning"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with Client(socket_path(root), timeout=5) as client:
                if client.call("agents")["agents"]:
                    return daemon
        except Exception:
            pass
        time.sleep(0.02)
    stop(daemon)
    raise SystemExit("the daemon or its harness did not start")


def stop(daemon: subprocess.Popen[bytes]) -> None:
    daemon.send_signal(signal.SIGTERM)
    try:
        daemon.wait(timeout=30)
    except subprocess.TimeoutExpired:
        daemon.kill()


def latencies(root: Path, count: int) -> list[float]:
    """Milliseconds from sending each submit to its session's first instruction."""
    out: list[float] = []
    with Client(socket_path(root), timeout=30) as client:
        for n in range(count):
            sent = time.time_ns()
            task = client.call("submit", text=f"task {n}", workspace="w")["task"]
            done = client.call("wait", task=task["id"])["task"]
            if done["outcome"] != "done":
                raise SystemExit(f"task failed: {done}")
            started = int(done["output"].split()[0])
            out.append((started - sent) / 1e6)
            time.sleep(0.05)  # a pause between tasks, in which a warm pool refills
    return out


def burst(root: Path, count: int) -> float:
    with Client(socket_path(root), timeout=120) as client:
        began = time.perf_counter()
        ids = []
        for n in range(count):
            client.send("submit", text=f"burst {n}", workspace="w")
        for _ in range(count):
            reply = client.read()
            ids.append(reply["task"]["id"])
        for task_id in ids:
            done = client.call("wait", task=task_id)["task"]
            if done["outcome"] != "done":
                raise SystemExit(f"burst task failed: {done.get('error')}")
        return time.perf_counter() - began


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--tasks", type=int, default=200, help="tasks per latency run")
    parser.add_argument("--burst", type=int, default=200, help="concurrent sessions")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    results: dict[str, Any] = {"bench": "sessions"}
    for name, workspace in (
        ("cold", {"session": {"command": COLD}}),
        ("warm", {"warm": 1, "session": {"command": WARM, "idle": "60s"}}),
    ):
        p50s, p99s = [], []
        for _ in range(args.repeat):
            root = Path(tempfile.mkdtemp(prefix="cbx", dir="/tmp"))
            init_root(root)
            daemon = start(root, workspace)
            try:
                time.sleep(0.3)
                values = latencies(root, args.tasks)
            finally:
                stop(daemon)
                shutil.rmtree(root, ignore_errors=True)
            p50s.append(statistics.median(values))
            p99s.append(pct(values, 0.99))
        results[f"{name}_submit_to_session_p50_ms"] = round(statistics.median(p50s), 2)
        results[f"{name}_submit_to_session_p99_ms"] = round(statistics.median(p99s), 2)
    times = []
    for _ in range(args.repeat):
        root = Path(tempfile.mkdtemp(prefix="cbx", dir="/tmp"))
        init_root(root)
        daemon = start(
            root, {"slots": args.burst, "session": {"command": ["sleep", "1"]}},
            max_sessions=args.burst,
        )  # fmt: skip
        try:
            times.append(burst(root, args.burst))
        finally:
            stop(daemon)
            shutil.rmtree(root, ignore_errors=True)
    results["burst_sessions"] = args.burst
    results["burst_seconds_median"] = round(statistics.median(times), 2)
    results["burst_errors"] = 0
    print(json.dumps(results))


if __name__ == "__main__":
    main()
