"""What the pages show, as plain values for the templates: a task's column on the board, its
state as a word, the counts of the header, a schedule's times in its own zone. No HTML here
(the templates make it, escaped), and nothing of Starlette."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import msgspec

from colibri.core.model import Agent, HarnessStatus, Task
from colibri.core.schedules import Schedule
from colibri.core.text import printable
from colibri.tui.board import Board, Filter, age

#: The board's columns, left to right.
COLUMNS = ("pending", "blocked", "running", "asking", "done", "failed", "cancelled")
#: The cards a column shows (the newest): the rest are a click away, in the list.
CARDS = 50
#: Rows of a page of the list.
ROWS = 200


def column_of(task: Task, held: bool) -> str:
    """Where a task sits on the board: ``blocked`` while it waits for others, ``asking``
    while its session waits for an answer, a closed one by its outcome."""
    if held:
        return "blocked"
    if task.question is not None and task.state == "running":
        return "asking"
    if task.state == "closed":
        return task.outcome or "cancelled"
    return task.state


def state_word(task: Task, held: bool = False) -> str:
    """As the TUI says it: an ended task whose session is not yet gone has a trailing ``…``,
    a task of several attempts says which one."""
    word = column_of(task, held)
    if task.state in ("done", "failed", "cancelled"):
        word += "…"
    if task.max_attempts > 1:
        word += f" {task.attempts}/{task.max_attempts}"
    return word


def cost_of(task: Task) -> str:
    if task.cost is None or not task.cost.usd:
        return ""
    return f"${task.cost.usd:.4f}"


def when_of(schedule: Schedule) -> str:
    if schedule.kind == "cron":
        zone = f" ({schedule.tz})" if schedule.tz else ""
        return f"cron {schedule.cron}{zone}"
    if schedule.kind == "interval":
        return f"every {schedule.every:g}s"
    return "once"


@dataclass(frozen=True)
class Card:
    """A task as a card of the board or a row of the list."""

    task: Task
    column: str
    state: str
    age: str
    cost: str


def card(board: Board, task: Task, now: datetime) -> Card:
    held = board.held(task)
    return Card(task, column_of(task, held), state_word(task, held), age(task.created_at, now),
                cost_of(task))  # fmt: skip


def columns(board: Board, now: datetime, spec: Filter) -> dict[str, tuple[int, list[Card]]]:
    """Each column's count and its newest ``CARDS`` cards."""
    shown: dict[str, tuple[int, list[Card]]] = {c: (0, []) for c in COLUMNS}
    counts = dict.fromkeys(COLUMNS, 0)
    cards: dict[str, list[Card]] = {c: [] for c in COLUMNS}
    for task in board.shown(spec):
        column = column_of(task, board.held(task))
        counts[column] = counts.get(column, 0) + 1
        if len(cards.setdefault(column, [])) < CARDS:
            cards[column].append(card(board, task, now))
    for column in COLUMNS:
        shown[column] = (counts[column], cards[column])
    return shown


def header(board: Board, now: datetime) -> dict[str, Any]:
    """The counts of the header: what is open, what ended today (UTC) and what it cost."""
    return board.counts(now)


@dataclass(frozen=True)
class AgentRow:
    name: str
    state: str
    workspace: str
    slots: str
    sessions: list[str]
    #: Warm sessions waiting in its ready pool (as its last heartbeat said).
    ready: str
    breaker: str
    #: Its harness: process, restarts, sessions not ready in time.
    harness: str
    #: The harness's last failure in its own words, and when.
    failure: str
    capabilities: str


@dataclass(frozen=True)
class WorkspaceRow:
    """A workspace (or an agent of none) summed up: its agents online of those known, slots
    busy of those online, sessions running, warm sessions ready, its harness's state."""

    name: str
    agents: str
    slots: str
    sessions: int
    ready: int
    harness: str


def agent_rows(board: Board) -> list[AgentRow]:
    """The agents, then the workspaces whose harness has no agent registered (its last
    failure in its own words)."""
    rows = []
    seen = set()
    for agent in sorted(board.agents.values(), key=lambda a: a.name):
        rows.append(_agent_row(agent, board))
        seen.add(agent.workspace or agent.name)
    for harness in board.harnesses:
        if harness.workspace not in seen:
            rows.append(_harness_row(harness))
    return rows


def workspace_rows(board: Board) -> list[WorkspaceRow]:
    by: dict[str, list[Agent]] = {}
    for agent in board.agents.values():
        by.setdefault(agent.workspace or agent.name, []).append(agent)
    harnesses = {h.workspace: h for h in board.harnesses}
    rows = []
    for name in sorted(set(by) | set(harnesses)):
        agents = by.get(name, [])
        online = [a for a in agents if a.online]
        harness = harnesses.get(name)
        rows.append(WorkspaceRow(
            name, f"{len(online)}/{len(agents)}",
            f"{sum(len(a.running) for a in online)}/{sum(a.slots for a in online)}",
            sum(len(a.running) for a in agents), sum(a.ready for a in agents),
            _harness_state(harness) if harness is not None else "-",
        ))  # fmt: skip
    return rows


def _harness_state(harness: HarnessStatus) -> str:
    """``describe`` without the last failure (shown on its own)."""
    return msgspec.structs.replace(harness, last_failure=None).describe()


def _failure(harness: HarnessStatus) -> str:
    if not harness.last_failure:
        return "-"
    at = f" (at {harness.last_failure_at})" if harness.last_failure_at else ""
    return harness.last_failure + at


def _agent_row(agent: Agent, board: Board) -> AgentRow:
    harness, failure = "-", "-"
    for entry in board.harnesses:
        if entry.workspace == (agent.workspace or agent.name):
            harness, failure = _harness_state(entry), _failure(entry)
    if warnings := board.warnings.get(agent.workspace or agent.name):
        harness += f", {warnings} not ready in time"
    state = "online" if agent.online else "offline"
    if agent.breaker_open:
        state = "breaker open"
    slots = f"{len(agent.running)}/{agent.slots}"
    return AgentRow(agent.name, state, agent.workspace or "-", slots, list(agent.running),
                    str(agent.ready), "open" if agent.breaker_open else "closed", harness, failure,
                    ", ".join(agent.capabilities) or "-")  # fmt: skip


def _harness_row(harness: HarnessStatus) -> AgentRow:
    return AgentRow(harness.workspace, "no agent", harness.workspace, "-", [], "-", "-",
                    _harness_state(harness), _failure(harness), "-")  # fmt: skip


def text(value: object) -> str:
    """Anything shown: made printable (controls and bidi overrides written as visible
    escapes, newlines kept); the templates escape it for HTML after."""
    return "" if value is None else printable(str(value), newlines=True)
