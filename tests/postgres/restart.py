"""PostgreSQL restarted, crashed and stopped under a daemon at work (A7 with a real server).

Clients submit (each submission with its idempotency key, retried until acknowledged, as in
the submit storm) and stub agents run every task, while the board's server — a private one
(``cluster.PrivateServer``) — is restarted cleanly, killed and started again (WAL recovery),
or stopped for a while. The daemon is never restarted: it must refuse while the server is
away, come back by itself, and lose nothing it acknowledged; the history checker reads the
board after. Shared by ``test_pg_restart.py`` (short) and ``bench/chaos.py --only A7``.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.helpers import Daemon, FakeAgent, write_config
from tests.postgres.cluster import PrivateServer
from tests.reliability import history
from tests.reliability.fleet import (
    Progress,
    RunResult,
    SubmitClient,
    finish,
    start_agents,
    wait_quiescent,
)

#: A fault: ("restart", "fast"), ("restart", "immediate") or ("away", seconds).
Fault = tuple[str, Any]


def restarts_under_load(
    root: Path,
    server: PrivateServer,
    *,
    clients: int,
    submits: int,
    agents: int,
    faults: list[Fault],
    seed: int,
    lease_ttl: str = "10s",
    agent_ttl: float = 3.0,
    log: Callable[[str], None] | None = None,
) -> RunResult:
    rng = random.Random(seed)
    write_config(root, tick="1s", agent_ttl=f"{agent_ttl}s")
    daemon = Daemon(root, "--store", server.dsn, "--lease-ttl", lease_ttl, log_level="info")
    daemon.start()
    pid = daemon.pid
    # An agent connected before the faults, in a tenant of its own (so it is given none of
    # the work): the daemon must keep its connection and its registration through them.
    witness = FakeAgent(daemon, "witness", ttl=300, tenant="witnesses")
    fleet = start_agents(root, agents, ttl=agent_ttl, seed=seed)
    total = clients * submits
    progress = Progress()
    workers = [SubmitClient(daemon.socket, c, submits, progress) for c in range(clients)]
    thresholds = sorted(rng.sample(range(max(1, total // 10), max(2, total * 8 // 10)),
                               len(faults)))  # fmt: skip
    back_to_serving: list[float] = []
    started = time.monotonic()
    try:
        for worker in workers:
            worker.start()
        for threshold, (kind, arg) in zip(thresholds, faults, strict=True):
            while progress.acked < threshold and any(w.is_alive() for w in workers):
                time.sleep(0.005)
            if kind == "restart":
                server.restart(arg)
            else:
                server.stop("immediate")
                time.sleep(float(arg))
                server.start()
            back = time.monotonic()
            before = progress.acked
            while progress.acked == before and any(w.is_alive() for w in workers):
                assert time.monotonic() - back < 60, "nothing acknowledged for 60 s"
                time.sleep(0.002)
            back_to_serving.append(time.monotonic() - back)
            if log is not None:
                log(f"{kind} {arg}: acknowledged again {back_to_serving[-1]:.2f} s after the "
                    f"server was back ({progress.acked}/{total})")  # fmt: skip
        finish(workers, timeout=600)
        submitted_in = time.monotonic() - started
        quiet = wait_quiescent(daemon, total, timeout=agent_ttl + 60)
        events = fleet.events()
        live = history.live_sessions(events) if fleet.all_alive() else set()
        witness.client.call("heartbeat")  # the same connection, still served
        witness_kept = any(
            a["name"] == "witness" for a in daemon.call("agents")["agents"]
        )  # fmt: skip
        same_daemon = daemon.process is not None and daemon.process.poll() is None
        witness.client.close()
    finally:
        fleet.stop()
        daemon.stop()
    ops = [op for w in workers for op in w.ops]
    store = history.read_pg_board(server.dsn)
    report = history.check(store, ops=ops, agent_events=events, live=live)
    outcomes = [op["outcome"] for op in ops]
    refusals = [op.get("error") for op in ops if op["outcome"] == "err"]
    keys_stored = {t["idempotency_key"] for t in store.tasks.values() if t["idempotency_key"]}
    figures = {
        "clients": clients,
        "submits": total,
        "agents": agents,
        "faults": [f"{kind} {arg}" for kind, arg in faults],
        "daemon_pid_unchanged": same_daemon and daemon.pid == pid,
        "witness_kept": witness_kept,
        "ops": len(ops),
        "acknowledged": outcomes.count("ok"),
        "refused_storage_unavailable": refusals.count("storage_unavailable"),
        "refused_other": len(refusals) - refusals.count("storage_unavailable"),
        "unknown_outcome": outcomes.count("unknown"),
        "keys_with_a_task": len(keys_stored),
        "tasks_in_store": len(store.tasks),
        "done": sum(1 for t in store.tasks.values() if t["outcome"] == "done"),
        "failed": sum(1 for t in store.tasks.values() if t["outcome"] == "failed"),
        # Why (a failed task is never run twice, but each should have a reason a user accepts).
        "failed_because": dict(
            Counter(
                str(t["error"])[:120] for t in store.tasks.values() if t["outcome"] == "failed"
            )
        ),
        "session_starts": sum(1 for e in events if e["event"] == "start"),
        "quiescent": quiet,
        "back_to_serving_s": [round(s, 2) for s in back_to_serving],
        "submit_phase_s": round(submitted_in, 2),
        "seconds": round(time.monotonic() - started, 1),
        **{f"anomaly_{k}": v for k, v in report.counts().items()},
    }
    return RunResult(report, figures)
