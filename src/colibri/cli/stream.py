"""What the swarm does, as it happens, one line per event: ``colibri attach`` and the demo
on a terminal without the TUI.

A follower subscribes, reads the ledger from a given position to catch up (the rows that
arrive as events meanwhile are not shown twice), then prints each event as it comes: a line
for people (coloured on a terminal, by rich), or the event itself as one JSON line.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from colibri.cli.output import print_json_line
from colibri.core import cursor
from colibri.core.cursor import Cursor
from colibri.core.errors import Unreached
from colibri.core.model import DEFAULT_TENANT
from colibri.core.protocol import LEDGER_END
from colibri.core.text import one_line, printable, short_id

if TYPE_CHECKING:
    from rich.console import Console
    from rich.text import Text

    from colibri.client import Client

STATE_STYLES = {
    "pending": "yellow",
    "running": "cyan",
    "done": "green",
    "failed": "bold red",
    "cancelled": "magenta",
    "closed": "dim",
}
#: Enough of a task's text to know it by, on one line.
TEXT_WIDTH = 72


def _clock(instant: str | None = None) -> str:
    if instant:
        from datetime import datetime

        when = datetime.fromisoformat(instant.replace("Z", "+00:00")).astimezone()
        return when.strftime("%H:%M:%S")
    return time.strftime("%H:%M:%S")


def _short(text: str) -> str:
    return one_line(text, TEXT_WIDTH)


def _transition(line: Text, from_state: str | None, to_state: str) -> None:
    line.append(f"{from_state or 'new':>9}", STATE_STYLES.get(from_state or "", "dim"))
    line.append(" → ")
    line.append(f"{to_state:<9}", STATE_STYLES.get(to_state, ""))


def render(message: dict[str, Any]) -> Text | None:
    """One event (or a catch-up ledger row, ``{"event": "ledger", "entry": …}``) as a line;
    None for those not worth one."""
    from rich.text import Text

    kind = message.get("event")
    line = Text(no_wrap=False)
    if kind == "task":
        task = message["task"]
        line.append(f"{_clock(task.get('updated_at'))} ", "dim")
        line.append(f"{short_id(task['id'])} ", "bold")
        _transition(line, message.get("from"), message["to"])
        if task.get("agent") and message["to"] == "running":
            line.append(f" on {printable(task['agent'])}", "cyan")
        line.append(f"  {_short(task['text'])}")
        reason = message.get("reason")
        if reason and reason not in ("submitted", "assigned", "out"):
            line.append(f"  ({_short(reason)})", "red" if message["to"] == "failed" else "dim")
        if message["to"] == "done" and task.get("output"):
            line.append(f"  ⇒ {_short(task['output'])}", "green")
        return line
    if kind == "ledger":
        entry = message["entry"]
        tenant = entry.get("tenant")
        where = entry["seq"] if tenant in (None, DEFAULT_TENANT) else f"{tenant}:{entry['seq']}"
        line.append(f"{_clock(entry.get('at'))} #{printable(str(where))} ", "dim")
        if entry.get("task"):
            line.append(f"{short_id(entry['task'])} ", "bold")
        else:
            line.append(f"schedule {printable(entry.get('schedule') or '-')} ", "blue")
        _transition(line, entry.get("from_state"), entry["to_state"])
        if entry.get("agent"):
            line.append(f" {printable(entry['agent'])}", "cyan")
        if entry.get("reason"):
            line.append(f"  {_short(entry['reason'])}", "dim")
        return line
    line.append(f"{_clock()} ", "dim")
    if kind == "agent":
        agent = message["agent"]
        caps = ", ".join(agent["capabilities"]) or "any task"
        line.append(f"agent {printable(agent['name'])} ", "bold")
        if agent["online"]:
            line.append("online", "green")
            line.append(f" ({printable(caps)}; {agent['slots']} slot" + "s" * (agent["slots"] != 1))
            if agent.get("ready"):  # (the event of a ready pool that changed size)
                line.append(f"; {agent['ready']} ready")
            line.append(")")
            if agent.get("breaker_open"):
                line.append(" breaker open", "bold red")
        else:
            line.append("offline", "red")
    elif kind == "swarm":
        line.append(
            "dispatch paused" if message["paused"] else "dispatch resumed",
            "bold yellow" if message["paused"] else "bold green",
        )
    elif kind == "schedule":
        line.append(f"schedule {printable(message['schedule'])} {message['what']}", "blue")
        if message.get("task"):
            line.append(f" task {short_id(message['task'])}")
    elif kind == "question":
        line.append(f"{short_id(message['task'])} asks: ", "bold magenta")
        line.append(_short(message["question"]))
        line.append(f"  (colibri answer {message['task']} TEXT)", "dim")
    elif kind in ("answered", "question_withdrawn"):
        line.append(f"{short_id(message['task'])} {kind.replace('_', ' ')}", "magenta")
    elif kind in ("warning", "unhealthy", "budget", "harness"):
        who = message.get("workspace") or message.get("agent") or ""
        line.append(f"{kind} {printable(who)}: {_short(message['reason'])}", "yellow")
    elif kind == "message":
        line.append(f"message to {printable(message['to'])}: {_short(message['text'])}")
    else:
        return None
    return line


def _key(message: dict[str, Any]) -> tuple[Any, ...] | None:
    """What one task transition is, the same for its ledger row and its ``task`` event."""
    if message.get("event") == "ledger":
        e = message["entry"]
        if e.get("task") is None:
            return None  # a schedule's row: no task event stands for it
        return (e["task"], e.get("from_state"), e["to_state"], e.get("epoch"))
    if message.get("event") == "task":
        t = message["task"]
        return (t["id"], message.get("from"), message["to"], t.get("epoch"))
    return None


def _request(client: Client, buffered: list[dict[str, Any]], cmd: str, **fields: Any) -> Any:
    """A request on a subscribed connection: the events read before its reply are kept."""
    from colibri.core.errors import from_wire

    request_id = client.send(cmd, **fields)
    while True:
        message = client.read()
        if "event" in message:
            buffered.append(message)
        elif message.get("id") == request_id:
            if not message.get("ok"):
                raise from_wire(message.get("error"))
            return message


#: How many transitions a follower remembers having shown, to show none twice when it catches
#: up after a takeover (past it the oldest are forgotten: at worst an old one shown again).
SHOWN_KEPT = 100_000


@dataclass
class Seen:
    """Where a follower is, so that it goes on from there on another connection (after a
    takeover): ``after``, a ledger position every row up to which has been shown or was there
    before it started (None: nowhere yet; ``colibri.core.cursor``), and the transitions shown
    since."""

    after: Cursor | None = None
    shown: dict[tuple[Any, ...], None] = field(default_factory=dict)

    def show(self, key: tuple[Any, ...] | None) -> None:
        if key is None:
            return
        self.shown[key] = None
        if len(self.shown) > SHOWN_KEPT:
            del self.shown[next(iter(self.shown))]


class Printer:
    """Where the lines go: JSON lines, or rich's console (colour only on a terminal)."""

    def __init__(self, as_json: bool) -> None:
        self.as_json = as_json
        self.console: Console | None = None
        if not as_json:
            from rich.console import Console

            self.console = Console(highlight=False, soft_wrap=True)

    def __call__(self, message: dict[str, Any]) -> None:
        if self.console is None:
            print_json_line(message)
        elif (line := render(message)) is not None:
            self.console.print(line)

    def say(self, text: str) -> None:
        if self.console is None:
            import sys

            print(text, file=sys.stderr, flush=True)
        else:
            self.console.print(text, style="bold", markup=False)


