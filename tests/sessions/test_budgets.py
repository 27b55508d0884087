"""Budgets: a task's dollars shared down its family; a workspace's daily spending cap."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from colibri.core.errors import ColibriError
from tests.helpers import Daemon, FakeAgent, wait_until

#: A one-shot agent that ends with Claude Code's JSON result: it cost 30 cents.
COSTS_30_CENTS = (
    "import json, sys\n"
    "sys.stdin.read()\n"
    "print(json.dumps({'result': 'ok', 'total_cost_usd': 0.3,"
    " 'usage': {'input_tokens': 10, 'output_tokens': 5}}))\n"
)


def test_children_share_what_remains_of_the_parent_budget(daemon: Daemon) -> None:
    parent = daemon.call("submit", text="release", budget_usd=1.0)["task"]
    first = daemon.call("submit", text="notes", parent=parent["id"], budget_usd=0.6)["task"]
    assert first["budget_usd"] == 0.6
    with pytest.raises(ColibriError) as err:
        daemon.call("submit", text="too dear", parent=parent["id"], budget_usd=0.6)
    assert err.value.code == "budget_exceeded" and "0.4000" in err.value.message
    inherited = daemon.call("submit", text="the rest", parent=parent["id"])["task"]
    assert inherited["budget_usd"] == pytest.approx(0.4)
    with pytest.raises(ColibriError) as err:
        daemon.call("submit", text="nothing left", parent=parent["id"])
    assert err.value.code == "budget_exceeded"
    # a grandchild shares its own parent's budget
    grandchild = daemon.call("submit", text="proofread", parent=first["id"], budget_usd=0.5)
    assert grandchild["task"]["budget_usd"] == 0.5


def test_what_a_parent_spent_is_not_left_for_its_children(daemon: Daemon) -> None:
    agent = FakeAgent(daemon, "worker")
    parent = daemon.call("submit", text="plan", budget_usd=1.0)["task"]
    assign = agent.next_assign()
    agent.out(assign, "planned", cost={"usd": 0.75}, session_ended=False)
    with pytest.raises(ColibriError) as err:
        daemon.call("submit", text="build", parent=parent["id"], budget_usd=0.5)
    assert err.value.code == "budget_exceeded"
    assert daemon.call("submit", text="build", parent=parent["id"])["task"]["budget_usd"] == 0.25
    agent.close()


def test_a_workspace_that_spent_its_daily_budget_gets_no_more_work(root: Path) -> None:
    (root / "colibri.jsonc").write_text(json.dumps({"workspaces": {"ai": {
        "budget_usd_daily": 0.5, "session": {"command": [sys.executable, "-c", COSTS_30_CENTS]},
    }}}))  # fmt: skip
    daemon = Daemon(root)
    daemon.start()
    try:
        for n in range(2):
            task = daemon.call("submit", text=f"job {n}", workspace="ai")["task"]
            daemon.wait_closed(task["id"])
        spent = daemon.call("cost", by="workspace")["totals"]
        assert spent == [{"key": "ai", "sessions": 2, "usd": pytest.approx(0.6),
                          "tokens_in": 20, "tokens_out": 10}]  # fmt: skip
        third = daemon.call("submit", text="job 2", workspace="ai")["task"]
        why = daemon.call("why", task=third["id"])
        assert any("budget" in r for a in why["agents"] for r in a["reasons"])
        assert daemon.call("get", task=third["id"])["task"]["state"] == "pending"
        daemon.restart()  # the day's spending is read back from the ledger

        def budget_reason() -> bool:
            why = daemon.call("why", task=third["id"])
            return any("budget" in r for a in why["agents"] for r in a["reasons"])

        wait_until(budget_reason)  # once the harness has registered again
        assert daemon.call("get", task=third["id"])["task"]["state"] == "pending"
    finally:
        daemon.stop()
