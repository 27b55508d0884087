"""The event bus: priorities, the chain for header-carrying messages, broadcast for others."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from colibri.client import Client
from colibri.core.errors import ColibriError
from colibri.core.lineage import Body, build_body
from tests.helpers import Daemon

HEADED = build_body(Body(task="t-1", text="please pick this up", workspace="web"))


def subscriber(daemon: Daemon, priority: int, name: str, workspace: str | None = "web") -> Client:
    client = daemon.client()
    client.call("subscribe", priority=priority, name=name, workspace=workspace)
    return client


def next_message(client: Client) -> dict[str, Any]:
    for event in client.events():
        if event["event"] == "message":
            return event
    raise AssertionError("no message")


def send_async(daemon: Daemon, text: str) -> tuple[threading.Thread, dict[str, Any]]:
    result: dict[str, Any] = {}

    def run() -> None:
        result.update(daemon.call("send", to="web", text=text))

    thread = threading.Thread(target=run)
    thread.start()
    return thread, result


def test_a_chained_message_stops_at_the_first_subscriber_that_consumes_it(daemon: Daemon) -> None:
    low = subscriber(daemon, 1, "low")
    high = subscriber(daemon, 10, "high")
    mid = subscriber(daemon, 5, "mid")
    thread, result = send_async(daemon, HEADED)
    first = next_message(high)
    assert first["chained"] is True and first["text"] == HEADED
    high.call("consumed", message=first["message"], consumed=False)
    second = next_message(mid)
    assert second["message"] == first["message"]
    mid.call("consumed", message=second["message"])
    thread.join(10)
    assert result["consumed_by"] == "mid"
    assert result["delivered"] == ["high", "mid"]
    # low never saw it
    low._sock.settimeout(0.5)
    with pytest.raises(TimeoutError):
        low.read()
    for c in (low, high, mid):
        c.close()


def test_a_silent_subscriber_is_passed_over_after_the_wait(daemon: Daemon) -> None:
    silent = subscriber(daemon, 10, "silent")
    second = subscriber(daemon, 1, "second")
    thread, result = send_async(daemon, HEADED)
    assert next_message(silent)["chained"]
    got = next_message(second)  # after CHAIN_WAIT, without the first answering
    second.call("consumed", message=got["message"])
    thread.join(15)
    assert result["consumed_by"] == "second"
    silent.close()
    second.close()


def test_plain_messages_are_broadcast_and_other_workspaces_do_not_hear(daemon: Daemon) -> None:
    web = subscriber(daemon, 3, "web-sub")
    everything = subscriber(daemon, 0, "all", workspace=None)
    api = subscriber(daemon, 9, "api-sub", workspace="api")
    reply = daemon.call("send", to="web", text="deploy is frozen until noon")
    assert sorted(reply["delivered"]) == ["all", "web-sub"] and reply["consumed_by"] is None
    assert next_message(web)["chained"] is False
    assert next_message(everything)["text"] == "deploy is frozen until noon"
    api._sock.settimeout(0.5)
    with pytest.raises(TimeoutError):
        while True:
            if api.read().get("event") == "message":
                raise AssertionError("api heard a message for web")
    for c in (web, everything, api):
        c.close()


def test_a_subscriber_of_events_only_is_neither_told_nor_chained_a_message(
    daemon: Daemon,
) -> None:
    """``messages: false`` (the foreground ``colibri run`` watching its board): the events,
    none of the bus, whatever its priority."""
    watcher = daemon.client()
    watcher.call("subscribe", priority=100, name="watcher", messages=False)
    web = subscriber(daemon, 1, "web-sub")
    assert daemon.call("send", to="web", text="plain")["delivered"] == ["web-sub"]
    assert next_message(web)["text"] == "plain"
    thread, result = send_async(daemon, HEADED)
    web.call("consumed", message=next_message(web)["message"])
    thread.join(10)
    assert (result["delivered"], result["consumed_by"]) == (["web-sub"], "web-sub")
    task = daemon.call("submit", text="seen", capabilities=["nothing-has-this"])["task"]
    for event in watcher.events():
        assert event["event"] != "message"
        if event["event"] == "task" and event["task"]["id"] == task["id"]:
            break
    for c in (watcher, web):
        c.close()


def test_consumed_for_a_message_not_waiting_on_you_is_refused(daemon: Daemon) -> None:
    with daemon.client() as client, pytest.raises(ColibriError) as err:
        client.call("consumed", message=12345)
    assert err.value.code == "bad_request"


def test_task_events_reach_higher_priorities_first(daemon: Daemon) -> None:
    order: list[str] = []
    low = subscriber(daemon, -5, "low", None)
    high = subscriber(daemon, 50, "high", None)
    daemon.call("submit", text="watched")
    seqs = {}
    for name, client in (("low", low), ("high", high)):
        for event in client.events():
            if event["event"] == "task":
                seqs[name] = event["seq"]
                order.append(name)
                break
    assert seqs["high"] < seqs["low"]
    low.close()
    high.close()