def follow(
    client: Client,
    printer: Printer,
    *,
    since: str | None = None,
    stop: Callable[[dict[str, Any]], bool] | None = None,
    subscribed: Callable[[], None] | None = None,
    subscribe: bool = True,
    seen: Seen | None = None,
    messages: bool = True,
) -> bool:
    """Subscribe, catch up from ledger position ``since`` (rows after it), then print every
    event until the daemon closes the connection (False) or ``stop`` says so (True).
    ``subscribed`` is called once nothing more can be missed. ``seen`` is kept up to date
    (and what it says was shown is not shown again), for a follow that goes on elsewhere.

    Over TCP a token may not subscribe (``subscribe`` False): the ledger is followed instead
    (the tasks' transitions and the schedules' skipped fires, as ledger rows). ``messages``
    False: the board's events only, taking no part in the bus (``subscribe``'s field)."""
    seen = seen if seen is not None else Seen()
    if not subscribe:
        return _follow_the_ledger(client, printer, since, stop, seen, subscribed)
    buffered: list[dict[str, Any]] = []
    # The field only when it says something: a daemon older than it refuses it.
    events_only = {} if messages else {"messages": False}
    _request(client, buffered, "subscribe", name="attach", **events_only)
    if subscribed is not None:
        subscribed()
    if since is not None:
        after, more = since, True
        while more:
            reply = _request(client, buffered, "ledger", after=after, limit=1000)
            for entry in reply["entries"]:
                message = {"event": "ledger", "entry": entry}
                if (key := _key(message)) not in seen.shown:
                    seen.show(key)
                    printer(message)
            after, more = reply["next"], bool(reply.get("more"))

    def new(message: dict[str, Any]) -> bool:
        key = _key(message)
        if key in seen.shown:
            return False
        seen.show(key)
        return True

    return _until_the_end(client, printer, buffered, stop, new)


def _follow_the_ledger(
    client: Client,
    printer: Printer,
    since: str | None,
    stop: Callable[[dict[str, Any]], bool] | None,
    seen: Seen,
    subscribed: Callable[[], None] | None,
) -> bool:
    buffered: list[dict[str, Any]] = []
    after = LEDGER_END if since is None else since
    reply = _request(client, buffered, "ledger", after=after, limit=1000, follow=True)
    if subscribed is not None:
        subscribed()  # every row from here on comes pushed
    while True:
        for entry in reply["entries"]:
            printer({"event": "ledger", "entry": entry})
        after = reply["next"]
        seen.after = cursor.parse(after)
        if not reply.get("more"):
            break
        reply = _request(client, buffered, "ledger", after=after, limit=1000)
    position = seen.after

    # Rows of the pages' batches come pushed too: only those past the last page are new.
    def new(message: dict[str, Any]) -> bool:
        entry = message.get("entry")
        if entry is None or entry["seq"] <= position.get(entry["tenant"], 0):
            return False
        position[entry["tenant"]] = entry["seq"]
        return True

    return _until_the_end(client, printer, buffered, stop, new)


def _until_the_end(
    client: Client,
    printer: Printer,
    buffered: list[dict[str, Any]],
    stop: Callable[[dict[str, Any]], bool] | None,
    new: Callable[[dict[str, Any]], bool],
) -> bool:
    try:
        for message in itertools.chain(buffered, client.events()):
            if new(message):
                printer(message)
            if stop is not None and stop(message):
                return True
    except (Unreached, OSError):
        return False
    return False
