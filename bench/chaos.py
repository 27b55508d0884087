"""Chaos, long form: the submit storm (A1) at full size, every crash point (A2) ×50, the Board
state machine (D4) at 2,000 sequences × 50 steps, restart with 500 running tasks (D1), the
claim race of 200 agents over 100,000 tasks (B1), 100 + 25 power cuts (A3), 1,000 schedules
on the daemons of one PostgreSQL board through 50 kills of the serving one (H1), 20,000 tasks
run by agents over TCP through such a kill (H2), a private PostgreSQL server restarted, killed
and stopped for 30 s under 10,000 submits (A7), 10,000 writes racing 500 takeovers of the lease
(F1), two tenants' 20,000 operations interleaved over 4 connections under row-level security
(S4), 100,000 fuzzed requests on one connection (G), a real harness's reports through 20 blips
of PostgreSQL (H4) and three sharing daemons at the edge of PostgreSQL's distance for 10 minutes
(H5).

    .venv/bin/python bench/chaos.py                      # about 55 minutes on 2 cores
    .venv/bin/python bench/chaos.py --runs 5 --submits 250 --kills 5 --d4-examples 200 \
        --claim-tasks 5000 --power-cuts 10 --h1-schedules 300 --h1-kills 5 --h2-tasks 2000 \
        --fuzz 2000                                      # quick
    .venv/bin/python bench/chaos.py --only H1,H2         # some of them
    .venv/bin/python bench/chaos.py --only D1,B1         # some of them
    .venv/bin/python bench/chaos.py --only H4 --h4-blips 20
    .venv/bin/python bench/chaos.py --only H5 --h5-minutes 10 --h5-delay-ms 50 --h5-rate 3

A1: 8 clients submit 1,250 tasks each with idempotency keys, 20 stub agents run them, the
daemon is SIGKILLed at 20 seeded instants and restarted; clients retry what was not
acknowledged with the same key. Then the history checker (tests/reliability/history.py) counts
lost acknowledgements, duplicate executions, illegal transitions, stuck tasks and mirror faults.

A2: each crash point (COLIBRI_CRASHPOINT) runs ``--runs`` seeded scenarios from
tests/reliability/crash_scenarios.py, each asserting its pass criterion and running the checker.

D4: tests/reliability/test_board_state_machine.py's Hypothesis machine with more examples.

D1: ``--restart-tasks`` tasks held running by ``--restart-agents`` stub agents (one process
each) through a SIGKILL of the daemon; while it is down an eighth of the agents are SIGKILLed and
a tenth SIGSTOPped (tests/reliability/fleet.py: restart_at_size, which asserts the criteria).

B1: ``--claim-agents`` stub agents, each its own process (``--claim-per-process K`` puts K in
one process, with a connection each, for a smaller machine), race for ``--claim-tasks`` tasks:
half waiting as a backlog when they register, half submitted while they work (fleet.py:
claim_race). One daemon on SQLite; the form with several daemons needs the PostgreSQL store.

A3: ``--power-cuts`` seeded power cuts with durability full and a quarter as many with relaxed
(tests/reliability/power_loss.py): the store on a FUSE file system that forgets unsynced
writes, cut under load; full must lose no acknowledged submit or ``out``, relaxed is reported.

H1: ``--h1-schedules`` interval schedules (every ``--h1-every`` seconds, 10–20 by default)
across ``--h1-tenants`` tenants on a PostgreSQL board (``COLIBRI_TEST_PG``, the local test
server by default) that ``--h1-daemons`` daemons share; the serving one is SIGKILLed while fires
flow, ``--h1-kills`` times, a standby takes over each time and the killed daemon comes back as a
standby (tests/postgres/schedule_fires.py). Then, from the board: tasks per (schedule, nominal
time) — 0 duplicates —, every nominal time due in the run fired or recorded missed, none missed
by a ``catch_up: all`` schedule, a ``catch_up: one`` schedule's missed times each followed by a
fire; the time from each kill to the next daemon's taking the lease (``--h1-ttl``, 5 s).

H2: ``--h2-tasks`` tasks submitted with idempotency keys to the serving daemon of
``--h1-daemons`` on a PostgreSQL board, run by ``--h2-agents`` stub agents (``--h2-per-process``
in a process, each with its own agent token) given every daemon's TCP address; the serving
daemon is SIGKILLed once half are done (tests/postgres/agents_through_kill.py). Then the history
checker: 0 acknowledged tasks lost, 0 sessions started twice, 0 re-spawns; the time from the
kill to the standby's taking the lease and to the next assignment. With
``--h2-submit-through-kill`` the clients submit over TCP (every daemon's address, an operator
token) while the agents work, and the kill comes once half the tasks are acknowledged.

H4: a daemon on a PostgreSQL board through a relay (lease ttl 10 s), a real ``colibri agent
--connect`` over TCP with ``--h4-slots`` slots running each task as ``sh -c 'sleep 1; cat'``
(every session appends its start and its finish to a file), a client submitting 3 tasks a
second with idempotency keys, and ``--h4-blips`` cuts of the relay, 1–3 s each, each once a
session has started since the last (tests/postgres/reports_through_blips.py). Then the history
checker over the board, the client's submissions and the sessions' file: 0 acknowledged lost,
every task done, one session start and one ledger ``running`` row a task; and, from the agent's
log, how many reports were refused transiently (``report_deferred``) and sent again.

H5: three ``run --share`` daemons with a 2 s lease and 7 tenants, PostgreSQL ``--h5-delay-ms``
(50) further away each way through a relay — the edge HIVE.md gives, a round trip of a twentieth
of the ttl — for ``--h5-minutes`` (10) once they have divided the tenants, under ``--h5-rate``
tasks a second (3; 0: none) submitted by a client a tenant and run by a stub agent a tenant over
TCP (tests/postgres/sharing_at_the_edge.py). The tokens are made by the daemon serving each
tenant once they are divided, or, with ``--h5-tokens-before``, by a daemon next to the server
before the three start. Then: none exited, 0 lease losses, no tenant's lease changed hands
after the division, the split at the end, and the history checker's 0 lost, 0 run twice.

A7: ``--a7-submits`` tasks submitted by 8 clients with idempotency keys and run by
``--a7-agents`` stub agents, on a PostgreSQL server of the run's own (initdb; the machine's
server is not touched) that is restarted cleanly, killed and started again (WAL recovery),
then stopped for ``--a7-away`` seconds, under load (tests/postgres/restart.py). The daemon is
never restarted: refusals while the server is away, serving again by itself, its agents'
connections kept, and the history checker's 0 acknowledged lost, 0 run twice.

F1: ``--f1-writes`` write transactions racing ``--f1-takeovers`` takeovers of a PostgreSQL
board's lease (tests/postgres/fence_race.py): a writer commits as fast as it can under the lease
it took, another daemon's lease takes it from it again and again and writes a marker row each
time; in the ledger's order, no write of an epoch may follow a later epoch's marker.

S4: ``--s4-operations`` store operations of two tenants interleaved over 4 connections to a
PostgreSQL board, as the role ``colibri hive grant`` makes (tests/postgres/tenants_apart.py):
each transaction names its tenant; 0 reads of the other tenant's rows, 0 writes under the wrong
tenant, 0 gaps in either tenant's ledger (each numbered 1, 2, 3 … on its own).

G: ``--fuzz`` Hypothesis-generated request lines (tests/reliability/test_socket_abuse.py: fuzz),
one at a time on one connection of a daemon: every reply ``ok`` or a known error code, the
daemon alive after each, the slowest reply under a second.

Prints progress on stderr, then a Markdown table of the figures and one JSON line on stdout.
Everything runs on fresh roots under /tmp, removed afterwards (kept, and named, on a failure).
"""

