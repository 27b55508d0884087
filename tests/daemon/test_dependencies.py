"""Tasks that wait for others (``after``): held back until every dependency has closed done,
released once, cancelled (or run, or kept waiting for a retry) when one fails. The board on a
real SQLite store, driven as the server drives it: a request, the commit, its effects."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from colibri.config import SchedulerSettings
from colibri.core.errors import BadRequest, ColibriError, QuotaExceeded, UnknownTask
from colibri.core.model import Task, TaskSpec, parse_rfc3339
from colibri.core.protocol import RegisterAgent
from colibri.core.states import State
from colibri.daemon.board import Board
from colibri.store import Store, TaskFilter, open_store
from tests.inprocess import ManualClock, Peer


class Run:
    """A board, one agent with many slots, and the steps a test takes."""

    def __init__(self, path: Path, **settings: Any) -> None:
        self.path = path
        self.settings = SchedulerSettings(**settings)
        self.clock = ManualClock()
        self.store: Store = open_store(str(path), durability="relaxed")
        self.board = self._board()

    def _board(self) -> Board:
        board = Board(self.store, self.settings, self.clock)
        board.rebuild()
        self.store.commit()
        board.take_effects()
        self.peer = Peer("harness")
        self.agent, _, _ = board.register(RegisterAgent(name="a1", slots=1000), self.peer)
        self.store.commit()
        board.take_effects()
        return board

    def restart(self) -> None:
        """A daemon started again on the same board: memory rebuilt from the store."""
        self.store.close()
        self.store = open_store(str(self.path), durability="relaxed")
        self.board = self._board()

    def commit(self) -> None:
        self.store.commit()
        self.board.take_effects()

    def submit(self, text: str, *after: str, **fields: Any) -> str:
        task, _ = self.board.submit(TaskSpec(text=text, after=list(after), **fields))
        self.commit()
        return task.id

    def dispatch(self) -> list[str]:
        """Dispatch; the tasks assigned by it."""
        before = {t.id for t in self.board.tasks.values() if t.state == State.RUNNING}
        self.board.dispatch()
        self.commit()
        return [
            t.id for t in self.board.tasks.values()
            if t.state == State.RUNNING and t.id not in before
        ]  # fmt: skip

    def out(self, task_id: str, output: str = "ok") -> Task:
        epoch = self.board.tasks[task_id].epoch
        task = self.board.out(self.agent, task_id, epoch, output, None)
        self.commit()
        return task

    def fail(self, task_id: str) -> Task:
        epoch = self.board.tasks[task_id].epoch
        task = self.board.fail(self.agent, task_id, epoch, "it broke")
        self.commit()
        return task

    def run(self, task_id: str, ok: bool = True) -> Task:
        """Dispatch, and end ``task_id``'s session (which must be among those assigned)."""
        assert task_id in self.dispatch() or self.board.tasks[task_id].state == State.RUNNING
        return self.out(task_id) if ok else self.fail(task_id)

    def get(self, task_id: str) -> Task:
        return self.board.get(task_id)

    def ledger(self, task_id: str) -> list[tuple[str | None, str, str | None]]:
        return [
            (row.from_state, row.to_state, row.reason)
            for row in self.store.ledger({}, 10_000, task=task_id)
        ]

    def released(self, task_id: str) -> int:
        reasons = (reason or "" for _, _, reason in self.ledger(task_id))
        return sum(1 for reason in reasons if reason.startswith("released"))


@pytest.fixture
def run(tmp_path: Path) -> Iterator[Run]:
    made = Run(tmp_path / "board.sqlite")
    yield made
    made.store.close()


def test_a_chain_runs_in_order_each_step_released_once(run: Run) -> None:
    plan = run.submit("plan")
    build = run.submit("implement", plan)
    check = run.submit("test", build)
    assert run.dispatch() == [plan]  # the others wait
    assert run.board.why(build).summary == f"waits for 1 task: {plan} (running)"
    assert run.board.why(check).summary == f"waits for 1 task: {build} (pending)"
    assert run.board.status()["blocked"] == 2
    run.out(plan)
    assert run.dispatch() == [build]
    assert run.released(build) == 1
    assert ("pending", "pending", "released: every task it waited for is done") in run.ledger(build)
    run.out(build)
    assert run.dispatch() == [check]
    run.out(check)
    assert [run.released(t) for t in (plan, build, check)] == [0, 1, 1]
    assert run.board.status()["blocked"] == 0


