"""Agents over TCP follow the serving daemon of a PostgreSQL board through its SIGKILL (the
test's short form and bench/chaos.py's H2), and — with ``tenants`` — daemons sharing the
board's tenants out follow the death of one of them (H3).

Several daemons stand on one board; stub agents (tests/reliability/stub_agent.py, each its own
token) are given every daemon's TCP address and find the serving one by trying them in turn;
clients submit tasks with idempotency keys to the serving daemon; once half of them are done
it is SIGKILLed, a standby takes over, the agents reconnect to it and register again with the
sessions they hold. With ``tenants``, every daemon shares the tenants out (``run --share``),
each agent and each client is of one tenant (its token), and the daemon serving the first
tenant is killed: the others take its tenants. Then the history checker
(tests/reliability/history.py) reads the board and the agents' own logs: acknowledged tasks
lost, sessions started twice, re-spawns, illegal transitions, tasks left running.
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


def served_by(board: str) -> dict[str, int]:
    """tenant → the pid of the daemon whose live lease serves it (by its hive row)."""
    rows = board_rows(
        board,
        "SELECT substr(l.name, 8), h.pid FROM leases l JOIN hives h ON h.id = l.owner"
        " WHERE starts_with(l.name, 'tenant/') AND l.expires_at > now()",
    )
    return {str(t): int(pid) for t, pid in rows}


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
    tenants: int = 0,
    log: Callable[[str], None] = lambda _: None,
) -> RunResult:
    """The run, then the history checker; the figures of the kill and the takeover.

    ``submit_through_kill``: the clients submit while the agents work, over TCP to every
    daemon's address with an operator token, and the serving daemon is killed once half of
    the tasks are acknowledged: the clients follow it to the standby that takes over, as the
    agents do (each submission retried with its key until acknowledged)."""
    members = [Member(workdir / f"d{n}", board, ttl=f"{ttl:g}s", share=bool(tenants))
               for n in range(daemons)]  # fmt: skip
    names_of_tenants = [f"t{n}" for n in range(tenants)] or ["default"]
    if tenants:
        clients = tenants  # one a tenant, with its token
    for member in members:
        # A claim of the killed daemon's no agent holds fails once the agents' ttl has passed.
        write_config(member.root, agent_ttl=f"{agent_ttl:g}s")
    names = [f"far-{n}-{i}" for n in range(processes) for i in range(per_process)]
    progress = Progress()
    submitters: list[SubmitClient] = []
    figures: dict[str, Any] = {"daemons": daemons, "tasks": tasks, "agents": len(names),
                               "tenants": tenants}  # fmt: skip
    tenant_of = {name: names_of_tenants[n % len(names_of_tenants)] for n, name in enumerate(names)}
    started = time.monotonic()
    agents: StubAgents | None = None
    live: set[tuple[str, int]] = set()
    try:
        members[0].start()
        for member in members[1:]:
            member.start() if tenants else member.stand_by()
        owner = members[0]
        tokens = {
            name: owner.call("token-create", role="agent", tenant=tenant_of[name],
                             agent=name)["secret"]
            for name in names
        }  # fmt: skip
        if tenants:
            # Tokens made the tenants known: the daemons share them out (2 each of 6, by 3).
            wait_until(lambda: len(served_by(board)) == tenants + 1, timeout=30)
        token_file = workdir / "tokens.json"
        token_file.write_text(json.dumps(tokens))
        token_file.chmod(0o600)
        addresses = ",".join(m.address for m in members)
        targets: list[Path | Remote] = [owner.socket] * clients
        if submit_through_kill or tenants:
            targets = [
                Remote.parse(addresses, insecure_loopback=True, token=owner.call(
                    "token-create", role="operator",
                    tenant=names_of_tenants[c % len(names_of_tenants)])["secret"])
                for c in range(clients)
            ]  # fmt: skip
        submitters = [
            SubmitClient(targets[c], c, tasks // clients + (c < tasks % clients), progress)
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
        if tenants:
            # The daemon serving the first tenant dies, with whatever else it serves.
            leases = served_by(board)
            victim_pid = leases[names_of_tenants[0]]
            moved = sorted(t for t, pid in leases.items() if pid == victim_pid)
            owner = next(m for m in members if m.process is not None
                         and m.process.pid == victim_pid)  # fmt: skip
            figures["tenants_of_killed"] = moved
        else:
            epoch: tuple[int, int] = wait_until(lambda: serving_pid(board))
        figures["done_at_kill"] = closed(board)
        acknowledged_at_kill = progress.acked
        owner.kill()
        killed_wall, killed = time.time(), time.monotonic()
        if tenants:
            took = wait_until(lambda: all(served_by(board).get(t, victim_pid) != victim_pid
                                          for t in moved) and time.monotonic(),
                              timeout=ttl * 5 + 20, interval=0.01)  # fmt: skip
        else:
            took = wait_until(lambda: (now := serving_pid(board)) is not None
                              and now[0] > epoch[0] and time.monotonic(),
                              timeout=ttl * 5 + 20, interval=0.01)  # fmt: skip
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
        # The next task started after the kill (with tenants: of a tenant the killed served).
        of_killed = {n for n in names if tenant_of[n] in figures.get("tenants_of_killed", [])}
        starts = sorted(e["t"] for e in agents.events()
                        if e["event"] == "start" and e["t"] > killed_wall
                        and (not tenants or e["agent"] in of_killed))  # fmt: skip
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
