"""The queue: pending tasks ready for dispatch, and retries waiting out their backoff.

A pending task is either dispatchable (in ``pending``, ordered by priority and age, grouped by
shape) or delayed (its ``not_before`` is ahead: in a heap until it is due). Tasks of equal
shape share one ``Shape`` object, and equal name lists one list: 100,000 tasks have a few.
"""

from __future__ import annotations

import heapq
import sys
from typing import Any

from colibri.config import SchedulerSettings
from colibri.core.matching import Shape
from colibri.core.model import Task, parse_rfc3339
from colibri.core.pending import PendingTasks, sort_key
from colibri.daemon.board.batch import Batch
from colibri.daemon.clock import Clock

#: Most distinct shapes and name lists kept for sharing between tasks.
SHARED_MAX = 10_000


class Queue:
    def __init__(self, settings: SchedulerSettings, clock: Clock, batch: Batch) -> None:
        self.settings = settings
        self.clock = clock
        self.batch = batch
        self.pending = PendingTasks()
        #: Retries waiting out their backoff: (monotonic due, task id).
        self.delayed: list[tuple[float, str]] = []
        self._shapes: dict[tuple[Any, ...], Shape] = {}
        self._name_lists: dict[tuple[str, ...], list[str]] = {}

    def clear(self) -> None:
        self.pending = PendingTasks()
        self.delayed.clear()

    def enqueue(self, task: Task) -> None:
        if task.not_before is not None:
            wait = parse_rfc3339(task.not_before) - self.clock.time()
            if wait > 0:
                heapq.heappush(self.delayed, (self.clock.monotonic() + wait, task.id))
                self.batch.wake_sweep()
                return
        self.make_dispatchable(task)

    def make_dispatchable(self, task: Task) -> None:
        created = parse_rfc3339(task.created_at) if self.settings.ageing else 0.0
        self.pending.add(
            task.id,
            self.shape(task),
            sort_key(task.priority, created, task.id, self.settings.ageing),
        )
        self.batch.dispatch_wanted = True

    def due(self, now: float) -> list[str]:
        """Take the retries whose backoff is over at monotonic ``now``."""
        ready = []
        while self.delayed and self.delayed[0][0] <= now:
            ready.append(heapq.heappop(self.delayed)[1])
        return ready

    def next_due(self) -> float | None:
        return self.delayed[0][0] if self.delayed else None

    def shape(self, task: Task) -> Shape:
        """The task's shape; equal shapes are one shared object."""
        min_score = task.min_score if task.min_score is not None else self.settings.min_score
        pin = task.agent if task.pinned else None
        key = (tuple(task.capabilities), task.workspace, pin, min_score, task.tenant)
        shape = self._shapes.get(key)
        if shape is None:
            if len(self._shapes) >= SHARED_MAX:
                self._shapes.clear()  # sharing saves memory; it is never needed for correctness
            shape = Shape(frozenset(task.capabilities), task.workspace, pin, min_score, task.tenant)
            self._shapes[key] = shape
        return shape

    def shared(self, names: list[str]) -> list[str]:
        """One list object per distinct list of names, shared by every task that has it."""
        key = tuple(names)
        shared = self._name_lists.get(key)
        if shared is None:
            if len(self._name_lists) >= SHARED_MAX:
                self._name_lists.clear()
            shared = self._name_lists[key] = [sys.intern(n) for n in names]
        return shared
