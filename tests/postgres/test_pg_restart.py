"""PostgreSQL restarted under a daemon at work, for real: a clean restart, a crash of every
server process (WAL recovery at the next start) and the server stopped for 3 s, while clients
submit and stub agents run every task. The same daemon process refuses while the server is
away (``storage_unavailable``), serves again by itself, keeps its agents' connections, and
loses nothing it acknowledged, runs nothing twice (the history checker). ``bench/chaos.py
--only A7`` runs it at size: 10,000 submits and the server away for 30 s."""

from __future__ import annotations

from pathlib import Path

from tests.postgres.cluster import PrivateServer
from tests.postgres.restart import restarts_under_load


def test_postgresql_restarted_crashed_and_stopped_under_load_loses_nothing(
    tmp_path: Path, private_server: PrivateServer
) -> None:
    result = restarts_under_load(
        tmp_path,
        private_server,
        clients=3,
        submits=150,
        agents=3,
        faults=[("restart", "fast"), ("restart", "immediate"), ("away", 1.0)],
        seed=7,
        lease_ttl="15s",  # the three faults come within a few seconds of one another
    )
    figures = result.figures
    assert not result.report.problems(), (result.report.problems(), figures)
    assert figures["daemon_pid_unchanged"] and figures["witness_kept"], figures
    assert figures["acknowledged"] == figures["keys_with_a_task"] == 450, figures
    assert figures["tasks_in_store"] == 450, figures
    assert figures["refused_storage_unavailable"] > 0, figures  # the faults did land
    assert figures["refused_other"] == 0, figures
    assert figures["quiescent"], figures
    assert figures["done"] <= figures["session_starts"] <= 450, figures
    assert figures["done"] + figures["failed"] == 450, figures
    assert len(figures["back_to_serving_s"]) == 3, figures
