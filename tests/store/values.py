"""Values the store tests write: tasks and ledger rows with every field set, and the few steps
(insert, compare-and-set) the tests take again and again."""

from __future__ import annotations

from typing import Any

import msgspec

from colibri.core.model import Change, Cost, LedgerEntry, Task, TaskSpec
from colibri.core.plans import Step
from colibri.core.schedules import Schedule
from colibri.store import Store

AT = "2026-01-02T03:04:05.678Z"
LATER = "2026-01-02T03:09:00.000Z"


def make_task(task_id: str, **fields: Any) -> Task:
    task = Task(id=task_id, text=f"task {task_id}", capabilities=[], created_at=AT, updated_at=AT)
    return msgspec.structs.replace(task, **fields)


def entry_for(task: Task, from_state: str | None = None, reason: str | None = None) -> LedgerEntry:
    return LedgerEntry(
        at=task.updated_at,
        task=task.id,
        tenant=task.tenant,
        from_state=from_state,
        to_state=task.state,
        agent=task.agent,
        epoch=task.epoch,
        reason=reason if reason is not None else ("submitted" if from_state is None else None),
    )


def add(store: Store, task: Task) -> LedgerEntry:
    return store.insert_task(task, entry_for(task))


def move(store: Store, task: Task, **changes: Any) -> tuple[Task, LedgerEntry]:
    """Write a changed copy of ``task`` by compare-and-set against its current state/epoch."""
    new = msgspec.structs.replace(task, updated_at=LATER, **changes)
    entry = store.update_task(new, task.state, task.epoch, entry_for(new, task.state))
    return new, entry


def ids(tasks: list[Task]) -> list[str]:
    return [t.id for t in tasks]


FULL_TASK = Task(
    id="t0001",
    text="upgrade zfs\non the build hosts ✓ \"quoted\" 'and' ; -- not sql",
    capabilities=["zfs", "freebsd"],  # order is kept, not sorted
    workspace="ops",
    agent="bsd-1",
    pinned=True,
    parent="t0000",
    sender="api",
    question="which database?",
    budget_usd=2.5,
    priority=-7,
    min_score=0.75,
    state="done",
    outcome="done",
    output="all good\n",
    error="a warning",
    cost=Cost(tokens_in=10, tokens_out=20, usd=0.125, model="model-1"),
    attempts=2,
    max_attempts=3,
    epoch=4,
    tenant="acme",
    labels=["release", "urgent"],
    idempotency_key="key-1",
    not_before=LATER,
    schedule="nightly",
    after=["t0000", "t0003"],  # order is kept
    if_dependency_fails="wait",
    base="release/2.x",
    change=Change(
        branch="colibri/t0001-upgrade-zfs", base="9c1e2f4" * 5 + "ab", head="0aa1" * 10,
        files=3, insertions=40, deletions=2, worktree="/srv/kept",
    ),  # fmt: skip
    created_at=AT,
    updated_at=LATER,
)
MINIMAL_TASK = make_task("t0002")  # every optional field None, empty lists, defaults
FULL_ENTRY = LedgerEntry(
    at=LATER,
    task="t0001",
    schedule="nightly",
    tenant="acme",
    from_state="pending",
    to_state="done",
    agent="linux-1",
    epoch=3,
    reason="out",
    cost=Cost(tokens_in=1, tokens_out=2, usd=0.5, model="m"),
    uid=1000,
    pid=4242,
)
FULL_SCHEDULE = Schedule(
    name="nightly",
    kind="cron",
    cron="0 0 * * *",
    tz="Europe/Ljubljana",
    every=90.0,  # the store keeps what it is given; the core decides what makes sense
    at=AT,
    catch_up="all",
    catch_up_max=7,
    grace=30.0,
    overlap="replace",
    jitter=1.5,
    task=TaskSpec(
        text='nightly build ✓ "quoted" ; -- not sql',
        capabilities=["freebsd", "zfs"],
        workspace="ops",
        agent="bsd-1",
        priority=3,
        min_score=0.5,
        labels=["nightly"],
        tenant="acme",
        max_attempts=2,
        parent="0197a0e0-0000-7000-8000-000000000001",  # the store keeps what it is given
        budget_usd=2.5,
        after=["0197a0e0-0000-7000-8000-000000000002"],
        if_dependency_fails="run",
        base="main",
    ),
    then=[Step(text="check the build", name="check", after=["task"], workspace="ops")],
    last_fire_tasks=["0197a0e0-0000-7000-8000-000000000003", "0197a0e0-0000-7000-8000-0000000004"],
    paused=True,
    finished=True,
    next_fire_at=LATER,
    last_fire_at=AT,
    last_task="t0001",
    fires=4,
    skipped=3,
    missed=2,
    refused=1,
    source="config",
    created_at=AT,
    updated_at=LATER,
)


def schedule(name: str, **fields: Any) -> Schedule:
    """A small interval schedule named ``name``."""
    plain = Schedule(name=name, kind="interval", every=60.0, task=TaskSpec(text=name))
    return msgspec.structs.replace(plain, **fields)
