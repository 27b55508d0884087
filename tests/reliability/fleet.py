"""Fleet scenarios around one real daemon: clients, stub agents, kills, and the checker after.

- the submit storm (A1): clients submit through SIGKILLs of the daemon while stub agents work;
- restart with running work (D1): hundreds of tasks held ``running`` by stub agents through a
  SIGKILL of the daemon, some agents killed or frozen while it is down;
- the claim race (B1): hundreds of agents against a backlog and a stream of submissions.

Shared by the short forms in ``tests/reliability`` and ``bench/chaos.py`` (full size). Every part
is real: the daemon is ``python -m colibri run``, the stub agents are separate processes
(``stub_agent.py``), clients are threads with their own ``colibri.client.Client`` connections,
and the daemon is killed with SIGKILL.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from colibri.client import Client, Remote
from colibri.core.errors import ColibriError
from colibri.core.model import parse_rfc3339
from tests.helpers import PYTHON, Daemon, claim_of, wait_until, write_config
from tests.reliability import history

STUB_AGENT = Path(__file__).with_name("stub_agent.py")


# -- stub agents -----------------------------------------------------------------------------------


@dataclass
class StubAgents:
    """Stub agent processes; process ``n`` runs the agents ``names[n]`` and logs to ``logs[n]``."""

    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)
    logs: list[Path] = field(default_factory=list)
    names: list[list[str]] = field(default_factory=list)

    def events(self) -> list[dict[str, Any]]:
        return history.read_agent_logs(self.logs)

    def all_alive(self) -> bool:
        return all(p.poll() is None for p in self.processes)

    def live_sessions(self) -> set[tuple[str, int]]:
        """Sessions started and not ended by processes still alive (a killed one's are gone)."""
        alive = [log for p, log in zip(self.processes, self.logs, strict=True) if p.poll() is None]
        return history.live_sessions(history.read_agent_logs(alive))

    def signal(self, n: int, sig: int) -> None:
        os.killpg(self.processes[n].pid, sig)

    def kill(self, n: int) -> None:
        self.signal(n, signal.SIGKILL)
        self.processes[n].wait(timeout=10)

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                os.killpg(process.pid, signal.SIGCONT)  # a frozen one must run to die
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
    per_process: int = 1,
    hold: bool = False,
    connect: str | None = None,
    tokens: Path | None = None,
) -> StubAgents:
    """``count`` stub agent processes of ``per_process`` agents each (named ``prefix-n``, or
    ``prefix-n-i`` when several share a process); ``hold``: sessions wait for SIGUSR1.
    ``connect``: TCP addresses (``tcp://a,tcp://b``) instead of the root's socket, with each
    agent's token in the JSON file ``tokens``."""
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
                connect or str(root / ".colibri" / "colibri.sock"),
                *(["--tokens", str(tokens)] if tokens is not None else []),
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
                "--agents",
                str(per_process),
                *(["--hold"] if hold else []),
            ],
            stdout=out,
            stderr=out,
            start_new_session=True,
        )
        out.close()
        agents.processes.append(process)
        agents.logs.append(log)
        agents.names.append(
            [name] if per_process == 1 else [f"{name}-{i}" for i in range(per_process)]
        )
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
    acknowledged. Every attempt is one op in ``ops``. ``every`` > 0 paces it: the n-th task
    is first sent no earlier than n × ``every`` seconds after the start (a steady rate, as in a
    soak, instead of a storm)."""

    def __init__(
        self,
        socket: Path | Remote,
        cid: int,
        count: int,
        progress: Progress,
        *,
        every: float = 0.0,
        **fields: Any,
    ) -> None:
        super().__init__(name=f"client-{cid}", daemon=True)
        self.socket = socket
        self.cid = cid
        self.count = count
        self.progress = progress
        self.every = every
        #: Sent with every submission (e.g. ``max_attempts``).
        self.fields = fields
        self.ops: list[dict[str, Any]] = []
        self.error: BaseException | None = None

    def run(self) -> None:
        try:
            self._run()
        except BaseException as exc:  # reported by the test, not lost in a thread
            self.error = exc

    def _connect(self, deadline: float) -> Client:
        """Its daemon's socket, or (a ``Remote``) the first of the daemons' TCP addresses that
        answers: through a kill of the serving one, the standby that takes over."""
        while True:
            try:
                if isinstance(self.socket, Remote):
                    return Client.remote(self.socket, timeout=30)
                return Client(self.socket, timeout=30)
            except (ColibriError, OSError) as exc:
                # No daemon, or (over TCP) one that took the connection and dropped it before
                # its ``auth`` was answered: killed, or stopping. Another comes.
                if isinstance(exc, ColibriError) and exc.code not in (
                    "no_daemon",
                    "closed",
                    "standby",
                    "not_owner",  # no daemon serves its tenant for the moment (sharing)
                    "storage_unavailable",  # its token not checked: the store is away
                ):
                    raise
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _run(self) -> None:
        client: Client | None = None
        started = time.monotonic()
        for n in range(self.count):
            key = f"c{self.cid}-{n}"
            if self.every > 0:
                time.sleep(max(0.0, started + n * self.every - time.monotonic()))
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
                    reply = client.call(
                        "submit", text=f"storm {key}", idempotency_key=key, **self.fields
                    )
                except ColibriError as exc:
                    # "standby": a daemon started again on a PostgreSQL board waits out the
                    # killed one's lease; like no daemon at all, the submission was not taken.
                    # "not_owner": its tenant was handed to another daemon meanwhile; not taken.
                    if exc.code not in ("closed", "standby", "not_owner"):
                        op["outcome"] = "err"
                        op["error"] = exc.code
                    if exc.code in ("standby", "storage_unavailable", "not_owner"):
                        time.sleep(0.02)  # (its store away: refused until it is back)
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


def finish(workers: list[SubmitClient], timeout: float) -> None:
    """Wait for the clients; raise what one of them met, or say which did not finish."""
    for worker in workers:
        worker.join(timeout=timeout)
    errors = [w.error for w in workers if w.error is not None]
    if errors:
        raise errors[0]
    assert not any(w.is_alive() for w in workers), "a client did not finish"


# -- the storm -------------------------------------------------------------------------------------


@dataclass
class RunResult:
    """One scenario's run: the history checker's report and the figures measured."""

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
) -> RunResult:
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
        finish(workers, timeout=300)
        submitted_in = time.monotonic() - started
        quiet = wait_quiescent(daemon, total, timeout=agent_ttl + 20)
        events = fleet.events()
        live = history.live_sessions(events) if fleet.all_alive() else set()
    finally:
        fleet.stop()
        daemon.stop()
    ops = [op for w in workers for op in w.ops]
    store = history.read_board(daemon)
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
    return RunResult(report, figures)


# -- restart with running work (D1) ----------------------------------------------------------------


def submit_tasks(daemon: Daemon, cid: int, count: int, **fields: Any) -> list[dict[str, Any]]:
    """``count`` submissions (keys ``c{cid}-n``) from this thread; every op made."""
    client = SubmitClient(daemon.socket, cid, count, Progress(), **fields)
    client.run()
    if client.error is not None:
        raise client.error
    return client.ops


def wait_registered(daemon: Daemon, names: list[str], timeout: float = 30.0) -> None:
    """Until every agent of ``names`` is online."""

    def online() -> bool:
        listed = {a["name"]: a for a in daemon.call("agents")["agents"]}
        return all(name in listed and listed[name]["online"] for name in names)

    wait_until(online, timeout=timeout)


def running_tasks(daemon: Daemon) -> dict[str, dict[str, Any]]:
    return {t["id"]: t for t in daemon.call("list", state="running", limit=10_000)["tasks"]}


def late_report(daemon: Daemon, task_id: str, epoch: int) -> str:
    """What a session of a superseded claim gets for its own ``colibri out`` (carrying that
    claim's secret, as the session has it): the error code."""
    try:
        daemon.call(
            "out",
            task=task_id,
            epoch=epoch,
            output="late",
            session_ended=False,
            from_session=True,
            claim=claim_of(daemon, task_id, epoch),
        )
    except ColibriError as exc:
        return exc.code
    return "accepted"


def restart_at_size(
    root: Path,
    *,
    tasks: int,
    agents: int,
    slots: int,
    killed: int,
    frozen: int,
    frozen_slots: int,
    seed: int,
    agent_ttl: float = 2.0,
    lost_within: float = 5.0,
    log: Any = None,
) -> RunResult:
    """D1 on ``root``: ``tasks`` tasks held ``running`` by stub agents through a SIGKILL of the
    daemon. While it is down, ``killed`` agents are SIGKILLed (their sessions die) and ``frozen``
    ones SIGSTOPped (alive, but silent past the adoption window). Asserts the pass criteria as
    it goes; returns the checker's final report and the figures.

    The frozen agents take their ``frozen × frozen_slots`` tasks first, submitted with
    ``max_attempts: 2``, so their claims are superseded by a second one on a surviving agent;
    every other task has one attempt, so a lost session fails it."""
    rng = random.Random(f"d1-{seed}")
    say = log or (lambda _: None)
    held_back = frozen * frozen_slots
    if not 0 < tasks <= 10_000:
        raise ValueError(f"tasks must be 1-10000 (one page of `list`), got {tasks}")
    if (agents - killed) * slots < tasks:
        raise ValueError(
            f"{agents - killed} surviving agents × {slots} slots cannot hold {tasks} tasks;"
            " give more agents or slots"
        )
    write_config(root, tick="1s", agent_ttl=f"{agent_ttl}s", retry_backoff="0.1s")
    daemon = Daemon(root)
    daemon.start()
    work = (0.0, 0.05)
    fleet = StubAgents()
    started = time.monotonic()
    try:
        # The frozen agents first, alone, so the tasks that may be retried land on them.
        cold = start_agents(
            root,
            frozen,
            slots=frozen_slots,
            ttl=agent_ttl,
            seed=seed,
            prefix="frz",
            work=work,
            hold=True,
        )
        fleet = cold
        wait_registered(daemon, [n for names in cold.names for n in names])
        ops = submit_tasks(daemon, 0, held_back, max_attempts=2)
        wait_until(lambda: len(running_tasks(daemon)) == held_back, timeout=60)
        main = start_agents(
            root,
            agents,
            slots=slots,
            ttl=agent_ttl,
            seed=seed,
            prefix="stub",
            work=work,
            hold=True,
        )
        fleet.processes += main.processes
        fleet.logs += main.logs
        fleet.names += main.names
        wait_registered(daemon, [n for names in main.names for n in names])
        ops += submit_tasks(daemon, 1, tasks - held_back)
        wait_until(lambda: len(running_tasks(daemon)) == tasks, timeout=120)
        # Every session has logged its start (the assign is sent after the claim commits).
        wait_until(lambda: len(fleet.live_sessions()) == tasks, timeout=60)
        before = running_tasks(daemon)
        say(f"D1: {tasks} tasks running on {frozen + agents} agents")
        assert all((t["epoch"], t["attempts"]) == (1, 1) for t in before.values())

        by_agent: dict[str, list[str]] = {}
        for task in before.values():
            by_agent.setdefault(task["agent"], []).append(task["id"])
        busy = [n for n in range(frozen, frozen + agents) if fleet.names[n][0] in by_agent]
        doomed = sorted(rng.sample(busy, killed))
        frozen_procs = list(range(frozen))
        lost = {t for n in doomed for t in by_agent[fleet.names[n][0]]}
        superseded = {t for n in frozen_procs for t in by_agent.get(fleet.names[n][0], [])}
        kept = set(before) - lost - superseded
        assert len(superseded) == held_back

        daemon.kill()
        for n in doomed:
            fleet.kill(n)
        for n in frozen_procs:
            fleet.signal(n, signal.SIGSTOP)
        restart_wall, t0 = time.time(), time.monotonic()
        daemon.start()
        restart_to_ready = time.monotonic() - t0
        say(f"D1: daemon killed and restarted; {len(lost)} sessions killed, {held_back} frozen")

        survivors = [n for n in range(frozen, frozen + agents) if n not in doomed]
        holding = {fleet.names[n][0]: set(by_agent.get(fleet.names[n][0], [])) for n in survivors}

        def adopted() -> bool:
            listed = {a["name"]: a for a in daemon.call("agents")["agents"]}
            return all(
                name in listed and listed[name]["online"] and set(listed[name]["running"]) == held
                for name, held in holding.items()
            )

        wait_until(adopted, timeout=agent_ttl + 10)
        adopted_in = time.monotonic() - t0

        def settled() -> bool:
            """Every lost session failed, every superseded one claimed again and started."""
            now = {t["id"]: t for t in daemon.call("list", limit=10_000)["tasks"]}
            starts = {(e["task_id"], e["epoch"]) for e in fleet.events() if e["event"] == "start"}
            return all(now[t]["outcome"] == "failed" for t in lost) and all(
                now[t]["state"] == "running" and (t, now[t]["epoch"]) in starts for t in superseded
            )

        wait_until(settled, timeout=agent_ttl + 30)
        settled_in = time.monotonic() - t0
        tasks_now = {t["id"]: t for t in daemon.call("list", limit=10_000)["tasks"]}
        # Not restarted: every adopted task is on the same claim, on the same agent.
        restarted = sorted(
            t
            for t in kept
            if (tasks_now[t]["state"], tasks_now[t]["epoch"], tasks_now[t]["agent"])
            != ("running", 1, before[t]["agent"])
        )
        assert not restarted, f"adopted tasks restarted or moved: {restarted[:10]}"
        for t in lost:
            assert tasks_now[t]["epoch"] == 1 and "session lost" in tasks_now[t]["error"]
        for t in superseded:
            assert tasks_now[t]["epoch"] == 2 and tasks_now[t]["agent"].startswith("stub-")
        # When the losses happened, by the ledger's own clock.
        snapshot = history.read_board(daemon, integrity_check=False)
        lost_at = [
            parse_rfc3339(row["at"]) - restart_wall
            for row in snapshot.ledger
            if row["task"] in lost | superseded
            and row["from_state"] == "running"
            and row["epoch"] == 1
            and "session lost" in (row["reason"] or "")
        ]
        assert len(lost_at) == len(lost) + len(superseded), "a lost session has no ledger row"
        lost_after = max(lost_at, default=0.0)
        assert lost_after <= agent_ttl + lost_within, (
            f"sessions lost {lost_after:.2f}s after the restart"
        )
        # 0 stuck running: every running task has a live session on a live agent behind it.
        middle = history.check(snapshot, agent_events=fleet.events(), live=fleet.live_sessions())
        assert not middle.problems(), middle.problems()

        # The superseded claims report late, as their sessions would: refused by epoch.
        seq = daemon.call("status")["ledger_at"]
        late = Counter(late_report(daemon, t, 1) for t in sorted(superseded))
        late_failed = Counter(late_report(daemon, t, 1) for t in sorted(lost))
        assert late == Counter({"stale_claim": len(superseded)}), late
        assert set(late_failed) <= {"illegal_transition"}, late_failed
        assert daemon.call("status")["ledger_at"] == seq, "a late report changed the ledger"
        # The frozen agents wake up, register with their old claims, are told to drop them.
        for n in frozen_procs:
            fleet.signal(n, signal.SIGCONT)

        def dropped() -> bool:
            stops = {(e["task_id"], e["epoch"]) for e in fleet.events() if e["event"] == "stop"}
            return all((t, 1) in stops for t in superseded)

        wait_until(dropped, timeout=30)
        say("D1: adopted, lost, superseded and late reports checked; releasing the sessions")
        for n in range(frozen + agents):
            if n not in doomed:
                fleet.signal(n, signal.SIGUSR1)
        quiet = wait_quiescent(daemon, tasks, timeout=120)
        assert quiet, daemon.call("status")["tasks"]
        events = fleet.events()
        live = fleet.live_sessions()
    finally:
        fleet.stop()
        daemon.stop()
    store = history.read_board(daemon)
    report = history.check(
        store,
        ops=ops,
        agent_events=events,
        mirror=history.read_mirror(root / ".colibri" / "ledger.jsonl"),
        live=live,
    )
    starts = Counter(e["task_id"] for e in events if e["event"] == "start")
    finishes = Counter(e["task_id"] for e in events if e["event"] == "finish")
    outcome = {t: store.tasks[t]["outcome"] for t in store.tasks}
    figures = {
        "tasks": tasks,
        "agents": frozen + agents,
        "agents_killed": killed,
        "sessions_killed": len(lost),
        "agents_frozen": frozen,
        "claims_superseded": len(superseded),
        "sessions_adopted": len(kept),
        "adopted_restarted": len(restarted),
        "adopted_started_once": sum(1 for t in kept if starts[t] == 1),
        "adopted_done_once": sum(1 for t in kept if outcome[t] == "done" and finishes[t] == 1),
        "lost_failed": sum(1 for t in lost if outcome[t] == "failed" and starts[t] == 1),
        "superseded_done_on_second_claim": sum(
            1 for t in superseded if outcome[t] == "done" and store.tasks[t]["epoch"] == 2
        ),
        "late_reports_stale_claim": late["stale_claim"],
        "late_reports_on_failed_refused": sum(late_failed.values()),
        "agent_ttl_s": agent_ttl,
        "restart_to_ready_s": round(restart_to_ready, 3),
        "all_adopted_after_s": round(adopted_in, 2),
        "lost_after_restart_max_s": round(lost_after, 2),
        "settled_after_s": round(settled_in, 2),
        "done": sum(1 for o in outcome.values() if o == "done"),
        "failed": sum(1 for o in outcome.values() if o == "failed"),
        "seconds": round(time.monotonic() - started, 1),
        **{f"anomaly_{k}": v for k, v in report.counts().items()},
    }
    return RunResult(report, figures)


# -- the claim race (B1) ---------------------------------------------------------------------------


def claim_race(
    root: Path,
    *,
    tasks: int,
    agents: int,
    per_process: int,
    clients: int,
    seed: int,
    slots: int = 2,
    agent_ttl: float = 30.0,
    log: Any = None,
) -> RunResult:
    """B1 on ``root``: half of ``tasks`` waits as a backlog when ``agents`` stub agents
    (``per_process`` to a process) register at once; ``clients`` threads submit the other half
    while they work. Returns the checker's report and the figures: claims in the ledger, tasks
    claimed twice, sessions started without a claim, terminal transitions."""
    say = log or (lambda _: None)
    if agents % per_process:
        raise ValueError(f"agents ({agents}) must be a multiple of per_process ({per_process})")
    write_config(root, tick="1s", agent_ttl=f"{agent_ttl}s")
    daemon = Daemon(root)
    daemon.start()
    progress = Progress()
    halves = (tasks // 2, tasks - tasks // 2)
    waves = [
        [
            SubmitClient(daemon.socket, wave * clients + c, share, progress)
            for c, share in enumerate(split(half, clients))
        ]
        for wave, half in enumerate(halves)
    ]
    fleet = StubAgents()
    started = racing = time.monotonic()
    try:
        for wave in waves:
            for worker in wave:
                worker.start()
            if wave is waves[0]:
                for worker in wave:
                    worker.join(timeout=600)
                say(f"B1: backlog of {halves[0]:,} submitted; {agents} agents start")
                racing = time.monotonic()
                fleet = start_agents(
                    root,
                    agents // per_process,
                    slots=slots,
                    ttl=agent_ttl,
                    seed=seed,
                    per_process=per_process,
                )
        for worker in waves[1]:
            worker.join(timeout=600)
        errors = [w.error for wave in waves for w in wave if w.error is not None]
        if errors:
            raise errors[0]
        say(f"B1: all {tasks:,} submitted after {time.monotonic() - started:.1f} s")
        quiet = wait_quiescent(daemon, tasks, timeout=max(120.0, tasks / 100))
        seconds, total = time.monotonic() - racing, time.monotonic() - started
        events = fleet.events()
        live = fleet.live_sessions()
        registered = {a["name"] for a in daemon.call("agents")["agents"]}
    finally:
        fleet.stop()
        daemon.stop()
    ops = [op for wave in waves for w in wave for op in w.ops]
    store = history.read_board(daemon)
    mirror = history.read_mirror(root / ".colibri" / "ledger.jsonl")
    report = history.check(store, ops=ops, agent_events=events, mirror=mirror, live=live)
    claims = Counter(
        row["task"]
        for row in store.ledger
        if row["from_state"] == "pending" and row["to_state"] == "running"
    )
    terminals = Counter(
        row["task"] for row in store.ledger if row["to_state"] in history.TERMINAL_STATES
    )
    starts = [e for e in events if e["event"] == "start"]
    per_agent = Counter(e["agent"] for e in starts)
    figures = {
        "tasks": tasks,
        "agents": agents,
        "agent_processes": agents // per_process,
        "agents_registered": len(registered),
        "acknowledged": sum(1 for op in ops if op["outcome"] == "ok"),
        "ledger_claims": sum(claims.values()),
        "tasks_claimed": len(claims),
        "tasks_claimed_twice": sum(1 for n in claims.values() if n > 1),
        "session_starts": len(starts),
        "done": sum(1 for t in store.tasks.values() if t["outcome"] == "done"),
        "tasks_ended_twice": sum(1 for n in terminals.values() if n > 1),
        "agents_that_won_claims": len(per_agent),
        "claims_per_agent_min": min(per_agent.values(), default=0),
        "claims_per_agent_max": max(per_agent.values(), default=0),
        "quiescent": quiet,
        "submit_backlog_s": round(racing - started, 1),
        "agents_start_to_all_closed_s": round(seconds, 1),
        "tasks_per_s": round(tasks / seconds),
        "seconds": round(total, 1),
        **{f"anomaly_{k}": v for k, v in report.counts().items()},
    }
    return RunResult(report, figures)


def split(total: int, parts: int) -> list[int]:
    """``total`` in ``parts`` shares differing by at most one."""
    return [total // parts + (1 if n < total % parts else 0) for n in range(parts)]