from __future__ import annotations

import argparse
import logging
import shutil
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _support import REPO, emit, machine, note

sys.path.insert(0, str(REPO))

from tests.helpers import write_config
from tests.reliability.crash_scenarios import SCENARIOS
from tests.reliability.fleet import RunResult, claim_race, restart_at_size, submit_storm
from tests.reliability.power_loss import fuse_available, run_power_loss
from tests.reliability.test_socket_abuse import fuzz

from colibri.config import init_root

#: What ``--only`` selects from.
SCENARIO_NAMES = (
    "A1", "A2", "D4", "D1", "B1", "A3", "H1", "H2", "H3", "H4", "H5", "A7", "F1", "S4", "G"
)  # fmt: skip
#: The plan's bound on any one reply to a fuzzed request (a hang).
FUZZ_SLOWEST_S = 1.0

CRITERIA = {
    "K1": "task absent, client saw EOF",
    "K2": "task present, retry with the key returns the same id",
    "K3": "ledger.jsonl = store after start-up, 0 fused lines",
    "K4": "torn line cut; ledger.jsonl = store, 0 fused lines",
    "K5": 'claimed task failed "session lost" ≤ TTL + 5 s, 0 re-spawns',
    "K7": "cascade all-or-nothing; 0 open descendants after cancel",
    "K8": "exactly 1 task per nominal fire time",
}


def fresh_root() -> Path:
    root = Path(tempfile.mkdtemp(prefix="cb", dir="/tmp"))
    init_root(root)
    write_config(root)
    return root


def run_storm(args: argparse.Namespace) -> dict[str, Any]:
    root = fresh_root()
    note(
        f"A1: {args.clients} clients × {args.submits} submits, {args.agents} agents, "
        f"{args.kills} kills (root {root})"
    )
    started = time.monotonic()
    result = submit_storm(
        root,
        clients=args.clients,
        submits=args.submits,
        agents=args.agents,
        kills=args.kills,
        seed=args.seed,
        agent_ttl=3.0,
        log=note,
    )
    figures = dict(result.figures, seconds=round(time.monotonic() - started, 1))
    problems = result.report.problems()
    figures["passed"] = not problems and figures["quiescent"]
    if problems:
        note(f"A1 found problems (root kept at {root}): {str(problems)[:2000]}")
    else:
        shutil.rmtree(root, ignore_errors=True)
    return figures


def judged(
    name: str,
    root: Path,
    run: Callable[[], RunResult],
    passed: Callable[[dict[str, Any]], bool],
    tasks: int,
) -> dict[str, Any]:
    """One fleet scenario on ``root``: its figures and whether it ``passed`` (no anomaly and
    ``passed(figures)``); the root is removed after a pass, kept and named after a failure."""
    try:
        result = run()
    except Exception as exc:  # the scenario asserts as it goes: shown, and the others run
        note(f"{name} FAILED (root kept at {root}):")
        note("".join(traceback.format_exception(exc))[-3000:])
        return {"tasks": tasks, "passed": False, "error": repr(exc)[:2000]}
    problems = result.report.problems()
    figures = dict(result.figures, passed=not problems and passed(result.figures))
    if figures["passed"]:
        shutil.rmtree(root, ignore_errors=True)
    else:
        note(f"{name} FAILED (root kept at {root}): {str(problems)[:2000]}")
    note(f"{name}: {'passed' if figures['passed'] else 'FAILED'} in {figures['seconds']} s")
    return figures


