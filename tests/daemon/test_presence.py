"""Agent presence through a real daemon: TTL expiry, disconnects, reconnects and fencing."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.daemon.conftest import Spawn
from tests.helpers import Daemon, error_code, wait_until

#: The TTL under test; agents that must outlive it register their own, longer one.
TTL = "0.5s"
LONG_TTL = 30.0


def agent_entry(daemon: Daemon, name: str) -> dict[str, Any]:
    return next(a for a in daemon.call("agents")["agents"] if a["name"] == name)


def test_a_silent_agent_goes_offline_and_its_session_is_lost(
    start_daemon: Callable[..., Daemon], spawn: Spawn
) -> None:
    daemon = start_daemon(agent_ttl=TTL)
    task = daemon.call("submit", text="long job")["task"]
    # Registered after the submission, so the assignment comes with the registration.
    silent = spawn(daemon, "silent")
    assert silent.registration["agent"]["ttl"] == 0.5
    assert silent.next_assign(timeout=5)["task"]["id"] == task["id"]
    # It never heartbeats again: the daemon tells it it expired.
    expired = silent.next_event("expired", timeout=10)
    assert "register again" in expired["reason"]
    final = daemon.wait_closed(task["id"])
    assert final["outcome"] == "failed"
    assert "session lost" in final["error"]
    rows = daemon.ledger(task["id"])
    assert [(r.get("from_state"), r["to_state"]) for r in rows] == [
        (None, "pending"),
        ("pending", "running"),
        ("running", "failed"),
        ("failed", "closed"),
    ]
    assert "session lost" in rows[2]["reason"]
    assert "silent" in rows[2]["reason"]
    entry = agent_entry(daemon, "silent")
    assert entry["online"] is False
    assert entry["running"] == []
    # Offline: a report on its old connection is not accepted.
    assert error_code(lambda: silent.client.call("heartbeat")) == "not_registered"


def test_a_lost_session_with_attempts_left_goes_back_to_pending(
    start_daemon: Callable[..., Daemon], spawn: Spawn
) -> None:
    daemon = start_daemon(agent_ttl=TTL, retry_backoff="0.05s")
    task = daemon.call("submit", text="retry me", max_attempts=2)["task"]
    silent = spawn(daemon, "silent")
    assert silent.next_assign(timeout=5)["epoch"] == 1
    silent.next_event("expired", timeout=10)

    def requeued() -> list[dict[str, Any]]:
        return [r for r in daemon.ledger(task["id"]) if r.get("from_state") == "running"]

    row = wait_until(requeued)[0]
    assert row["to_state"] == "pending"
    assert "session lost" in row["reason"] and "retry" in row["reason"]
    # The next agent gets it under a new claim.
    healthy = spawn(daemon, "healthy", ttl=LONG_TTL)
    assign = healthy.next_assign(timeout=10)
    assert (assign["task"]["id"], assign["epoch"]) == (task["id"], 2)
    assert healthy.out(assign, "second time lucky")["task"]["outcome"] == "done"


def test_a_disconnected_agent_gets_no_work_and_adopts_its_task_on_reconnect(
    start_daemon: Callable[..., Daemon], spawn: Spawn
) -> None:
    daemon = start_daemon(agent_ttl=TTL)
    first = daemon.call("submit", text="first")["task"]
    agent = spawn(daemon, "worker", ["linux"], slots=2, ttl=LONG_TTL)
    held = agent.next_assign(timeout=5)
    assert held["task"]["id"] == first["id"]
    probe = daemon.call("submit", text="probe", capabilities=["gpu"])["task"]
    agent.close()

    def disconnect_seen() -> bool:
        why = daemon.call("why", task=probe["id"])
        return any(
            r["agent"] == "worker" and any(x.startswith("disconnected") for x in r["reasons"])
            for r in why["agents"]
        )

    wait_until(disconnect_seen)
    # It has a free slot, but no connection: new work waits.
    second = daemon.call("submit", text="second")["task"]
    assert daemon.task(second["id"])["state"] == "pending"
    assert daemon.task(first["id"])["state"] == "running"

    back = spawn(
        daemon,
        "worker",
        ["linux"],
        slots=2,
        ttl=LONG_TTL,
        running=[{"task": first["id"], "epoch": held["epoch"], "claim": held["claim"]}],
    )
    assert back.registration["adopted"] == [first["id"]]
    assert back.registration["rejected"] == []
    assert back.next_assign(timeout=5)["task"]["id"] == second["id"]
    still = daemon.task(first["id"])
    assert (still["state"], still["agent"], still["epoch"], still["attempts"]) == (
        "running",
        "worker",
        1,
        1,
    )
    assert back.out(held, "survived the reconnect")["task"]["outcome"] == "done"
    assert daemon.task(first["id"])["output"] == "survived the reconnect"
    assert [r["to_state"] for r in daemon.ledger(first["id"])] == [
        "pending",
        "running",
        "done",
        "closed",
    ]


def test_fencing_a_stalled_agent_cannot_overwrite_the_retry(
    start_daemon: Callable[..., Daemon], spawn: Spawn
) -> None:
    daemon = start_daemon(agent_ttl=TTL, retry_backoff="0.05s")
    task = daemon.call("submit", text="fenced", max_attempts=2)["task"]
    stalled = spawn(daemon, "stalled")
    old = stalled.next_assign(timeout=5)
    assert old["epoch"] == 1
    taker = spawn(daemon, "taker", ttl=LONG_TTL)
    new = taker.next_assign(timeout=10)
    assert (new["task"]["id"], new["epoch"]) == (task["id"], 2)
    stalled.next_event("expired", timeout=10)

    # The stalled agent wakes: on its expired connection it is not an agent any more...
    assert error_code(lambda: stalled.out(old, "stale result")) == "not_registered"
    # ...and registered again, the task it still believes it holds is refused, as is its out.
    again = stalled.client.call(
        "register-agent", name="stalled", ttl=LONG_TTL, running=[{"task": task["id"], "epoch": 1}]
    )
    assert again["adopted"] == []
    assert again["rejected"] == [{"task": task["id"], "epoch": 1}]
    assert error_code(lambda: stalled.out(old, "stale result")) == "stale_claim"
    assert error_code(lambda: stalled.fail(old, "stale failure")) == "stale_claim"
    assert daemon.task(task["id"])["state"] == "running"

    assert taker.out(new, "the real result")["task"]["outcome"] == "done"
    final = daemon.task(task["id"])
    assert (final["state"], final["outcome"], final["output"]) == (
        "closed",
        "done",
        "the real result",
    )
    rows = daemon.ledger(task["id"])
    outcomes = [r for r in rows if r["to_state"] in ("done", "failed", "cancelled")]
    assert [(r["to_state"], r["agent"], r["epoch"]) for r in outcomes] == [("done", "taker", 2)]
    assert [(r.get("from_state"), r["to_state"], r.get("agent")) for r in rows] == [
        (None, "pending", None),
        ("pending", "running", "stalled"),
        ("running", "pending", "stalled"),
        ("pending", "running", "taker"),
        ("running", "done", "taker"),
        ("done", "closed", "taker"),
    ]
    # Late reports after the end change nothing either.
    assert error_code(lambda: stalled.out(old, "stale result")) == "stale_claim"
    assert daemon.task(task["id"])["output"] == "the real result"


def test_a_task_that_ended_while_its_agent_was_away_is_closed_on_reregistration(
    start_daemon: Callable[..., Daemon], spawn: Spawn
) -> None:
    """The agent reported out but kept its session (session_ended false), then reconnected.

    Registering again lists the task; it has ended, so it is rejected, closed, and the slot is
    free for new work at once.
    """
    daemon = start_daemon(agent_ttl="30s")
    first = spawn(daemon, "keeper", ttl=LONG_TTL)
    task = daemon.call("submit", text="interactive")["task"]
    assign = first.next_assign()
    first.out(assign, "result", session_ended=False)
    assert daemon.task(task["id"])["state"] == "done"
    first.close()
    again = spawn(
        daemon,
        "keeper",
        ttl=LONG_TTL,
        running=[{"task": task["id"], "epoch": assign["epoch"], "claim": assign["claim"]}],
    )
    assert again.registration["rejected"] == [{"task": task["id"], "epoch": assign["epoch"]}]
    final = daemon.task(task["id"])
    assert (final["state"], final["outcome"], final["output"]) == ("closed", "done", "result")
    follow_up = daemon.call("submit", text="next")["task"]
    assert again.next_assign()["task"]["id"] == follow_up["id"]


def test_subscribing_twice_does_not_double_events(
    start_daemon: Callable[..., Daemon],
) -> None:
    daemon = start_daemon()
    with daemon.client() as watcher:
        watcher.call("subscribe")
        watcher.call("subscribe")
        task = daemon.call("submit", text="once")["task"]
        daemon.call("cancel", task=task["id"])
        seen = []
        for event in watcher.events():
            if event["event"] == "task":
                seen.append((event["from"], event["to"]))
            if event["to"] == "closed" if event["event"] == "task" else False:
                break
    assert seen == [(None, "pending"), ("pending", "cancelled"), ("cancelled", "closed")]