def test_fan_in_waits_for_the_last_and_fan_out_releases_every_one(run: Run) -> None:
    sources = [run.submit(f"source {i}") for i in range(3)]
    join = run.submit("join", *sources)
    fans = [run.submit(f"fan {i}", join) for i in range(5)]
    assert sorted(run.dispatch()) == sorted(sources)
    run.out(sources[0])
    run.out(sources[2])
    assert run.dispatch() == []
    assert run.board.why(join).summary == f"waits for 1 task: {sources[1]} (running)"
    run.out(sources[1])
    assert run.dispatch() == [join]
    run.out(join)
    assert sorted(run.dispatch()) == sorted(fans)


def test_a_task_after_one_already_done_is_not_held_back(run: Run) -> None:
    first = run.submit("first")
    run.run(first)
    second = run.submit("second", first)
    assert run.board.waits_because(run.get(second)) is None
    assert run.dispatch() == [second]
    assert run.released(second) == 0  # never held: nothing to release


def test_a_failed_dependency_cancels_its_dependents_and_theirs(run: Run) -> None:
    first = run.submit("first")
    second = run.submit("second", first)
    third = run.submit("third", second)
    run.run(first, ok=False)
    assert run.get(second).outcome == "cancelled"
    assert run.get(third).outcome == "cancelled"
    assert ("pending", "cancelled", f"dependency {first} failed") in run.ledger(second)
    assert ("pending", "cancelled", f"dependency {second} was cancelled") in run.ledger(third)
    assert run.board.status()["blocked"] == 0


def test_policy_run_releases_after_a_failure_and_wait_waits_for_the_retry(run: Run) -> None:
    first = run.submit("first")
    runs_anyway = run.submit("runs anyway", first, if_dependency_fails="run")
    waits = run.submit("waits", first, if_dependency_fails="wait")
    cancelled = run.submit("cancelled", first)
    run.run(first, ok=False)
    assert run.get(cancelled).outcome == "cancelled"
    assert run.dispatch() == [runs_anyway]
    assert run.released(runs_anyway) == 1
    reasons = [r for _, _, r in run.ledger(runs_anyway)]
    assert "released: every task it waited for has ended" in reasons
    assert run.get(waits).state == "pending"
    assert run.board.why(waits).summary == f"waits for 1 task: {first} (failed)"
    retry = run.board.retry(first)
    run.commit()
    assert run.get(waits).after == [retry.id]
    rewritten = ("pending", "pending", f"waits for {retry.id}, the retry of {first}")
    assert rewritten in run.ledger(waits)
    run.restart()  # the rewrite is durable
    assert run.get(waits).after == [retry.id]
    assert run.dispatch() == [retry.id]
    run.out(retry.id)
    assert run.dispatch() == [waits]
    assert run.released(waits) == 1


def test_a_dependency_retried_within_its_attempts_keeps_its_dependents_waiting(run: Run) -> None:
    first = run.submit("first", max_attempts=2)
    second = run.submit("second", first)
    assert run.dispatch() == [first]
    assert run.fail(first).state == "pending"  # back in line after its backoff
    assert run.get(second).state == "pending"
    assert second in run.board.dependencies.waiting
    while run.clock.wall <= parse_rfc3339(run.get(first).not_before or ""):
        run.clock.advance(1.0)  # a sweep a second, as the daemon's (a longer gap is a stall)
        run.board.sweep()
    run.run(first)
    assert run.dispatch() == [second]


def test_cancelling_a_waiting_task_cancels_what_waits_for_it(run: Run) -> None:
    first = run.submit("first")
    second = run.submit("second", first)
    third = run.submit("third", second)
    run.board.cancel(second, None)
    run.commit()
    assert run.get(third).outcome == "cancelled"
    assert run.board.status()["blocked"] == 0
    run.run(first)  # its dependents are gone: nothing to release
    assert run.dispatch() == []


def test_waits_survive_a_restart_and_release_exactly_once(run: Run) -> None:
    first = run.submit("first")
    second = run.submit("second", first)
    third = run.submit("third", first, second)
    run.restart()
    assert set(run.board.dependencies.waiting) == {second, third}
    assert run.dispatch() == [first]
    run.out(first)
    run.restart()  # released, not yet dispatched: released again? never
    assert run.dispatch() == [second]
    run.out(second)
    run.restart()
    assert run.dispatch() == [third]
    assert [run.released(t) for t in (second, third)] == [1, 1]


def test_bad_dependencies_are_refused_and_nothing_is_written(run: Run) -> None:
    failed = run.submit("fails")
    run.run(failed, ok=False)
    other = run.submit("of another tenant", tenant="acme")
    seq = sum(run.store.ledger_heads().values())
    with pytest.raises(UnknownTask):
        run.submit("after nothing", "0197a0e0-0000-7000-8000-00000000dead")
    with pytest.raises(UnknownTask):
        run.submit("after another tenant's", other)
    with pytest.raises(BadRequest, match="cancelled at once; wait for a retry of it instead"):
        run.submit("after a failure", failed)
    assert sum(run.store.ledger_heads().values()) == seq
    released = run.submit("runs anyway", failed, if_dependency_fails="run")
    assert run.dispatch() == [released]


