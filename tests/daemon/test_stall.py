"""C3: a daemon stopped longer than the agents' TTL expires nobody when it resumes."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import pytest

from tests.helpers import STORE_BACKEND, Daemon, FakeAgent, wait_until, write_config


@pytest.mark.skipif(
    STORE_BACKEND != "sqlite",
    reason="on PostgreSQL a daemon stopped past its lease stops when it runs again, by design "
    "(docs/HIVE.md; tests/postgres/test_failover.py)",
)
def test_a_stalled_daemon_reads_heartbeats_before_expiring_anyone(root: Path) -> None:
    write_config(root, agent_ttl="1s")
    daemon = Daemon(root)
    daemon.start()
    agent: FakeAgent | None = None
    try:
        agent = FakeAgent(daemon, "steady", ttl=1.0)
        task = daemon.call("submit", text="long work")["task"]
        agent.next_assign()
        assert daemon.process is not None
        daemon.process.send_signal(signal.SIGSTOP)
        try:
            for _ in range(6):  # the agent keeps heartbeating into the stopped daemon
                agent.client.send("heartbeat")
                time.sleep(0.5)
        finally:
            daemon.process.send_signal(signal.SIGCONT)
        for _ in range(8):  # and goes on after it, through a few sweeps
            agent.client.send("heartbeat")
            time.sleep(0.3)
        assert daemon.call("get", task=task["id"])["task"]["state"] == "running"
        online = {a["name"]: a["online"] for a in daemon.call("agents")["agents"]}
        assert online == {"steady": True}
        agent.close()
        agent = None
        # an agent that really goes silent is still expired afterwards
        wait_until(lambda: daemon.call("get", task=task["id"])["task"]["state"] == "closed")
    finally:
        if agent is not None:
            agent.close()  # (not left for the collector to find in another test)
        daemon.stop()
