"""Tasks that wait for others through a takeover: the daemon that took the board over from one
killed holds them back as the first did, and releases each once."""

from __future__ import annotations

import shutil
import signal
import tempfile
from pathlib import Path

from tests.helpers import wait_until
from tests.postgres.hive import Member, tcp_agent


def test_a_waiting_task_is_released_once_by_the_daemon_that_took_over(
    tmp_path: Path, board: str
) -> None:
    first, second = Member(tmp_path / "a", board), Member(tmp_path / "b", board)
    first.start()
    state = tempfile.mkdtemp(prefix="cr-", dir="/tmp")
    agent = None
    try:
        second.stand_by()
        token = first.call("token-create", role="agent", tenant="default", agent="far")["secret"]
        gate = first.submit("the gate", capabilities=["far"])  # nobody can run it yet
        then = first.submit("after the gate", capabilities=["far"], after=[gate["id"]])
        last = first.submit("after both", capabilities=["far"], after=[then["id"], gate["id"]])
        assert first.call("status")["blocked"] == 2
        first.kill()
        wait_until(second.serving, timeout=15)
        assert second.call("status")["blocked"] == 2
        why = second.call("why", task=last["id"])["summary"]
        assert why == f"waits for 2 tasks: {then['id']} (pending), {gate['id']} (pending)"
        agent = tcp_agent(f"{first.address},{second.address}", token, state)
        assert second.wait_closed(last["id"], timeout=30)["output"] == "after both"
        rows = second.ledger()
        closed = {r["task"]: r["seq"] for r in rows if r["to_state"] == "closed"}
        ran: dict[str, int] = {}
        for row in rows:
            if row["to_state"] == "running":
                ran.setdefault(row["task"], row["seq"])
        assert closed[gate["id"]] < ran[then["id"]] and closed[then["id"]] < ran[last["id"]]
        released = [r["task"] for r in rows if (r.get("reason") or "").startswith("released")]
        assert sorted(released) == sorted([then["id"], last["id"]])
    finally:
        if agent is not None:
            agent.send_signal(signal.SIGTERM)
            agent.wait(timeout=20)
        shutil.rmtree(state, ignore_errors=True)
        first.stop_with(second)
