"""An operator token sees its own tenant only: another tenant's tasks do not exist for it."""

from __future__ import annotations

from typing import Any

import pytest

from colibri.core import cursor
from colibri.core.errors import ColibriError, UnknownTask
from tests.remote.conftest import TlsDaemon


@pytest.fixture
def two_tenants(tls_daemon: TlsDaemon) -> tuple[dict[str, Any], dict[str, Any]]:
    """A task of tenant acme (a parent with a question-free child) and one of beta."""
    acme = tls_daemon.submit("acme's secret plans", tenant="acme", capabilities=["x"])
    beta = tls_daemon.submit("beta's task", tenant="beta", capabilities=["x"])
    tls_daemon.call("schedule-add", name="acme-nightly",
                    schedule={"every": 3600, "task": {"text": "a",
                              "tenant": "acme"}})  # fmt: skip
    tls_daemon.call("schedule-add", name="beta-nightly",
                    schedule={"every": 3600, "task": {"text": "b",
                              "tenant": "beta"}})  # fmt: skip
    return acme, beta


@pytest.mark.parametrize(
    "request_",
    [
        {"cmd": "get"}, {"cmd": "why"}, {"cmd": "family"}, {"cmd": "wait"},
        {"cmd": "cancel"}, {"cmd": "retry"}, {"cmd": "answer", "text": "hi"},
        {"cmd": "ledger"},
    ],
)  # fmt: skip
def test_another_tenants_task_is_unknown_task(
    tls_daemon: TlsDaemon, two_tenants: tuple[dict[str, Any], dict[str, Any]],
    request_: dict[str, Any],
) -> None:  # fmt: skip
    acme, _ = two_tenants
    with tls_daemon.connect(tls_daemon.token("operator", "beta")) as client:
        cmd = request_.pop("cmd")
        with pytest.raises(ColibriError) as caught:
            client.call(cmd, task=acme["id"], **request_)
        assert caught.value.code == "unknown_task"
        # Word for word what a task that does not exist gets: nothing to probe with.
        assert caught.value.message == UnknownTask(acme["id"]).message
        assert client.call("ping")["pong"]  # a miss is not a refusal: the connection stays
    assert tls_daemon.task(acme["id"])["state"] == "pending"  # nothing was cancelled


@pytest.mark.parametrize("cmd", ["get", "why", "cancel", "ledger"])
def test_the_start_or_end_of_an_id_names_only_the_tokens_own_tenants_tasks(
    tls_daemon: TlsDaemon, two_tenants: tuple[dict[str, Any], dict[str, Any]], cmd: str
) -> None:
    """Another tenant's task counts neither as a match nor towards an ambiguity: a prefix or
    a suffix cannot be used to learn that it exists."""
    acme, beta = two_tenants
    common = next(n for n in range(36, 0, -1) if acme["id"][:n] == beta["id"][:n])
    shared, acme_only = acme["id"][:common], acme["id"][: common + 1]
    with tls_daemon.connect(tls_daemon.token("operator", "beta")) as client:
        # The prefix both ids start with names beta's task alone, for beta's token.
        if cmd == "get":
            assert client.call("get", task=shared)["task"]["id"] == beta["id"]
        if cmd == "get":
            assert client.call("get", task=beta["id"][-8:])["task"]["id"] == beta["id"]
        for part in (acme_only, acme["id"][-8:]):
            with pytest.raises(ColibriError) as caught:
                client.call(cmd, task=part)
            assert caught.value.code == "unknown_task"
            assert caught.value.message == UnknownTask(part).message
    # The owner sees both: the shared prefix is ambiguous to it.
    with pytest.raises(ColibriError) as caught:
        tls_daemon.call("get", task=shared)
    assert caught.value.code == "ambiguous_task"
    assert tls_daemon.task(acme["id"])["state"] == "pending"


