"""Quotas: too many pending tasks for a tenant, or children for one task, are refused."""

from __future__ import annotations

from pathlib import Path

import pytest

from colibri.core.errors import ColibriError
from tests.helpers import Daemon, FakeAgent, write_config


def test_pending_and_children_quotas(root: Path) -> None:
    write_config(root, max_pending=4, max_children=2)
    daemon = Daemon(root)
    daemon.start()
    try:
        first = [daemon.call("submit", text=f"t{n}")["task"] for n in range(4)]
        before = daemon.call("status")["ledger_at"]
        with pytest.raises(ColibriError) as err:
            daemon.call("submit", text="one too many")
        assert err.value.code == "quota_exceeded" and "max_pending" in err.value.message
        assert daemon.call("status")["ledger_at"] == before  # nothing stored
        other = daemon.call("submit", text="another tenant", tenant="team-b")["task"]
        assert other["state"] == "pending"  # quotas are per tenant
        agent = FakeAgent(daemon, "a")  # taking one frees a place
        agent.next_assign()
        parent = daemon.call("submit", text="parent")["task"]
        agent.close()
        for task in first[1:]:
            daemon.call("cancel", task=task["id"])
        for n in range(2):
            daemon.call("submit", text=f"child {n}", parent=parent["id"])
        with pytest.raises(ColibriError) as err:
            daemon.call("submit", text="third child", parent=parent["id"])
        assert err.value.code == "quota_exceeded" and "children" in err.value.message
    finally:
        daemon.stop()
