"""Agents over TCP follow the serving daemon through its SIGKILL: nothing acknowledged lost,
nothing run twice (the short form of bench/chaos.py's H2: tests/postgres/agents_through_kill.py)."""

from __future__ import annotations

from pathlib import Path

from tests.postgres.agents_through_kill import tasks_through_owner_kill


def test_agents_over_tcp_follow_the_serving_daemon_and_nothing_is_lost_or_run_twice(
    tmp_path: Path, board: str
) -> None:
    result = tasks_through_owner_kill(tmp_path, board, daemons=3, tasks=300, processes=2,
                                      per_process=4, ttl=2.0, seed=3)  # fmt: skip
    figures = result.figures
    assert result.report.problems() == {}, (result.report.problems(), figures)
    assert figures["acknowledged"] == 300
    # The kill landed mid-run, and the work went on on the daemon that took over.
    assert 150 <= figures["done_at_kill"] < 300
    assert figures["kill_to_next_assignment_s"] is not None
    # Every task ended: done, or (a claim committed by the killed daemon whose assign never
    # reached its agent) failed "session lost" without ever running — at most once.
    outcomes = figures["outcomes"]
    assert set(outcomes) <= {"done", "failed"}, outcomes
    assert outcomes.get("failed", 0) == figures["failed_claim_lost_to_kill"] <= 8 * 2
    assert figures["session_starts"] == outcomes["done"]  # each done task's session started once


def test_daemons_sharing_tenants_out_take_a_dead_ones_tenants_and_nothing_is_lost_or_run_twice(
    tmp_path: Path, board: str
) -> None:
    """3 daemons sharing 6 tenants (2 each), agents and clients of every tenant given all three
    addresses; the daemon serving the first tenant is killed halfway (the short form of
    bench/chaos.py's H3)."""
    result = tasks_through_owner_kill(tmp_path, board, daemons=3, tasks=300, processes=2,
                                      per_process=6, ttl=2.0, seed=5, tenants=6)  # fmt: skip
    figures = result.figures
    assert result.report.problems() == {}, (result.report.problems(), figures)
    assert figures["acknowledged"] == 300
    # Its share of the 7 tenants (6 and default) by 3 daemons.
    assert len(figures["tenants_of_killed"]) in (2, 3)
    assert 150 <= figures["done_at_kill"] < 300
    assert figures["kill_to_next_assignment_s"] is not None
    outcomes = figures["outcomes"]
    assert set(outcomes) <= {"done", "failed"}, outcomes
    assert outcomes.get("failed", 0) == figures["failed_claim_lost_to_kill"] <= 12 * 2
    assert figures["session_starts"] == outcomes["done"]
