"""One seeded run per crash point (A2): arm the point, drive the daemon into it, restart, check.

Each ``run_*`` function takes a fresh initialised root and a seed, arms
``COLIBRI_CRASHPOINT=name:n`` for a real daemon process, makes the n-th hit happen, checks that
the daemon died there (SIGKILL, and its last words in the log), restarts it without the crash
point and asserts the point's pass criterion (docs/RELIABILITY.md). It returns a few figures.
The history checker runs at the end of every scenario over the store, the ledger mirror and
whatever the stub agents logged.

Shared by ``test_crashpoints.py`` (a few seeds each) and ``bench/chaos.py`` (×50).
"""

from __future__ import annotations

import json
import random
import signal
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from colibri.core.errors import ColibriError
from colibri.core.model import parse_rfc3339
from tests.helpers import Daemon, RawConnection, wait_until, write_config
from tests.reliability import history
from tests.reliability.fleet import StubAgents, start_agents

Figures = dict[str, Any]


def store_path(root: Path) -> Path:
    return root / ".colibri" / "colibri.sqlite"


def mirror_path(root: Path) -> Path:
    return root / ".colibri" / "ledger.jsonl"


def armed(root: Path, point: str, n: int) -> Daemon:
    daemon = Daemon(root, env={"COLIBRI_CRASHPOINT": f"{point}:{n}"})
    daemon.start()
    return daemon


def assert_died_at(daemon: Daemon, point: str) -> None:
    """The daemon killed itself with SIGKILL at ``point`` (not elsewhere, not by a bug)."""
    assert daemon.process is not None
    code = daemon.process.wait(timeout=15)
    assert code == -signal.SIGKILL, f"daemon exited with {code}, not SIGKILL:\n{daemon.log()}"
    assert f"crash point {point}:" in daemon.log(), daemon.log()


def restart_clean(daemon: Daemon) -> None:
    daemon.env = {}
    daemon.start()


def unknown_outcome(call: Callable[[], Any]) -> None:
    """The request's connection died before a reply: the client saw EOF, not ``ok``."""
    try:
        reply = call()
    except ColibriError as exc:
        assert exc.code == "closed", exc
    except OSError:
        pass
    else:
        raise AssertionError(f"got a reply, expected the daemon to die first: {reply}")


def check_all(
    root: Path,
    ops: list[dict[str, Any]] | None = None,
    agents: StubAgents | None = None,
    *,
    check_stuck: bool = True,
) -> history.Report:
    """The history checker over the store and mirror; fail on any anomaly."""
    report = history.check(
        history.read_store(store_path(root)),
        ops=ops or [],
        agent_events=agents.events() if agents else [],
        mirror=history.read_mirror(mirror_path(root)),
        check_stuck=check_stuck,
    )
    assert not report.problems(), report.problems()
    return report


def submit_op(daemon: Daemon, key: str) -> dict[str, Any]:
    reply = daemon.call("submit", text=f"task {key}", idempotency_key=key)
    return {
        "op": "submit",
        "idempotency_key": key,
        "invoke_t": time.time(),
        "outcome": "ok",
        "task_id": reply["task"]["id"],
    }


def all_tasks(daemon: Daemon) -> list[dict[str, Any]]:
    return daemon.call("list", limit=10_000)["tasks"]


# -- K1: parsed and handled, not committed ---------------------------------------------------------


def run_k1(root: Path, seed: int) -> Figures:
    """K1: the task is absent after the restart and its client saw EOF; acked ones stay."""
    rng = random.Random(f"k1-{seed}")
    before = rng.randint(0, 3)
    # Daemon.start's readiness ping is the first request handled; then ``before`` submits.
    daemon = armed(root, "before-commit", 1 + before + 1)
    try:
        ops = [submit_op(daemon, f"k1-{n}") for n in range(before)]
        unknown_outcome(lambda: daemon.call("submit", text="doomed", idempotency_key="k1-doomed"))
        assert_died_at(daemon, "before-commit")
        restart_clean(daemon)
        tasks = all_tasks(daemon)
        assert sorted(t["id"] for t in tasks) == sorted(op["task_id"] for op in ops)
        assert all(t.get("idempotency_key") != "k1-doomed" for t in tasks)
        assert daemon.call("status")["ledger_at"] == (f"default:{before}" if before else "")
    finally:
        daemon.stop()
    check_all(root, ops)
    return {"acked_before": before, "crashed_task_present": 0}