def test_a_token_lists_counts_and_follows_its_own_tenant_only(
    tls_daemon: TlsDaemon, two_tenants: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    acme, beta = two_tenants
    with tls_daemon.connect(tls_daemon.token("operator", "beta")) as client:
        assert [t["id"] for t in client.call("list")["tasks"]] == [beta["id"]]
        with tls_daemon.connect(tls_daemon.token("operator", "beta")) as other:
            with pytest.raises(ColibriError, match="'beta' only"):
                other.call("list", tenant="acme")
        entries = client.call("ledger", limit=1000)["entries"]
        assert entries and {e["tenant"] for e in entries} == {"beta"}
        assert [s["name"] for s in client.call("schedule-list")["schedules"]] == ["beta-nightly"]
        with pytest.raises(ColibriError) as caught:
            client.call("schedule-get", name="acme-nightly")
        assert caught.value.code == "unknown_schedule"
        status = client.call("status")
        assert "tasks" not in status and status["you"]["tenant"] == "beta"
        mine = client.call("submit", text="no tenant given")["task"]
        assert mine["tenant"] == "beta"
        with pytest.raises(ColibriError) as caught:
            client.call("submit", text="adopt", parent=acme["id"])
        assert caught.value.code == "unknown_parent"


def test_a_ledger_follower_hears_only_its_tenants_rows(
    tls_daemon: TlsDaemon, two_tenants: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    acme, beta = two_tenants
    follower = tls_daemon.connect(tls_daemon.token("operator", "beta"), timeout=10)
    try:
        at = tls_daemon.call("status")["ledger_at"]
        assert set(cursor.parse(at)) == {"acme", "beta"}
        start = follower.call("ledger", follow=True, after=at)
        # Where it stands is told of its own tenant only: nothing of how far acme's runs.
        assert start["entries"] == [] and start["next"] == f"beta:{cursor.parse(at)['beta']}"
        tls_daemon.call("cancel", task=acme["id"])
        tls_daemon.call("cancel", task=beta["id"])
        pushed = next(follower.events())
        assert pushed["entry"]["task"] == beta["id"] and pushed["entry"]["tenant"] == "beta"
    finally:
        follower.close()


def test_agents_and_costs_of_other_tenants_are_not_shown(tls_daemon: TlsDaemon) -> None:
    from tests.helpers import FakeAgent

    acme_agent = FakeAgent(tls_daemon, "acme-worker", ["x"], tenant="acme")
    task = tls_daemon.submit("paid work", tenant="acme", capabilities=["x"])
    assign = acme_agent.next_event("assign")
    acme_agent.client.call("out", task=task["id"], epoch=assign["epoch"], output="ok",
                           cost={"usd": 1.5})  # fmt: skip
    tls_daemon.wait_closed(task["id"])
    with tls_daemon.connect(tls_daemon.token("operator", "beta")) as beta:
        assert beta.call("agents")["agents"] == []
        assert beta.call("cost", by="tenant")["totals"] == []
    with tls_daemon.connect(tls_daemon.token("operator", "acme")) as acme:
        assert [a["name"] for a in acme.call("agents")["agents"]] == ["acme-worker"]
        (row,) = acme.call("cost", by="agent")["totals"]
        assert (row["key"], row["usd"]) == ("acme-worker", 1.5)
    acme_agent.client.close()


@pytest.mark.parametrize(
    "request_",
    [
        {"cmd": "out", "epoch": 1, "output": "x", "from_session": True, "claim": "c" * 43},
        {"cmd": "fail", "epoch": 1, "error": "x"},
        {"cmd": "ask", "epoch": 1, "question": "?", "claim": "c" * 43},
        {"cmd": "ready", "epoch": 1, "claim": "c" * 43},
        {"cmd": "requeue", "epoch": 1},
        {"cmd": "reclaimed", "epoch": 1},
    ],
)  # fmt: skip
def test_another_tenants_task_is_unknown_to_an_agents_reports(
    tls_daemon: TlsDaemon, two_tenants: tuple[dict[str, Any], dict[str, Any]],
    request_: dict[str, Any],
) -> None:  # fmt: skip
    acme, _ = two_tenants
    token = tls_daemon.token("agent", "beta", agent="prober")
    with tls_daemon.connect(token) as client:
        client.call("register-agent", name="prober")
        cmd = request_.pop("cmd")
        with pytest.raises(ColibriError) as caught:
            client.call(cmd, task=acme["id"], **request_)
        assert caught.value.code == "unknown_task"


def test_a_child_is_of_its_parents_tenant(tls_daemon: TlsDaemon) -> None:
    parent = tls_daemon.submit("acme's parent", tenant="acme", capabilities=["x"])
    child = tls_daemon.submit("no tenant given", parent=parent["id"], capabilities=["x"])
    assert child["tenant"] == "acme"
    with pytest.raises(ColibriError, match="its children are too"):
        tls_daemon.submit("elsewhere", parent=parent["id"], tenant="beta")


def test_skills_are_the_owners(tls_daemon: TlsDaemon) -> None:
    from tests.remote.test_refusals import refused

    error = refused(tls_daemon, tls_daemon.token("operator", "beta"), {"cmd": "skills"})
    assert error["code"] == "forbidden"


def test_a_tokens_submit_all_is_its_tenants_whole_or_nothing(
    tls_daemon: TlsDaemon, two_tenants: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    """Each submission of a ``submit-all`` is checked as a ``submit`` of the token would be:
    in its own tenant, another tenant's parent unknown; one refused, none taken."""
    acme, beta = two_tenants
    before = tls_daemon.call("status")["ledger_at"]
    with tls_daemon.connect(tls_daemon.token("operator", "beta")) as client:
        with pytest.raises(ColibriError) as caught:
            client.call("submit-all", tasks=[{"text": "mine"}, {"text": "x", "parent": acme["id"]}])
        assert (caught.value.code, caught.value.index) == ("unknown_parent", 1)
        assert tls_daemon.call("status")["ledger_at"] == before
        made = client.call(
            "submit-all", tasks=[{"text": "mine"}, {"text": "y", "parent": beta["id"]}]
        )
    assert [t["task"]["tenant"] for t in made["tasks"]] == ["beta", "beta"]


def test_a_token_cannot_wait_for_another_tenants_task(
    tls_daemon: TlsDaemon, two_tenants: tuple[dict[str, Any], dict[str, Any]]
) -> None:
    """``after`` names tasks as every request does: another tenant's, by its whole id or the
    end of it, is a task that does not exist, word for word; nothing is stored."""
    acme, beta = two_tenants
    before = cursor.parse(tls_daemon.call("status")["ledger_at"])
    with tls_daemon.connect(tls_daemon.token("operator", "beta")) as client:
        for named in (acme["id"], acme["id"][-8:]):
            with pytest.raises(ColibriError) as caught:
                client.call("submit", text="after acme's", after=[named])
            assert caught.value.code == "unknown_task"
            assert caught.value.message == UnknownTask(named).message
            with pytest.raises(ColibriError) as caught:
                client.call("submit-all", tasks=[{"text": "mine"},
                                                 {"text": "after acme's", "after": [named]}])
            assert caught.value.code == "unknown_task" and caught.value.index == 1
        mine = client.call("submit", text="after my own", after=[beta["id"]])["task"]
        assert mine["after"] == [beta["id"]] and mine["tenant"] == "beta"
    # One row, beta's: numbered after beta's last, and acme's ledger untouched.
    after = cursor.parse(tls_daemon.call("status")["ledger_at"])
    assert after == {**before, "beta": before["beta"] + 1}