def run_restart(args: argparse.Namespace) -> dict[str, Any]:
    """D1 at ``--restart-tasks`` (the scenario asserts its criteria as it goes)."""
    root = fresh_root()
    agents = args.restart_agents
    killed, frozen = max(1, agents // 8), max(1, agents // 10)
    slots = -(-args.restart_tasks // (agents - killed))
    note(
        f"D1: {args.restart_tasks} running tasks, {frozen} + {agents} agents ({killed} killed,"
        f" {frozen} frozen while the daemon is down; root {root})"
    )
    return judged(
        "D1",
        root,
        lambda: restart_at_size(
            root,
            tasks=args.restart_tasks,
            agents=agents,
            slots=slots,
            killed=killed,
            frozen=frozen,
            frozen_slots=5,
            seed=args.seed,
            agent_ttl=3.0,
            log=note,
        ),
        lambda f: True,
        args.restart_tasks,
    )


def run_claim_race(args: argparse.Namespace) -> dict[str, Any]:
    """B1 at ``--claim-tasks``: exactly one claim, one session start and one end per task."""
    root = fresh_root()
    n = args.claim_tasks
    note(
        f"B1: {n:,} tasks, {args.claim_agents} agents in"
        f" {args.claim_agents // args.claim_per_process} processes (root {root})"
    )
    return judged(
        "B1",
        root,
        lambda: claim_race(
            root,
            tasks=n,
            agents=args.claim_agents,
            per_process=args.claim_per_process,
            clients=4,
            seed=args.seed,
            log=note,
        ),
        lambda f: (
            f["quiescent"]
            and f["ledger_claims"] == f["tasks_claimed"] == f["session_starts"] == f["done"] == n
            and f["tasks_claimed_twice"] == f["tasks_ended_twice"] == 0
        ),
        n,
    )


def run_power_cuts(cuts: int) -> dict[str, Any]:
    """A3: ``cuts`` power cuts with durability full (0 lost), a quarter as many with relaxed."""
    why_not = fuse_available()
    if why_not is not None:
        note(f"A3 skipped: {why_not}")
        return {"skipped": why_not, "passed": True}
    started = time.monotonic()
    totals: dict[str, dict[str, int]] = {}
    for durability, n in (("full", cuts), ("relaxed", max(1, cuts // 4))):
        total = totals[durability] = dict.fromkeys(
            ("cuts", "acknowledged", "finished", "lost", "undone", "cuts_with_loss"), 0
        )
        for seed in range(n):
            root = Path(tempfile.mkdtemp(prefix="cp", dir="/tmp"))
            try:
                figures = run_power_loss(root, 10_000 + seed, durability)
            finally:
                shutil.rmtree(root, ignore_errors=True)
            total["cuts"] += 1
            for key in ("acknowledged", "finished", "lost", "undone"):
                total[key] += figures[key]
            total["cuts_with_loss"] += bool(figures["lost"] or figures["undone"])
        note(f"A3 {durability}: {total}")
    full = totals["full"]
    return {
        **totals,
        "seconds": round(time.monotonic() - started, 1),
        "passed": full["lost"] == full["undone"] == 0,
    }


def run_fuzz(examples: int) -> dict[str, Any]:
    """G: ``examples`` fuzzed requests on one connection of a fresh daemon."""
    from tests.helpers import Daemon, RawConnection

    root = fresh_root()
    note(f"G: {examples:,} fuzzed requests (root {root})")
    started = time.monotonic()
    daemon = Daemon(root)
    daemon.start()
    seen: dict[str, int] = {}
    slowest = 0.0
    error = None
    try:
        conn = RawConnection(daemon.socket, timeout=30)
        try:
            seen, slowest = fuzz(daemon, conn, examples)
        finally:
            conn.close()
        assert daemon.process is not None
        alive = daemon.call("status")["daemon"]["pid"] == daemon.process.pid
    except Exception as exc:
        error, alive = repr(exc)[:2000], False
        note(f"G FAILED (root kept at {root}): {error}")
    finally:
        daemon.stop()
    passed = error is None and alive and slowest < FUZZ_SLOWEST_S
    if passed:
        shutil.rmtree(root, ignore_errors=True)
    seconds = round(time.monotonic() - started, 1)
    note(f"G: {'passed' if passed else 'FAILED'} in {seconds} s: {seen}, slowest {slowest:.3f} s")
    return {
        "requests": sum(seen.values()),
        "outcomes": dict(sorted(seen.items(), key=lambda kv: -kv[1])),
        "slowest_s": round(slowest, 3),
        "daemon_alive": alive,
        "error": error,
        "seconds": seconds,
        "passed": passed,
    }


def _pg_board(name: str) -> tuple[str, Callable[[], None], dict[str, Any] | None]:
    """A fresh PostgreSQL board for scenario ``name`` (and its removal), or what to report
    when no server answers: the scenario skipped, with the line that says how to enable it."""
    from _pytest.outcomes import Skipped
    from tests.store.conftest import pg_schema

    try:
        board, drop = pg_schema()
    except Skipped as why:
        note(f"{name} skipped: {why}")
        return "", lambda: None, {"skipped": str(why), "passed": True}
    return board, drop, None


def run_hive_schedules(args: argparse.Namespace) -> dict[str, Any]:
    """H1: schedules across the daemons of one PostgreSQL board, the serving one killed."""
    from tests.postgres.schedule_fires import schedules_through_kills

    board, drop, skipped = _pg_board("H1")
    if skipped is not None:
        return skipped
    workdir = Path(tempfile.mkdtemp(prefix="ch", dir="/tmp"))
    low, _, high = args.h1_every.partition("-")
    note(
        f"H1: {args.h1_schedules} schedules every {args.h1_every} s across {args.h1_tenants} "
        f"tenants, {args.h1_daemons} daemons, {args.h1_kills} kills (roots under {workdir})"
    )
    try:
        result = schedules_through_kills(
            workdir,
            board,
            daemons=args.h1_daemons,
            schedules=args.h1_schedules,
            tenants=args.h1_tenants,
            every=(float(low), float(high or low)),
            kills=args.h1_kills,
            ttl=args.h1_ttl,
            seed=args.seed,
            log=note,
        )
    except Exception as exc:
        note(f"H1 FAILED (roots kept at {workdir}):")
        note("".join(traceback.format_exception(exc))[-3000:])
        return {"passed": False, "error": repr(exc)[:2000]}
    finally:
        drop()
    figures = dict(result.figures, passed=not result.problems, problems=result.problems[:20])
    if figures["passed"]:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        note(f"H1 FAILED (roots kept at {workdir}): {result.problems[:20]}")
    note(f"H1: {'passed' if figures['passed'] else 'FAILED'} in {figures['seconds']} s")
    return figures


def run_hive_agents(args: argparse.Namespace, name: str = "H2") -> dict[str, Any]:
    """H2: agents over TCP following the serving daemon of a PostgreSQL board through its kill.
    H3: daemons sharing ``--h3-tenants`` tenants out, the one serving the first killed."""
    from tests.postgres.agents_through_kill import tasks_through_owner_kill

    board, drop, skipped = _pg_board(name)
    if skipped is not None:
        return skipped
    tenants = args.h3_tenants if name == "H3" else 0
    tasks = args.h3_tasks if name == "H3" else args.h2_tasks
    workdir = Path(tempfile.mkdtemp(prefix="ch", dir="/tmp"))
    note(
        f"{name}: {tasks:,} tasks, {args.h2_agents} agents over TCP, {args.h1_daemons} "
        + (f"daemons sharing {tenants} tenants out, the one serving t0 killed halfway"
           if tenants else "daemons, the serving one killed halfway")
        + f" (roots under {workdir})"
    )  # fmt: skip
    return judged(
        name,
        workdir,
        lambda: _finally(
            lambda: tasks_through_owner_kill(
                workdir,
                board,
                daemons=args.h1_daemons,
                tasks=tasks,
                clients=4,
                tenants=tenants,
                processes=args.h2_agents // args.h2_per_process,
                per_process=args.h2_per_process,
                ttl=2.0,
                seed=args.seed,
                submit_through_kill=args.h2_submit_through_kill,
                log=note,
            ),
            drop,
        ),
        lambda f: (
            f["acknowledged"] == f["tasks"]
            and sum(f["outcomes"].values()) == f["tasks"]
            and f["outcomes"].get("failed", 0) == f["failed_claim_lost_to_kill"]
            and f["session_starts"] == f["outcomes"].get("done", 0)
        ),
        tasks,
    )


def run_reports_through_blips(args: argparse.Namespace) -> dict[str, Any]:
    """H4: a real harness's reports through blips of the relay to PostgreSQL."""
    from tests.postgres.reports_through_blips import reports_through_blips

    board, drop, skipped = _pg_board("H4")
    if skipped is not None:
        return skipped
    workdir = Path(tempfile.mkdtemp(prefix="ch", dir="/tmp"))
    note(f"H4: {args.h4_blips} blips of 1–3 s of the relay to PostgreSQL, a real agent over TCP"
         f" with {args.h4_slots} slots, lease ttl 10 s (roots under {workdir})")  # fmt: skip
    return judged(
        "H4",
        workdir,
        lambda: _finally(
            lambda: reports_through_blips(
                workdir, board, blips=args.h4_blips, slots=args.h4_slots, seed=args.seed, log=note
            ),
            drop,
        ),
        lambda f: (
            f["daemon_alive"]
            and f["blips_done"] == args.h4_blips
            and f["outcomes"] == {"done": f["acknowledged"]}
            and f["tasks"] == f["acknowledged"]
            and f["session_starts"] == f["acknowledged"] == f["ledger_running_rows"]
            and f["tasks_started_twice"] == 0
            and f["reports_refused_other"] == 0
        ),
        0,
    )


def run_sharing_at_the_edge(args: argparse.Namespace) -> dict[str, Any]:
    """H5: three sharing daemons, PostgreSQL a twentieth of their ttl away, for minutes."""
    from tests.postgres.sharing_at_the_edge import sharing_at_the_edge

    board, drop, skipped = _pg_board("H5")
    if skipped is not None:
        return skipped
    workdir = Path(tempfile.mkdtemp(prefix="ch", dir="/tmp"))
    note(f"H5: 3 sharing daemons, lease ttl 2 s, 7 tenants, PostgreSQL {args.h5_delay_ms:g} ms"
         " away each way, "
         f"{args.h5_minutes:g} minutes (roots under {workdir})")  # fmt: skip
    return judged(
        "H5",
        workdir,
        lambda: _finally(
            lambda: sharing_at_the_edge(
                workdir,
                board,
                minutes=args.h5_minutes,
                delay=args.h5_delay_ms / 1000,
                rate=args.h5_rate,
                tokens_before=args.h5_tokens_before,
                log=note,
            ),
            drop,
        ),
        lambda f: (
            all(f["alive"])
            and not f["exits"]
            and f["lease_losses"] == 0
            and not f["tenants_changed_hands"]
            and f["acknowledged"] == f["submitted"]
            and f["outcomes"].get("done", 0) == sum(f["outcomes"].values()) == f["submitted"]
            and f["session_starts"] == f["submitted"]
        ),
        0,
    )


def run_pg_restarts(args: argparse.Namespace) -> dict[str, Any]:
    """A7 with a real server: restarted, killed and stopped under load."""
    from tests.postgres.cluster import PrivateServer, unavailable
    from tests.postgres.restart import restarts_under_load

    why = unavailable()
    if why is not None:
        note(f"A7 skipped: {why}")
        return {"skipped": why, "passed": True}
    server = PrivateServer()
    server.start()
    root = fresh_root()
    clients = 8
    faults = [("restart", "fast"), ("restart", "immediate"), ("away", args.a7_away)]
    # The lease must outlast the outage, or the daemon stops by its own deadline (HIVE.md).
    ttl = f"{max(10.0, 2 * args.a7_away):g}s"
    note(f"A7: {args.a7_submits:,} submits, {args.a7_agents} agents, faults {faults}, lease "
         f"ttl {ttl} (root {root}, server {server.base})")  # fmt: skip
    return judged(
        "A7",
        root,
        lambda: _finally(
            lambda: restarts_under_load(
                root,
                server,
                clients=clients,
                submits=args.a7_submits // clients,
                agents=args.a7_agents,
                faults=faults,
                seed=args.seed,
                lease_ttl=ttl,
                log=note,
            ),
            server.close,
        ),
        lambda f: (
            f["acknowledged"] == f["keys_with_a_task"] == f["tasks_in_store"] == f["submits"]
            and f["done"] + f["failed"] == f["submits"]
            and f["daemon_pid_unchanged"]
            and f["witness_kept"]
            and f["refused_other"] == 0
            and f["quiescent"]
        ),
        args.a7_submits,
    )


def run_fence_race(args: argparse.Namespace) -> dict[str, Any]:
    """F1: ``--f1-writes`` writes racing ``--f1-takeovers`` takeovers of the lease."""
    from tests.postgres.fence_race import writes_racing_takeovers

    board, drop, skipped = _pg_board("F1")
    if skipped is not None:
        return skipped
    note(f"F1: {args.f1_writes:,} writes racing {args.f1_takeovers} lease takeovers")
    try:
        figures = writes_racing_takeovers(
            board, writes=args.f1_writes, takeovers=args.f1_takeovers, give_up_s=900
        )
    except Exception as exc:
        note("".join(traceback.format_exception(exc))[-3000:])
        return {"passed": False, "error": repr(exc)[:2000]}
    finally:
        drop()
    figures["passed"] = (
        figures["stale"] == 0
        and figures["writes"] >= args.f1_writes
        and figures["takeovers"] >= args.f1_takeovers
    )
    note(f"F1: {'passed' if figures['passed'] else 'FAILED'} in {figures['seconds']} s: {figures}")
    return figures


def run_tenants_apart(args: argparse.Namespace) -> dict[str, Any]:
    """S4: two tenants' operations interleaved over 4 connections under row-level security."""
    from tests.postgres.tenants_apart import tenants_interleaved
    from tests.store.conftest import as_app_role

    board, drop, skipped = _pg_board("S4")
    if skipped is not None:
        return skipped
    note(f"S4: {args.s4_operations:,} operations of 2 tenants over 4 connections, RLS bound")
    try:
        figures = tenants_interleaved(
            as_app_role(board), board, operations=args.s4_operations, connections=4
        )
    except Exception as exc:
        note("".join(traceback.format_exception(exc))[-3000:])
        return {"passed": False, "error": repr(exc)[:2000]}
    finally:
        drop()
    figures["passed"] = (
        figures["crossed_reads"] == 0
        and figures["misplaced_writes"] == 0
        and figures["own_task_missed"] == 0
        and figures["ledger_gaps"] == 0
    )
    note(f"S4: {'passed' if figures['passed'] else 'FAILED'} in {figures['seconds']} s: {figures}")
    return figures


def _finally(run: Callable[[], RunResult], then: Callable[[], None]) -> RunResult:
    try:
        return run()
    finally:
        then()


def run_points(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    results: dict[str, dict[str, Any]] = {}
    for point in args.points:
        scenario = SCENARIOS[point]
        passed, failures, runs = 0, [], []
        started = time.monotonic()
        for seed in range(1, args.runs + 1):
            root = fresh_root()
            try:
                figures = scenario(root, seed)
            except Exception as exc:  # counted and shown, the next seed goes on
                failures.append({"seed": seed, "root": str(root), "error": repr(exc)[:500]})
                note(f"{point} seed {seed} FAILED (root kept at {root}):")
                note("".join(traceback.format_exception(exc))[-1500:])
                continue
            passed += 1
            runs.append(figures)
            shutil.rmtree(root, ignore_errors=True)
        results[point] = {
            "runs": args.runs,
            "passed": passed,
            "failures": failures,
            "seconds": round(time.monotonic() - started, 1),
            "figures": summarise(runs),
        }
        note(f"{point}: {passed}/{args.runs} passed in {results[point]['seconds']} s")
    return results


#: Outcome figures, summed over the runs; the others describe the runs' set-ups (shown as a range).
SUMMED = {"crashed_task_present", "retry_same_id", "fused_lines", "respawns", "open_descendants"}


def summarise(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Per figure over the runs: a sum (outcomes), a max (times, maxima) or a min–max range."""
    summary: dict[str, Any] = {}
    for key in dict.fromkeys(k for figures in runs for k in figures):
        values = [figures[key] for figures in runs if key in figures]
        if key in SUMMED:
            summary[key] = sum(values)
        elif key.endswith("_s") or key.endswith("_max"):
            summary[key] = max(values)
        elif all(isinstance(v, bool) for v in values):
            summary[key] = f"{sum(values)} of {len(values)} runs"
        else:
            summary[key] = f"{min(values)}–{max(values)}"
    return summary


def run_state_machine(examples: int, steps: int) -> dict[str, Any]:
    """D4: the Board state machine (tests/reliability/test_board_state_machine.py), longer."""
    from hypothesis import HealthCheck, settings
    from hypothesis.stateful import run_state_machine_as_test
    from tests.reliability.test_board_state_machine import BoardMachine

    logging.getLogger("colibri").setLevel(logging.ERROR)  # refused reports are expected here
    note(f"D4: {examples} sequences × up to {steps} steps")
    started = time.monotonic()
    error = None
    try:
        run_state_machine_as_test(
            BoardMachine,
            settings=settings(
                max_examples=examples,
                stateful_step_count=steps,
                deadline=None,
                suppress_health_check=[HealthCheck.too_slow],
                database=None,
            ),
        )
    except Exception as exc:
        error = repr(exc)[:2000]
        note(f"D4 FAILED: {error}")
    seconds = round(time.monotonic() - started, 1)
    note(f"D4: {'passed' if error is None else 'FAILED'} in {seconds} s")
    return {
        "examples": examples,
        "steps": steps,
        "passed": error is None,
        "error": error,
        "seconds": seconds,
    }


def _blips_line(h4: dict[str, Any]) -> str:
    """The row of H4: a real harness's reports through blips of the relay to PostgreSQL."""
    what = "| H4 | a real agent over TCP through blips of PostgreSQL: 0 reports lost (every task"
    what += " done), 0 sessions run twice | "
    if "skipped" in h4:
        return what + f"skipped | {h4['skipped']} |"
    if "outcomes" not in h4:
        return what + f"FAIL | {h4['error']} |"
    return (
        what + f"{'pass' if h4['passed'] else 'FAIL'} | {h4['blips_done']} blips of "
        f"{h4['cut_s'][0]}–{h4['cut_s'][1]} s ({h4['cut_s'][2]} s cut in all), lease ttl "
        f"{h4['lease_ttl_s']:g} s, {h4['slots']} slots; {h4['acknowledged']:,} tasks acknowledged"
        f" ({h4['submits_refused_storage_unavailable']} submits refused storage_unavailable and "
        f"retried), outcomes {h4['outcomes']}; {h4['session_starts']:,} sessions, "
        f"{h4['tasks_started_twice']} tasks started twice, {h4['ledger_running_rows']:,} ledger "
        f"`running` rows; {h4['reports_deferred']} reports refused transiently and sent again "
        f"({h4['report_refusals']} refusals), "
        f"{h4['reports_refused_other']} refused for good; lost {h4['anomaly_lost']}, duplicate "
        f"starts {h4['anomaly_duplicate_starts']}, re-spawns {h4['anomaly_respawns']}, stuck "
        f"{h4['anomaly_stuck_running']}; daemon alive {h4['daemon_alive']}; load "
        f"{h4['load_1min'][0]}–{h4['load_1min'][1]}; {h4['seconds']} s |"
    )


def _edge_line(h5: dict[str, Any]) -> str:
    """The row of H5: sharing daemons with PostgreSQL at the edge of latency, for minutes."""
    what = "| H5 | 3 sharing daemons, PostgreSQL a twentieth of the ttl away (or as told), light"
    what += " load: none exits, 0 lease losses, 0 tenants changing hands, 0 acknowledged lost,"
    what += " 0 run twice | "
    if "skipped" in h5:
        return what + f"skipped | {h5['skipped']} |"
    if "alive" not in h5:
        return what + f"FAIL | {h5['error']} |"
    return (
        what + f"{'pass' if h5['passed'] else 'FAIL'} | lease ttl {h5['lease_ttl_s']:g} s, "
        f"{h5['tenants']} tenants, {h5['delay_each_way_ms']} ms each way; divided "
        f"{h5['split_at_start']} in {h5['divided_s']} s, then {h5['ran_s'] / 60:.1f} min: alive "
        f"{sum(h5['alive'])} of {h5['daemons']}, exits {h5['exits'] or 'none'}, lease losses "
        f"{h5['lease_losses']}, tenants that changed hands {len(h5['tenants_changed_hands'])}"
        f" ({h5['took_tenant_lines']} takes and {h5['gave_back_lines']} give-backs logged in all,"
        f" the first division included); split at the end {h5['split_at_end']}; "
        f"{h5['acknowledged']:,} of {h5['submitted']:,} tasks acknowledged, outcomes "
        f"{h5['outcomes']}, {h5['session_starts']:,} session starts; lost {h5['anomaly_lost']}, "
        f"duplicate starts {h5['anomaly_duplicate_starts']}; {h5['seconds']} s |"
    )


def _agents_through_kill_line(name: str, h2: dict[str, Any]) -> str:
    """The row of H2 (the serving daemon killed) or H3 (one of the daemons sharing the tenants
    out killed)."""
    if "acknowledged" not in h2:
        return f"| {name} | agents over TCP through a kill | FAIL | {h2['error']} |"
    sharing = bool(h2.get("tenants"))
    what = (
        f"| {name} | {h2['tasks']:,} tasks of {h2['tenants']} tenants shared out by the daemons,"
        " the one serving the first killed halfway, agents and clients of every tenant over TCP"
        " following their tenant: 0 acknowledged lost, 0 run twice | "
        if sharing
        else f"| {name} | {h2['tasks']:,} tasks, the serving daemon killed halfway, agents over"
        " TCP following it: 0 acknowledged lost, 0 run twice | "
    )
    taken = (
        f"its tenants {', '.join(h2['tenants_of_killed'])} all taken by the others "
        f"{h2['takeover_s']} s after the kill, the next of their tasks assigned "
        if sharing
        else f"lease taken {h2['takeover_s']} s after the kill, next assignment "
    )
    return (
        what + f"{'pass' if h2['passed'] else 'FAIL'} | {h2['daemons']} daemons, {h2['agents']}"
        f" agents; {h2['acknowledged']:,} acknowledged"
        + (
            f" ({h2['acknowledged_at_kill']:,} before the kill, the clients following "
            + ("their tenants" if sharing else "the standby")
            + f"; next acknowledged {h2['kill_to_next_acknowledgement_s']} s after it)"
            if "acknowledged_at_kill" in h2
            else ""
        )
        + f", killed with {h2['done_at_kill']:,} done; lost {h2['anomaly_lost']}, "
        f"duplicate starts {h2['anomaly_duplicate_starts']}, re-spawns "
        f"{h2['anomaly_respawns']}, phantom starts {h2['anomaly_phantom_starts']}, illegal "
        f"{h2['anomaly_illegal_transitions']}, stuck {h2['anomaly_stuck_running']}; "
        f"{h2['session_starts']:,} session starts; outcomes {h2['outcomes']} "
        f"({h2['failed_claim_lost_to_kill']} failed: a claim whose assign the kill cut "
        f"off, never run); {taken}{h2['kill_to_next_assignment_s']} s after it, all closed "
        f"{h2['all_closed_s']} s after it; {h2['seconds']} s |"
    )


def table(
    storm: dict[str, Any] | None,
    points: dict[str, dict[str, Any]],
    machine_run: dict[str, Any] | None = None,
    restart: dict[str, Any] | None = None,
    race: dict[str, Any] | None = None,
    power: dict[str, Any] | None = None,
    fuzzed: dict[str, Any] | None = None,
    hive: dict[str, Any] | None = None,
    hive_agents: dict[str, Any] | None = None,
    pg_restarts: dict[str, Any] | None = None,
    fence: dict[str, Any] | None = None,
    apart: dict[str, Any] | None = None,
    hive_sharing: dict[str, Any] | None = None,
    edge: dict[str, Any] | None = None,
    blips: dict[str, Any] | None = None,
) -> str:
    lines = ["| test | what must hold | result | figures |", "| --- | --- | --- | --- |"]
    if storm is not None:
        anomalies = {k[8:]: v for k, v in storm.items() if k.startswith("anomaly_")}
        bad = {k: v for k, v in anomalies.items() if (v != 1 if k == "integrity_ok" else v)}
        lines.append(
            f"| A1 | {storm['submits']:,} submits, {storm['kills']} kills: 0 lost, 0 duplicates, "
            f"0 illegal, integrity ok | {'pass' if storm['passed'] else 'FAIL'} | "
            f"{storm['acknowledged']:,} acknowledged, {storm['unknown_outcome']} unknown "
            f"outcomes retried, lost {anomalies['lost']}, duplicate starts "
            f"{anomalies['duplicate_starts']}, re-spawns {anomalies['respawns']}, illegal "
            f"{anomalies['illegal_transitions']}, stuck {anomalies['stuck_running']}, mirror "
            f"faults {anomalies['mirror_missing'] + anomalies['mirror_extra']}, fused "
            f"{anomalies['fused_lines']}, integrity {'ok' if anomalies['integrity_ok'] else 'BAD'}"
            f"; {storm['done']:,} done, {storm['failed']} failed (claim lost to a kill); "
            f"restart to ready ≤ {storm['restart_to_ready_max_s']} s"
            + (f"; other findings {bad}" if bad else "")
            + " |"
        )
    for point, result in points.items():
        figures = ", ".join(f"{k} {v}" for k, v in result["figures"].items())
        lines.append(
            f"| A2 {point} | {CRITERIA[point]} | {result['passed']}/{result['runs']} | {figures} |"
        )
    if machine_run is not None:
        lines.append(
            f"| D4 | legal edges only; ledger replay = store; terminal states absorbing; memory ="
            f" store | {'pass' if machine_run['passed'] else 'FAIL'} | "
            f"{machine_run['examples']:,} sequences × ≤{machine_run['steps']} steps, "
            f"{machine_run['seconds']} s |"
        )
    if restart is not None:
        lines.append(
            f"| D1 | {restart['tasks']} running through a kill: adopted stay running, lost fail"
            " ≤ TTL + 5 s, late reports stale_claim, all done once | "
            + (
                f"{'pass' if restart['passed'] else 'FAIL'} | {restart['sessions_adopted']} "
                f"adopted ({restart['adopted_restarted']} restarted, "
                f"{restart['adopted_started_once']} started once, {restart['adopted_done_once']}"
                f" done once); killed agents {restart['agents_killed']}: their "
                f"{restart['sessions_killed']} sessions failed `session lost` ≤ "
                f"{restart['lost_after_restart_max_s']} s after the restart (TTL "
                f"{restart['agent_ttl_s']:g} s); frozen agents {restart['agents_frozen']}: their"
                f" {restart['claims_superseded']} claims superseded, "
                f"{restart['late_reports_stale_claim']} late reports `stale_claim`; stuck "
                f"{restart['anomaly_stuck_running']}, duplicate starts "
                f"{restart['anomaly_duplicate_starts']}, re-spawns {restart['anomaly_respawns']},"
                f" phantom starts {restart['anomaly_phantom_starts']}; all adopted "
                f"{restart['all_adopted_after_s']} s after the restart; {restart['seconds']} s |"
                if "sessions_adopted" in restart
                else f"FAIL | {restart['error']} |"
            )
        )
    if race is not None:
        lines.append(
            f"| B1 | {race['tasks']:,} tasks: claims = tasks, 0 claimed twice, 0 starts without a"
            " claim, all done once | "
            + (
                f"{'pass' if race['passed'] else 'FAIL'} | {race['agents']} agents in "
                f"{race['agent_processes']} processes; {race['ledger_claims']:,} claims in the "
                f"ledger, {race['tasks_claimed_twice']} tasks claimed twice, "
                f"{race['session_starts']:,} session starts, phantom starts "
                f"{race['anomaly_phantom_starts']}, duplicate starts "
                f"{race['anomaly_duplicate_starts']}, {race['done']:,} done, "
                f"{race['tasks_ended_twice']} ended twice; {race['agents_that_won_claims']} "
                f"agents won {race['claims_per_agent_min']}–{race['claims_per_agent_max']} claims"
                f" each; {race['tasks_per_s']:,} tasks/s, {race['seconds']} s |"
                if "ledger_claims" in race
                else f"FAIL | {race['error']} |"
            )
        )
    if power is not None and "skipped" in power:
        lines.append(f"| A3 | power cuts | skipped | {power['skipped']} |")
    elif power is not None:
        full, relaxed = power["full"], power["relaxed"]
        lines.append(
            f"| A3 | {full['cuts']} power cuts with durability full: 0 acknowledged lost | "
            f"{'pass' if power['passed'] else 'FAIL'} | full: {full['acknowledged']:,} "
            f"acknowledged submits, {full['finished']:,} acknowledged outs, lost {full['lost']},"
            f" undone {full['undone']}; relaxed (reported): {relaxed['cuts_with_loss']} of "
            f"{relaxed['cuts']} cuts lost work, {relaxed['lost']:,} of "
            f"{relaxed['acknowledged']:,} submits; {power['seconds']} s |"
        )
    if hive is not None and "skipped" in hive:
        lines.append(f"| H1 | schedules across daemons | skipped | {hive['skipped']} |")
    elif hive is not None and "error" in hive:
        lines.append(f"| H1 | schedules across daemons | FAIL | {hive['error']} |")
    elif hive is not None:
        tenants = ", ".join(f"{t} {n:,}" for t, n in hive["tasks_per_tenant"].items())
        lines.append(
            f"| H1 | {hive['schedules']:,} schedules, {hive['kills']} kills of the serving daemon"
            " while firing: 0 duplicate fires, every due time fired or recorded missed, none "
            f"missed under catch_up all | {'pass' if hive['passed'] else 'FAIL'} | "
            f"{hive['daemons']} daemons, lease ttl {hive['lease_ttl_s']:g} s, epoch "
            f"{hive['lease_epoch']}; {hive['due']:,} nominal times due, {hive['fires_fired']:,}"
            f" fired ({hive['fired_late']:,} caught up late), {hive['fires_missed']:,} missed "
            f"(catch_up one), {hive['missed_under_catch_up_all']} missed under catch_up all, "
            f"{hive['unrecorded']} unrecorded, {hive['off_timetable']} off the timetable; "
            f"{hive['tasks']:,} tasks ({tenants}),"
            f" {hive['duplicate_fires']} duplicate fires; kill to takeover median "
            f"{hive['takeover_s_median']} s, max {hive['takeover_s_max']} s; "
            f"{hive['takeovers_unforced']} takeovers without a kill; {hive['seconds']} s"
            + (f"; {hive['problems']}" if hive["problems"] else "")
            + " |"
        )
    for name, h2 in (("H2", hive_agents), ("H3", hive_sharing)):
        if h2 is not None and "skipped" in h2:
            lines.append(f"| {name} | agents over TCP through a kill | skipped | {h2['skipped']} |")
        elif h2 is not None:
            lines.append(_agents_through_kill_line(name, h2))
    if blips is not None:
        lines.append(_blips_line(blips))
    if edge is not None:
        lines.append(_edge_line(edge))
    if pg_restarts is not None and "skipped" in pg_restarts:
        skipped = pg_restarts["skipped"]
        lines.append(f"| A7 | PostgreSQL restarted under load | skipped | {skipped} |")
    elif pg_restarts is not None:
        a7 = pg_restarts
        lines.append(
            "| A7 | PostgreSQL restarted, killed and stopped under load: refused while away, "
            "serving again by itself, agents kept, 0 acknowledged lost, 0 run twice | "
            + (
                f"{'pass' if a7['passed'] else 'FAIL'} | {a7['submits']:,} submits, "
                f"{a7['agents']} agents; faults {', '.join(a7['faults'])}; "
                f"{a7['acknowledged']:,} acknowledged, {a7['tasks_in_store']:,} tasks, "
                f"{a7['refused_storage_unavailable']:,} submits refused storage_unavailable "
                f"(retried), {a7['refused_other']} refused otherwise; lost {a7['anomaly_lost']}, "
                f"duplicate starts {a7['anomaly_duplicate_starts']}, stuck "
                f"{a7['anomaly_stuck_running']}; done {a7['done']:,}, failed {a7['failed']}; "
                f"daemon the same process {a7['daemon_pid_unchanged']}, agent connection kept "
                f"{a7['witness_kept']}; first acknowledgement after the server was back "
                f"{a7['back_to_serving_s']} s; {a7['seconds']} s |"
                if "acknowledged" in a7
                else f"FAIL | {a7['error']} |"
            )
        )
    if fence is not None and "skipped" in fence:
        lines.append(f"| F1 | writes racing lease takeovers | skipped | {fence['skipped']} |")
    elif fence is not None:
        lines.append(
            "| F1 | writes racing lease takeovers: 0 rows committed under a stale epoch | "
            + (
                f"{'pass' if fence['passed'] else 'FAIL'} | {fence['writes']:,} writes "
                f"committed, {fence['takeovers']} takeovers (epoch {fence['epochs']}), "
                f"{fence['refused_lease_lost']} writes refused `lease_lost`; "
                f"**{fence['stale']}** under a stale epoch; {fence['seconds']} s |"
                if "writes" in fence
                else f"FAIL | {fence['error']} |"
            )
        )
    if apart is not None and "skipped" in apart:
        lines.append(f"| S4 | tenants kept apart by RLS | skipped | {apart['skipped']} |")
    elif apart is not None:
        lines.append(
            "| S4 | two tenants interleaved over 4 connections under RLS: 0 crossed | "
            + (
                f"{'pass' if apart['passed'] else 'FAIL'} | {apart['operations']:,} "
                f"operations ({apart['tasks']['acme']:,} + {apart['tasks']['beta']:,} tasks "
                f"written, {apart['ledger_rows_read']:,} ledger rows read): "
                f"**{apart['crossed_reads']}** reads of the other tenant's rows, "
                f"**{apart['misplaced_writes']}** writes under the wrong tenant, "
                f"{apart['own_task_missed']} own tasks missed, {apart['ledger_gaps']} ledger "
                f"gaps; {apart['seconds']} s |"
                if "operations" in apart
                else f"FAIL | {apart['error']} |"
            )
        )
    if fuzzed is not None:
        outcomes = ", ".join(f"{code} {n:,}" for code, n in fuzzed["outcomes"].items())
        lines.append(
            f"| G | fuzzed requests: each answered ok or a known error, daemon alive, no reply "
            f"≥ {FUZZ_SLOWEST_S:g} s | {'pass' if fuzzed['passed'] else 'FAIL'} | "
            f"{fuzzed['requests']:,} requests: {outcomes}; slowest reply {fuzzed['slowest_s']} s;"
            f" daemon alive: {'yes' if fuzzed['daemon_alive'] else 'NO'}; {fuzzed['seconds']} s"
            + (f"; {fuzzed['error']}" if fuzzed["error"] else "")
            + " |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--submits", type=int, default=1250, help="per client")
    parser.add_argument("--agents", type=int, default=20)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--runs", type=int, default=50, help="seeded runs per crash point")
    parser.add_argument("--seed", type=int, default=1, help="seed of the storm")
    parser.add_argument("--points", default=",".join(SCENARIOS), help="e.g. K1,K5")
    parser.add_argument("--no-storm", action="store_true", help="skip the submit storm")
    parser.add_argument("--d4-examples", type=int, default=2000, help="0 skips D4")
    parser.add_argument("--d4-steps", type=int, default=50)
    parser.add_argument("--restart-tasks", type=int, default=500, help="D1; 0 skips it")
    parser.add_argument("--restart-agents", type=int, default=40, help="D1, besides the frozen")
    parser.add_argument("--claim-tasks", type=int, default=100_000, help="B1; 0 skips it")
    parser.add_argument("--claim-agents", type=int, default=200)
    parser.add_argument("--claim-per-process", type=int, default=1, help="B1 agents a process")
    parser.add_argument("--power-cuts", type=int, default=100, help="A3 with full; 0 skips it")
    parser.add_argument("--h1-schedules", type=int, default=1000, help="H1; 0 skips it")
    parser.add_argument("--h1-every", default="10-20", help="H1 intervals: seconds, LOW-HIGH")
    parser.add_argument("--h1-ttl", type=float, default=5.0, help="H1 lease ttl, seconds")
    parser.add_argument("--h1-tenants", type=int, default=3)
    parser.add_argument("--h1-daemons", type=int, default=3)
    parser.add_argument("--h1-kills", type=int, default=50)
    parser.add_argument("--h2-tasks", type=int, default=20_000, help="H2; 0 skips it")
    parser.add_argument("--h2-agents", type=int, default=40)
    parser.add_argument("--h2-per-process", type=int, default=10, help="H2 agents a process")
    parser.add_argument(
        "--h2-submit-through-kill",
        action="store_true",
        help="H2 with the clients submitting over TCP while the agents work, through the kill",
    )
    parser.add_argument("--h3-tasks", type=int, default=20_000, help="H3; 0 skips it")
    parser.add_argument("--h3-tenants", type=int, default=6, help="H3: tenants shared out")
    parser.add_argument("--h4-blips", type=int, default=20, help="H4; 0 skips it")
    parser.add_argument("--h4-slots", type=int, default=4, help="H4 agent's slots")
    parser.add_argument("--h5-minutes", type=float, default=10.0, help="H5; 0 skips it")
    parser.add_argument(
        "--h5-delay-ms",
        type=float,
        default=50.0,
        help="H5: PostgreSQL this much further away each way (50: the edge for a 2 s lease)",
    )
    parser.add_argument(
        "--h5-rate", type=float, default=3.0, help="H5 tasks a second across the tenants; 0: none"
    )
    parser.add_argument(
        "--h5-tokens-before",
        action="store_true",
        help="H5 with the tokens made before the sharing daemons start, by a daemon next to"
        " the server (by default each tenant's sharing daemon makes them once they are divided)",
    )
    parser.add_argument("--a7-submits", type=int, default=10_000, help="A7; 0 skips it")
    parser.add_argument("--a7-agents", type=int, default=10)
    parser.add_argument("--a7-away", type=float, default=30.0, help="A7 outage, seconds")
    parser.add_argument("--f1-writes", type=int, default=10_000, help="F1; 0 skips it")
    parser.add_argument("--f1-takeovers", type=int, default=500)
    parser.add_argument("--s4-operations", type=int, default=20_000, help="S4; 0 skips it")
    parser.add_argument("--fuzz", type=int, default=100_000, help="G requests; 0 skips it")
    parser.add_argument(
        "--only", help=f"run only these, e.g. D1,B1 (of {', '.join(SCENARIO_NAMES)})"
    )
    parser.add_argument("--repeat", type=int, default=1, help="accepted for run_all; ignored")
    args = parser.parse_args()
    args.points = [p.strip().upper() for p in args.points.split(",") if p.strip()]
    if unknown := set(args.points) - set(SCENARIOS):
        parser.error(f"unknown crash points {sorted(unknown)}; known: {', '.join(SCENARIOS)}")
    if args.only is not None:
        only = {name.strip().upper() for name in args.only.split(",") if name.strip()}
        if not only or only - set(SCENARIO_NAMES):
            parser.error(
                f"--only {args.only!r}: give a comma-separated list of {', '.join(SCENARIO_NAMES)}"
            )
        args.no_storm = args.no_storm or "A1" not in only
        args.points = args.points if "A2" in only else []
        args.d4_examples = args.d4_examples if "D4" in only else 0
        args.restart_tasks = args.restart_tasks if "D1" in only else 0
        args.claim_tasks = args.claim_tasks if "B1" in only else 0
        args.power_cuts = args.power_cuts if "A3" in only else 0
        args.fuzz = args.fuzz if "G" in only else 0
        args.h1_schedules = args.h1_schedules if "H1" in only else 0
        args.h2_tasks = args.h2_tasks if "H2" in only else 0
        args.h3_tasks = args.h3_tasks if "H3" in only else 0
        args.h4_blips = args.h4_blips if "H4" in only else 0
        args.h5_minutes = args.h5_minutes if "H5" in only else 0
        args.a7_submits = args.a7_submits if "A7" in only else 0
        args.f1_writes = args.f1_writes if "F1" in only else 0
        args.s4_operations = args.s4_operations if "S4" in only else 0
    if args.restart_tasks and not args.restart_agents >= 2:
        parser.error(f"--restart-agents must be at least 2, got {args.restart_agents}")
    if args.claim_tasks and (
        args.claim_per_process < 1 or args.claim_agents % args.claim_per_process
    ):
        parser.error(
            f"--claim-agents ({args.claim_agents}) must be a multiple of --claim-per-process"
            f" ({args.claim_per_process})"
        )
    if args.h1_schedules and not (
        args.h1_daemons >= 2 and args.h1_kills >= 1 and args.h1_tenants >= 1 and args.h1_ttl >= 1
    ):
        parser.error(
            "H1 needs --h1-daemons 2 or more, --h1-kills and --h1-tenants 1 or more, "
            "--h1-ttl 1 or more"
        )
    if args.h2_tasks and (
        args.h2_per_process < 1 or args.h2_agents < 1 or args.h2_agents % args.h2_per_process
    ):
        parser.error(
            f"--h2-agents ({args.h2_agents}) must be a multiple of --h2-per-process"
            f" ({args.h2_per_process})"
        )
    low, _, high = args.h1_every.partition("-")
    try:
        if not 1 <= float(low) <= float(high or low):
            raise ValueError
    except ValueError:
        parser.error(f"--h1-every {args.h1_every!r}: seconds, or LOW-HIGH, each 1 or more")
    started = time.monotonic()
    storm = None if args.no_storm else run_storm(args)
    points = run_points(args)
    machine_run = run_state_machine(args.d4_examples, args.d4_steps) if args.d4_examples else None
    restart = run_restart(args) if args.restart_tasks else None
    race = run_claim_race(args) if args.claim_tasks else None
    power = run_power_cuts(args.power_cuts) if args.power_cuts else None
    hive = run_hive_schedules(args) if args.h1_schedules else None
    hive_agents = run_hive_agents(args) if args.h2_tasks else None
    hive_sharing = run_hive_agents(args, "H3") if args.h3_tasks else None
    blips = run_reports_through_blips(args) if args.h4_blips else None
    edge = run_sharing_at_the_edge(args) if args.h5_minutes else None
    pg_restarts = run_pg_restarts(args) if args.a7_submits else None
    fence = run_fence_race(args) if args.f1_writes else None
    tenants = run_tenants_apart(args) if args.s4_operations else None
    fuzzed = run_fuzz(args.fuzz) if args.fuzz else None
    print(
        table(
            storm,
            points,
            machine_run,
            restart,
            race,
            power,
            fuzzed,
            hive,
            hive_agents,
            pg_restarts,
            fence,
            tenants,
            hive_sharing,
            edge,
            blips,
        ),
        flush=True,
    )
    passed = (
        (storm is None or storm["passed"])
        and all(r["passed"] == r["runs"] for r in points.values())
        and (machine_run is None or machine_run["passed"])
        and (restart is None or restart["passed"])
        and (race is None or race["passed"])
        and (power is None or power["passed"])
        and (fuzzed is None or fuzzed["passed"])
        and (hive is None or hive["passed"])
        and (hive_agents is None or hive_agents["passed"])
        and (hive_sharing is None or hive_sharing["passed"])
        and (edge is None or edge["passed"])
        and (blips is None or blips["passed"])
        and (pg_restarts is None or pg_restarts["passed"])
        and (fence is None or fence["passed"])
        and (tenants is None or tenants["passed"])
    )
    emit(
        {
            "bench": "chaos",
            "passed": passed,
            "seconds": round(time.monotonic() - started, 1),
            "storm": storm,
            "crash_points": points,
            "state_machine": machine_run,
            "restart": restart,
            "claim_race": race,
            "power_loss": power,
            "fuzz": fuzzed,
            "hive_schedules": hive,
            "hive_agents": hive_agents,
            "hive_sharing": hive_sharing,
            "reports_through_blips": blips,
            "sharing_at_the_edge": edge,
            "pg_restarts": pg_restarts,
            "fence_race": fence,
            "tenants_apart": tenants,
            "machine": machine(),
        }
    )
    raise SystemExit(0 if passed else 1)


if __name__ == "__main__":
    main()