# -- K2: committed, not acknowledged ---------------------------------------------------------------


def run_k2(root: Path, seed: int) -> Figures:
    """K2: the task is present; a retry with the same idempotency key returns the same id."""
    rng = random.Random(f"k2-{seed}")
    before = rng.randint(0, 3)
    daemon = armed(root, "after-commit", before + 1)
    try:
        ops = [submit_op(daemon, f"k2-{n}") for n in range(before)]
        unknown_outcome(lambda: daemon.call("submit", text="unacked", idempotency_key="k2-lost"))
        assert_died_at(daemon, "after-commit")
        restart_clean(daemon)
        stored = [t for t in all_tasks(daemon) if t.get("idempotency_key") == "k2-lost"]
        assert len(stored) == 1, "the committed task must survive the crash"
        retry = daemon.call("submit", text="unacked", idempotency_key="k2-lost")
        assert retry["task"]["id"] == stored[0]["id"] and retry["created"] is False
        ops.append(
            {
                "op": "submit",
                "idempotency_key": "k2-lost",
                "invoke_t": time.time(),
                "outcome": "ok",
                "task_id": retry["task"]["id"],
            }
        )
        assert len(all_tasks(daemon)) == before + 1
    finally:
        daemon.stop()
    check_all(root, ops)
    return {"acked_before": before, "retry_same_id": 1}


# -- K3 and K4: acknowledged, the mirror behind or torn --------------------------------------------


def _pipelined_batch(daemon: Daemon, keys: list[str]) -> list[dict[str, Any]]:
    """Submit ``keys`` in one write, so the daemon handles them in one batch (almost always:
    the kernel may split a write); return an op per acknowledgement read before EOF."""
    conn = RawConnection(daemon.socket)
    replies: list[dict[str, Any]] = []
    try:
        lines = b"".join(
            json.dumps(
                {"cmd": "submit", "id": n, "text": f"task {key}", "idempotency_key": key}
            ).encode()
            + b"\n"
            for n, key in enumerate(keys)
        )
        conn.send(lines)
        while len(replies) < len(keys) and (line := conn.file.readline()):
            replies.append(json.loads(line))
    finally:
        conn.close()
    ops = []
    for reply in replies:
        assert reply["ok"], reply
        key = keys[reply["id"]]
        ops.append(
            {
                "op": "submit",
                "idempotency_key": key,
                "invoke_t": time.time(),
                "outcome": "ok",
                "task_id": reply["task"]["id"],
            }
        )
    return ops


def _run_mirror_point(root: Path, seed: int, point: str) -> Figures:
    rng = random.Random(f"mirror-{point}-{seed}")
    before = rng.randint(0, 3)
    batch = rng.randint(1, 6)
    daemon = armed(root, point, before + 1)
    try:
        ops = [submit_op(daemon, f"m-{n}") for n in range(before)]
        acked = _pipelined_batch(daemon, [f"b-{n}" for n in range(batch)])
        assert acked, "the batch is acknowledged before the mirror is written"
        ops += acked
        assert_died_at(daemon, point)
        mirror = history.read_mirror(mirror_path(root))
        stored = history.read_store(store_path(root))
        committed = len(stored.ledger)
        assert committed >= before + len(acked)
        # The crash left the mirror behind the store (K3) or with a torn last line (K4).
        if point == "mid-mirror-write":
            assert mirror.torn_tail and before <= len(mirror.rows) < committed
        else:
            assert not mirror.torn_tail and len(mirror.rows) == before < committed
        restart_clean(daemon)
        if point == "mid-mirror-write":
            assert "torn last line" in daemon.log()
        repaired = history.read_mirror(mirror_path(root))
        assert not repaired.torn_tail and not repaired.bad_lines
        assert [r["seq"] for r in repaired.rows] == list(range(1, committed + 1))
        assert len(all_tasks(daemon)) == committed
        ops += [submit_op(daemon, "after")]  # the repaired mirror takes new rows normally
    finally:
        daemon.stop()
    check_all(root, ops)
    return {"acked_before": before, "batch": batch, "fused_lines": 0}


