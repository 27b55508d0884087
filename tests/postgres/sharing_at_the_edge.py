"""Daemons sharing a PostgreSQL board's tenants out, the server at the edge HIVE.md gives — a
round trip of a twentieth of the lease's ttl — for a long while (bench/chaos.py's H5; the test
of ten ttls is tests/postgres/test_sharing.py's).

Three ``run --share`` daemons with a 2 s lease reach the server through a relay that delays
every chunk 50 ms each way (tests/postgres/hive.py: ``Relay``). The board has 7 tenants; one
stub agent a tenant, over TCP, runs a light steady stream of tasks that a client a tenant
submits with idempotency keys. Once the daemons have divided the tenants, the run goes on for
``minutes``: no daemon may exit, no tenant's lease may change hands (a takeover means a lease
that was not renewed in time), and the history checker reads the board and the agents' logs at
the end: 0 acknowledged lost, 0 sessions started twice.
"""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psycopg

from colibri.client import Remote
from colibri.core.errors import ColibriError
from tests.helpers import wait_until, write_config
from tests.postgres.agents_through_kill import served_by
from tests.postgres.hive import Member, relayed
from tests.postgres.schedule_fires import board_rows
from tests.reliability import history
from tests.reliability.fleet import Progress, RunResult, StubAgents, SubmitClient, start_agents
from tests.store.conftest import as_app_role

#: What a daemon's log says when it loses a lease, takes a tenant or gives one back.
LOST = ("could not be renewed", "has passed to another daemon")


def holders(board: str) -> dict[str, tuple[str, int]]:
    """tenant → (owner, epoch) of its live lease."""
    rows = board_rows(
        board,
        "SELECT substr(name, 8), owner, epoch FROM leases WHERE starts_with(name, 'tenant/')"
        " AND expires_at > now()",
    )
    return {str(t): (str(o), int(e)) for t, o, e in rows}


def split(board: str, members: list[Member]) -> list[int]:
    """How many tenants each of ``members`` serves (by its pid's live leases)."""
    pids = list(served_by(board).values())
    return [pids.count(m.process.pid) if m.process else 0 for m in members]


