"""Dependencies: tasks that wait for others (``after``), and releasing them.

A pending task whose ``after`` names a task that has not yet ended done *waits*: it is not in
the queue, and ``why`` names what it waits for. A dependency counts once it is **closed** —
its outcome in and its session over, so a worktree's branch is final before anything starts
from it. Then each task waiting for it is told:

- done: one dependency fewer; the last one *releases* the task — one ledger row
  (``pending → pending``, "released …"), and it enters the queue as any task does;
- failed or cancelled: by the task's ``if_dependency_fails``: ``cancel`` (the default) cancels
  it, a ledger row naming the dependency and why; ``run`` counts the dependency as met;
  ``wait`` keeps it waiting, and an operator's ``retry`` of the dependency puts the retry in
  its place (``replace``).

The indexes live in memory and are rebuilt from the store's open tasks (``load``): whether a
task is released follows from its ``after`` and its dependencies' rows, so a restart, a crash
or a takeover releases nothing twice and forgets nothing.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable

import msgspec

from colibri.core.errors import BadRequest, QuotaExceeded, UnknownTask
from colibri.core.model import LedgerEntry, Task, rfc3339
from colibri.core.states import State
from colibri.daemon.board.audience import Audience
from colibri.daemon.board.batch import Batch
from colibri.daemon.board.queue import Queue
from colibri.daemon.clock import Clock
from colibri.store import Store

#: What a waiting task is told of a dependency that ended another way than done.
ENDED_HOW = {"failed": "failed", "cancelled": "was cancelled"}


def met(dependency: Task, policy: str) -> bool | None:
    """Whether ``dependency`` no longer holds back a task with ``policy``: True (met), False
    (it never will: the task is cancelled), None (not yet)."""
    if dependency.state != State.CLOSED:
        return None
    if dependency.outcome == State.DONE:
        return True
    if policy == "run":
        return True
    if policy == "wait":
        return None
    return False


class Dependencies:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        batch: Batch,
        audience: Audience,
        queue: Queue,
        tasks: dict[str, Task],
    ) -> None:
        self.store = store
        self.clock = clock
        self.batch = batch
        self.audience = audience
        self.queue = queue
        self.tasks = tasks
        #: Waiting task → the dependencies it still waits for.
        self.waiting: dict[str, set[str]] = {}
        #: Dependency → the tasks waiting for it, in the order they came (a dict as an ordered
        #: set: one that stops waiting is taken out at once).
        self.dependents: dict[str, dict[str, None]] = {}
        #: Waiting task → the longest chain of waits that ends at it (1: it waits for tasks
        #: that wait for nothing).
        self.depth: dict[str, int] = {}
        #: Waiting tasks one of whose dependencies ended otherwise than done, met all the same
        #: (``run``): their release says so.
        self.ran_anyway: set[str] = set()
        #: Dependencies closed and not yet told of (``closed``), and whether they are being.
        self._closed: deque[Task] = deque()
        self._telling = False
        #: While a caller collects them (``Intake.cancel``, for its reply): the tasks cancelled
        #: because a dependency failed or was cancelled. None: nobody does.
        self.cancelled: list[Task] | None = None
        #: Cancels a waiting task, a ledger row saying why (``Intake.cancel_one``).
        self.cancel_one: Callable[[Task, str], Task] = _unwired

    def clear(self) -> None:
        self.waiting.clear()
        self.dependents.clear()
        self.depth.clear()
        self.ran_anyway.clear()

    def lookup(self, task_id: str) -> Task | None:
        return self.tasks.get(task_id) or self.store.get_task(task_id)

    # -- a new task ----------------------------------------------------------------------------

    def check(
        self, tenant: str, after: list[str], policy: str, max_depth: int,
        planned: dict[str, tuple[int, str]] | None = None,
    ) -> int:  # fmt: skip
        """What intake refuses of a new task's ``after`` (whole ids; ``planned``: the depth and
        tenant of each task submitted with it, not yet written), before anything is written;
        its depth.

        :raises UnknownTask: a dependency that does not exist, or is of another tenant (as if
            it did not: a tenant never learns of another's tasks).
        :raises BadRequest: a dependency already failed or cancelled, and ``policy`` would
            cancel the task at once.
        :raises QuotaExceeded: the chain of waits would pass ``max_depth``.
        """
        depth = 0
        planned = planned or {}
        for dep_id in after:
            if dep_id in planned:
                deep, of = planned[dep_id]
                if of != tenant:
                    raise UnknownTask(dep_id)
                depth = max(depth, deep)
                continue
            dependency = self.lookup(dep_id)
            if dependency is None or dependency.tenant != tenant:
                raise UnknownTask(dep_id)
            if dependency.outcome in ENDED_HOW and policy == "cancel":
                raise BadRequest(
                    f"task {dep_id} {ENDED_HOW[dependency.outcome]}: a task after it would be "
                    "cancelled at once; wait for a retry of it instead (colibri retry gives "
                    "one: name it in after), or give if_dependency_fails run or wait"
                )
            depth = max(depth, self.depth.get(dep_id, 0))
        if depth + 1 > max_depth:
            raise QuotaExceeded(
                f"the task would wait at the end of a chain of {depth + 1} waiting tasks, more "
                f"than {max_depth} (scheduler.max_depth)"
            )
        return depth + 1

    def hold(self, task: Task) -> bool:
        """Index a pending task that has ``after`` (a new one, or one loaded); whether it
        waits. A task none of whose dependencies holds it back is not indexed."""
        if not task.after or task.state != State.PENDING:
            return False
        open_deps = set()
        depth = 0
        for dep_id in task.after:
            dependency = self.lookup(dep_id)
            if dependency is None:
                continue  # never written (refused at intake); nothing to wait for
            # (False, a cancel not yet made, never loads: a dependency's cascade is written in
            # the batch that closes it.)
            if met(dependency, task.if_dependency_fails) is not True:
                open_deps.add(dep_id)
                depth = max(depth, self.depth.get(dep_id, 0))
            elif dependency.outcome != State.DONE:
                self.ran_anyway.add(task.id)
        if not open_deps:
            self.ran_anyway.discard(task.id)
            return False
        self.waiting[task.id] = open_deps
        self.depth[task.id] = depth + 1
        for dep_id in open_deps:
            self.dependents.setdefault(dep_id, {})[task.id] = None
        return True

    def load(self, open_tasks: Iterable[Task]) -> set[str]:
        """Rebuild the indexes from the open tasks (in any order); the ids of those that
        wait. Depths are those of the chains among them, found from the tasks waiting for
        nothing that waits."""
        self.clear()
        pending = [t for t in open_tasks if t.after and t.state == State.PENDING]
        # Index the tasks whose dependencies wait for nothing first, so each depth is known.
        order = _by_depth(pending)
        for task in order:
            self.hold(task)
        return set(self.waiting)

    # -- a dependency closed ---------------------------------------------------------------

    def concerns(self, task_id: str) -> bool:
        """Whether a task closing matters here: it waits, or others wait for it. (Most tasks
        neither: two looks in a dictionary for each.)"""
        return task_id in self.dependents or task_id in self.waiting

    def closed(self, dependency: Task) -> None:
        """``dependency`` is closed: it waits no more (cancelled while waiting), and every
        task that waits for it is told. A cancel this makes closes more tasks, which are told
        in turn — one after another, not within each other: a chain of a thousand is no
        deeper a call than one."""
        self._closed.append(dependency)
        if self._telling:
            return
        self._telling = True
        try:
            while self._closed:
                self._tell(self._closed.popleft())
        finally:
            self._telling = False
            self._closed.clear()  # (left only by a failure, whose batch is rolled back)

    def _tell(self, dependency: Task) -> None:
        self._forget(dependency.id)
        waiting_ids = self.dependents.pop(dependency.id, None)
        if not waiting_ids:
            return
        for task_id in waiting_ids:
            holds = self.waiting.get(task_id)
            task = self.tasks.get(task_id)
            if holds is None or dependency.id not in holds or task is None:
                continue  # it stopped waiting (cancelled; released)
            verdict = met(dependency, task.if_dependency_fails)
            if verdict is None:  # wait: for a retry of the dependency
                self.dependents.setdefault(dependency.id, {})[task_id] = None
                continue
            if verdict is False:
                self._forget(task_id)
                how = ENDED_HOW.get(dependency.outcome or "", "ended")
                cancelled = self.cancel_one(task, f"dependency {dependency.id} {how}")
                if self.cancelled is not None:
                    self.cancelled.append(cancelled)
                continue
            if dependency.outcome != State.DONE:
                self.ran_anyway.add(task_id)
            holds.discard(dependency.id)
            if not holds:
                self._release(task)

    def _release(self, task: Task) -> None:
        reason = "released: every task it waited for is done"
        if task.id in self.ran_anyway:
            reason = "released: every task it waited for has ended"
        self._forget(task.id)
        self._note(task, reason)
        self.queue.enqueue(task)

    def _note(self, task: Task, reason: str) -> None:
        """A ledger row ``pending → pending`` for a waiting task (released, or waiting for
        another), told to whoever follows the board."""
        entry = LedgerEntry(
            at=rfc3339(self.clock.time()), task=task.id, tenant=task.tenant,
            from_state=State.PENDING.value, to_state=State.PENDING.value, epoch=task.epoch,
            reason=reason, uid=self.batch.uid, pid=self.batch.pid,
        )  # fmt: skip
        self.batch.ledger_rows.append(self.store.append_ledger(entry))
        self.audience.announce(task, State.PENDING.value, reason)

    def _forget(self, task_id: str) -> None:
        """``task_id`` waits no more: out of every index, its dependencies' included."""
        for dep_id in self.waiting.pop(task_id, ()):
            self._unlink(task_id, dep_id)
        self.depth.pop(task_id, None)
        self.ran_anyway.discard(task_id)

    def _unlink(self, task_id: str, dep_id: str) -> None:
        waiting = self.dependents.get(dep_id)
        if waiting is not None:
            waiting.pop(task_id, None)
            if not waiting:
                del self.dependents[dep_id]

    # -- a retry takes a failed dependency's place --------------------------------------------

    def replace(self, old: Task, retry: Task) -> list[Task]:
        """``retry`` is the operator's retry of ``old``: the tasks that wait for ``old`` by
        ``wait`` wait for the retry instead (their ``after`` rewritten, a ledger row each).
        Returns them."""
        moved = []
        for task_id in list(self.dependents.get(old.id, {})):
            task = self.tasks.get(task_id)
            holds = self.waiting.get(task_id)
            if task is None or holds is None or old.id not in holds:
                continue
            if task.if_dependency_fails != "wait" or old.outcome == State.DONE:
                continue
            after = [retry.id if d == old.id else d for d in task.after]
            after = list(dict.fromkeys(after))  # (it may have named the retry already)
            self.store.set_after(task.id, after)
            changed = msgspec.structs.replace(task, after=after)
            self.tasks[task.id] = changed
            holds.discard(old.id)
            holds.add(retry.id)
            self.dependents.setdefault(retry.id, {})[task.id] = None
            self._unlink(task.id, old.id)
            self._note(changed, f"waits for {retry.id}, the retry of {old.id}")
            moved.append(changed)
        return moved

    # -- reading --------------------------------------------------------------------------------

    def waits_for(self, task: Task) -> list[Task]:
        """The dependencies ``task`` still waits for, as they are now (oldest listed first)."""
        holds = self.waiting.get(task.id)
        if not holds:
            return []
        found = (self.lookup(d) for d in task.after if d in holds)
        return [d for d in found if d is not None]

    def describe(self, task: Task) -> str | None:
        """``waits for 2 tasks: 0190…a1b2 (running), 0190…c3d4 (pending)`` or None."""
        deps = self.waits_for(task)
        if not deps:
            return None
        shown = ", ".join(f"{d.id} ({d.outcome or d.state})" for d in deps[:5])
        more = f" and {len(deps) - 5} more" if len(deps) > 5 else ""
        plural = "" if len(deps) == 1 else "s"
        return f"waits for {len(deps)} task{plural}: {shown}{more}"


def _by_depth(tasks: list[Task]) -> list[Task]:
    """``tasks`` ordered so that each comes after those of them it waits for (Kahn's order;
    a cycle, which intake never writes, keeps its members at the end, in their order)."""
    by_id = {t.id: t for t in tasks}
    blockers = {t.id: {d for d in t.after if d in by_id} for t in tasks}
    waiting_on: dict[str, list[str]] = {}
    for task_id, deps in blockers.items():
        for dep_id in deps:
            waiting_on.setdefault(dep_id, []).append(task_id)
    ready = [t for t in tasks if not blockers[t.id]]
    order: list[Task] = []
    while ready:
        task = ready.pop()
        order.append(task)
        for later in waiting_on.get(task.id, []):
            blockers[later].discard(task.id)
            if not blockers[later]:
                ready.append(by_id[later])
    placed = {t.id for t in order}
    return order + [t for t in tasks if t.id not in placed]


def _unwired(task: Task, reason: str) -> Task:
    raise RuntimeError("Dependencies.cancel_one is wired by the board")