def run_k3(root: Path, seed: int) -> Figures:
    """K3: acknowledged, then killed before the mirror append: the mirror is completed."""
    return _run_mirror_point(root, seed, "before-mirror")


def run_k4(root: Path, seed: int) -> Figures:
    """K4: killed halfway through a mirror write: the torn line is cut, never fused."""
    return _run_mirror_point(root, seed, "mid-mirror-write")


# -- K5: claim committed, assign never sent --------------------------------------------------------


def run_k5(root: Path, seed: int, ttl: float = 1.0) -> Figures:
    """K5 (= K6): the claimed task fails "session lost" within TTL + 5 s, never re-spawned."""
    rng = random.Random(f"k5-{seed}")
    write_config(root, agent_ttl=f"{ttl}s", tick="1s")
    waiting = rng.randint(1, 3)
    slots = rng.randint(1, waiting)
    daemon = armed(root, "before-assign", 1)
    agents: StubAgents | None = None
    try:
        ops = [submit_op(daemon, f"k5-{n}") for n in range(waiting)]
        # The agent registers, the dispatch pass claims `slots` tasks, commits, and dies.
        agents = start_agents(root, 1, slots=slots, ttl=ttl, seed=seed, work=(0.0, 0.01))
        assert_died_at(daemon, "before-assign")
        claimed = [
            t["id"]
            for t in history.read_store(store_path(root)).tasks.values()
            if t["state"] == "running"
        ]
        assert len(claimed) == slots
        t0 = time.monotonic()
        restart_clean(daemon)

        def lost() -> bool:
            tasks = {t["id"]: t for t in all_tasks(daemon)}
            return all(tasks[c]["state"] == "closed" for c in claimed)

        wait_until(lost, timeout=ttl + 5)
        took = time.monotonic() - t0
        for task_id in claimed:
            task = daemon.call("get", task=task_id)["task"]
            assert (task["outcome"], task["attempts"]) == ("failed", 1), task
            assert "session lost" in task["error"], task
        starts = [e for e in agents.events() if e["event"] == "start"]
        assert not [e for e in starts if e["task_id"] in claimed], "a lost claim was re-spawned"
        # The other tasks were dispatched normally after the restart.
        wait_until(lambda: daemon.call("status")["tasks"]["closed"] == waiting, timeout=10)
    finally:
        if agents is not None:
            agents.stop()
        daemon.stop()
    check_all(root, ops, agents)
    return {
        "waiting": waiting,
        "claimed": slots,
        "failed_session_lost_s": round(took, 2),
        "respawns": 0,
    }


# -- K7: in the middle of a cancel cascade ---------------------------------------------------------


