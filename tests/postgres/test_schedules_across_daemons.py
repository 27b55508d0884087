"""Schedules fire once across the daemons of one board, the serving one SIGKILLed while they
fire (the short form of bench/chaos.py's H1: tests/postgres/schedule_fires.py)."""

from __future__ import annotations

from pathlib import Path

from tests.postgres.schedule_fires import schedules_through_kills


def test_schedules_fire_once_and_miss_nothing_while_the_serving_daemon_is_killed(
    tmp_path: Path, board: str
) -> None:
    result = schedules_through_kills(tmp_path, board, daemons=3, schedules=30, tenants=3,
                                     every=(1.0, 2.0), kills=3, ttl=2.0, seed=7)  # fmt: skip
    figures = result.figures
    assert result.problems == [], (result.problems[:20], figures)
    assert figures["kills"] == figures["killed_while_firing"] == 3
    assert figures["lease_epoch"] >= 4
    assert figures["duplicate_fires"] == figures["unrecorded"] == 0
    assert figures["missed_under_catch_up_all"] == 0
    # The kills landed while the schedules were due: the daemons that took over caught up.
    assert figures["fires_fired"] + figures["fires_missed"] >= figures["due"] > 30 * 3
    assert figures["fired_late"] > 0
    assert figures["tasks"] == figures["fires_fired"]
    assert sorted(figures["tasks_per_tenant"]) == ["t0", "t1", "t2"]
