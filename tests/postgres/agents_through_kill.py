"""Agents over TCP follow the serving daemon of a PostgreSQL board through its SIGKILL (the
test's short form and bench/chaos.py's H2).

Several daemons stand on one board; stub agents (tests/reliability/stub_agent.py, each its own
token) are given every daemon's TCP address and find the serving one by trying them in turn;
clients submit tasks with idempotency keys to the serving daemon; once half of them are done
it is SIGKILLed, a standby takes over, the agents reconnect to it and register again with the
sessions they hold. Then the history checker (tests/reliability/history.py) reads the board
and the agents' own logs: acknowledged tasks lost, sessions started twice, re-spawns, illegal
transitions, tasks left running.
"""

from __future__ import annotations

import json
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from colibri.client import Remote
from tests.helpers import wait_until, write_config
from tests.postgres.hive import Member
from tests.postgres.schedule_fires import board_rows, serving_pid
from tests.reliability import history
from tests.reliability.fleet import (
    Progress,
    RunResult,
    StubAgents,
    SubmitClient,
    finish,
    start_agents,
)


def closed(board: str) -> int:
    return int(board_rows(board, "SELECT count(*) FROM tasks WHERE state = 'closed'")[0][0])


def tasks_through_owner_kill(
    workdir: Path,
    board: str,
    *,
    daemons: int = 3,
    tasks: int = 400,
    clients: int = 2,
    processes: int = 2,
    per_process: int = 5,
    ttl: float = 2.0,
    agent_ttl: float = 5.0,
    work: tuple[float, float] = (0.02, 0.1),
    seed: int = 1,
    submit_through_kill: bool = False,
    log: Callable[[str], None] = lambda _: None,
) -> RunResult:
    """The run, then the history checker; the figures of the kill and the takeover.

    ``submit_through_kill``: the clients submit while the agents work, over TCP to every
    daemon's address with an operator token, and the serving daemon is killed once half of
    the tasks are acknowledged: the clients follow it to the standby that takes over, as the
    agents do (each submission retried with its key until acknowledged)."""
    members = [Member(workdir / f"d{n}", board, ttl=f"{ttl:g}s") for n in range(daemons)]
    for member in members:
        # A claim of the killed daemon's no agent holds fails once the agents' ttl has passed.
        write_config(member.root, agent_ttl=f"{agent_ttl:g}s")
    names = [f"far-{n}-{i}" for n in range(processes) for i in range(per_process)]
    progress = Progress()
    submitters: list[SubmitClient] = []
    figures: dict[str, Any] = {"daemons": daemons, "tasks": tasks, "agents": len(names)}
    started = time.monotonic()
    agents: StubAgents | None = None
    live: set[tuple[str, int]] = set()
    try:
        members[0].start()
        for member in members[1:]:
            member.stand_by()
        owner = members[0]
        tokens = {
            name: owner.call("token-create", role="agent", tenant="default", agent=name)["secret"]
            for name in names
        }
        token_file = workdir / "tokens.json"
        token_file.write_text(json.dumps(tokens))
        token_file.chmod(0o600)
        addresses = ",".join(m.address for m in members)
        target: Path | Remote = owner.socket
        if submit_through_kill:
            operator = owner.call("token-create", role="operator", tenant="default")["secret"]
            target = Remote.parse(addresses, token=operator, insecure_loopback=True)
        submitters = [
            SubmitClient(target, c, tasks // clients + (c < tasks % clients), progress)
            for c in range(clients)
        ]

        def agents_start() -> StubAgents:
            return start_agents(workdir, processes, per_process=per_process, ttl=agent_ttl,
                                work=work, seed=seed, prefix="far", connect=addresses,
                                tokens=token_file)  # fmt: skip

        patience = max(120.0, tasks / 20)  # at 20 tasks/s at least
        if submit_through_kill:
            agents = agents_start()
            for submitter in submitters:
                submitter.start()
            # Half of them acknowledged: the clients are in mid-stream when the daemon dies.
            wait_until(lambda: progress.acked >= tasks // 2, timeout=patience, interval=0.005)
        else:
            for submitter in submitters:
                submitter.start()
            finish(submitters, patience)
            figures["acknowledged"] = progress.acked
            # The agents come once every task is acknowledged: the kill lands mid-run.
            agents = agents_start()
            # Half of them done: the serving daemon dies with work assigned and running.
            wait_until(lambda: closed(board) >= tasks // 2, timeout=patience, interval=0.01)
        epoch: tuple[int, int] = wait_until(lambda: serving_pid(board))
        figures["done_at_kill"] = closed(board)
        acknowledged_at_kill = progress.acked
        owner.kill()
        killed_wall, killed = time.time(), time.monotonic()
        took = wait_until(lambda: (now := serving_pid(board)) is not None and now[0] > epoch[0]
                          and time.monotonic(), timeout=ttl * 5 + 20, interval=0.01)  # fmt: skip
        figures["takeover_s"] = round(took - killed, 2)
        log(f"H2: killed with {figures['done_at_kill']} of {tasks} done; taken over in "
            f"{figures['takeover_s']} s")  # fmt: skip
        if submit_through_kill:
            figures["acknowledged_at_kill"] = acknowledged_at_kill
            finish(submitters, patience)
            figures["acknowledged"] = progress.acked
            resumed = [op["complete_t"] for s in submitters for op in s.ops
                       if op["outcome"] == "ok" and op["complete_t"] > killed_wall]  # fmt: skip
            figures["kill_to_next_acknowledgement_s"] = (
                round(min(resumed) - killed_wall, 2) if resumed else None
            )
        wait_until(lambda: closed(board) == tasks, timeout=patience, interval=0.05)
        figures["all_closed_s"] = round(time.monotonic() - killed, 2)
        starts = sorted(e["t"] for e in agents.events()
                        if e["event"] == "start" and e["t"] > killed_wall)  # fmt: skip
        figures["kill_to_next_assignment_s"] = round(starts[0] - killed_wall, 2) if starts else None
        live = agents.live_sessions()
    finally:
        if agents is not None:
            agents.stop()
        for member in members:
            if member.process is not None and member.process.poll() is None:
                member.process.send_signal(signal.SIGTERM)
                member.process.wait(timeout=30)
    store = history.read_pg_board(board)
    events = [] if agents is None else agents.events()
    report = history.check(store, ops=[op for s in submitters for op in s.ops],
                           agent_events=events, live=live)  # fmt: skip
    states: dict[str, int] = {}
    for task in store.tasks.values():
        key = str(task["outcome"] or task["state"])
        states[key] = states.get(key, 0) + 1
    # A claim the killed daemon committed but whose assign never reached its agent: failed
    # "session lost" once the agent's ttl passed, never run (at most once, as on one daemon).
    ran = {e["task_id"] for e in events if e["event"] == "start"}
    unrun = [t for t, task in store.tasks.items()
             if task["outcome"] == "failed" and t not in ran
             and str(task["error"] or "").startswith("session lost")]  # fmt: skip
    figures.update(
        outcomes=dict(sorted(states.items())),
        failed_claim_lost_to_kill=len(unrun),
        session_starts=sum(e["event"] == "start" for e in events),
        **{f"anomaly_{k}": v for k, v in report.counts().items()},
        seconds=round(time.monotonic() - started, 1),
    )
    return RunResult(report, figures)