def test_a_chain_of_waits_past_max_depth_is_refused(tmp_path: Path) -> None:
    run = Run(tmp_path / "deep.sqlite", max_depth=3)
    try:
        last = run.submit("root")
        for i in range(3):
            last = run.submit(f"step {i}", last)
        with pytest.raises(QuotaExceeded, match="chain of 4 waiting tasks, more than 3"):
            run.submit("too deep", last)
    finally:
        run.store.close()


def test_a_plan_names_its_steps_and_is_admitted_in_its_order(run: Run) -> None:
    items = [
        (TaskSpec(text="review", after=["test"]), None),
        (TaskSpec(text="test", after=["build"]), None),
        (TaskSpec(text="plan"), None),
        (TaskSpec(text="build", after=["plan"]), None),
    ]
    made = run.board.submit_all(items, ["review", "test", "plan", "build"])
    run.commit()
    review, test, plan, build = (t.id for t, _ in made)
    assert [t.text for t, _ in made] == ["review", "test", "plan", "build"]
    assert run.get(review).after == [test]
    assert run.get(test).after == [build]
    assert run.dispatch() == [plan]
    for step, following in ((plan, build), (build, test), (test, review)):
        run.out(step)
        assert run.dispatch() == [following]


def test_a_plan_with_a_circle_or_a_name_twice_is_refused_whole(run: Run) -> None:
    seq = sum(run.store.ledger_heads().values())
    circle = [
        (TaskSpec(text="a"), None),
        (TaskSpec(text="b", after=["d"]), None),
        (TaskSpec(text="c", after=["b"]), None),
        (TaskSpec(text="d", after=["c"]), None),
    ]
    with pytest.raises(ColibriError, match=r"waits in a circle: b → d → c → b") as refused:
        run.board.submit_all(circle, ["a", "b", "c", "d"])
    assert refused.value.index == 1
    with pytest.raises(ColibriError, match="given to submissions 0 and 1") as twice:
        run.board.submit_all(circle[:2], ["a", "a"])
    assert twice.value.index == 1
    assert sum(run.store.ledger_heads().values()) == seq
    assert run.store.list_tasks(TaskFilter()) == []


def test_a_chain_of_a_thousand_is_cancelled_from_its_first(tmp_path: Path) -> None:
    """A failed first task cancels the 999 waiting behind it, each telling the next: one after
    another, not a call within a call (which a thousand would take past Python's limit)."""
    run = Run(tmp_path / "long.sqlite", max_depth=1000)
    try:
        first = last = run.submit("first")
        for i in range(999):
            last = run.submit(f"step {i}", last)
        run.run(first, ok=False)
        assert run.get(last).outcome == "cancelled"
        assert run.board.status()["blocked"] == 0
        assert run.board.tasks == {}
    finally:
        run.store.close()


def test_cancelling_a_family_whose_members_wait_for_each_other_cancels_all_of_it(
    run: Run,
) -> None:
    """A member cancelled with the one it waited for is not cancelled twice: the rest of the
    family is cancelled all the same, and the reply names every task the cancel ended."""
    parent = run.submit("parent")
    assert run.dispatch() == [parent]
    first = run.board.submit(TaskSpec(text="c1", parent=parent, capabilities=["nobody"]))[0].id
    second = run.board.submit(TaskSpec(text="c2", parent=parent, after=[first]))[0].id
    third = run.board.submit(TaskSpec(text="c3", parent=parent, capabilities=["nobody"]))[0].id
    outside = run.board.submit(TaskSpec(text="after c1, no family", after=[first]))[0].id
    run.commit()
    cancelled = run.board.cancel(parent, None)
    run.commit()
    assert {t.id for t in cancelled} == {parent, first, second, third, outside}
    for task_id in (first, second, third, outside):
        assert run.get(task_id).outcome == "cancelled", task_id
    assert run.board.status()["blocked"] == 0 and not run.board.queue.pending


def test_a_plan_cannot_wait_across_tenants(run: Run) -> None:
    """Even the owner's plan: a task waits only for tasks of its own tenant (another's would
    show it to a tenant's token, and on a hive it may not be served by the same daemon)."""
    items = [(TaskSpec(text="alpha's", tenant="alpha"), None),
             (TaskSpec(text="beta's", tenant="beta", after=["a"]), None)]  # fmt: skip
    with pytest.raises(UnknownTask) as refused:
        run.board.submit_all(items, ["a", None])
    assert refused.value.index == 1
    assert run.store.list_tasks(TaskFilter()) == []
