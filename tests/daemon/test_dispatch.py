"""The board's dispatch rules, end to end through a real daemon and hand-driven agents."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from tests.daemon.conftest import Spawn
from tests.helpers import Daemon, error_code, wait_until


def transitions(daemon: Daemon, task_id: str) -> list[tuple[str | None, str]]:
    return [(row.get("from_state"), row["to_state"]) for row in daemon.ledger(task_id)]


def why_row(why: dict[str, Any], agent: str) -> dict[str, Any]:
    rows: list[dict[str, Any]] = [row for row in why["agents"] if row["agent"] == agent]
    assert len(rows) == 1, why
    return rows[0]


# -- best fit ------------------------------------------------------------------------------------


def test_full_match_beats_partial_match_even_when_its_name_sorts_later(
    daemon: Daemon, spawn: Spawn
) -> None:
    partial = spawn(daemon, "aaa-bsd", ["freebsd"])
    full = spawn(daemon, "zzz-bsd", ["freebsd", "zfs"])
    task = daemon.submit("upgrade zfs", capabilities=["freebsd", "zfs"])
    assign = full.next_assign(timeout=5)
    assert assign["task"]["id"] == task["id"]
    stored = daemon.task(task["id"])
    assert (stored["state"], stored["agent"]) == ("running", "zzz-bsd")
    # The partial match is still free and fits a freebsd-only task.
    other = daemon.submit("freebsd only", capabilities=["freebsd"])
    assert partial.next_assign(timeout=5)["task"]["id"] == other["id"]


def test_equal_scores_go_to_the_name_that_sorts_first(daemon: Daemon, spawn: Spawn) -> None:
    spawn(daemon, "beta", ["freebsd"])
    alpha = spawn(daemon, "alpha", ["freebsd"])
    task = daemon.submit(capabilities=["freebsd"])
    assert alpha.next_assign(timeout=5)["task"]["id"] == task["id"]
    assert daemon.task(task["id"])["agent"] == "alpha"


def test_a_task_without_capabilities_fits_any_agent(daemon: Daemon, spawn: Spawn) -> None:
    agent = spawn(daemon, "only-gpu", ["gpu"])
    task = daemon.submit("anything")
    assert agent.next_assign(timeout=5)["task"]["id"] == task["id"]


def test_an_agent_with_nothing_in_common_never_gets_the_task(daemon: Daemon, spawn: Spawn) -> None:
    spawn(daemon, "linux-1", ["linux", "python"])
    task = daemon.submit(capabilities=["freebsd"])
    # Dispatch runs in the same batch as the submission, before the reply: it is settled now.
    assert daemon.task(task["id"])["state"] == "pending"
    why = daemon.call("why", task=task["id"])
    assert why["summary"] == "no agent can take it now: see the reasons per agent"
    row = why_row(why, "linux-1")
    assert row["score"] == 0
    assert row["missing"] == ["freebsd"]
    assert row["eligible"] is False
    assert row["reasons"] == ["no capability in common"]
    # A capable agent takes it; the zero-overlap one was never a candidate.
    bsd = spawn(daemon, "bsd-1", ["freebsd"])
    assert bsd.next_assign(timeout=5)["task"]["id"] == task["id"]
    assigned = [row for row in daemon.ledger(task["id"]) if row["to_state"] == "running"]
    assert [row["agent"] for row in assigned] == ["bsd-1"]


def test_waiting_task_is_assigned_when_a_capable_agent_registers_not_at_the_tick(
    daemon: Daemon, spawn: Spawn
) -> None:
    # colibri.jsonc has tick = 30s (write_config's default): only the registration can do it.
    assert "30s" in (daemon.root / "colibri.jsonc").read_text()
    spawn(daemon, "linux-1", ["linux"])
    task = daemon.submit(capabilities=["freebsd"])
    assert daemon.task(task["id"])["state"] == "pending"
    bsd = spawn(daemon, "bsd-1", ["freebsd"])
    assign = bsd.next_assign(timeout=5)
    assert assign["task"]["id"] == task["id"]
    assert assign["epoch"] == 1


# -- slots and order -----------------------------------------------------------------------------


def test_slots_bound_concurrent_tasks_and_a_freed_slot_is_refilled(
    daemon: Daemon, spawn: Spawn
) -> None:
    agent = spawn(daemon, "twin", slots=2)
    first, second, third = (daemon.submit(f"task {n}") for n in range(3))
    got = {agent.next_assign(timeout=5)["task"]["id"] for _ in range(2)}
    assert got == {first["id"], second["id"]}
    assert daemon.task(third["id"])["state"] == "pending"
    agents = daemon.call("agents")["agents"]
    assert [(a["name"], sorted(a["running"])) for a in agents] == [
        ("twin", sorted([first["id"], second["id"]]))
    ]
    held = agent.events[0]
    assert agent.out(held, "one")["task"]["outcome"] == "done"
    assert agent.next_assign(timeout=5)["task"]["id"] == third["id"]


def test_an_unplaceable_high_priority_task_does_not_block_a_placeable_one(
    daemon: Daemon, spawn: Spawn
) -> None:
    blocked = daemon.submit("needs a gpu", capabilities=["gpu"], priority=100)
    placeable = daemon.submit("plain linux", capabilities=["linux"], priority=0)
    agent = spawn(daemon, "linux-1", ["linux"])
    assert agent.next_assign(timeout=5)["task"]["id"] == placeable["id"]
    assert daemon.task(blocked["id"])["state"] == "pending"


def test_priority_first_then_first_in_first_out(daemon: Daemon, spawn: Spawn) -> None:
    # Different shapes (capability sets) that all fit the one agent are ordered together.
    low_a = daemon.submit("low a", capabilities=["a"])
    low_b = daemon.submit("low b", capabilities=["b"])
    top = daemon.submit("top", priority=5)
    mid = daemon.submit("mid", capabilities=["a"], priority=1)
    low_c = daemon.submit("low c", capabilities=["b"])
    below = daemon.submit("below", priority=-3)
    mid_2 = daemon.submit("mid 2", capabilities=["b"], priority=1)
    agent = spawn(daemon, "solo", ["a", "b"])
    order: list[str] = []
    for _ in range(7):
        assign = agent.next_assign(timeout=5)
        order.append(assign["task"]["id"])
        agent.out(assign)
    assert order == [t["id"] for t in (top, mid, mid_2, low_a, low_b, low_c, below)]


# -- pinning, workspaces, min_score --------------------------------------------------------------


def test_a_pinned_task_goes_only_to_its_agent(daemon: Daemon, spawn: Spawn) -> None:
    spawn(daemon, "aaa", ["linux"])
    bbb = spawn(daemon, "bbb", ["linux"])
    pinned = daemon.call("create-task", text="for bbb", capabilities=["linux"], agent="bbb")["task"]
    assert pinned["pinned"] is True
    assert bbb.next_assign(timeout=5)["task"]["id"] == pinned["id"]
    # Pinned to an agent that is not here yet: it waits for that agent, not for "aaa".
    later = daemon.call("create-task", text="for ccc", agent="ccc")["task"]
    assert daemon.task(later["id"])["state"] == "pending"
    why = daemon.call("why", task=later["id"])
    assert why_row(why, "aaa")["reasons"] == ["task is pinned to ccc"]
    ccc = spawn(daemon, "ccc")
    assert ccc.next_assign(timeout=5)["task"]["id"] == later["id"]
    assert daemon.task(later["id"])["agent"] == "ccc"


def test_an_agent_registered_again_under_another_tenant_gets_only_that_tenants_work(
    daemon: Daemon, spawn: Spawn
) -> None:
    mover = spawn(daemon, "mover", ["linux"], tenant="team-a")
    assert mover.client.call(
        "register-agent", name="mover", capabilities=["linux"], slots=1, tenant="team-b"
    )["ok"]
    # Dispatch runs in the submit's own batch: pending in the reply means it was not placed.
    left = daemon.submit(capabilities=["linux"], tenant="team-a")
    assert daemon.task(left["id"])["state"] == "pending"
    why = daemon.call("why", task=left["id"])
    assert all(row["agent"] != "mover" for row in why["agents"]), why
    taken = daemon.submit(capabilities=["linux"], tenant="team-b")
    assert mover.next_assign(timeout=5)["task"]["id"] == taken["id"]
    # Gone from the first tenant for good: once its connection closes, a task of that tenant
    # does not reach for it either (and the submit that would have dispatched it succeeds).
    mover.close()
    another = daemon.submit(capabilities=["linux"], tenant="team-a")
    assert daemon.task(another["id"])["state"] == "pending"
    assert daemon.task(left["id"])["state"] == "pending"


def test_a_workspace_task_goes_only_to_that_workspace(daemon: Daemon, spawn: Spawn) -> None:
    spawn(daemon, "aaa", ["linux"])
    inside = spawn(daemon, "zzz", ["linux"], workspace="ws1")
    task = daemon.submit(capabilities=["linux"], workspace="ws1")
    assert inside.next_assign(timeout=5)["task"]["id"] == task["id"]
    elsewhere = daemon.submit(capabilities=["linux"], workspace="ws2")
    assert daemon.task(elsewhere["id"])["state"] == "pending"
    why = daemon.call("why", task=elsewhere["id"])
    assert "not in workspace ws2" in why_row(why, "aaa")["reasons"]
    assert "not in workspace ws2" in why_row(why, "zzz")["reasons"]


def test_per_task_min_score(daemon: Daemon, spawn: Spawn) -> None:
    agent = spawn(daemon, "half", ["x"])
    strict = daemon.submit("all or nothing", capabilities=["x", "y"], min_score=1.0)
    assert daemon.task(strict["id"])["state"] == "pending"
    row = why_row(daemon.call("why", task=strict["id"]), "half")
    assert row["score"] == 0.5
    assert row["missing"] == ["y"]
    assert row["reasons"] == ["score 0.50 below min_score 1.00"]
    lenient = daemon.submit("half will do", capabilities=["x", "y"], min_score=0.5)
    assert agent.next_assign(timeout=5)["task"]["id"] == lenient["id"]
    assert daemon.task(strict["id"])["state"] == "pending"


# -- pause ---------------------------------------------------------------------------------------


def test_pause_takes_submissions_but_assigns_nothing_until_resumed(
    daemon: Daemon, spawn: Spawn
) -> None:
    agent = spawn(daemon, "worker")
    assert daemon.call("toggle-swarm", paused=True)["paused"] is True
    reply = daemon.call("submit", text="while paused")
    assert reply["created"] is True
    task = reply["task"]
    assert daemon.task(task["id"])["state"] == "pending"
    assert daemon.call("status")["paused"] is True
    assert daemon.call("why", task=task["id"])["summary"].startswith("dispatch is paused")
    assert daemon.call("toggle-swarm", paused=False)["paused"] is False
    assert agent.next_assign(timeout=5)["task"]["id"] == task["id"]


# -- reports -------------------------------------------------------------------------------------


def test_out_with_cost_closes_done_with_exact_ledger(daemon: Daemon, spawn: Spawn) -> None:
    agent = spawn(daemon, "worker")
    task = daemon.submit("do it")
    assign = agent.next_assign(timeout=5)
    cost = {"tokens_in": 120, "tokens_out": 30, "usd": 0.25, "model": "m-1"}
    reply = agent.out(assign, "all done", cost=cost)
    assert (reply["task"]["state"], reply["task"]["outcome"]) == ("closed", "done")
    stored = daemon.task(task["id"])
    assert stored["output"] == "all done"
    assert stored["cost"] == cost
    assert stored["attempts"] == 1 and stored["epoch"] == 1
    rows = daemon.ledger(task["id"])
    assert [(r.get("from_state"), r["to_state"], r.get("reason")) for r in rows] == [
        (None, "pending", "submitted"),
        ("pending", "running", "assigned"),
        ("running", "done", "out"),
        ("done", "closed", None),
    ]
    assert rows[2]["cost"] == cost
    assert [r.get("agent") for r in rows[1:]] == ["worker"] * 3
    assert [r["seq"] for r in rows] == sorted({r["seq"] for r in rows})


def test_fail_closes_failed_with_exact_ledger(daemon: Daemon, spawn: Spawn) -> None:
    agent = spawn(daemon, "worker")
    task = daemon.submit("try it")
    reply = agent.fail(agent.next_assign(timeout=5), "disk full")
    assert (reply["task"]["state"], reply["task"]["outcome"]) == ("closed", "failed")
    stored = daemon.task(task["id"])
    assert stored["error"] == "disk full"
    rows = daemon.ledger(task["id"])
    assert [(r.get("from_state"), r["to_state"], r.get("reason")) for r in rows] == [
        (None, "pending", "submitted"),
        ("pending", "running", "assigned"),
        ("running", "failed", "disk full"),
        ("failed", "closed", None),
    ]


def test_stale_epoch_and_foreign_reports_are_refused(daemon: Daemon, spawn: Spawn) -> None:
    holder = spawn(daemon, "holder", ["x"])
    stranger = spawn(daemon, "stranger", ["y"])
    task = daemon.submit(capabilities=["x"])
    assign = holder.next_assign(timeout=5)
    assert assign["epoch"] == 1
    assert error_code(lambda: holder.out({**assign, "epoch": 0})) == "stale_claim"
    assert error_code(lambda: holder.fail({**assign, "epoch": 2})) == "stale_claim"
    assert error_code(lambda: stranger.out(assign)) == "not_your_task"
    assert error_code(lambda: stranger.fail(assign)) == "not_your_task"
    # None of it changed anything; the holder's report stands.
    assert transitions(daemon, task["id"]) == [(None, "pending"), ("pending", "running")]
    assert holder.out(assign, "mine")["task"]["outcome"] == "done"
    assert daemon.task(task["id"])["output"] == "mine"
    # A second report for the ended task is refused too.
    assert error_code(lambda: holder.out(assign, "again")) == "illegal_transition"
    assert daemon.task(task["id"])["output"] == "mine"


def test_a_retried_claim_fences_the_previous_epoch(
    start_daemon: Callable[..., Daemon], spawn: Spawn
) -> None:
    daemon = start_daemon(retry_backoff="0.05s")
    agent = spawn(daemon, "worker")
    task = daemon.submit(max_attempts=2)
    first = agent.next_assign(timeout=5)
    assert agent.fail(first, "flaky")["task"]["state"] == "pending"
    second = agent.next_assign(timeout=10)
    assert (second["task"]["id"], second["epoch"]) == (task["id"], 2)
    assert error_code(lambda: agent.out(first, "late")) == "stale_claim"
    assert agent.out(second, "fresh")["task"]["outcome"] == "done"
    assert daemon.task(task["id"])["output"] == "fresh"


# -- cancel --------------------------------------------------------------------------------------


def test_cancel_cascades_through_the_open_family(daemon: Daemon, spawn: Spawn) -> None:
    worker = spawn(daemon, "worker", ["work"])
    parent = daemon.submit("release", capabilities=["nobody"])
    pid = parent["id"]
    # Finished members of the family first (the worker has one slot).
    done_child = daemon.submit("done child", capabilities=["work"], parent=pid)
    worker.out(worker.next_assign(timeout=5), "finished")
    open_child = daemon.submit("open child", capabilities=["nobody"], parent=pid)
    done_grandchild = daemon.submit(
        "done grandchild", capabilities=["work"], parent=open_child["id"]
    )
    worker.out(worker.next_assign(timeout=5), "finished too")
    running_child = daemon.submit("running child", capabilities=["work"], parent=pid)
    running = worker.next_assign(timeout=5)
    assert running["task"]["id"] == running_child["id"]
    grandchild_1 = daemon.submit("grandchild 1", capabilities=["nobody"], parent=open_child["id"])
    grandchild_2 = daemon.submit(
        "grandchild 2", capabilities=["nobody"], parent=running_child["id"]
    )
    family_open = [
        pid,
        open_child["id"],
        running_child["id"],
        grandchild_1["id"],
        grandchild_2["id"],
    ]
    family_done = [done_child["id"], done_grandchild["id"]]
    done_rows = {t: daemon.ledger(t) for t in family_done}

    cancelled = daemon.call("cancel", task=pid, reason="release dropped")["cancelled"]
    assert sorted(cancelled) == sorted(family_open)

    for task_id in family_open:
        rows = [r for r in daemon.ledger(task_id) if r["to_state"] == "cancelled"]
        assert len(rows) == 1, task_id
        assert "release dropped" in rows[0]["reason"]
        if task_id != pid:
            assert pid in rows[0]["reason"]
    for task_id in family_open:
        if task_id != running_child["id"]:
            stored = daemon.task(task_id)
            assert (stored["state"], stored["outcome"]) == ("closed", "cancelled")
    for task_id in family_done:
        stored = daemon.task(task_id)
        assert (stored["state"], stored["outcome"]) == ("closed", "done")
        assert daemon.ledger(task_id) == done_rows[task_id]

    # The running session is told to stop; the task keeps its slot until it has.
    event = worker.next_event("cancel", timeout=5)
    assert (event["task"], event["epoch"]) == (running_child["id"], running["epoch"])
    assert "release dropped" in event["reason"]
    stopping = daemon.task(running_child["id"])
    assert (stopping["state"], stopping["outcome"]) == ("cancelled", "cancelled")
    waiting = daemon.submit("next job", capabilities=["work"])
    assert daemon.task(waiting["id"])["state"] == "pending"

    reply = worker.client.call("reclaimed", task=running_child["id"], epoch=running["epoch"])
    assert (reply["task"]["state"], reply["task"]["outcome"]) == ("closed", "cancelled")
    assert worker.next_assign(timeout=5)["task"]["id"] == waiting["id"]
    assert transitions(daemon, running_child["id"]) == [
        (None, "pending"),
        ("pending", "running"),
        ("running", "cancelled"),
        ("cancelled", "closed"),
    ]

    # No new children under a cancelled task, at any depth.
    assert error_code(lambda: daemon.submit("late child", parent=pid)) == "parent_cancelled"
    assert error_code(lambda: daemon.submit("late", parent=open_child["id"])) == "parent_cancelled"
    # Cancelling an ended family again is refused.
    assert error_code(lambda: daemon.call("cancel", task=pid)) == "illegal_transition"


# -- retries -------------------------------------------------------------------------------------


def test_retries_with_backoff_then_failed_naming_max_attempts(
    start_daemon: Callable[..., Daemon], spawn: Spawn
) -> None:
    daemon = start_daemon(retry_backoff="0.2s")
    agent = spawn(daemon, "worker")
    task = daemon.submit("flaky", max_attempts=3)
    for attempt in (1, 2):
        assign = agent.next_assign(timeout=10)
        assert (assign["task"]["id"], assign["epoch"], assign["task"]["attempts"]) == (
            task["id"],
            attempt,
            attempt,
        )
        back = agent.fail(assign, f"crash {attempt}")["task"]
        assert back["state"] == "pending"
        assert back["not_before"] is not None
    last = agent.next_assign(timeout=10)
    assert last["epoch"] == 3
    final = agent.fail(last, "crash 3")["task"]
    assert (final["state"], final["outcome"]) == ("closed", "failed")

    rows = daemon.ledger(task["id"])
    assert [(r.get("from_state"), r["to_state"]) for r in rows] == [
        (None, "pending"),
        ("pending", "running"),
        ("running", "pending"),
        ("pending", "running"),
        ("running", "pending"),
        ("pending", "running"),
        ("running", "failed"),
        ("failed", "closed"),
    ]
    assert "retry" in rows[2]["reason"] and "crash 1" in rows[2]["reason"]
    assert "retry" in rows[4]["reason"] and "crash 2" in rows[4]["reason"]
    assert "max_attempts" in rows[6]["reason"] and "crash 3" in rows[6]["reason"]
    assert daemon.task(task["id"])["attempts"] == 3

    # By hand: a new task with the same text and settings; the old one keeps its outcome.
    again = daemon.call("retry", task=task["id"])["task"]
    assert again["id"] != task["id"]
    assert (again["text"], again["max_attempts"]) == ("flaky", 3)
    assert daemon.task(task["id"])["outcome"] == "failed"
    assert [r.get("reason") for r in daemon.ledger(again["id"])][0] == "submitted"


def test_retry_refuses_an_open_task(daemon: Daemon) -> None:
    task = daemon.submit("still pending", capabilities=["nobody"])
    assert error_code(lambda: daemon.call("retry", task=task["id"])) == "illegal_transition"
    assert len(daemon.call("list")["tasks"]) == 1


# -- idempotency, wait, why ----------------------------------------------------------------------


def test_idempotency_key_returns_the_same_task(daemon: Daemon) -> None:
    first = daemon.call("submit", text="once", idempotency_key="k-1")
    second = daemon.call("submit", text="once", idempotency_key="k-1")
    assert first["created"] is True
    assert second["created"] is False
    assert second["task"]["id"] == first["task"]["id"]
    assert len(daemon.ledger(first["task"]["id"])) == 1
    assert [t["id"] for t in daemon.call("list")["tasks"]] == [first["task"]["id"]]
    other = daemon.call("submit", text="once", idempotency_key="k-2")
    assert other["created"] is True and other["task"]["id"] != first["task"]["id"]


def test_wait_returns_when_the_task_ends(daemon: Daemon, spawn: Spawn) -> None:
    agent = spawn(daemon, "worker")
    task = daemon.submit("long job")
    assign = agent.next_assign(timeout=5)
    with daemon.client() as waiter:
        wait_id = waiter.send("wait", task=task["id"])
        ping_id = waiter.send("ping")
        # The ping is answered first: the wait is still open while the task runs.
        assert waiter.read()["id"] == ping_id
        agent.out(assign, "finally")
        reply = waiter.read()
        assert reply["id"] == wait_id and reply["ok"] is True
        assert reply["task"]["outcome"] == "done"
        assert reply["task"]["output"] == "finally"
        # An ended task answers at once.
        assert waiter.call("wait", task=task["id"])["task"]["outcome"] == "done"


def test_why_lists_every_agent_with_score_missing_and_reasons(daemon: Daemon, spawn: Spawn) -> None:
    busy = spawn(daemon, "full", ["gpu", "linux"])
    first = daemon.submit("occupy full", capabilities=["gpu"])
    assert busy.next_assign(timeout=5)["task"]["id"] == first["id"]
    spawn(daemon, "half", ["linux"])
    spawn(daemon, "mac", ["macos"])
    gone = spawn(daemon, "gone", ["gpu", "linux", "x"], slots=4)
    task = daemon.submit("needs both", capabilities=["linux", "gpu"], min_score=1.0)
    # "gone" would take it, so close it first and let the daemon notice.
    assert daemon.task(task["id"])["agent"] == "gone"
    gone.close()
    later = daemon.submit("needs both again", capabilities=["linux", "gpu"], min_score=1.0)

    def offline_seen() -> dict[str, Any] | None:
        why = daemon.call("why", task=later["id"])
        reasons = why_row(why, "gone")["reasons"]
        return why if any(r.startswith("disconnected") for r in reasons) else None

    why = wait_until(offline_seen)
    assert daemon.task(later["id"])["state"] == "pending"
    assert why["summary"] == "no agent can take it now: see the reasons per agent"
    assert why["required"] == ["gpu", "linux"]
    assert why["min_score"] == 1.0
    rows = {row["agent"]: row for row in why["agents"]}
    assert set(rows) == {"full", "half", "mac", "gone"}
    assert (rows["full"]["score"], rows["full"]["missing"], rows["full"]["reasons"]) == (
        1.0,
        [],
        ["no free slot"],
    )
    assert (rows["half"]["score"], rows["half"]["missing"], rows["half"]["reasons"]) == (
        0.5,
        ["gpu"],
        ["score 0.50 below min_score 1.00"],
    )
    assert (rows["mac"]["score"], rows["mac"]["missing"], rows["mac"]["reasons"]) == (
        0.0,
        ["gpu", "linux"],
        ["no capability in common"],
    )
    assert (rows["gone"]["score"], rows["gone"]["missing"], rows["gone"]["reasons"]) == (
        1.0,
        [],
        ["disconnected (offline unless it reconnects within 30s)"],
    )
    assert not any(row["eligible"] for row in why["agents"])
    # Best first: score descending, then name.
    assert [row["agent"] for row in why["agents"]] == ["full", "gone", "half", "mac"]
