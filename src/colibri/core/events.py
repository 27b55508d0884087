"""Every event the daemon pushes, as one tagged union: to the agent that holds a task, to
subscribers, and to ``ledger --follow`` connections.

On the wire each is an object whose ``event`` names it and whose ``seq`` increases by one per
event sent, for the life of the daemon (the connection sets it as it sends). Durable history,
with a ``seq`` that survives restarts, is the ledger. The class names say what happened (in the
past tense) or, for the two an agent must act on, what to do (``Assign``, ``Cancel``); the tags
are the wire's names. ``decode`` reads any event line back as its class.
"""

from __future__ import annotations

from typing import Any, Union

import msgspec

from colibri.core.model import Agent, LedgerEntry, Task


class Event(msgspec.Struct, tag_field="event", kw_only=True):
    #: Set by the connection as it sends the event.
    seq: int = 0


# -- to the agent that holds a task --------------------------------------------------------


class Assign(Event, tag="assign"):
    """Run this task under this claim; ``claim`` is the secret its session's own reports
    must carry."""

    epoch: int
    claim: str
    task: Task


class Cancel(Event, tag="cancel"):
    """Stop the session of this task (it was cancelled); then say ``reclaimed``."""

    task: str
    epoch: int
    reason: str


class SessionReady(Event, tag="ready"):
    """The session said it is ready (``colibri ready``): type its task in."""

    task: str
    epoch: int


class AskingStarted(Event, tag="asking"):
    """The session waits for an answer: its clocks (max_runtime) stand still meanwhile."""

    task: str


class Expired(Event, tag="expired"):
    """The agent was silent past its TTL and is offline: register again."""

    reason: str


# -- to subscribers (and, for questions, to the holder too) --------------------------------


class TaskChanged(Event, tag="task"):
    from_state: str | None = msgspec.field(name="from")
    to_state: str = msgspec.field(name="to")
    reason: str | None
    task: Task


class AgentChanged(Event, tag="agent"):
    """An agent registered or went offline, its ready pool changed size (a heartbeat said so),
    or its circuit breaker closed. Which tasks it holds changes with their ``task`` events."""

    agent: Agent


class SwarmToggled(Event, tag="swarm"):
    """Dispatch was paused or resumed."""

    paused: bool


class QuestionAsked(Event, tag="question"):
    task: str
    question: str


class Answered(Event, tag="answered"):
    task: str


class QuestionWithdrawn(Event, tag="question_withdrawn"):
    """Nobody waits for the answer any more (its asker went away)."""

    task: str


class SessionNotReady(Event, tag="warning"):
    """A session never became ready; its task went back to pending."""

    workspace: str
    task: str
    reason: str


class BreakerOpened(Event, tag="unhealthy"):
    """Sessions in a row never became ready: the agent gets no work for a while."""

    agent: str
    workspace: str
    reason: str


class BudgetChanged(Event, tag="budget"):
    """A workspace spent its daily budget (``paused``), or a new day reopened it."""

    workspace: str
    paused: bool
    reason: str


class HarnessExited(Event, tag="harness"):
    """A workspace's harness exited; the daemon starts it again after a backoff (unless it
    crash-looped: ``degraded``). ``reason`` is why, in its own words (``HarnessStatus``)."""

    workspace: str
    restarts: int
    degraded: bool
    reason: str


class ScheduleNoted(Event, tag="schedule"):
    """A schedule fired (``task`` is what it submitted), or skipped, missed or was refused."""

    schedule: str
    what: str
    nominal: str
    task: str | None = None


class MessageSent(Event, tag="message"):
    """A bus message (``colibri send``); a ``chained`` one waits for ``consumed``."""

    message: int
    to: str
    text: str
    chained: bool


class LedgerAppended(Event, tag="ledger"):
    """To ``ledger --follow``: a row was committed."""

    entry: LedgerEntry


class Dropped(Event, tag="dropped"):
    """To a subscriber that fell too far behind, just before it is dropped."""

    reason: str


AnyEvent = Union[  # noqa: UP007 (msgspec reads the union's members)
    Assign,
    Cancel,
    SessionReady,
    AskingStarted,
    Expired,
    TaskChanged,
    AgentChanged,
    SwarmToggled,
    QuestionAsked,
    Answered,
    QuestionWithdrawn,
    SessionNotReady,
    BreakerOpened,
    BudgetChanged,
    HarnessExited,
    ScheduleNoted,
    MessageSent,
    LedgerAppended,
    Dropped,
]
#: Every event's wire name.
NAMES: tuple[str, ...] = tuple(
    str(cls.__struct_config__.tag)
    for cls in AnyEvent.__args__  # type: ignore[attr-defined]
)

_decoder = msgspec.json.Decoder(AnyEvent)


def decode(line: bytes | str) -> AnyEvent:
    """An event line read back as its class (``msgspec.ValidationError`` if it is not one)."""
    return _decoder.decode(line)


def convert(message: dict[str, Any]) -> AnyEvent:
    """An event already decoded as a plain object, as its class."""
    event: AnyEvent = msgspec.convert(message, AnyEvent)
    return event


# The builders the board calls most; the others are constructed where they happen.


def assign(task: Task, claim: str) -> Assign:
    return Assign(epoch=task.epoch, claim=claim, task=task)


def cancel(task: Task, reason: str) -> Cancel:
    return Cancel(task=task.id, epoch=task.epoch, reason=reason)


def task_changed(task: Task, from_state: str | None, reason: str | None) -> TaskChanged:
    return TaskChanged(from_state=from_state, to_state=task.state, reason=reason, task=task)


def agent_changed(agent: Agent) -> AgentChanged:
    return AgentChanged(agent=agent)


def swarm_toggled(paused: bool) -> SwarmToggled:
    return SwarmToggled(paused=paused)


def dropped(reason: str) -> Dropped:
    return Dropped(reason=reason)
