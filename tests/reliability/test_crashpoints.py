"""A2: the daemon SIGKILLs itself at each named crash point; the restart keeps every promise.

Each point runs a few seeded scenarios (``crash_scenarios.py``; ``bench/chaos.py`` runs each 50
times). The points and what each must leave behind are in docs/RELIABILITY.md.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.crash_scenarios import SCENARIOS

SEEDS = (1, 2, 3)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("point", sorted(SCENARIOS))
def test_crash_point(root: Path, point: str, seed: int) -> None:
    figures = SCENARIOS[point](root, seed)
    assert figures  # every scenario asserts its own pass criterion and runs the checker
