"""Transitions: the one writer of task rows.

Every change of a task's state goes through ``move``: the state machine allows it, the store
writes the row and its ledger row together by compare-and-set, memory follows, and the change
is announced once the batch commits. The open tasks live here, with the per-tenant counts the
quotas read.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import msgspec

from colibri.config import SchedulerSettings
from colibri.core import backoff, states
from colibri.core.errors import IllegalTransition, UnknownTask
from colibri.core.model import Change, Cost, LedgerEntry, Task, rfc3339
from colibri.core.states import State
from colibri.daemon.board.audience import Audience
from colibri.daemon.board.batch import Batch
from colibri.daemon.board.capacity import Capacity
from colibri.daemon.board.dependencies import Dependencies
from colibri.daemon.board.queue import Queue
from colibri.daemon.clock import Clock
from colibri.store import Store, StoreConflict

#: The longest wait before a retry, however many attempts doubled it.
MAX_RETRY_DELAY = 86_400.0


def text_bytes(text: str) -> int:
    """Bytes of a task's text, UTF-8 (what it holds in memory is at least that)."""
    return len(text) if text.isascii() else len(text.encode())


class Transitions:
    def __init__(
        self,
        store: Store,
        settings: SchedulerSettings,
        clock: Clock,
        batch: Batch,
        audience: Audience,
        capacity: Capacity,
        queue: Queue,
        tasks: dict[str, Task],
        dependencies: Dependencies,
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.batch = batch
        self.audience = audience
        self.capacity = capacity
        self.queue = queue
        self.dependencies = dependencies
        #: Tasks not yet closed: pending, running, and ended ones whose session is still around.
        self.tasks = tasks
        #: Pending tasks per tenant, for the max_pending quota.
        self.pending_by_tenant: dict[str, int] = {}
        #: Bytes of task text the open tasks of each tenant hold (max_pending_mib).
        self.open_text: dict[str, int] = {}
        #: Every task the board serves, closed ones too, by state, and those with an outcome by
        #: outcome (``status``): counted from the store at each load, then kept by each change,
        #: so that ``status`` never scans the store's closed tasks.
        self.by_state: Counter[str] = Counter()
        self.by_outcome: Counter[str] = Counter()

    def load(
        self, open_tasks: list[Task], by_state: dict[str, int], by_outcome: dict[str, int]
    ) -> None:
        """Memory from the store's open tasks and its counts (at start-up, and after a failed
        commit)."""
        self.by_state, self.by_outcome = Counter(by_state), Counter(by_outcome)
        self.tasks.clear()
        self.pending_by_tenant = {}
        self.open_text = {}
        for task in open_tasks:
            self.tasks[task.id] = task
            self.open_text[task.tenant] = self.open_text.get(task.tenant, 0) + text_bytes(task.text)
            if task.state == State.PENDING:
                self.pending_by_tenant[task.tenant] = self.pending_by_tenant.get(task.tenant, 0) + 1

    def get(self, task_id: str) -> Task:
        """The task, open (from memory) or not (from the store)."""
        task = self.tasks.get(task_id) or self.store.get_task(task_id)
        if task is None:
            raise UnknownTask(task_id)
        return task

    def entry(
        self, task: Task, from_state: str | None, reason: str | None, cost: Cost | None = None
    ) -> LedgerEntry:
        return LedgerEntry(
            at=task.updated_at,
            task=task.id,
            tenant=task.tenant,
            from_state=from_state,
            to_state=task.state,
            schedule=task.schedule if from_state is None else None,
            agent=task.agent,
            epoch=task.epoch,
            reason=reason,
            cost=cost,
            uid=self.batch.uid,
            pid=self.batch.pid,
        )

    def insert(self, task: Task, reason: str, fingerprint: str | None) -> None:
        """A new pending task: its row, its first ledger row, memory, the queue."""
        entry = self.store.insert_task(task, self.entry(task, None, reason), fingerprint)
        self.batch.ledger_rows.append(entry)
        self.tasks[task.id] = task
        self.by_state[task.state] += 1
        tenant = task.tenant
        self.pending_by_tenant[tenant] = self.pending_by_tenant.get(tenant, 0) + 1
        self.open_text[tenant] = self.open_text.get(tenant, 0) + text_bytes(task.text)
        self.audience.announce(task, None, reason)
        if not self.dependencies.hold(task):
            self.queue.enqueue(task)

    def move(
        self,
        task: Task,
        to: State,
        reason: str | None = None,
        *,
        close: bool = False,
        **changes: Any,
    ) -> Task:
        """Apply one legal transition: store row + ledger row, memory, events.

        ``close``: go on to ``closed`` at once (the session is already gone) — two transitions
        and two ledger rows, but the task row is written once.
        """
        states.check(task.id, State(task.state), to)
        if to in states.OUTCOMES:
            changes["outcome"] = to.value
        if to != State.RUNNING:
            changes["question"] = None  # a question dies with its session
        new = msgspec.structs.replace(
            task, state=to.value, updated_at=rfc3339(self.clock.time()), **changes
        )
        entries = [self.entry(new, task.state, reason, changes.get("cost"))]
        final = new
        if close:
            states.check(task.id, to, State.CLOSED)
            self.capacity.release(task)
            final = msgspec.structs.replace(new, state=State.CLOSED.value)
            entries.append(self.entry(final, new.state, None))
        try:
            self.store.update_task(final, task.state, task.epoch, *entries)
        except StoreConflict:
            raise IllegalTransition(task.id, task.state, to.value) from None
        self.batch.ledger_rows.extend(entries)
        self.by_state[task.state] -= 1
        self.by_state[final.state] += 1
        if task.outcome is not None:
            self.by_outcome[task.outcome] -= 1
        if final.outcome is not None:
            self.by_outcome[final.outcome] += 1
        if task.state == State.PENDING:
            self.pending_by_tenant[task.tenant] -= 1
        if final.state == State.PENDING:
            self.pending_by_tenant[task.tenant] = self.pending_by_tenant.get(task.tenant, 0) + 1
        if final.state == State.CLOSED:
            self.tasks.pop(task.id, None)
            self.open_text[task.tenant] -= text_bytes(task.text)
        else:
            self.tasks[task.id] = final
        self.audience.announce(new, task.state, reason)
        if close:
            self.audience.announce(final, new.state, None)
        if final.state == State.CLOSED and self.dependencies.concerns(final.id):
            self.dependencies.closed(final)
        return final

    def close(self, task: Task, change: Change | None = None) -> Task:
        """The task's session is over; ``change``: what it left in its worktree."""
        self.capacity.release(task)
        if change is None:
            return self.move(task, State.CLOSED)
        return self.move(task, State.CLOSED, change.describe(), change=change)

    def requeue(self, task: Task, reason: str) -> Task:
        """A running task whose session never started: back to pending, no attempt spent."""
        self.capacity.release(task)
        waiting = self.move(task, State.PENDING, f"requeued: {reason}", attempts=task.attempts - 1)
        self.queue.enqueue(waiting)
        return waiting

    def end_session(self, task: Task, error: str, change: Change | None = None) -> Task:
        """A running task's session is gone without out: retry if attempts remain, else fail.
        ``change``: what the session left in its worktree."""
        kept: dict[str, Any] = {} if change is None else {"change": change}
        left = "" if change is None else f"; {change.describe()}"
        if task.attempts < task.max_attempts:
            delay = backoff.delay(task.attempts, self.settings.retry_backoff, MAX_RETRY_DELAY)
            self.capacity.release(task)
            retry = self.move(
                task,
                State.PENDING,
                f"retry {task.attempts + 1}/{task.max_attempts} in {delay:g}s after: {error}"
                + left,
                error=error,
                not_before=rfc3339(self.clock.time() + delay),
                **kept,
            )
            self.queue.enqueue(retry)
            return retry
        reason = (
            error
            if task.max_attempts == 1
            else f"max_attempts ({task.max_attempts}) reached: {error}"
        )
        return self.move(task, State.FAILED, reason + left, error=error, **kept)

    def lose(self, task: Task, reason: str) -> None:
        """The session is gone and nobody will report on it: end it, and close it if it
        will not run again."""
        ended = self.end_session(task, reason)
        if ended.state == State.FAILED:
            self.close(ended)

    def drop_session(self, task: Task, reason: str) -> None:
        """A task whose session is gone: lose it if it was running, close it if it had
        already ended (its outcome is in)."""
        if task.state == State.RUNNING:
            self.lose(task, reason)
        elif task.state in states.OUTCOMES:
            self.close(task)
