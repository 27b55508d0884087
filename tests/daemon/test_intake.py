"""Intake rules that a hostile or careless client meets: idempotency keys reused with other
fields, and `retry` carrying every field of the original, budgets included."""

from __future__ import annotations

from typing import Any

import pytest

from colibri.core.errors import ColibriError, QuotaExceeded
from colibri.core.model import SPEC_FIELDS
from tests.daemon.conftest import Spawn
from tests.helpers import Daemon

FIRST: dict[str, Any] = {
    "text": "text one",
    "capabilities": ["zz", "yy"],
    "priority": 2,
    "labels": ["l1"],
    "max_attempts": 2,
    "min_score": 0.5,
    "budget_usd": 3.0,
    "workspace": "ws",
}


def count(daemon: Daemon) -> int:
    return len(daemon.call("list", limit=10_000)["tasks"])


@pytest.mark.parametrize(
    "changed",
    [
        {"text": "totally different text"},
        {"text": "text one "},
        {"capabilities": ["other"]},
        {"capabilities": ["zz"]},
        {"priority": 9},
        {"labels": []},
        {"max_attempts": 1},
        {"min_score": 1.0},
        {"budget_usd": 4.0},
        {"budget_usd": None},
        {"workspace": "elsewhere"},
    ],
)
def test_a_key_reused_with_other_fields_is_refused_and_stores_nothing(
    daemon: Daemon, changed: dict[str, Any]
) -> None:
    first = daemon.call("submit", idempotency_key="k1", **FIRST)["task"]
    before = (count(daemon), daemon.call("status")["ledger_at"])
    with pytest.raises(ColibriError) as caught:
        daemon.call("submit", idempotency_key="k1", **{**FIRST, **changed})
    assert caught.value.code == "idempotency_conflict"
    assert first["id"] in caught.value.message
    assert (count(daemon), daemon.call("status")["ledger_at"]) == before


def test_a_key_reused_for_a_pinned_submission_of_another_agent_is_refused(
    daemon: Daemon,
) -> None:
    daemon.call("create-task", agent="a1", text="pinned", idempotency_key="pin")
    with pytest.raises(ColibriError) as caught:
        daemon.call("create-task", agent="a2", text="pinned", idempotency_key="pin")
    assert caught.value.code == "idempotency_conflict"
    with pytest.raises(ColibriError) as caught:
        daemon.call("submit", text="pinned", idempotency_key="pin")
    assert caught.value.code == "idempotency_conflict"


def test_the_same_fields_get_the_same_task_back_in_any_state_forever(daemon: Daemon) -> None:
    """The key names its task for as long as the board keeps it: sent again with the same
    fields (names are compared as the board reads them: trimmed, lower-case, deduplicated),
    it returns that task, also once it was cancelled and closed. To run the work again, use
    a new key or `retry`."""
    first = daemon.call("submit", idempotency_key="k1", **FIRST)
    assert first["created"] is True
    again = daemon.call(
        "submit", idempotency_key="k1", **{**FIRST, "capabilities": [" ZZ", "yy", "zz"]}
    )
    assert again["created"] is False and again["task"]["id"] == first["task"]["id"]
    daemon.call("cancel", task=first["task"]["id"])
    after = daemon.call("submit", idempotency_key="k1", **FIRST)
    assert after["created"] is False and after["task"]["id"] == first["task"]["id"]
    assert after["task"]["state"] == "closed" and after["task"]["outcome"] == "cancelled"
    other_tenant = daemon.call("submit", idempotency_key="k1", tenant="acme", **FIRST)
    assert other_tenant["created"] is True
    assert count(daemon) == 2


def test_a_retried_submission_gets_its_task_back_even_when_the_quota_is_full(
    start_daemon: Any,
) -> None:
    daemon = start_daemon(max_pending=2)
    kept = daemon.call("submit", text="one", idempotency_key="a")["task"]
    daemon.call("submit", text="two")
    again = daemon.call("submit", text="one", idempotency_key="a")
    assert again["created"] is False and again["task"]["id"] == kept["id"]
    with pytest.raises(ColibriError) as caught:
        daemon.call("submit", text="three", idempotency_key="b")
    assert caught.value.code == "quota_exceeded"


def test_retry_carries_every_field_of_the_original(daemon: Daemon, spawn: Spawn) -> None:
    original = daemon.call(
        "create-task", agent="a1", idempotency_key="orig", tenant="acme", **FIRST
    )["task"]
    daemon.call("cancel", task=original["id"])
    copy = daemon.call("retry", task=original["id"])["task"]
    assert copy["id"] != original["id"] and copy["state"] == "pending"
    fields = (*SPEC_FIELDS, "pinned")  # every field a task is asked with
    assert {f: copy[f] for f in fields} == {f: original[f] for f in fields}
    assert copy.get("idempotency_key") is None  # the key still names the original


