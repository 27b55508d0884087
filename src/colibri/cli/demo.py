"""``colibri demo``: a daemon, three agents and a few tasks, so a newcomer sees the board work."""

from __future__ import annotations

import contextlib
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from colibri.client import Client, socket_path
from colibri.config import init_root
from colibri.core.errors import DaemonNotRunning

WORKER = """\
import sys, time, random
text = sys.stdin.read().strip()
time.sleep(random.uniform(0.2, 0.8))
if "fail" in text:
    print("this task was meant to fail", file=sys.stderr)
    sys.exit(3)
print(f"done: {text}")
"""

FLEET = [
    ("linux-1", ["linux", "python"], 2),
    ("bsd-1", ["freebsd", "zfs"], 1),
    ("docs-1", ["docs"], 1),
]

TASKS: list[dict[str, Any]] = [
    {"text": "upgrade zfs on the build hosts", "capabilities": ["freebsd", "zfs"]},
    {"text": "run the python test suite", "capabilities": ["python"], "priority": 5},
    {"text": "write release notes", "capabilities": ["docs"]},
    {"text": "rebuild the linux kernel module", "capabilities": ["linux"]},
    {"text": "check disk space anywhere", "capabilities": []},
    {"text": "snapshot pools (zfs + linux: best partial fit)", "capabilities": ["zfs", "linux"]},
    {"text": "a task that will fail", "capabilities": ["python"]},
]


def _wait_for_daemon(root: Path, process: subprocess.Popen[bytes], timeout: float = 15.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"colibri: the demo daemon exited with code {process.returncode}")
        with contextlib.suppress(DaemonNotRunning, OSError):
            with Client.for_root(root, timeout=2) as client:
                client.call("ping")
                return
        time.sleep(0.05)
    raise SystemExit("colibri: the demo daemon did not start in time")


def run_demo(root: Path, *, exit_when_done: bool) -> int:
    init_root(root, force=True)
    worker = root / "demo_worker.py"
    worker.write_text(WORKER, encoding="utf-8")
    base = [sys.executable, "-m", "colibri", "--root", str(root)]
    processes: list[subprocess.Popen[bytes]] = []
    print(f"demo root: {root}")
    daemon = subprocess.Popen([*base, "run", "--log-level", "warning"])
    processes.append(daemon)
    try:
        _wait_for_daemon(root, daemon)
        print(f"daemon running (pid {daemon.pid}) on {socket_path(root)}")
        for name, caps, slots in FLEET:
            cmd = [*base, "agent", "--name", name, "--slots", str(slots), "--log-level", "warning"]
            for cap in caps:
                cmd += ["--cap", cap]
            processes.append(subprocess.Popen([*cmd, "--", sys.executable, str(worker)], cwd=root))
            print(f"agent {name:8} capabilities {', '.join(caps)} ({slots} slots)")
        with Client.for_root(root) as client:
            start = client.call("status")["ledger_seq"]
            ids: dict[str, str] = {}
            for spec in TASKS:
                task = client.call("submit", **spec)["task"]
                ids[task["id"]] = task["text"]
            parent = client.call(
                "submit",
                text="a family: parent of two children",
                capabilities=["docs"],
                priority=-1,
            )["task"]
            ids[parent["id"]] = parent["text"]
            for n in (1, 2):
                child = client.call(
                    "submit",
                    text=f"child {n} of the family",
                    capabilities=["docs"],
                    parent=parent["id"],
                    priority=-1,
                )["task"]
                ids[child["id"]] = child["text"]
            print(f"submitted {len(ids)} tasks, then cancelled a family (a parent, two children)\n")
            client.call("cancel", task=parent["id"], reason="demo: cancel a whole family")
            _follow(client, ids, start)
        exe = Path(sys.executable).parent / "colibri"
        colibri = str(exe) if exe.exists() else "colibri"
        print(
            "\nThe daemon and its agents keep running. In another terminal try:\n"
            f"  export COLIBRI_ROOT={root}\n"
            f"  {colibri} submit 'hello from me' --cap python --wait\n"
            f"  {colibri} list\n  {colibri} agents\n  {colibri} ledger --follow\n"
        )
        if exit_when_done:
            return 0
        print("Press Ctrl+C to stop the demo.")
        with contextlib.suppress(KeyboardInterrupt):
            daemon.wait()
        return 0
    finally:
        for process in reversed(processes):
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(timeout=10)
            if process.poll() is None:
                process.kill()


def _follow(client: Client, ids: dict[str, str], after: int) -> None:
    """Print each transition of the demo tasks until every one is closed."""
    reply = client.call("ledger", after=after, follow=True)
    open_ids = set(ids)
    entries = list(reply["entries"])

    def show(entry: dict[str, Any]) -> None:
        if entry.get("task") not in ids:
            return
        arrow = f"{entry.get('from_state') or 'new':>9} → {entry['to_state']:<9}"
        agent = (
            f" on {entry['agent']}" if entry.get("agent") and entry["to_state"] == "running" else ""
        )
        reason = entry.get("reason") or ""
        if "family of" in reason:
            reason = reason.split(" (family of")[0] + " (family)"
        print(f"  {ids[entry['task']][:40]:40} {arrow}{agent:12} {reason}"[:120], flush=True)
        if entry["to_state"] == "closed":
            open_ids.discard(entry["task"])

    for entry in entries:
        show(entry)
    if not open_ids:
        return
    for event in client.events():
        if event["event"] == "ledger":
            show(event["entry"])
            if not open_ids:
                return
