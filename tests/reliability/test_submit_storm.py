"""A1 (short form): a submit storm through five SIGKILLs of the daemon, checked Jepsen-style.

4 clients × 250 submissions, each with its own idempotency key and retried with the same key
until acknowledged; 5 stub agents (real processes) run every task; the daemon is killed with
SIGKILL at 5 seeded instants and restarted. The history checker must then find 0 acknowledged
tasks lost, 0 duplicate executions, 0 illegal transitions, 0 tasks stuck, a mirror equal to the
store and an intact SQLite file. ``bench/chaos.py`` runs the full size (8 × 1,250, 20 kills).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.fleet import submit_storm


@pytest.mark.parametrize("seed", [1, 2])
def test_submit_storm_through_sigkills_loses_and_doubles_nothing(root: Path, seed: int) -> None:
    result = submit_storm(root, clients=4, submits=250, agents=5, kills=5, seed=seed)
    figures = result.figures
    assert not result.report.problems(), result.report.problems()
    assert figures["kills"] == 5
    assert figures["quiescent"], figures
    assert figures["acknowledged"] == 1000
    assert figures["keys_with_a_task"] == figures["tasks_in_store"] == 1000
    assert figures["refused"] == 0
    # Each task ran at most once (the checker counts starts per claim); a task that did not
    # finish lost its claim or its session to a kill, and failed instead of running again.
    assert figures["done"] <= figures["session_starts"] <= 1000
    assert figures["done"] + figures["failed"] == 1000
