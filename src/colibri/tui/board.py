"""What the TUI knows of the board: filled once by ``list``, ``status``, ``agents`` and
``schedule-list``, then kept current by the daemon's events (and the agents read again when a
task's event says a session came or went: ``moves_a_session``). No Textual here: the screens
read it, and a filter is applied to it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any
from zoneinfo import ZoneInfo

import msgspec

from colibri.core import events
from colibri.core.model import Agent, HarnessStatus, Task
from colibri.core.replies import Status
from colibri.core.schedules import Schedule

OPEN_STATES = frozenset({"pending", "running"})

FILTER_KEYS = {
    "state": "state",
    "outcome": "outcome",
    "ws": "workspace",
    "workspace": "workspace",
    "agent": "agent",
    "cap": "capability",
}


@dataclass(frozen=True)
class Filter:
    """``state:running outcome:failed ws:web agent:bsd-1 cap:zfs`` and free words, all of which
    must match (the words anywhere in the text or id, case-insensitive)."""

    state: str | None = None
    outcome: str | None = None
    workspace: str | None = None
    agent: str | None = None
    capability: str | None = None
    words: tuple[str, ...] = ()

    @classmethod
    def parse(cls, spec: str) -> Filter:
        fields: dict[str, Any] = {}
        words: list[str] = []
        for token in spec.split():
            key, sep, value = token.partition(":")
            if sep and key.lower() in FILTER_KEYS and value:
                fields[FILTER_KEYS[key.lower()]] = value.lower()
            else:
                words.append(token.lower())
        return cls(**fields, words=tuple(words))

    def __bool__(self) -> bool:
        return self != Filter()

    def matches(self, task: Task) -> bool:
        if self.state is not None and task.state != self.state:
            return False
        if self.outcome is not None and task.outcome != self.outcome:
            return False
        if self.workspace is not None and (task.workspace or "").lower() != self.workspace:
            return False
        if self.agent is not None and (task.agent or "").lower() != self.agent:
            return False
        if self.capability is not None and self.capability not in task.capabilities:
            return False
        if self.words:
            haystack = f"{task.id} {task.text}".lower()
            return all(word in haystack for word in self.words)
        return True


def moves_a_session(from_state: str | None, to_state: str, agent: str | None) -> bool:
    """Whether a task's change (its event, or its ledger row) takes a session on or off its
    agent: assigned (``running``), its session gone (``closed``), or back to ``pending`` (a
    retry, a requeue). The agent's slots, sessions and ready pool change then, and no event
    of the agent says so."""
    if agent is None:
        return False
    return to_state in ("running", "closed") or (from_state == "running" and to_state == "pending")


def in_zone(instant: str | None, zone: str | None) -> str:
    """An instant as a wall clock of the schedule's own time zone."""
    when = parse_instant(instant)
    if when is None:
        return "-"
    try:
        when = when.astimezone(ZoneInfo(zone or "UTC"))
    except (KeyError, ValueError):
        pass
    return when.strftime("%Y-%m-%d %H:%M:%S %Z")