def run_k7(root: Path, seed: int) -> Figures:
    """K7: the cascade is one transaction: after the crash nothing is cancelled (or, had it
    committed, everything); cancelling again leaves 0 open descendants of a cancelled task."""
    rng = random.Random(f"k7-{seed}")
    write_config(root, agent_ttl="3s", tick="1s")
    children = rng.randint(2, 4)
    grandchildren = rng.randint(1, 3)
    descendants = children + children * grandchildren
    crash_after = rng.randint(1, descendants - 1)
    daemon = armed(root, "mid-cancel", crash_after)
    agents: StubAgents | None = None
    try:
        top = daemon.call("submit", text="release", capabilities=["nobody"])["task"]["id"]
        family = [top]
        for c in range(children):
            child = daemon.call("submit", text=f"child {c}", parent=top)["task"]["id"]
            family.append(child)
            for g in range(grandchildren):
                family.append(
                    daemon.call("submit", text=f"grandchild {c}.{g}", parent=child)["task"]["id"]
                )
        if seed % 2:  # one member running on a real agent whose session outlives the crash
            agents = start_agents(root, 1, slots=1, ttl=3.0, seed=seed, work=(60.0, 60.0))
            wait_until(lambda: daemon.call("status")["tasks"]["running"] == 1)
        unknown_outcome(lambda: daemon.call("cancel", task=top))
        assert_died_at(daemon, "mid-cancel")
        restart_clean(daemon)
        states = {t["id"]: t for t in all_tasks(daemon) if t["id"] in family}
        cancelled = [t for t in states.values() if t.get("outcome") == "cancelled"]
        assert len(cancelled) in (0, len(family)), "a cancel cascade was half applied"
        assert not cancelled  # it never committed: the client did not get its ok
        if agents is not None:  # the session was claimed back, not lost
            wait_until(lambda: daemon.call("agents")["agents"][0]["running"])
        assert sorted(daemon.call("cancel", task=top)["cancelled"]) == sorted(family)
        wait_until(
            lambda: all(t["state"] == "closed" for t in all_tasks(daemon) if t["id"] in family)
        )
    finally:
        if agents is not None:
            agents.stop()
        daemon.stop()
    report = check_all(root, agents=agents)
    return {
        "family": len(family),
        "crash_after_descendant": crash_after,
        "running_member": agents is not None,
        "open_descendants": len(report.open_descendants_of_cancelled),
    }


# -- K8: a schedule fire between the task insert and next_fire_at ----------------------------------


def run_k8(root: Path, seed: int) -> Figures:
    """K8: exactly one task per nominal fire time, across the crash and the catch-up."""
    rng = random.Random(f"k8-{seed}")
    crash_at = rng.randint(1, 3)
    daemon = armed(root, "mid-fire", crash_at)
    try:
        daemon.call(
            "schedule-add",
            name="beat",
            schedule={
                "every": "1s",
                "catch_up": "all",
                "overlap": "allow",
                "task": {"text": "beat", "capabilities": ["nobody"]},
            },
        )
        assert_died_at(daemon, "mid-fire")
        restart_clean(daemon)
        wait_until(
            lambda: daemon.call("schedule-get", name="beat")["schedule"]["fires"] > crash_at,
            timeout=10,
        )
        records = daemon.call("schedule-get", name="beat", next=0, fires=1000)["fires"]
        beat_tasks = [t for t in all_tasks(daemon) if t.get("schedule") == "beat"]
    finally:
        daemon.stop()
    nominals = sorted(parse_rfc3339(r["nominal"]) for r in records)
    assert len(nominals) == len(set(nominals)), "a nominal time was recorded twice"
    steps = {round(b - a, 3) for a, b in zip(nominals, nominals[1:], strict=False)}
    assert steps <= {1.0}, f"nominal times skipped or doubled: gaps {steps}"
    fired = [r for r in records if r["outcome"] == "fired"]
    assert sorted(t["id"] for t in beat_tasks) == sorted(r["task"] for r in fired)
    # Independently of the fire records: the tasks' first ledger rows name their nominal time.
    store = history.read_store(store_path(root))
    per_nominal = Counter(
        row["reason"].rsplit(" for ", 1)[1]
        for row in store.ledger
        if row["schedule"] == "beat" and row["from_state"] is None and row["task"]
    )
    assert len(per_nominal) == len(fired) and set(per_nominal.values()) == {1}, per_nominal
    check_all(root)
    return {
        "crash_at_fire": crash_at,
        "fires": len(fired),
        "tasks_per_nominal_max": max(per_nominal.values()),
    }


SCENARIOS: dict[str, Callable[[Path, int], Figures]] = {
    "K1": run_k1,
    "K2": run_k2,
    "K3": run_k3,
    "K4": run_k4,
    "K5": run_k5,
    "K7": run_k7,
    "K8": run_k8,
}
