"""The task state machine: the only copy of the legal transitions.

    pending → running → done → closed
       │         ├→ failed → closed
       └─────────┴→ cancelled → closed

One edge is ours beyond the original design: ``running → pending`` (a *requeue*), taken only
when a session ended without a result and the task still has attempts left (``max_attempts``),
or when a session never became ready. ``closed`` keeps the outcome (done, failed, cancelled).
"""

from __future__ import annotations

from enum import StrEnum

from colibri.core.errors import IllegalTransition


class State(StrEnum):
    PENDING = "pending"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    CLOSED = "closed"


TRANSITIONS: dict[State, frozenset[State]] = {
    State.PENDING: frozenset({State.RUNNING, State.CANCELLED}),
    State.RUNNING: frozenset({State.DONE, State.FAILED, State.CANCELLED, State.PENDING}),
    State.DONE: frozenset({State.CLOSED}),
    State.FAILED: frozenset({State.CLOSED}),
    State.CANCELLED: frozenset({State.CLOSED}),
    State.CLOSED: frozenset(),
}

#: States a task ends in; the one it reaches first is kept as its ``outcome``.
OUTCOMES = frozenset({State.DONE, State.FAILED, State.CANCELLED})
#: States in which the task still needs something to happen.
OPEN = frozenset({State.PENDING, State.RUNNING})
#: States from which the task can never be dispatched again.
ENDED = OUTCOMES | {State.CLOSED}


def is_legal(current: State, wanted: State) -> bool:
    return wanted in TRANSITIONS[current]


def check(task_id: str, current: State, wanted: State) -> None:
    """Raise IllegalTransition unless ``current → wanted`` is an edge of the machine."""
    if wanted not in TRANSITIONS[current]:
        raise IllegalTransition(task_id, current.value, wanted.value)
