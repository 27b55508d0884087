"""Who may report on a task: every report verb goes through one check (``Reports.reporter``).
An agent token speaks for its own agent only: a second agent of the same tenant, even one that
has learnt the claim's secret, is refused every verb, and nothing changes."""

from __future__ import annotations

from typing import Any

import pytest

from colibri.core.errors import ColibriError
from tests.helpers import claim_of
from tests.remote.conftest import TlsDaemon

#: Each report verb, as the second agent would send it (the claim's secret filled in).
VERBS: list[dict[str, Any]] = [
    {"cmd": "out", "output": "stolen", "from_session": True},
    {"cmd": "fail", "error": "stolen", "from_session": True},
    {"cmd": "ask", "question": "may I?"},
    {"cmd": "ready"},
    {"cmd": "requeue", "reason": "stolen"},
    {"cmd": "reclaimed"},
    {"cmd": "submit", "text": "a hand-off"},
]


@pytest.mark.parametrize("verb", VERBS, ids=[v["cmd"] for v in VERBS])
def test_another_agent_of_the_tenant_may_not_report_for_the_holders_task(
    tls_daemon: TlsDaemon, verb: dict[str, Any]
) -> None:
    holder_token = tls_daemon.token("agent", "acme", agent="holder")
    other_token = tls_daemon.token("agent", "acme", agent="other")
    with tls_daemon.connect(holder_token) as holder, tls_daemon.connect(other_token) as other:
        holder.call("register-agent", name="holder", capabilities=["x"])
        other.call("register-agent", name="other", capabilities=["y"])
        task = tls_daemon.submit("the holder's", tenant="acme", capabilities=["x"])
        assign = holder.read()
        assert assign["event"] == "assign" and assign["task"]["id"] == task["id"]
        epoch = assign["epoch"]
        claim = claim_of(tls_daemon, task["id"], epoch)
        request = dict(verb)
        cmd = request.pop("cmd")
        if cmd == "submit":
            request |= {"parent": task["id"], "claim": claim}
        else:
            request |= {"task": task["id"], "epoch": epoch}
            if cmd not in ("requeue", "reclaimed"):  # a harness's own: no claim, its connection
                request["claim"] = claim
        with pytest.raises(ColibriError) as caught:
            other.call(cmd, **request)
        assert caught.value.code == "not_your_task", caught.value
        assert "agent 'other'" in caught.value.message
        after = tls_daemon.task(task["id"])
        assert (after["state"], after["epoch"], after["question"]) == ("running", epoch, None)
        assert tls_daemon.call("list", parent=task["id"])["tasks"] == []
        # The holder's own token is taken, for the same verb.
        if cmd == "submit":
            child = holder.call(cmd, **request)["task"]
            assert child["parent"] == task["id"]
        elif cmd != "ask":  # (an ask waits for its answer)
            holder.call(cmd, **request)
