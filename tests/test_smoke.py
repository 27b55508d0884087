"""End to end through a real daemon: submit, best-fit assign, out, closed, ledger."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import Daemon, FakeAgent


def test_submit_assign_out_close(daemon: Daemon) -> None:
    bsd = FakeAgent(daemon, "bsd", ["freebsd"])
    both = FakeAgent(daemon, "both", ["freebsd", "zfs"])
    task = daemon.call("submit", text="upgrade zfs", capabilities=["FreeBSD ", "zfs", "zfs"])[
        "task"
    ]
    assert task["capabilities"] == ["freebsd", "zfs"]
    assign = both.next_assign()
    assert assign["task"]["id"] == task["id"]
    assert assign["epoch"] == 1
    reply = both.out(assign, "upgraded", cost={"tokens_in": 10, "usd": 0.5})
    assert reply["task"]["state"] == "closed"
    assert reply["task"]["outcome"] == "done"
    final = daemon.call("get", task=task["id"])["task"]
    assert final["output"] == "upgraded"
    assert final["cost"] == {"tokens_in": 10, "usd": 0.5}
    rows = daemon.call("ledger", task=task["id"])["entries"]
    assert [(r.get("from_state"), r["to_state"]) for r in rows] == [
        (None, "pending"),
        ("pending", "running"),
        ("running", "done"),
        ("done", "closed"),
    ]
    bsd.close()
    both.close()


def test_the_plain_asyncio_loop_works_too(root: Path) -> None:
    """uvloop is used when installed; the daemon must run on asyncio's own loop as well."""
    daemon = Daemon(root, "--loop", "asyncio")
    daemon.start()
    try:
        agent = FakeAgent(daemon, "plain", ["x"])
        task = daemon.call("submit", text="on asyncio", capabilities=["x"])["task"]
        assign = agent.next_assign()
        assert assign["task"]["id"] == task["id"]
        assert agent.out(assign, "fine")["task"]["outcome"] == "done"
        agent.close()
    finally:
        daemon.stop()
