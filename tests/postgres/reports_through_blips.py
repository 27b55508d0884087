"""Reports of real harnesses through blips of PostgreSQL (bench/chaos.py's H4; the tests of one
blip each are tests/postgres/test_reports_through_faults.py's).

A daemon serves a PostgreSQL board through a relay (tests/postgres/hive.py: ``Relay``) with a
lease longer than any blip; a real ``colibri agent --connect`` over TCP with ``slots`` slots
runs each task as ``sh -c 'sleep 1; cat'``, every session appending its start (task, epoch)
to a file of its own before it works and its finish after; a client submits a steady stream of
tasks with idempotency keys. The relay is cut ``blips`` times, for 1–3 s each, each time once
a session has started since the last blip was over (sessions are mid-flight when it comes).
Then the history checker reads the board, the client's submissions and the sessions' file: 0
acknowledged lost, 0 sessions started twice, every task done; and the agent's log says how
many reports were refused while the server was away and sent again.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from colibri.client import Remote
from tests.helpers import PYTHON, stop_process, wait_until
from tests.postgres.hive import Member, relayed
from tests.postgres.schedule_fires import board_rows
from tests.reliability import history
from tests.reliability.fleet import Progress, RunResult, SubmitClient, finish

#: Each session: its start appended (and synced) before it works, its finish after.
SESSION = (
    'printf \'{"task_id": "%s", "epoch": %s, "agent": "far", "event": "start", "t": %s}\\n\' '
    '"$COLIBRI_TASK_ID" "$COLIBRI_EPOCH" "$(date +%s.%N)" >> "$STARTS"; sync "$STARTS"; '
    "sleep 1; cat; "
    'printf \'{"task_id": "%s", "epoch": %s, "agent": "far", "event": "finish", "t": %s}\\n\' '
    '"$COLIBRI_TASK_ID" "$COLIBRI_EPOCH" "$(date +%s.%N)" >> "$STARTS"'
)


def events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def starts_in(path: Path) -> int:
    return sum(e["event"] == "start" for e in events(path))


def started_since(path: Path, seen: int) -> Callable[[], bool]:
    return lambda: starts_in(path) > seen


def answers(daemon: Member) -> bool:
    try:
        daemon.call("ping")
    except Exception:
        return False
    return True


def reports_through_blips(
    workdir: Path,
    board: str,
    *,
    blips: int = 20,
    slots: int = 4,
    rate: float = 3.0,
    cut: tuple[float, float] = (1.0, 3.0),
    ttl: float = 10.0,
    seed: int = 1,
    log: Callable[[str], None] = lambda _: None,
) -> RunResult:
    """The run and its figures; the daemon's root, the agent's log and the sessions' file stay
    under ``workdir``."""
    rng = random.Random(seed)
    relay, through = relayed(board)
    daemon = Member(workdir / "d0", through, ttl=f"{ttl:g}s")
    starts, agent_log = workdir / "sessions.jsonl", workdir / "agent.log"
    figures: dict[str, Any] = {"blips": blips, "slots": slots, "lease_ttl_s": ttl}
    progress = Progress()
    submitter: SubmitClient | None = None
    agent = None
    cuts: list[float] = []
    load: list[float] = []
    started = time.monotonic()
    try:
        daemon.start(timeout=60)
        token = daemon.call("token-create", role="agent", tenant="default", agent="far")["secret"]
        operator = daemon.call("token-create", role="operator", tenant="default")["secret"]
        with open(agent_log, "wb") as out:
            agent = subprocess_agent(daemon.address, token, slots, workdir, starts, out)
        # About as many as the blips last (a blip and the wait for a fresh session, ~4 s each).
        count = int(rate * blips * 4)
        submitter = SubmitClient(
            Remote.parse(daemon.address, insecure_loopback=True, token=operator),
            0, count, progress, every=1 / rate, capabilities=["far"],
        )  # fmt: skip
        submitter.start()
        for n in range(blips):
            # A session started since the last blip: the next one cuts it mid-flight.
            wait_until(started_since(starts, starts_in(starts)), timeout=120, interval=0.05)
            if submitter.error is not None:
                raise submitter.error
            time.sleep(rng.uniform(0.1, 0.9))  # somewhere within its one second of work
            away = rng.uniform(*cut)
            relay.cut()
            time.sleep(away)
            relay.restore()
            cuts.append(round(away, 2))
            load.append(os.getloadavg()[0])
            wait_until(lambda: answers(daemon), timeout=60, interval=0.05)
            log(f"H4: blip {n + 1}/{blips}: cut {away:.1f} s; {progress.acked} acknowledged, "
                f"load {load[-1]:.1f}")  # fmt: skip
        figures["blips_done"] = len(cuts)
        figures["cut_s"] = [min(cuts), max(cuts), round(sum(cuts), 1)]
        figures["load_1min"] = [round(min(load), 1), round(max(load), 1)]
        finish([submitter], 600)
        figures["acknowledged"] = progress.acked
        open_tasks = "SELECT count(*) FROM tasks WHERE state <> 'closed'"
        wait_until(lambda: int(board_rows(board, open_tasks)[0][0]) == 0, timeout=180,
                   interval=0.5)  # fmt: skip
        figures["daemon_alive"] = daemon.process is not None and daemon.process.poll() is None
    finally:
        if agent is not None and agent.poll() is None:
            agent.send_signal(signal.SIGTERM)
            stop_process(agent)
        if daemon.process is not None and daemon.process.poll() is None:
            daemon.stop()
        relay.close()
    said = agent_log.read_text(errors="replace")
    deferred = re.findall(r"event=report_deferred task=(\S+)", said)
    # Reports refused at least once (each is sent again until taken), and the refusals.
    figures["reports_deferred"] = len(set(deferred))
    figures["report_refusals"] = len(deferred)
    figures["reports_refused_other"] = said.count("report refused")
    figures["submits_refused_storage_unavailable"] = sum(
        1 for op in submitter.ops if op.get("error") == "storage_unavailable"
    ) if submitter is not None else 0  # fmt: skip
    store = history.read_pg_board(board)
    seen_events = events(starts)
    report = history.check(
        store, ops=[op for op in (submitter.ops if submitter else []) if op["outcome"] != "err"],
        agent_events=seen_events, live=history.live_sessions(seen_events),
    )  # fmt: skip
    states: dict[str, int] = {}
    for task in store.tasks.values():
        key = str(task["outcome"] or task["state"])
        states[key] = states.get(key, 0) + 1
    per_task: dict[str, int] = {}
    for e in seen_events:
        if e["event"] == "start":
            per_task[e["task_id"]] = per_task.get(e["task_id"], 0) + 1
    running_rows = sum(1 for row in store.ledger if row["to_state"] == "running")
    figures.update(
        tasks=len(store.tasks),
        outcomes=dict(sorted(states.items())),
        session_starts=sum(per_task.values()),
        tasks_started_twice=sum(1 for n in per_task.values() if n > 1),
        ledger_running_rows=running_rows,
        **{f"anomaly_{k}": v for k, v in report.counts().items()},
        seconds=round(time.monotonic() - started, 1),
    )
    return RunResult(report, figures)


def subprocess_agent(
    connect: str, token: str, slots: int, workdir: Path, starts: Path, out: Any
) -> Any:
    """``colibri agent --connect`` over plain TCP with ``slots`` slots, running SESSION."""
    import subprocess

    state = workdir / "agent"
    shutil.rmtree(state, ignore_errors=True)
    return subprocess.Popen(
        [PYTHON, "-m", "colibri", "agent", "--connect", connect, "--insecure-loopback",
         "--name", "far", "--cap", "far", "--slots", str(slots), "--state-dir", str(state),
         "--", "sh", "-c", SESSION],
        env={**os.environ, "COLIBRI_TOKEN": token, "STARTS": str(starts)},
        stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
    )  # fmt: skip