def parse_instant(text: str | None) -> datetime | None:
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def age(text: str | None, now: datetime) -> str:
    """How long ago, shortly: ``4s``, ``12m``, ``3h``, ``2d``."""
    instant = parse_instant(text)
    if instant is None:
        return "-"
    seconds = max(0, int((now - instant).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"


@dataclass
class Board:
    tasks: dict[str, Task] = field(default_factory=dict)
    agents: dict[str, Agent] = field(default_factory=dict)
    schedules: dict[str, Schedule] = field(default_factory=dict)
    #: What ``status`` says of the workspaces' harnesses, and of the sessions not ready by
    #: workspace (a token is told neither).
    harnesses: list[HarnessStatus] = field(default_factory=list)
    warnings: dict[str, int] = field(default_factory=dict)
    paused: bool = False
    #: The last notes worth a line (schedule fires, warnings, budgets), newest last.
    notes: list[str] = field(default_factory=list)

    def load(
        self,
        tasks: Iterable[Task],
        status: Status,
        agents: Iterable[Agent],
        schedules: Iterable[Schedule],
    ) -> None:
        """Start again from what the daemon answered (after a connect, or a reconnect)."""
        self.tasks = {t.id: t for t in tasks}
        self.agents = {a.name: a for a in agents}
        self.schedules = {s.name: s for s in schedules}
        self.take_status(status)

    def take_status(self, status: Status) -> None:
        self.harnesses = status.harnesses or []
        self.warnings = status.warnings or {}
        self.paused = status.paused

    def apply(self, event: events.AnyEvent) -> bool:
        """Take one event in; whether the tasks shown may have changed."""
        if isinstance(event, events.TaskChanged):
            self.put(event.task)
            return True
        if isinstance(event, events.AgentChanged):
            self.agents[event.agent.name] = event.agent
        elif isinstance(event, events.SwarmToggled):
            self.paused = event.paused
        elif isinstance(event, events.QuestionAsked):
            return self._set_question(event.task, event.question)
        elif isinstance(event, (events.Answered, events.QuestionWithdrawn)):
            return self._set_question(event.task, None)
        elif isinstance(event, events.BreakerOpened):  # (its closing is an ``agent`` event)
            if (agent := self.agents.get(event.agent)) is not None:
                self.agents[event.agent] = msgspec.structs.replace(agent, breaker_open=True)
            self.note(f"{event.agent}: {event.reason}")
        elif isinstance(event, events.SessionNotReady):
            self.note(f"{event.workspace}: {event.reason}")
        elif isinstance(event, events.BudgetChanged):
            self.note(f"{event.workspace}: {event.reason}")
        elif isinstance(event, events.HarnessExited):
            self.note(f"harness {event.workspace} exited: {event.reason}")
        elif isinstance(event, events.ScheduleNoted):
            self.note(f"schedule {event.schedule} {event.what} ({event.nominal})")
        return False

    def put(self, task: Task) -> None:
        """A task as the daemon has it now (an older copy than the one known is no step
        back: an event can trail what ``list`` already answered)."""
        known = self.tasks.get(task.id)
        if known is None or task.updated_at >= known.updated_at:
            self.tasks[task.id] = task

    def _set_question(self, task_id: str, question: str | None) -> bool:
        task = self.tasks.get(task_id)
        if task is None:
            return False
        self.tasks[task_id] = msgspec.structs.replace(task, question=question)
        return True

    def note(self, text: str) -> None:
        self.notes = [*self.notes[-49:], text]

    # -- what the screens show ------------------------------------------------------------

    def counts(self, now: datetime) -> dict[str, Any]:
        """The header: pending, running, waiting for an answer, done and failed today (UTC),
        and what the tasks that ended today cost."""
        today = now.date().isoformat()
        counts = {"pending": 0, "running": 0, "waiting": 0, "done": 0, "failed": 0, "usd": 0.0}
        for task in self.tasks.values():
            if task.state in OPEN_STATES:
                counts[task.state] += 1
                if task.question is not None:
                    counts["waiting"] += 1
            elif task.updated_at.startswith(today):
                if task.outcome in ("done", "failed"):
                    counts[task.outcome] += 1
                if task.cost is not None:
                    counts["usd"] += task.cost.usd
        return counts

    def shown(self, spec: Filter, *, tree: bool = False, limit: int | None = None) -> list[Task]:
        """The tasks that match, newest first; with ``tree``, each family under its newest
        root, children after their parent."""
        tasks = self.tasks
        if spec:
            matching = sorted((t for t in tasks.values() if spec.matches(t)), key=_by_id,
                              reverse=True)  # fmt: skip
        else:  # the common case, kept cheap: ids sort as the tasks were created
            matching = [tasks[task_id] for task_id in sorted(tasks, reverse=True)]
        if tree:
            matching = list(_as_tree(matching))
        return matching if limit is None else matching[:limit]

    def depth(self, task: Task) -> int:
        depth, parent = 0, task.parent
        while parent is not None and parent in self.tasks and depth < 50:
            depth += 1
            parent = self.tasks[parent].parent
        return depth

    def held(self, task: Task) -> bool:
        """Whether ``task`` waits for others (``after``) as far as this board can tell: pending,
        and one of them still open here (a dependency counts once it is closed), or closed
        another way than done while the task waits for a retry of it (``wait``: the daemon
        says nothing of the task until that retry takes the dependency's place)."""
        if task.state != "pending" or not task.after:
            return False
        for dep_id in task.after:
            dep = self.tasks.get(dep_id)
            if dep is None:
                continue
            if dep.state != "closed":
                return True
            if dep.outcome != "done" and task.if_dependency_fails == "wait":
                return True
        return False

    def waiting(self) -> list[Task]:
        return [t for t in self.tasks.values() if t.question is not None and t.state == "running"]

    def now(self) -> datetime:
        return datetime.now(UTC)


def _by_id(task: Task) -> str:
    return task.id


def _as_tree(newest_first: list[Task]) -> Iterator[Task]:
    ids = {t.id for t in newest_first}
    children: dict[str | None, list[Task]] = {}
    for task in reversed(newest_first):  # children oldest first under their parent
        parent = task.parent if task.parent in ids else None
        children.setdefault(parent, []).append(task)
    roots = list(reversed(children.get(None, [])))
    stack = list(reversed(roots))
    while stack:
        task = stack.pop()
        yield task
        stack.extend(reversed(children.get(task.id, [])))
