"""Every event the daemon sends reads back as its class of the one union in core/events.py,
and the protocol document names every one of them."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from colibri.core import events
from tests.daemon.conftest import Spawn
from tests.helpers import Daemon


def strictly(raw: dict[str, object]) -> events.AnyEvent:
    """``raw`` as its event class; a field the daemon sent that the class lacks fails."""
    event = events.convert(raw)
    back = msgspec.to_builtins(event)
    assert set(raw) == set(back), f"{raw['event']}: fields {set(raw) ^ set(back)} differ"
    return event


def test_the_events_of_a_busy_minute_all_read_back_as_their_class(
    daemon: Daemon, spawn: Spawn
) -> None:
    seen: dict[str, events.AnyEvent] = {}
    with daemon.client() as watcher:
        watcher.call("subscribe", name="watcher")
        agent = spawn(daemon, "a1", ["x"])
        task = daemon.call("submit", text="t", capabilities=["x"])["task"]
        assign = agent.next_assign()
        seen["assign"] = strictly(assign)
        agent.out(assign)
        daemon.call("toggle-swarm", paused=True)
        daemon.call("toggle-swarm", paused=False)
        second = daemon.call("submit", text="to cancel", capabilities=["x"])["task"]
        strictly(agent.next_assign())
        daemon.call("cancel", task=second["id"])
        seen["cancel"] = strictly(agent.next_event("cancel"))
        daemon.call("schedule-add", name="s", schedule={"every": "1h", "task": {"text": "s"}})
        daemon.call("schedule-run", name="s")
        daemon.call("send", to="anywhere", text="hello")
        for raw in watcher.events():
            event = strictly(raw)
            seen.setdefault(str(raw["event"]), event)
            if isinstance(event, events.MessageSent):
                break
    assert {"assign", "cancel", "task", "agent", "swarm", "schedule", "message"} <= set(seen)
    changed = seen["task"]
    assert isinstance(changed, events.TaskChanged) and changed.task.id == task["id"]
    assert isinstance(seen["swarm"], events.SwarmToggled)
    fired = seen["schedule"]
    assert isinstance(fired, events.ScheduleNoted) and fired.what == "fired" and fired.task


def test_a_line_that_is_no_event_is_refused() -> None:
    with pytest.raises(msgspec.ValidationError):
        events.decode(b'{"event":"assign","epoch":1}')  # no claim, no task
    with pytest.raises(msgspec.ValidationError):
        events.decode(b'{"event":"nonsense"}')
    assert isinstance(events.decode(b'{"event":"dropped","seq":3,"reason":"slow"}'),
                      events.Dropped)  # fmt: skip


def test_the_protocol_document_names_every_event() -> None:
    text = (Path(__file__).parents[2] / "docs" / "PROTOCOL.md").read_text()
    missing = [name for name in events.NAMES if f'"event":"{name}"' not in text.replace(" ", "")
               and f"`{name}`" not in text]  # fmt: skip
    assert not missing, f"docs/PROTOCOL.md does not describe: {missing}"


def test_the_typed_client_gives_tasks_and_events_as_their_classes(
    daemon: Daemon, spawn: Spawn
) -> None:
    import asyncio

    from colibri.client import AsyncClient, Client
    from colibri.core.model import Task

    with Client.for_root(daemon.root, timeout=10) as board:
        task = board.submit("typed", capabilities=["y"], priority=3)
        assert isinstance(task, Task) and task.priority == 3 and task.state == "pending"
        assert board.get(task.id) == task
        board.call("subscribe")
        board.call("cancel", task=task.id)
        changed = next(e for e in board.typed_events() if isinstance(e, events.TaskChanged))
        assert (changed.from_state, changed.to_state, changed.task.id) == (
            "pending", "cancelled", task.id)  # fmt: skip

    async def watch() -> list[events.AnyEvent]:
        client = await AsyncClient(daemon.socket).connect()
        try:
            await client.call("subscribe")
            await asyncio.to_thread(daemon.call, "toggle-swarm", paused=True)
            seen = []
            async for event in client.events():
                seen.append(event)
                if isinstance(event, events.SwarmToggled):
                    return seen
            return seen
        finally:
            await client.close()

    seen = asyncio.run(asyncio.wait_for(watch(), 10))
    assert isinstance(seen[-1], events.SwarmToggled) and seen[-1].paused is True
    assert all(event.seq > 0 for event in seen)
