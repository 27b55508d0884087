"""B5: a task that kills its session every time fails after max_attempts; others flow on."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import Daemon, FakeAgent, write_config


def test_a_poison_task_fails_after_its_attempts_and_does_not_block_others(root: Path) -> None:
    write_config(root, retry_backoff="0.05s")
    daemon = Daemon(root)
    daemon.start()
    try:
        agent = FakeAgent(daemon, "worker")  # one slot: replies never hide an assign
        poison = daemon.call("submit", text="poison", max_attempts=3, priority=10)["task"]
        others = [daemon.call("submit", text=f"fine {n}")["task"]["id"] for n in range(20)]
        done: set[str] = set()
        crashes = 0
        while len(done) < len(others) or crashes < 3:
            assign = agent.next_assign(timeout=10)
            if assign["task"]["id"] == poison["id"]:
                crashes += 1
                agent.fail(assign, "segfault")
            else:
                agent.out(assign)
                done.add(assign["task"]["id"])
        final = daemon.wait_closed(poison["id"])
        assert (final["outcome"], final["attempts"]) == ("failed", 3)
        reasons = [
            r.get("reason") or "" for r in daemon.call("ledger", task=poison["id"])["entries"]
        ]
        assert any("max_attempts (3)" in r for r in reasons)
        assert done == set(others)
        agent.close()
    finally:
        daemon.stop()
