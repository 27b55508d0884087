"""The submit storm (A1): clients, stub agents and a killer around one real daemon.

Shared by ``tests/reliability/test_submit_storm.py`` (short form) and ``bench/chaos.py`` (full
size). Every part is real: the daemon is ``python -m colibri run``, the stub agents are separate
processes (``stub_agent.py``), clients are threads with their own ``colibri.client.Client``
connections, and the daemon is killed with SIGKILL.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from colibri.client import Client, RemoteError
from colibri.core.errors import DaemonNotRunning
from tests.helpers import PYTHON, Daemon, write_config
from tests.reliability import history

STUB_AGENT = Path(__file__).with_name("stub_agent.py")


# -- stub agents -----------------------------------------------------------------------------------


@dataclass
class StubAgents:
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)

    def events(self) -> list[dict[str, Any]]:
        return history.read_agent_logs(self.logs)

    def all_alive(self) -> bool:
        return all(p.poll() is None for p in self.processes)

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        for process in self.processes:
            process.wait(timeout=10)


def start_agents(
    root: Path,
    count: int,
    *,
    slots: int = 2,
    ttl: float = 3.0,
    work: tuple[float, float] = (0.0, 0.02),
    seed: int = 0,
    prefix: str = "stub",
) -> StubAgents:
    agents = StubAgents()
    for n in range(count):
        name = f"{prefix}-{n}"
        log = root / f"agent-{name}.jsonl"
        out = open(root / f"agent-{name}.log", "ab")
        process = subprocess.Popen(
            [
                PYTHON,
                str(STUB_AGENT),
                "--socket",
                str(root / ".colibri" / "colibri.sock"),
                "--name",
                name,
                "--log",
                str(log),
                "--slots",
                str(slots),
                "--ttl",
                str(ttl),
                "--work-min",
                str(work[0]),
                "--work-max",
                str(work[1]),
                "--seed",
                str(seed * 1000 + n),
            ],
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
        out.close()
        agents.processes.append(process)
        agents.logs.append(log)
    return agents


# -- clients ---------------------------------------------------------------------------------------


class Progress:
    """Acknowledged submissions so far, shared by the clients and the killer."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.acked = 0
        self.done = threading.Event()

    def add(self) -> None:
        with self._lock:
            self.acked += 1