def sharing_at_the_edge(
    workdir: Path,
    board: str,
    *,
    minutes: float = 10.0,
    daemons: int = 3,
    tenants: int = 7,
    ttl: float = 2.0,
    delay: float = 0.05,
    rate: float = 3.0,
    tokens_before: bool = False,
    log: Callable[[str], None] = lambda _: None,
) -> RunResult:
    """The run and its figures; the members' roots (and logs) stay under ``workdir``.

    The tenants' tokens are made by the sharing daemons that serve them, once they have
    divided the tenants, as an operator would make them; ``tokens_before``: by a daemon next to
    the server (no relay) that serves the whole board and stops before the three start."""
    names_of_tenants = ["default"] + [f"t{n}" for n in range(tenants - 1)]
    app = as_app_role(board)  # (which makes the board's tables)
    with psycopg.connect(board, autocommit=True) as admin:
        for tenant in names_of_tenants[1:]:
            admin.execute("INSERT INTO tenants (name, created_at) VALUES (%s, 'x')", (tenant,))
    relay, far = relayed(app, delay)
    members = [Member(workdir / f"d{n}", far, ttl=f"{ttl:g}s", share=True)
               for n in range(daemons)]  # fmt: skip
    for member in members:
        write_config(member.root, agent_ttl="10s")
    names = [f"edge-0-{i}" for i in range(tenants)]
    tenant_of = dict(zip(names, names_of_tenants, strict=True))
    made: dict[str, str] = {}
    if tokens_before:
        maker = Member(workdir / "maker", app, ttl=f"{ttl:g}s")
        maker.start(timeout=60)
        try:
            made = {name: maker.call("token-create", role="agent", tenant=tenant_of[name],
                                     agent=name)["secret"] for name in names}  # fmt: skip
            made |= {t: maker.call("token-create", role="operator", tenant=t)["secret"]
                     for t in names_of_tenants}  # fmt: skip
        finally:
            maker.stop()
    figures: dict[str, Any] = {
        "daemons": daemons,
        "tokens_before": tokens_before,
        "tenants": tenants,
        "lease_ttl_s": ttl,
        "delay_each_way_ms": round(delay * 1000),
        "minutes": minutes,
    }
    progress = Progress()
    submitters: list[SubmitClient] = []
    agents: StubAgents | None = None
    live: set[tuple[str, int]] = set()
    started = time.monotonic()
    try:
        for member in members:
            member.start(timeout=60)
        fair = wait_until(
            lambda: sum(s := split(board, members)) == tenants and max(s) - min(s) <= 1 and s,
            timeout=120, interval=0.5,
        )  # fmt: skip
        figures["divided_s"] = round(time.monotonic() - started, 1)
        figures["split_at_start"] = fair
        at_start = holders(board)
        by_pid = {m.process.pid: m for m in members if m.process is not None}
        serving = served_by(board)
        count = 0
        if rate > 0:  # (none: the daemons only hold and renew their leases)

            def token(key: str, tenant: str, **fields: str) -> str:
                """Made by the daemon serving ``tenant``, unless made before."""
                if made:
                    return made[key]
                maker = by_pid[serving[tenant]]
                # Refused for now (the writers' lock taken too long by the others' batches,
                # far away): asked again, as any client does with a transient refusal.
                for attempt in range(30):
                    try:
                        return str(maker.call("token-create", tenant=tenant, **fields)["secret"])
                    except ColibriError as exc:
                        if not exc.transient or attempt == 29:
                            raise
                        time.sleep(min(2.0, 0.1 * 2**attempt))
                raise AssertionError("unreachable")

            tokens = {n: token(n, tenant_of[n], role="agent", agent=n) for n in names}
            token_file = workdir / "tokens.json"
            token_file.write_text(json.dumps(tokens))
            token_file.chmod(0o600)
            addresses = ",".join(m.address for m in members)
            agents = start_agents(workdir, 1, per_process=tenants, ttl=10.0, work=(0.05, 0.5),
                                  prefix="edge", connect=addresses, tokens=token_file)  # fmt: skip
            every = tenants / rate  # each client's pace: ``rate`` tasks/s across the tenants
            count = int(minutes * 60 / every)
            submitters = [
                SubmitClient(Remote.parse(addresses, insecure_loopback=True,
                                          token=token(t, t, role="operator")),
                             c, count, progress, every=every)
                for c, t in enumerate(names_of_tenants)
            ]  # fmt: skip
        steady = time.monotonic()
        for submitter in submitters:
            submitter.start()
        log(f"H5: divided {fair} in {figures['divided_s']} s; {count * tenants} tasks over "
            f"{minutes:g} min")  # fmt: skip
        deadline = steady + minutes * 60
        load: list[float] = []  # the machine's 1-minute load average, every 10 s
        while (now := time.monotonic()) < deadline:
            gone = [m.root.name for m in members if m.process and m.process.poll() is not None]
            if gone:
                log(f"H5: daemon {gone} EXITED after {now - steady:.0f} s")
                break
            time.sleep(min(10.0, deadline - now))
            done = int(board_rows(board, "SELECT count(*) FROM tasks WHERE state = 'closed'")
                       [0][0])  # fmt: skip
            load.append(os.getloadavg()[0])
            log(f"H5: {now + 10 - steady:.0f} s, {progress.acked} acknowledged, {done} closed,"
                f" split {split(board, members)}, load {load[-1]:.1f}")  # fmt: skip
        figures["ran_s"] = round(time.monotonic() - steady, 1)
        figures["load_1min"] = [round(min(load or [0]), 1), round(max(load or [0]), 1)]
        figures["alive"] = [m.process is not None and m.process.poll() is None for m in members]
        figures["split_at_end"] = split(board, members)
        at_end = holders(board)
        figures["tenants_changed_hands"] = sorted(
            t for t in names_of_tenants if at_end.get(t) != at_start.get(t)
        )
        for submitter in submitters:
            submitter.join(60)
        figures["acknowledged"] = progress.acked
        figures["submitted"] = count * tenants
        if all(figures["alive"]):
            wait_until(lambda: int(board_rows(board, "SELECT count(*) FROM tasks WHERE state "
                                              "<> 'closed'")[0][0]) == 0,
                       timeout=120, interval=0.5)  # fmt: skip
        live = agents.live_sessions() if agents is not None else set()
    finally:
        if agents is not None:
            agents.stop()
        for member in members:
            if member.process is not None and member.process.poll() is None:
                member.process.send_signal(signal.SIGTERM)
                member.process.wait(timeout=30)
        relay.close()
    said = "".join(m.log() for m in members)
    figures["exits"] = {
        m.root.name: m.process.returncode
        for m in members
        if m.process is not None and m.process.returncode not in (None, 0, -15)
    }
    figures["lease_losses"] = sum(any(w in line for w in LOST) for line in said.splitlines())
    figures["took_tenant_lines"] = said.count("took tenant")
    figures["gave_back_lines"] = said.count("gave back tenant")
    store = history.read_pg_board(board)
    events = [] if agents is None else agents.events()
    report = history.check(store, ops=[op for s in submitters for op in s.ops],
                           agent_events=events, live=live)  # fmt: skip
    states: dict[str, int] = {}
    for task in store.tasks.values():
        key = str(task["outcome"] or task["state"])
        states[key] = states.get(key, 0) + 1
    figures.update(
        outcomes=dict(sorted(states.items())),
        session_starts=sum(e["event"] == "start" for e in events),
        **{f"anomaly_{k}": v for k, v in report.counts().items()},
        seconds=round(time.monotonic() - started, 1),
    )
    return RunResult(report, figures)
