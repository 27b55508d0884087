"""D5: a Hypothesis state machine over tasks that wait for others (``after``).

The daemon's own ``Board`` in process over a real SQLite file, one agent with slots enough for
everything: tasks are submitted after any of those already there (whatever their state, with any
of the three policies), dispatched, ended done or failed (some with attempts to spare),
cancelled, retried by the operator, and the daemon restarted (memory rebuilt from the file).

After every step, from the store's ledger and rows:

- no task is released twice (at most one "released" row), nor early: a task that ran had every
  dependency closed before its first assignment, done — or ended otherwise, under ``run``;
- none is left waiting for a dependency that has ended and that it need not wait for any more:
  every pending task is either in the queue or waits for a dependency that is open, or failed
  under ``wait``; a task whose dependency closed failed or cancelled under ``cancel`` is cancelled;
- what the board holds in memory is what a restart would rebuild from the store.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import msgspec
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from colibri.config import SchedulerSettings
from colibri.core.errors import ColibriError
from colibri.core.model import Task, TaskSpec
from colibri.core.protocol import Held, RegisterAgent
from colibri.core.states import State
from colibri.daemon.board import Board
from colibri.daemon.board.dependencies import Dependencies
from colibri.store import Store, TaskFilter, open_store
from tests.inprocess import ManualClock, Peer
from tests.properties import examples

SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else None
POLICIES = ("cancel", "run", "wait")


class DependencyMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="colibri-deps-", dir=SCRATCH))
        self.path = self.dir / "board.sqlite"
        self.clock = ManualClock()
        self.store: Store = open_store(str(self.path), durability="relaxed")
        self.ids: list[str] = []
        self.board = self._start(held=[])

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    def _start(self, held: list[Held]) -> Board:
        board = Board(self.store, SchedulerSettings(retry_backoff=0.001), self.clock)
        board.rebuild()
        self.store.commit()
        board.take_effects()
        self.peer = Peer("harness")
        self.agent, _, _ = board.register(
            RegisterAgent(name="a1", slots=10_000, ttl=86_400.0, running=held), self.peer
        )
        self.store.commit()
        board.take_effects()
        return board

    def _refused(self) -> None:
        """A request refused: its batch rolled back and memory reloaded, as the server does."""
        self.store.rollback()
        self.board.rebuild()
        self.board.take_effects()

    def _commit(self) -> None:
        self.store.commit()
        self.board.take_effects()

    def _running(self) -> list[Task]:
        return sorted(
            (t for t in self.board.tasks.values() if t.state == State.RUNNING),
            key=lambda t: t.id,
        )

    # -- rules -------------------------------------------------------------------------------

    @rule(
        deps=st.lists(st.integers(min_value=0, max_value=1000), max_size=3),
        policy=st.sampled_from(POLICIES),
        attempts=st.integers(min_value=1, max_value=2),
    )
    def submit(self, deps: list[int], policy: str, attempts: int) -> None:
        after = [self.ids[i % len(self.ids)] for i in deps] if self.ids else []
        spec = msgspec.convert({"text": f"t{len(self.ids)}", "after": after,
                                "if_dependency_fails": policy, "max_attempts": attempts},
                               TaskSpec)  # fmt: skip
        try:
            task, _ = self.board.submit(spec)
        except ColibriError:
            self._refused()
            return
        self._commit()
        self.ids.append(task.id)

    @rule()
    def dispatch(self) -> None:
        self.board.dispatch()
        self._commit()

    @precondition(lambda self: any(t.state == State.RUNNING for t in self.board.tasks.values()))
    @rule(pick=st.integers(min_value=0, max_value=1000), ok=st.booleans())
    def end(self, pick: int, ok: bool) -> None:
        running = self._running()
        task = running[pick % len(running)]
        if ok:
            self.board.out(self.agent, task.id, task.epoch, "ok", None)
        else:
            self.board.fail(self.agent, task.id, task.epoch, "broke")
        self._commit()

    @precondition(lambda self: bool(self.ids))
    @rule(pick=st.integers(min_value=0, max_value=1000))
    def cancel(self, pick: int) -> None:
        task = self.board.get(self.ids[pick % len(self.ids)])
        if task.state not in (State.PENDING, State.RUNNING):
            return
        self.board.cancel(task.id, None)
        self._commit()
        # The cancelled sessions stop; their harness says so.
        for task_id in [t.id for t in self.board.tasks.values() if t.state == State.CANCELLED]:
            cancelled = self.board.tasks[task_id]
            self.board.reclaimed(self.agent, task_id, cancelled.epoch)
            self._commit()

    @precondition(lambda self: bool(self.ids))
    @rule(pick=st.integers(min_value=0, max_value=1000))
    def retry(self, pick: int) -> None:
        task = self.board.get(self.ids[pick % len(self.ids)])
        if task.state != State.CLOSED:
            return
        try:
            made = self.board.retry(task.id)
        except ColibriError:
            self._refused()
            return
        self._commit()
        self.ids.append(made.id)

    @rule()
    def time_passes(self) -> None:
        self.clock.advance(1.0)  # retries' backoff is over
        self.board.sweep()
        self._commit()

    @rule()
    def restart(self) -> None:
        held = [
            Held(task=t.id, epoch=t.epoch, claim=self.board.claim_of(t.id, t.epoch))
            for t in self._running()
        ]
        self.store.close()
        self.store = open_store(str(self.path), durability="relaxed")
        self.board = self._start(held)

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def released_once_and_never_early(self) -> None:
        rows = self.store.ledger({}, 1_000_000)
        released: dict[str, int] = {}
        first_run: dict[str, int] = {}
        closed_at: dict[str, int] = {}
        for row in rows:
            if row.task is None:
                continue
            if (row.reason or "").startswith("released"):
                released[row.task] = released.get(row.task, 0) + 1
            if row.to_state == State.RUNNING:
                first_run.setdefault(row.task, row.seq)
            if row.to_state == State.CLOSED:
                closed_at[row.task] = row.seq
        assert all(n == 1 for n in released.values()), released
        for task_id, seq in first_run.items():
            task = self.board.get(task_id)
            for dep_id in task.after:
                dep = self.board.get(dep_id)
                assert closed_at.get(dep_id, seq + 1) < seq, f"{task_id} ran before {dep_id} closed"
                assert dep.outcome == State.DONE or task.if_dependency_fails == "run", (
                    f"{task_id} ran after {dep_id} ended {dep.outcome}"
                )

    @invariant()
    def none_left_waiting(self) -> None:
        waiting = self.board.dependencies.waiting
        for task in self.store.list_tasks(TaskFilter(limit=100_000)):
            if task.state != State.PENDING:
                continue
            deps = [self.board.get(d) for d in task.after]
            blocked = [
                d for d in deps
                if d.state != State.CLOSED
                or (d.outcome != State.DONE and task.if_dependency_fails == "wait")
            ]  # fmt: skip
            ended_badly = [
                d for d in deps if d.state == State.CLOSED and d.outcome != State.DONE
            ]
            if task.if_dependency_fails == "cancel":
                assert not ended_badly, f"{task.id} still pending after {ended_badly[0].id} ended"
            if blocked:
                assert task.id in waiting, f"{task.id} waits for {blocked[0].id} unheld"
                assert task.id not in self.board.queue.pending
            else:
                assert task.id not in waiting, f"{task.id} held, nothing to wait for"
                assert task.id in self.board.queue.pending or self.board.queue.delayed

    @invariant()
    def memory_is_what_a_restart_rebuilds(self) -> None:
        rebuilt = Dependencies(self.store, self.clock, self.board.batch, self.board.audience,
                               self.board.queue, dict(self.board.tasks))  # fmt: skip
        rebuilt.load(list(self.board.tasks.values()))
        assert self.board.dependencies.waiting == rebuilt.waiting
        # No index keeps a task that waits no more (nor misses one that does).
        assert {d: set(w) for d, w in self.board.dependencies.dependents.items()} == {
            d: set(w) for d, w in rebuilt.dependents.items()
        }


DependencyMachine.TestCase.settings = settings(
    max_examples=examples(200),
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestDependencyMachine = pytest.mark.properties(DependencyMachine.TestCase)