class SubmitClient(threading.Thread):
    """Submits ``count`` tasks, each with its own idempotency key, retrying every submission
    whose outcome it does not know (the connection died) with the same key until it is
    acknowledged. Every attempt is one op in ``ops``."""

    def __init__(self, socket: Path, cid: int, count: int, progress: Progress) -> None:
        super().__init__(name=f"client-{cid}", daemon=True)
        self.socket = socket
        self.cid = cid
        self.count = count
        self.progress = progress
        self.ops: list[dict[str, Any]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the test, not lost in a thread
            self.error = exc

    def _connect(self, deadline: float) -> Client:
        while True:
            try:
                return Client(self.socket, timeout=30)
            except DaemonNotRunning:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _run(self) -> None:
        client: Client | None = None
        for n in range(self.count):
            key = f"c{self.cid}-{n}"
            while True:
                if client is None:
                    client = self._connect(time.monotonic() + 60)
                op: dict[str, Any] = {
                    "op": "submit",
                    "idempotency_key": key,
                    "invoke_t": time.time(),
                    "outcome": "unknown",
                    "task_id": None,
                }
                try:
                    reply = client.call("submit", text=f"storm {key}", idempotency_key=key)
                except RemoteError as exc:
                    if exc.code != "closed":
                        op["outcome"] = "err"
                        op["error"] = exc.code
                    client.close()
                    client = None
                except OSError:
                    client.close()
                    client = None
                else:
                    op.update(outcome="ok", task_id=reply["task"]["id"], created=reply["created"])
                op["complete_t"] = time.time()
                self.ops.append(op)
                if op["outcome"] == "ok":
                    self.progress.add()
                    break
        if client is not None:
            client.close()


# -- the storm -------------------------------------------------------------------------------------


@dataclass
class StormResult:
    report: history.Report
    figures: dict[str, Any]


def wait_quiescent(daemon: Daemon, expected: int, timeout: float) -> bool:
    """Until every one of ``expected`` tasks is closed; False if that did not happen in time."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        counts = daemon.call("status")["tasks"]
        if counts.get("closed", 0) == expected and sum(counts.values()) == expected:
            return True
        time.sleep(0.05)
    return False


def submit_storm(
    root: Path,
    *,
    clients: int,
    submits: int,
    agents: int,
    kills: int,
    seed: int,
    agent_ttl: float = 2.0,
    log: Any = None,
) -> StormResult:
    """Run A1 on ``root`` (an initialised root); return the checker's report and figures."""
    rng = random.Random(seed)
    write_config(root, tick="1s", agent_ttl=f"{agent_ttl}s")
    daemon = Daemon(root)
    daemon.start()
    fleet = start_agents(root, agents, ttl=agent_ttl, seed=seed)
    total = clients * submits
    progress = Progress()
    workers = [SubmitClient(daemon.socket, c, submits, progress) for c in range(clients)]
    span = (max(1, total // 20), max(2, total * 9 // 10))
    thresholds = sorted(rng.sample(range(*span), kills))
    restarts: list[float] = []
    started = time.monotonic()
    try:
        for worker in workers:
            worker.start()
        for threshold in thresholds:
            while progress.acked < threshold and any(w.is_alive() for w in workers):
                time.sleep(0.002)
            time.sleep(rng.uniform(0.0, 0.02))
            daemon.kill()
            t0 = time.monotonic()
            daemon.start()
            restarts.append(time.monotonic() - t0)
            if log is not None:
                log(f"kill {len(restarts)}/{kills} at {progress.acked}/{total} acknowledged")
        for worker in workers:
            worker.join(timeout=300)
        submitted_in = time.monotonic() - started
        errors = [w.error for w in workers if w.error is not None]
        if errors:
            raise errors[0]
        assert not any(w.is_alive() for w in workers), "a client did not finish"
        quiet = wait_quiescent(daemon, total, timeout=agent_ttl + 20)
        events = fleet.events()
        live = history.live_sessions(events) if fleet.all_alive() else set()
    finally:
        fleet.stop()
        daemon.stop()
    ops = [op for w in workers for op in w.ops]
    store = history.read_store(root / ".colibri" / "colibri.sqlite")
    mirror = history.read_mirror(root / ".colibri" / "ledger.jsonl")
    report = history.check(store, ops=ops, agent_events=events, mirror=mirror, live=live)
    outcomes = [op["outcome"] for op in ops]
    keys_stored = {t["idempotency_key"] for t in store.tasks.values() if t["idempotency_key"]}
    figures = {
        "clients": clients,
        "submits": total,
        "agents": agents,
        "kills": len(restarts),
        "ops": len(ops),
        "acknowledged": outcomes.count("ok"),
        "unknown_outcome": outcomes.count("unknown"),
        "refused": outcomes.count("err"),
        "retried_keys_created_by_earlier_attempt": sum(
            1 for op in ops if op["outcome"] == "ok" and not op.get("created")
        ),
        "keys_with_a_task": len(keys_stored),
        "tasks_in_store": len(store.tasks),
        "done": sum(1 for t in store.tasks.values() if t["outcome"] == "done"),
        "failed": sum(1 for t in store.tasks.values() if t["outcome"] == "failed"),
        "session_starts": sum(1 for e in events if e["event"] == "start"),
        "quiescent": quiet,
        "restart_to_ready_max_s": round(max(restarts, default=0.0), 3),
        "submit_phase_s": round(submitted_in, 2),
        **{f"anomaly_{k}": v for k, v in report.counts().items()},
    }
    return StormResult(report, figures)
