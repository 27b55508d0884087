"""A3: acknowledged tasks survive a power cut with ``durability: full`` (and not with relaxed).

The store sits on lazyfs (``lazyfs.py``), which forgets every write not yet fsynced when its
process is killed; ``power_loss.py`` has the scenario. The relaxed runs prove the harness can
see a loss: without an fsync per commit, acknowledged tasks do go missing.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.reliability.power_loss import fuse_available, run_power_loss

pytestmark = pytest.mark.skipif(
    fuse_available() is not None, reason=f"power loss needs FUSE: {fuse_available()}"
)


@pytest.mark.parametrize("seed", range(4))
def test_no_acknowledged_task_is_lost_to_a_power_cut(tmp_path: Path, seed: int) -> None:
    figures = run_power_loss(tmp_path, seed, "full")
    assert figures["acknowledged"] > 0, figures
    assert figures["lost"] == 0, figures
    assert figures["undone"] == 0, figures


def test_relaxed_durability_does_lose_acknowledged_tasks_to_a_power_cut(tmp_path: Path) -> None:
    """What ``relaxed`` gives up, measured: a crash of the daemon is survived, power loss not.
    A cut right after SQLite's own checkpoint (which syncs) loses nothing, so this cuts until
    one loses acknowledged work: about four cuts in five do (bench/chaos.py), six never all
    missing it but once in some 15,000 runs."""
    runs = []
    for seed in range(6):
        figures = run_power_loss(tmp_path / str(seed), seed, "relaxed")
        assert figures["acknowledged"] > 0, figures
        runs.append(figures)
        if figures["lost"] or figures["undone"]:
            break
    assert runs[-1]["lost"] or runs[-1]["undone"], runs