def test_retrying_a_child_gives_it_its_budget_within_what_the_parent_has_left(
    daemon: Daemon, spawn: Spawn
) -> None:
    """Parent $1.00; child $0.60 ends having spent $0.10. Retried, the new child gets $0.60
    again: the ended child holds only the $0.10 it spent, not the $0.60 it was given. With
    another child open at $0.50, the next retry is held to the $0.40 left; with nothing
    left, retry is refused."""
    agent = spawn(daemon, "a1")
    parent = daemon.call("create-task", agent="nobody", text="release", budget_usd=1.0)["task"]
    child = daemon.call("submit", text="notes", parent=parent["id"], budget_usd=0.6)["task"]
    agent.out(agent.next_assign(), cost={"usd": 0.1})
    second = daemon.call("retry", task=child["id"])["task"]
    assert second["budget_usd"] == pytest.approx(0.6)
    assert second["parent"] == parent["id"]
    agent.out(agent.next_assign(), cost={"usd": 0.0})
    daemon.call("submit", text="other", parent=parent["id"], budget_usd=0.5)  # runs on a1
    agent.next_assign()
    third = daemon.call("retry", task=second["id"])["task"]
    assert third["budget_usd"] == pytest.approx(0.4)  # 1.00 - 0.10 spent - 0.50 open
    daemon.call("cancel", task=third["id"])
    daemon.call("submit", text="dear", parent=parent["id"], budget_usd=0.4)
    with pytest.raises(ColibriError) as caught:
        daemon.call("retry", task=third["id"])
    assert caught.value.code == "budget_exceeded"


def test_a_family_is_at_most_max_depth_deep(start_daemon: Any) -> None:
    """A chain of --parent submissions stops at scheduler.max_depth ancestors: the task
    that would pass it is refused, nothing is stored."""
    daemon = start_daemon(max_depth=3)
    chain = [daemon.call("submit", text="root")["task"]["id"]]
    for level in range(3):
        child = daemon.call("submit", text=f"level {level + 1}", parent=chain[-1])["task"]
        chain.append(child["id"])
    with pytest.raises(ColibriError) as caught:
        daemon.call("submit", text="too deep", parent=chain[-1])
    assert caught.value.code == "quota_exceeded" and "max_depth" in caught.value.message
    assert count(daemon) == 4
    # a sibling higher up is still fine
    daemon.call("submit", text="beside", parent=chain[1])


def test_the_text_open_tasks_hold_is_bounded_per_tenant(start_daemon: Any) -> None:
    """scheduler.max_pending_mib: 1 MiB of text in a tenant's open tasks, four of the
    longest texts; a fifth is refused (nothing stored), another tenant is not affected, and
    a task that closes gives its room back — also as counted again after a restart."""
    from colibri.core.model import MAX_TEXT

    daemon = start_daemon(max_pending_mib=1)
    long_text = "a" * MAX_TEXT
    first = [daemon.call("submit", text=long_text)["task"]["id"] for _ in range(4)]
    before = count(daemon)
    with pytest.raises(ColibriError) as caught:
        daemon.call("submit", text=long_text)
    assert caught.value.code == "quota_exceeded" and "max_pending_mib" in caught.value.message
    assert count(daemon) == before
    daemon.call("submit", text=long_text, tenant="other")
    daemon.restart()
    with pytest.raises(QuotaExceeded):
        daemon.call("submit", text=long_text)
    daemon.call("cancel", task=first[0])
    daemon.call("submit", text=long_text)


def test_long_pages_are_cut_by_bytes_and_go_on_where_they_stopped(start_daemon: Any) -> None:
    """40 tasks of 256 KiB asked for in one `list`: the reply stops before 8 MiB and says
    where the next page starts; the pages cover every task once. A family that long says it
    is not complete."""
    from colibri.core.model import MAX_TEXT
    from colibri.core.sizes import REPLY_BUDGET

    daemon = start_daemon(max_pending_mib=16)
    parent = daemon.call("create-task", agent="nobody", text="parent")["task"]["id"]
    ids = {parent}
    for n in range(40):
        ids.add(daemon.call("submit", text=f"{n}" + "b" * (MAX_TEXT - 3), parent=parent)
                ["task"]["id"])  # fmt: skip
    seen: list[str] = []
    after = None
    with daemon.client(timeout=30) as client:
        while True:
            reply = client.call("list", limit=10_000, after=after)
            assert sum(len(t["text"]) for t in reply["tasks"]) <= REPLY_BUDGET
            seen += [t["id"] for t in reply["tasks"]]
            after = reply["next"]
            if after is None:
                break
            assert len(reply["tasks"]) < 41
        family = client.call("family", task=parent)
    assert sorted(seen) == sorted(ids) and len(seen) == len(set(seen))
    assert family["complete"] is False and family["tasks"][0]["id"] == parent
    assert 1 < len(family["tasks"]) < 41


def test_the_cli_says_when_a_key_returned_an_existing_task(daemon: Daemon) -> None:
    from tests.helpers import colibri

    first = colibri(daemon.root, "submit", "deploy 42", "--idempotency-key", "deploy-42")
    again = colibri(daemon.root, "submit", "deploy 42", "--idempotency-key", "deploy-42")
    assert first.returncode == again.returncode == 0
    assert first.stdout == again.stdout and first.stderr == ""
    assert "already names task" in again.stderr and "nothing new" in again.stderr
    other = colibri(daemon.root, "submit", "deploy 43", "--idempotency-key", "deploy-42")
    assert other.returncode == 1 and "idempotency key 'deploy-42' names task" in other.stderr
