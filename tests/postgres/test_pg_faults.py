"""PostgreSQL away under a running daemon: refusals while it is, no acknowledged task lost,
the agents kept, and serving again on its own once it is back.

The daemon reaches the server through a TCP relay of the test's, which is cut (every
connection dropped, new ones refused) and restored: the network or the server gone, as far as
the daemon can tell, without stopping the server other tests use.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.helpers import Daemon, FakeAgent, error_code, wait_until, write_config
from tests.postgres.hive import Relay
from tests.store.conftest import PG_DSN


def test_postgresql_away_for_a_while_loses_nothing_and_the_daemon_comes_back_by_itself(
    tmp_path: Path, relayed_board: tuple[Relay, str]
) -> None:
    relay, dsn = relayed_board
    root = tmp_path / "pgfault"
    root.mkdir()
    write_config(root, tick="1s", agent_ttl="2s")
    daemon = Daemon(root, "--store", dsn, "--lease-ttl", "5s")
    daemon.start()
    try:
        agent = FakeAgent(daemon, "steady", ["py"])
        acknowledged = [daemon.submit(f"before {n}", capabilities=["gpu"]) for n in range(10)]
        held = daemon.submit("held by the agent", capabilities=["py"])
        assign = agent.next_event("assign")
        relay.cut()
        # Away: new work is refused (nothing is acknowledged that is not stored); the daemon
        # and its agent's connection stay up.
        assert error_code(lambda: daemon.submit("during", capabilities=["gpu"])) == (
            "storage_unavailable"
        )
        assert error_code(lambda: daemon.call("status")) == "storage_unavailable"
        assert daemon.call("ping")["pong"]
        with pytest.raises(Exception):  # noqa: B017 - any refusal: the heartbeat is not taken
            agent.client.call("heartbeat")
        wait_until(lambda: "refusing every request until it is back" in daemon.log())
        # Longer than the agent's TTL: once back, its silence meanwhile must not count.
        import time

        time.sleep(3)
        relay.restore()
        wait_until(lambda: "the store answers again" in daemon.log(), timeout=15)
        assert [daemon.task(t["id"])["state"] for t in acknowledged] == ["pending"] * 10
        after = daemon.submit("after", capabilities=["gpu"])
        assert daemon.task(after["id"])["state"] == "pending"
        agent.client.call("heartbeat")
        agent.client.call("out", task=held["id"], epoch=assign["epoch"], output="done anyway")
        assert daemon.wait_closed(held["id"])["output"] == "done anyway"
        seqs = [row["seq"] for row in daemon.ledger()]
        assert seqs == list(range(1, len(seqs) + 1))
        agent.client.close()
    finally:
        daemon.stop()


def test_connections_killed_and_cut_during_a_submit_storm_lose_and_double_nothing(
    tmp_path: Path, relayed_board: tuple[Relay, str]
) -> None:
    """A7 at the suite's scale: 1,500 submits, each retried with its idempotency key until it
    is acknowledged, while the daemon's server connections are killed (pg_terminate_backend)
    five times and the network cut twice."""
    import threading
    import time

    import psycopg

    from colibri.core.errors import ColibriError

    relay, dsn = relayed_board
    name = f"colibri-a7-{relay.port}"
    dsn = f"{dsn}&application_name={name}"
    root = tmp_path / "a7"
    root.mkdir()
    write_config(root, tick="1s")
    daemon = Daemon(root, "--store", dsn, "--lease-ttl", "5s", log_level="info")
    daemon.start()
    acknowledged: dict[str, str] = {}
    refusals = 0
    done = threading.Event()

    def submit_all() -> None:
        nonlocal refusals
        for n in range(1500):
            key = f"k{n}"
            while True:
                try:
                    task = daemon.call("submit", text=f"t{n}", capabilities=["none"],
                                       idempotency_key=key)["task"]  # fmt: skip
                except ColibriError as exc:
                    assert exc.code in ("storage_unavailable", "closed"), exc
                    refusals += 1
                    time.sleep(0.05)
                    continue
                acknowledged[key] = task["id"]
                break
        done.set()

    submitter = threading.Thread(target=submit_all)
    submitter.start()
    try:
        for round_ in range(7):
            time.sleep(0.4)
            if round_ in (2, 5):
                relay.cut()
                time.sleep(1.0)
                relay.restore()
            else:
                with psycopg.connect(PG_DSN, autocommit=True) as admin:
                    admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name = %s", (name,),
                    )  # fmt: skip
        submitter.join(120)
        assert done.is_set()
        assert len(acknowledged) == 1500 and len(set(acknowledged.values())) == 1500
        listed = daemon.call("list", limit=2000, state="pending")["tasks"]
        assert sorted(t["id"] for t in listed) == sorted(acknowledged.values())
        seqs = [row["seq"] for row in daemon.ledger()]
        assert seqs == list(range(1, 1501))
        assert refusals > 0  # the faults did land
    finally:
        done.set()
        submitter.join(120)
        daemon.stop()
