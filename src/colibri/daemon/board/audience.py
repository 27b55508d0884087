"""Who hears of the board's changes: subscribers, and ``wait`` requests for a task's end.

One registry of subscribers serves both the board's events and the message bus
(``daemon/bus.py``): a connection that subscribes once gets both (or, with ``messages``
false, the events alone), in the same order — highest ``priority`` first, then first come.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

from colibri.core import events, states
from colibri.core.events import Event
from colibri.core.model import Task
from colibri.core.replies import ErrorReply, TaskReply
from colibri.daemon.board.batch import Batch, Peer


@dataclass(eq=False, slots=True)
class Subscription:
    peer: Peer
    priority: int
    #: Bus messages to this workspace (and to none) reach it; None: every workspace's.
    workspace: str | None
    name: str
    order: int
    #: Whether bus messages reach it at all (False: the board's events only).
    messages: bool = True


class Audience:
    def __init__(self, batch: Batch) -> None:
        self.batch = batch
        #: Highest priority first, then in the order they subscribed.
        self.subscriptions: list[Subscription] = []
        self._order = itertools.count(1)
        #: ``wait`` requests: task id → (peer, request id), answered when the task ends.
        self.waiters: dict[str, list[tuple[Peer, Any]]] = {}
        #: How many of those each peer has (what the server caps per token and tenant).
        self._waiting: dict[Peer, int] = {}

    # -- subscribers -------------------------------------------------------------------------

    def subscribe(
        self, peer: Peer, priority: int = 0, workspace: str | None = None,
        name: str | None = None, messages: bool = True,
    ) -> None:  # fmt: skip
        self.unsubscribe(peer)  # a second subscribe must not double every event
        order = next(self._order)
        self.subscriptions.append(
            Subscription(peer, priority, workspace, name or f"subscriber {order}", order, messages)
        )
        self.subscriptions.sort(key=lambda s: (-s.priority, s.order))

    def unsubscribe(self, peer: Peer) -> None:
        self.subscriptions = [s for s in self.subscriptions if s.peer is not peer]

    def broadcast(self, message: Event) -> None:
        """Send an event to every subscriber (after the batch commits)."""
        for subscription in self.subscriptions:
            self.batch.emit(subscription.peer, message)

    def announce(self, task: Task, from_state: str | None, reason: str | None) -> None:
        """A task changed state: tell the subscribers, and answer who waits for its end."""
        if self.subscriptions:
            self.broadcast(events.task_changed(task, from_state, reason))
        if task.state in states.ENDED and task.id in self.waiters:
            for peer, request_id in self._take(task.id):
                self.batch.answered.append((task.id, peer, request_id))
                self.batch.emit(peer, TaskReply(id=request_id, task=task))

    # -- waits -------------------------------------------------------------------------------

    def wait_for(self, peer: Peer, request_id: Any, task_id: str) -> None:
        self.waiters.setdefault(task_id, []).append((peer, request_id))
        self._waiting[peer] = self._waiting.get(peer, 0) + 1

    def waiting(self, peer: Peer) -> int:
        """How many waits of ``peer`` are still to be answered."""
        return self._waiting.get(peer, 0)

    def _take(self, task_id: str) -> list[tuple[Peer, Any]]:
        """The waits for ``task_id``, no longer waiting."""
        taken = self.waiters.pop(task_id, [])
        for peer, _ in taken:
            left = self._waiting[peer] - 1
            if left:
                self._waiting[peer] = left
            else:
                del self._waiting[peer]
        return taken

    def restore(self, answered: list[tuple[str, Peer, Any]]) -> None:
        """The batch that answered these waits did not commit: they wait again."""
        for task_id, peer, request_id in answered:
            self.wait_for(peer, request_id, task_id)

    def waited_for(self) -> list[str]:
        return list(self.waiters)

    def answer(self, task: Task) -> None:
        """``task`` has ended (found so in the store): answer every wait for it."""
        for peer, request_id in self._take(task.id):
            self.batch.answered.append((task.id, peer, request_id))  # put back if it fails
            self.batch.emit(peer, TaskReply(id=request_id, task=task))

    def refuse(self, task_id: str, error: dict[str, str | int | float]) -> None:
        """Answer every wait for ``task_id`` with ``error`` (the wire form of a ColibriError):
        the task is no longer this daemon's to see end."""
        for peer, request_id in self._take(task_id):
            self.batch.emit(peer, ErrorReply(id=request_id, error=error))

    def waits(self, peer: Peer) -> bool:
        return peer in self._waiting

    def forget(self, peer: Peer) -> None:
        self.unsubscribe(peer)
        if self._waiting.pop(peer, None) is None:
            return
        for task_id in [t for t, ws in self.waiters.items() if any(p is peer for p, _ in ws)]:
            rest = [(p, r) for p, r in self.waiters[task_id] if p is not peer]
            if rest:
                self.waiters[task_id] = rest
            else:
                del self.waiters[task_id]
