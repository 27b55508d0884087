"""B1 (short form, SQLite, one daemon): 20 stub agents race for 2,000 tasks.

Half of the tasks wait as a backlog when the agents (real processes, five agents to a process,
each with its own connection) register at once; four clients submit the other half while they
work. The ledger must hold exactly one claim per task, the agents' own fsynced logs exactly one
session start per claim and none without one, and every task must end once, done.
``bench/chaos.py`` runs 200 agents over 100,000 tasks.
"""

from __future__ import annotations

from pathlib import Path

from tests.reliability.fleet import claim_race


def test_every_task_is_claimed_and_run_exactly_once(root: Path) -> None:
    result = claim_race(root, tasks=2000, agents=20, per_process=5, clients=4, seed=1)
    figures = result.figures
    assert not result.report.problems(), result.report.problems()
    assert figures["quiescent"], figures
    assert figures["agents_registered"] == 20
    assert figures["acknowledged"] == 2000
    assert figures["ledger_claims"] == figures["tasks_claimed"] == 2000
    assert figures["tasks_claimed_twice"] == 0
    assert figures["session_starts"] == 2000
    assert figures["anomaly_phantom_starts"] == figures["anomaly_duplicate_starts"] == 0
    assert figures["done"] == 2000 and figures["tasks_ended_twice"] == 0
