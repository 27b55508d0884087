"""A cancelled family takes no new children, also under a member that ended before the cancel.

Found by the Board state machine (D4): a grandchild could be added under a done child of a
cancelled task, leaving an open descendant of a cancelled node.
"""

from __future__ import annotations

import pytest

from colibri.core.errors import ColibriError
from tests.helpers import Daemon, FakeAgent


def test_no_new_children_anywhere_under_a_cancelled_task(daemon: Daemon) -> None:
    top = daemon.call("submit", text="release", capabilities=["nobody"])["task"]["id"]
    child = daemon.call("submit", text="notes", parent=top, capabilities=["docs"])["task"]["id"]
    agent = FakeAgent(daemon, "writer", ["docs"])
    try:
        assign = agent.next_assign()
        assert assign["task"]["id"] == child
        assert agent.out(assign)["task"]["outcome"] == "done"
    finally:
        agent.close()
    assert daemon.call("cancel", task=top)["cancelled"] == [top]
    for parent in (top, child):
        with pytest.raises(ColibriError) as refused:
            daemon.call("submit", text="more", parent=parent)
        assert refused.value.code == "parent_cancelled"
        assert top in refused.value.message
    assert [t["id"] for t in daemon.call("list")["tasks"]] == [top, child]
