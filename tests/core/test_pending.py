"""Dispatch order: priority, then first in first out, ageing, and no head-of-line blocking."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from colibri.core.matching import Shape
from colibri.core.pending import PendingTasks, sort_key
from colibri.daemon.board import new_task_id

ANY = Shape(frozenset())
BSD = Shape(frozenset({"freebsd"}))
LINUX = Shape(frozenset({"linux"}))
GPU = Shape(frozenset({"gpu"}))


def new_id() -> str:
    """Task ids as the board makes them: UUIDv7, time-ordered."""
    return new_task_id()


def always(agent: str = "a") -> Callable[[Shape], str | None]:
    return lambda shape: agent


def drain(pending: PendingTasks, pick: Callable[[Shape], str | None]) -> list[str]:
    return [task_id for task_id, _ in pending.placements(pick)]


def test_uuid7_ids_sort_in_creation_order() -> None:
    ids = [new_id() for _ in range(50)]
    assert ids == sorted(ids)


def test_higher_priority_first_then_first_in_first_out() -> None:
    pending = PendingTasks()
    low1, high1, mid, low2, high2 = (new_id() for _ in range(5))
    for task_id, priority in ((low1, 0), (high1, 5), (mid, 1), (low2, 0), (high2, 5)):
        pending.add(task_id, ANY, sort_key(priority, 0.0, task_id, None))
    assert len(pending) == 5
    assert drain(pending, always()) == [high1, high2, mid, low1, low2]
    assert len(pending) == 0


def test_order_holds_across_shapes() -> None:
    pending = PendingTasks()
    plan = [("t1", BSD, 0), ("t2", LINUX, 3), ("t3", BSD, 3), ("t4", GPU, 1), ("t5", LINUX, 0)]
    for task_id, shape, priority in plan:
        pending.add(task_id, shape, sort_key(priority, 0.0, task_id, None))
    placed = list(pending.placements(always("agent-7")))
    assert placed == [
        ("t2", "agent-7"),
        ("t3", "agent-7"),
        ("t4", "agent-7"),
        ("t1", "agent-7"),
        ("t5", "agent-7"),
    ]


def test_negative_priority_goes_after_the_default() -> None:
    pending = PendingTasks()
    pending.add("t1", ANY, sort_key(-1, 0.0, "t1", None))
    pending.add("t2", ANY, sort_key(0, 0.0, "t2", None))
    assert drain(pending, always()) == ["t2", "t1"]


def test_without_ageing_an_old_low_priority_task_waits() -> None:
    pending = PendingTasks()
    pending.add("t1-old", ANY, sort_key(0, 1_000.0, "t1-old", None))
    pending.add("t2-new", ANY, sort_key(1, 10_000.0, "t2-new", None))
    assert drain(pending, always()) == ["t2-new", "t1-old"]


def test_ageing_lets_an_old_low_priority_task_overtake_a_newer_higher_one() -> None:
    ageing = 300.0  # one priority point per 5 minutes of waiting
    start = 1_750_000_000.0
    pending = PendingTasks()
    # Waited 20 minutes longer: four points gained, more than the newer task's lead of 3.
    pending.add("t1-old", ANY, sort_key(0, start, "t1-old", ageing))
    pending.add("t2-new", ANY, sort_key(3, start + 1_200.0, "t2-new", ageing))
    assert drain(pending, always()) == ["t1-old", "t2-new"]


def test_ageing_does_not_overtake_before_enough_time_has_passed() -> None:
    ageing = 300.0
    start = 1_750_000_000.0
    pending = PendingTasks()
    # Waited 10 minutes longer: two points gained, less than the newer task's lead of 3.
    pending.add("t1-old", ANY, sort_key(0, start, "t1-old", ageing))
    pending.add("t2-new", ANY, sort_key(3, start + 600.0, "t2-new", ageing))
    assert drain(pending, always()) == ["t2-new", "t1-old"]


def test_ageing_keeps_first_in_first_out_at_equal_priority() -> None:
    ageing = 60.0
    start = 1_750_000_000.0
    pending = PendingTasks()
    # Added newest first, so insertion order cannot be what decides.
    for n in reversed(range(5)):
        task_id = f"t{n}"
        pending.add(task_id, ANY, sort_key(2, start + n * 7.0, task_id, ageing))
    assert drain(pending, always()) == ["t0", "t1", "t2", "t3", "t4"]


def test_an_unplaceable_shape_does_not_block_other_shapes() -> None:
    pending = PendingTasks()
    # The oldest, highest-priority tasks need a GPU and no GPU agent exists.
    pending.add("t1", GPU, sort_key(9, 0.0, "t1", None))
    pending.add("t2", GPU, sort_key(9, 0.0, "t2", None))
    pending.add("t3", BSD, sort_key(0, 0.0, "t3", None))
    pending.add("t4", LINUX, sort_key(0, 0.0, "t4", None))
    agents = {BSD: "bsd-1", LINUX: "linux-1"}
    placed = list(pending.placements(agents.get))
    assert placed == [("t3", "bsd-1"), ("t4", "linux-1")]
    # The GPU tasks are still waiting, in order, for a later pass.
    assert "t1" in pending and "t2" in pending and len(pending) == 2
    assert drain(pending, always("gpu-1")) == ["t1", "t2"]


def test_pick_is_asked_once_per_unplaceable_shape() -> None:
    pending = PendingTasks()
    for n in range(100):
        pending.add(f"gpu-{n:03}", GPU, sort_key(0, 0.0, f"gpu-{n:03}", None))
    for n in range(3):
        pending.add(f"bsd-{n}", BSD, sort_key(0, 0.0, f"bsd-{n}", None))
    calls: Counter[Shape] = Counter()

    def pick(shape: Shape) -> str | None:
        calls[shape] += 1
        return "bsd-1" if shape == BSD else None

    placed = drain(pending, pick)
    assert placed == ["bsd-0", "bsd-1", "bsd-2"]
    assert calls[GPU] == 1
    # One call per placed task of the placeable shape; it stops once the shape is empty.
    assert calls[BSD] == 3
    assert len(pending) == 100


def test_a_shape_stops_when_its_agents_run_out() -> None:
    pending = PendingTasks()
    for n in range(5):
        pending.add(f"t{n}", BSD, sort_key(0, 0.0, f"t{n}", None))
    slots = {"bsd-1": 2}
    calls = 0

    def pick(shape: Shape) -> str | None:
        nonlocal calls
        calls += 1
        free = [name for name, n in slots.items() if n > 0]
        return free[0] if free else None

    placed = []
    for task_id, agent in pending.placements(pick):
        slots[agent] -= 1  # the caller claims before asking for the next
        placed.append(task_id)
    assert placed == ["t0", "t1"]
    assert calls == 3
    assert len(pending) == 3


def test_discard_removes_a_task() -> None:
    pending = PendingTasks()
    for task_id in ("t1", "t2", "t3"):
        pending.add(task_id, BSD, sort_key(0, 0.0, task_id, None))
    pending.add("t4", LINUX, sort_key(0, 0.0, "t4", None))
    pending.discard("t1")
    pending.discard("t4")
    pending.discard("never-added")
    assert "t1" not in pending and "t4" not in pending
    assert len(pending) == 2
    calls: Counter[Shape] = Counter()

    def pick(shape: Shape) -> str | None:
        calls[shape] += 1
        return "a"

    assert drain(pending, pick) == ["t2", "t3"]
    # LINUX lost its only task, so it is not even asked about.
    assert calls[LINUX] == 0


def test_adding_a_task_twice_keeps_one() -> None:
    pending = PendingTasks()
    pending.add("t1", BSD, sort_key(0, 0.0, "t1", None))
    pending.add("t1", BSD, sort_key(5, 0.0, "t1", None))
    assert len(pending) == 1
    assert drain(pending, always()) == ["t1"]


def test_a_discarded_task_can_be_added_again() -> None:
    pending = PendingTasks()
    pending.add("t1", BSD, sort_key(0, 0.0, "t1", None))
    pending.add("t2", BSD, sort_key(0, 0.0, "t2", None))
    pending.discard("t1")
    pending.add("t1", LINUX, sort_key(1, 0.0, "t1", None))
    assert list(pending.placements(always())) == [("t1", "a"), ("t2", "a")]
    assert len(pending) == 0


def test_placed_tasks_are_removed_before_they_are_yielded() -> None:
    pending = PendingTasks()
    pending.add("t1", BSD, sort_key(0, 0.0, "t1", None))
    pending.add("t2", BSD, sort_key(0, 0.0, "t2", None))
    for task_id, _ in pending.placements(always()):
        assert task_id not in pending
    assert len(pending) == 0
