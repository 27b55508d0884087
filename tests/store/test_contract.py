"""The Store contract: every backend in ``conftest.BACKENDS`` must pass the first part.

The second part checks what only the SQLite file can show: its identity (application_id,
user_version), refusing files that are not Colibri boards without touching them, the durability
pragmas, the file mode, and a real write fault (a file size limit set in a child process).
"""

from __future__ import annotations

import hashlib
import os
import random
import sqlite3
import stat
import subprocess
import sys
import textwrap
from contextlib import closing
from pathlib import Path
from typing import Any

import msgspec
import pytest

from colibri.core.errors import ConfigError
from colibri.core.model import Agent, Cost, LedgerEntry, Task
from colibri.store import Store, StoreConflict, TaskFilter
from colibri.store.sqlite import SqliteStore
from colibri.store.sqlite_schema import APPLICATION_ID, SCHEMA_VERSION
from tests.store.conftest import Backend

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


def _unset_fields(value: msgspec.Struct) -> list[str]:
    """Fields of ``value`` left at their default (or empty): a round trip would not test them."""
    unset = []
    for field in msgspec.structs.fields(value):
        got = getattr(value, field.name)
        if field.default is not msgspec.NODEFAULT:
            default = field.default
        elif field.default_factory is not msgspec.NODEFAULT:
            default = field.default_factory()
        else:
            default = None
        if got == default or got in ("", [], 0, False):
            unset.append(field.name)
    return unset


def test_the_round_trip_values_set_every_field() -> None:
    """A field added to Task or LedgerEntry must be added here, and so get tested."""
    assert _unset_fields(FULL_TASK) == []
    assert _unset_fields(FULL_ENTRY) == ["seq"]


# -- tasks: round trip and the ledger row -----------------------------------------------------


@pytest.mark.parametrize("task", [FULL_TASK, MINIMAL_TASK, make_task("t0003", cost=Cost())])
def test_insert_and_get_round_trip_every_field(backend: Backend, store: Store, task: Task) -> None:
    add(store, task)
    assert store.get_task(task.id) == task  # the writer reads its own uncommitted write
    store.commit()
    assert backend.open().get_task(task.id) == task
    assert store.get_task("no-such-task") is None


def test_insert_writes_a_ledger_row_and_seq_grows_by_one(store: Store) -> None:
    assert store.max_ledger_seq() == 0
    assert store.ledger(0, 100) == []
    rows = [add(store, make_task(f"t{n:04d}")) for n in range(5)]
    assert [r.seq for r in rows] == [1, 2, 3, 4, 5]
    assert store.max_ledger_seq() == 5
    store.commit()
    stored = store.ledger(0, 100)
    assert stored == rows
    assert [(e.task, e.from_state, e.to_state, e.reason) for e in stored] == [
        (f"t{n:04d}", None, "pending", "submitted") for n in range(5)
    ]
    task = store.get_task("t0002")
    assert task is not None
    _, row = move(store, task, state="running", agent="a1", epoch=1, attempts=1)
    assert row.seq == 6
    assert store.max_ledger_seq() == 6


def test_ledger_entry_round_trips_every_field(store: Store) -> None:
    task = make_task("t0001", tenant="acme")
    first = add(store, task)
    entry = msgspec.structs.replace(FULL_ENTRY)  # the store sets seq on the value it is given
    done = msgspec.structs.replace(task, state="done", outcome="done", agent="linux-1", epoch=3)
    second = store.update_task(done, "pending", 0, entry)
    store.commit()
    assert second.seq == first.seq + 1
    assert store.ledger(0, 10) == [first, second]
    assert store.ledger(0, 10)[1] == msgspec.structs.replace(FULL_ENTRY, seq=2)


# -- unit of work: commit, rollback, what another connection sees -------------------------------


def test_nothing_is_visible_to_another_connection_until_commit(backend: Backend) -> None:
    writer = backend.open()
    reader = backend.open()
    add(writer, make_task("t0001", idempotency_key="k"))
    writer.ensure_tenant("acme", AT)
    writer.upsert_agent(Agent(name="a1", capabilities=["python"]), AT)
    writer.ensure_skills(["python"])
    # The writer sees its own batch (the daemon relies on it within one group commit) ...
    assert writer.get_task("t0001") is not None
    found = writer.find_idempotent("default", "k")
    assert found is not None and found.id == "t0001"
    assert writer.max_ledger_seq() == 1
    # ... nobody else does.
    assert reader.get_task("t0001") is None
    assert reader.find_idempotent("default", "k") is None
    assert reader.list_tasks(TaskFilter()) == []
    assert reader.open_tasks() == []
    assert reader.count_by_state() == {}
    assert reader.ledger(0, 10) == []
    assert reader.max_ledger_seq() == 0
    assert reader.agents() == []
    assert reader.skills() == []
    writer.commit()
    assert ids(reader.list_tasks(TaskFilter())) == ["t0001"]
    assert [e.task for e in reader.ledger(0, 10)] == ["t0001"]
    assert reader.max_ledger_seq() == 1
    assert [a.name for a in reader.agents()] == ["a1"]
    assert reader.skills() == [("python", "", 1)]
    assert backend.query("SELECT name, created_at FROM tenants") == [("acme", AT)]


def test_rollback_discards_the_whole_batch(backend: Backend, store: Store) -> None:
    kept = make_task("t0001")
    add(store, kept)
    store.commit()
    add(store, make_task("t0002", idempotency_key="k"))
    move(store, kept, state="running", agent="a1", epoch=1)
    store.upsert_agent(Agent(name="a1", capabilities=["python"]), AT)
    store.ensure_skills(["python"])
    store.ensure_tenant("acme", AT)
    store.rollback()
    assert store.get_task("t0002") is None
    assert store.find_idempotent("default", "k") is None
    assert store.get_task("t0001") == kept
    assert store.max_ledger_seq() == 1
    assert store.agents() == [] and store.skills() == []
    assert backend.query("SELECT name FROM tenants") == []
    store.rollback()  # nothing open: harmless
    store.commit()  # nothing open: harmless
    assert backend.open().get_task("t0001") == kept
    # The store is usable after a rollback.
    assert add(store, make_task("t0003")).seq > 1
    store.commit()
    assert backend.open().get_task("t0003") is not None


def test_close_discards_an_uncommitted_batch(backend: Backend) -> None:
    first = backend.open()
    add(first, make_task("t0001"))
    first.commit()
    add(first, make_task("t0002"))
    backend.close(first)
    again = backend.open()
    assert ids(again.list_tasks(TaskFilter())) == ["t0001"]
    assert again.max_ledger_seq() == 1


# -- update_task: compare-and-set ---------------------------------------------------------------


def test_update_task_writes_when_state_and_epoch_match(backend: Backend, store: Store) -> None:
    task = make_task("t0001", max_attempts=2)
    add(store, task)
    running, claim = move(store, task, state="running", agent="a1", epoch=1, attempts=1)
    assert store.get_task("t0001") == running
    assert (claim.seq, claim.from_state, claim.to_state, claim.epoch) == (
        2,
        "pending",
        "running",
        1,
    )
    cost = Cost(tokens_in=5, usd=0.01)
    done, out = move(
        store, running, state="done", outcome="done", output="ok", error=None, cost=cost
    )
    assert (out.seq, out.from_state, out.to_state) == (3, "running", "done")
    store.commit()
    assert backend.open().get_task("t0001") == done
    assert [e.to_state for e in store.ledger(0, 10, task="t0001")] == [
        "pending",
        "running",
        "done",
    ]


def test_update_task_round_trips_every_field_a_transition_changes(store: Store) -> None:
    task = make_task("t0001", state="running", agent="a1", epoch=1, attempts=1, max_attempts=3)
    add(store, task)
    back, _ = move(
        store,
        task,
        state="pending",
        agent="a2",
        epoch=2,
        attempts=2,
        error="boom",
        output="partial",
        cost=Cost(tokens_out=3),
        not_before=LATER,
    )
    assert store.get_task("t0001") == back
    cleared, _ = move(store, back, agent=None, error=None, output=None, cost=None, not_before=None)
    assert store.get_task("t0001") == cleared


@pytest.mark.parametrize(
    ("expected_state", "expected_epoch"),
    [("running", 0), ("pending", 1), ("running", 1)],
    ids=["state-differs", "epoch-differs", "both-differ"],
)
def test_update_task_conflict_writes_nothing(
    backend: Backend, store: Store, expected_state: str, expected_epoch: int
) -> None:
    task = make_task("t0001")  # pending, epoch 0
    add(store, task)
    store.commit()
    new = msgspec.structs.replace(task, state="running", agent="a1", epoch=1, updated_at=LATER)
    with pytest.raises(StoreConflict):
        store.update_task(new, expected_state, expected_epoch, entry_for(new, expected_state))
    assert store.get_task("t0001") == task
    assert store.max_ledger_seq() == 1
    store.commit()
    assert backend.open().get_task("t0001") == task
    assert [e.seq for e in backend.open().ledger(0, 10)] == [1]
    # The compare-and-set with the right expectation still goes through afterwards.
    store.update_task(new, "pending", 0, entry_for(new, "pending"))
    store.commit()
    assert backend.open().get_task("t0001") == new


def test_update_of_an_unknown_task_is_a_conflict(store: Store) -> None:
    ghost = make_task("t-ghost", state="running", epoch=1)
    with pytest.raises(StoreConflict):
        store.update_task(ghost, "pending", 0, entry_for(ghost, "pending"))
    assert store.get_task("t-ghost") is None
    assert store.max_ledger_seq() == 0


def test_only_one_of_two_racing_claims_wins(store: Store) -> None:
    task = make_task("t0001")
    add(store, task)
    one = msgspec.structs.replace(task, state="running", agent="a1", epoch=1)
    two = msgspec.structs.replace(task, state="running", agent="a2", epoch=1)
    store.update_task(one, "pending", 0, entry_for(one, "pending"))
    with pytest.raises(StoreConflict):
        store.update_task(two, "pending", 0, entry_for(two, "pending"))
    assert store.get_task("t0001") == one
    assert [e.agent for e in store.ledger(0, 10, task="t0001")] == [None, "a1"]


# -- idempotency ---------------------------------------------------------------------------------


def test_find_idempotent(store: Store) -> None:
    mine = make_task("t0001", idempotency_key="deploy-42")
    theirs = make_task("t0002", tenant="acme", idempotency_key="deploy-42")
    add(store, mine)
    add(store, theirs)
    add(store, make_task("t0003"))
    store.commit()
    assert store.find_idempotent("default", "deploy-42") == mine
    assert store.find_idempotent("acme", "deploy-42") == theirs
    assert store.find_idempotent("default", "deploy-43") is None
    assert store.find_idempotent("other", "deploy-42") is None


def test_a_fingerprint_is_kept_with_its_task(backend: Backend, store: Store) -> None:
    store.insert_task(make_task("t0001", idempotency_key="k"), entry_for(make_task("t0001")),
                      "fp-1")  # fmt: skip
    add(store, make_task("t0002"))
    store.commit()
    reopened = backend.open()
    assert reopened.fingerprint("t0001") == "fp-1"
    assert reopened.fingerprint("t0002") is None
    assert reopened.fingerprint("t9999") is None
    found = reopened.find_idempotent("default", "k")
    assert found is not None and found.id == "t0001"  # the fingerprint is not part of the task


def test_a_fire_is_recorded_once_with_its_outcome_and_reason(
    backend: Backend, store: Store
) -> None:
    assert store.fire_recorded("nightly", AT) is False
    assert store.record_fire("nightly", AT, "fired", "t0001", AT) is True
    assert store.record_fire("nightly", LATER, "refused", None, LATER, "quota_exceeded: full")
    # a second record of the same nominal time writes nothing, whatever its outcome
    assert store.record_fire("nightly", AT, "refused", None, LATER, "again") is False
    assert store.record_fire("other", AT, "missed", None, AT) is True
    store.commit()
    reopened = backend.open()
    assert reopened.fire_recorded("nightly", AT) and reopened.fire_recorded("nightly", LATER)
    assert not reopened.fire_recorded("nightly", "2026-01-03T00:00:00.000Z")
    assert reopened.fires("nightly", 10) == [
        {"schedule": "nightly", "nominal": LATER, "outcome": "refused", "task": None,
         "at": LATER, "reason": "quota_exceeded: full"},
        {"schedule": "nightly", "nominal": AT, "outcome": "fired", "task": "t0001", "at": AT,
         "reason": None},
    ]  # fmt: skip
    assert reopened.fires("nightly", 1)[0]["nominal"] == LATER


def test_cost_totals_at_the_bounds_of_a_session_never_overflow(store: Store) -> None:
    """Integers summed by SQL overflow at 2**63; the totals are floats that cannot."""
    for n in range(4):
        task = make_task(f"t000{n}", state="done", agent="a1")
        store.insert_task(task, msgspec.structs.replace(
            entry_for(task), cost=Cost(tokens_in=2**63 - 1, tokens_out=10**12, usd=1e6)
        ))  # fmt: skip
    store.commit()
    (row,) = store.cost_totals("agent", "")
    assert row["key"] == "a1" and row["sessions"] == 4
    assert row["tokens_in"] == pytest.approx(4 * (2**63 - 1))
    assert row["tokens_out"] == 4 * 10**12 and row["usd"] == 4e6


def test_idempotency_key_is_unique_within_a_tenant(backend: Backend, store: Store) -> None:
    """A second insert with a tenant's key is a ``StoreConflict``, never the driver's error.

    Only the failing insert is undone: the batch's earlier writes stand and commit, and the
    store stays usable. The daemon never gets there: it looks the key up first with
    ``find_idempotent``.
    """
    first = make_task("t0001", idempotency_key="k")
    add(store, first)
    store.commit()
    before = add(store, make_task("t0000"))  # in the same batch as the conflict
    with pytest.raises(StoreConflict, match="idempotency key 'k'") as caught:
        add(store, make_task("t0002", idempotency_key="k"))
    assert not isinstance(caught.value, sqlite3.Error)
    assert store.get_task("t0002") is None
    assert store.max_ledger_seq() == before.seq
    store.commit()
    assert ids(backend.open().list_tasks(TaskFilter())) == ["t0000", "t0001"]
    assert store.find_idempotent("default", "k") == first
    # Another tenant may use the same key; tasks without a key never collide.
    add(store, make_task("t0003", tenant="acme", idempotency_key="k"))
    add(store, make_task("t0004"))
    add(store, make_task("t0005"))
    store.commit()
    assert ids(backend.open().list_tasks(TaskFilter())) == [
        "t0000", "t0001", "t0003", "t0004", "t0005"
    ]  # fmt: skip
    found = store.find_idempotent("acme", "k")
    assert found is not None and found.id == "t0003"


@pytest.mark.parametrize("tenant", ["default", "acme"])
def test_duplicate_task_id_is_refused(backend: Backend, store: Store, tenant: str) -> None:
    """A task id is unique across tenants: a second insert is a ``StoreConflict`` that writes
    nothing of itself (no task, no ledger row) and leaves the rest of the batch to commit."""
    first = make_task("t0001")
    add(store, first)
    store.commit()
    add(store, make_task("t0000"))
    with pytest.raises(StoreConflict, match="t0001") as caught:
        add(store, make_task("t0001", text="another", tenant=tenant))
    assert not isinstance(caught.value, sqlite3.Error)
    assert store.get_task("t0001") == first
    assert store.max_ledger_seq() == 2
    store.commit()
    reader = backend.open()
    assert reader.get_task("t0001") == first
    assert ids(reader.list_tasks(TaskFilter())) == ["t0000", "t0001"]
    assert [e.task for e in reader.ledger(0, 10)] == ["t0001", "t0000"]


# -- queries -------------------------------------------------------------------------------------


def _board(store: Store) -> list[Task]:
    """Twelve tasks across states, agents, workspaces, parents and tenants, inserted shuffled."""
    tasks = [
        make_task("t01", state="pending"),
        make_task("t02", state="running", agent="a1", epoch=1, workspace="ci"),
        make_task("t03", state="done", outcome="done", agent="a1", parent="t01"),
        make_task("t04", state="failed", outcome="failed", agent="a2", parent="t01"),
        make_task("t05", state="pending", workspace="ci", parent="t02"),
        make_task("t06", state="cancelled", outcome="cancelled", tenant="acme"),
        make_task("t07", state="closed", outcome="done", agent="a2", tenant="acme"),
        make_task("t08", state="running", agent="a2", epoch=1, tenant="acme", workspace="ci"),
        make_task("t09", state="pending", agent="a1", pinned=True, parent="t01"),
        make_task("t10", state="pending", tenant="acme", parent="t06"),
        make_task("t11", state="running", agent="a1", epoch=2, parent="t03"),
        make_task("t12", state="closed", outcome="failed", workspace="ops"),
    ]
    for task in random.Random(7).sample(tasks, len(tasks)):
        add(store, task)
    store.commit()
    return tasks


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        (TaskFilter(), "t01 t02 t03 t04 t05 t06 t07 t08 t09 t10 t11 t12"),
        (TaskFilter(state="pending"), "t01 t05 t09 t10"),
        (TaskFilter(state="running"), "t02 t08 t11"),
        (TaskFilter(state="closed"), "t07 t12"),
        (TaskFilter(state="nothing"), ""),
        (TaskFilter(agent="a1"), "t02 t03 t09 t11"),
        (TaskFilter(agent="a2"), "t04 t07 t08"),
        (TaskFilter(workspace="ci"), "t02 t05 t08"),
        (TaskFilter(parent="t01"), "t03 t04 t09"),
        (TaskFilter(tenant="acme"), "t06 t07 t08 t10"),
        (TaskFilter(tenant="default"), "t01 t02 t03 t04 t05 t09 t11 t12"),
        (TaskFilter(state="running", tenant="acme"), "t08"),
        (TaskFilter(state="pending", parent="t01", agent="a1"), "t09"),
        (TaskFilter(workspace="ci", agent="a1"), "t02"),
        (TaskFilter(after="t06"), "t07 t08 t09 t10 t11 t12"),
        (TaskFilter(state="pending", after="t05"), "t09 t10"),
        (TaskFilter(limit=3), "t01 t02 t03"),
        (TaskFilter(tenant="acme", after="t06", limit=2), "t07 t08"),
    ],
)
def test_list_tasks_filters(store: Store, query: TaskFilter, expected: str) -> None:
    tasks = {t.id: t for t in _board(store)}
    found = store.list_tasks(query)
    assert ids(found) == expected.split()
    assert all(t == tasks[t.id] for t in found)


@pytest.mark.parametrize("limit", [1, 7, 40, 41, 100])
def test_list_tasks_pages_cover_every_task_once_in_id_order(store: Store, limit: int) -> None:
    all_ids = [f"t{n:03d}" for n in range(40)]
    for task_id in random.Random(limit).sample(all_ids, len(all_ids)):
        add(store, make_task(task_id, tenant="acme" if task_id.endswith("3") else "default"))
    store.commit()
    seen: list[str] = []
    after: str | None = None
    while True:
        page = store.list_tasks(TaskFilter(after=after, limit=limit))
        assert len(page) <= limit
        if not page:
            break
        seen += ids(page)
        after = page[-1].id
    assert seen == all_ids
    acme: list[str] = []
    after = None
    while page := store.list_tasks(TaskFilter(tenant="acme", after=after, limit=limit)):
        acme += ids(page)
        after = page[-1].id
    assert acme == [i for i in all_ids if i.endswith("3")]


def test_children_are_the_direct_children_in_id_order(store: Store) -> None:
    _board(store)
    assert ids(store.children("t01")) == ["t03", "t04", "t09"]
    assert ids(store.children("t03")) == ["t11"]
    assert ids(store.children("t06")) == ["t10"]
    assert store.children("t12") == []
    assert store.children("no-such-task") == []


def test_open_family_is_every_pending_or_running_member_at_any_depth_root_first(
    store: Store,
) -> None:
    tasks = {t.id: t for t in _board(store)}
    # t11 is open below t03, which is done: an ended member's children are still searched.
    assert ids(store.open_family("t01")) == ["t01", "t09", "t11"]
    assert all(t == tasks[t.id] for t in store.open_family("t01"))
    assert ids(store.open_family("t03")) == ["t11"]  # the root itself ended
    assert ids(store.open_family("t06")) == ["t10"]
    assert ids(store.open_family("t02")) == ["t02", "t05"]
    assert store.open_family("t12") == []
    assert store.open_family("no-such-task") == []
    move(store, tasks["t11"], state="closed")
    assert ids(store.open_family("t01")) == ["t01", "t09"]


def test_open_tasks_are_the_tasks_not_yet_closed_in_id_order(store: Store) -> None:
    """Ended tasks (done, failed, cancelled) stay open until closed: the daemon rebuilds them."""
    assert store.open_tasks() == []
    tasks = {t.id: t for t in _board(store)}
    found = store.open_tasks()
    assert ids(found) == "t01 t02 t03 t04 t05 t06 t08 t09 t10 t11".split()
    assert all(t == tasks[t.id] for t in found)
    move(store, tasks["t03"], state="closed")
    move(store, tasks["t01"], state="running", agent="a1", epoch=1)
    assert ids(store.open_tasks()) == "t01 t02 t04 t05 t06 t08 t09 t10 t11".split()


def test_count_by_state(store: Store) -> None:
    assert store.count_by_state() == {}
    _board(store)
    assert store.count_by_state() == {
        "pending": 4,
        "running": 3,
        "done": 1,
        "failed": 1,
        "cancelled": 1,
        "closed": 2,
    }
    task = store.get_task("t01")
    assert task is not None
    move(store, task, state="running", agent="a1", epoch=1)
    counts = store.count_by_state()
    assert (counts["pending"], counts["running"]) == (3, 4)


# -- the ledger ----------------------------------------------------------------------------------


def _ledger_history(store: Store) -> list[LedgerEntry]:
    """Three tasks, interleaved transitions: 8 rows."""
    rows = []
    a, b, c = make_task("t-a"), make_task("t-b"), make_task("t-c", tenant="acme")
    rows += [add(store, a), add(store, b)]
    a, row = move(store, a, state="running", agent="x", epoch=1)
    rows.append(row)
    rows.append(add(store, c))
    b, row = move(store, b, state="cancelled", outcome="cancelled")
    rows.append(row)
    a, row = move(store, a, state="done", outcome="done", output="ok")
    rows.append(row)
    for task in (a, b):
        _, row = move(store, task, state="closed")
        rows.append(row)
    store.commit()
    return rows


def test_ledger_order_after_and_limit(store: Store) -> None:
    rows = _ledger_history(store)
    assert [r.seq for r in rows] == list(range(1, 9))
    assert store.ledger(0, 100) == rows
    assert store.ledger(0, 3) == rows[:3]
    assert store.ledger(2, 3) == rows[2:5]
    assert store.ledger(7, 100) == rows[7:]
    assert store.ledger(8, 100) == []
    assert store.ledger(100, 100) == []
    assert store.max_ledger_seq() == 8
    pages: list[LedgerEntry] = []
    while page := store.ledger(pages[-1].seq if pages else 0, 3):
        pages += page
    assert pages == rows


def test_ledger_of_one_task(store: Store) -> None:
    rows = _ledger_history(store)
    of_a = [r for r in rows if r.task == "t-a"]
    assert [(r.from_state, r.to_state) for r in of_a] == [
        (None, "pending"),
        ("pending", "running"),
        ("running", "done"),
        ("done", "closed"),
    ]
    assert store.ledger(0, 100, task="t-a") == of_a
    assert store.ledger(0, 2, task="t-a") == of_a[:2]
    assert store.ledger(of_a[1].seq, 100, task="t-a") == of_a[2:]
    assert store.ledger(of_a[1].seq, 1, task="t-a") == of_a[2:3]
    assert store.ledger(0, 100, task="t-c") == [r for r in rows if r.task == "t-c"]
    assert store.ledger(0, 100, task="no-such-task") == []


# -- agents, tenants, skills -------------------------------------------------------------------


def test_agents_upsert_and_list_by_name(backend: Backend, store: Store) -> None:
    linux = Agent(
        name="linux-1",
        capabilities=["python", "linux"],
        slots=2,
        ttl=12.5,
        workspace="ci",
        tenant="acme",
        last_seen=AT,
    )
    bsd = Agent(name="bsd-1", capabilities=["freebsd"])
    store.upsert_agent(linux, AT)
    store.upsert_agent(bsd, AT)
    store.commit()
    assert store.agents() == [bsd, linux]
    changed = Agent(name="linux-1", capabilities=["linux"], slots=4, ttl=3.0, last_seen=LATER)
    store.upsert_agent(changed, LATER)
    store.commit()
    assert backend.open().agents() == [bsd, changed]


def test_ensure_tenant_is_idempotent(backend: Backend, store: Store) -> None:
    store.ensure_tenant("acme", AT)
    store.ensure_tenant("acme", LATER)
    store.ensure_tenant("beta", LATER)
    store.commit()
    store.ensure_tenant("acme", LATER)
    store.commit()
    rows = backend.query("SELECT name, created_at FROM tenants ORDER BY name")
    assert rows == [("acme", AT), ("beta", LATER)]


def test_skills_are_idempotent_and_count_agents(backend: Backend, store: Store) -> None:
    assert store.skills() == []
    store.ensure_skills(["python", "linux"])
    store.ensure_skills(["python", "zfs"])
    store.ensure_skills([])
    assert store.skills() == [("linux", "", 0), ("python", "", 0), ("zfs", "", 0)]
    store.upsert_agent(Agent(name="a1", capabilities=["python", "linux"]), AT)
    store.upsert_agent(Agent(name="a2", capabilities=["python", "rust"]), AT)
    store.upsert_agent(Agent(name="a3", capabilities=[]), AT)
    store.commit()
    # "rust" has an agent but was never ensured: skills() lists only known skills.
    assert backend.open().skills() == [("linux", "", 1), ("python", "", 2), ("zfs", "", 0)]
    store.upsert_agent(Agent(name="a1", capabilities=["zfs"]), LATER)
    assert store.skills() == [("linux", "", 0), ("python", "", 1), ("zfs", "", 1)]


def test_describe_skill(store: Store) -> None:
    store.ensure_skills(["python"])
    store.describe_skill("python", "runs Python 3.11+")
    store.describe_skill("zfs", "manages ZFS pools")  # an unknown skill is created
    store.ensure_skills(["python", "zfs"])  # keeps the descriptions
    assert store.skills() == [("python", "runs Python 3.11+", 0), ("zfs", "manages ZFS pools", 0)]
    store.describe_skill("python", "runs Python 3.12+")
    store.commit()
    assert store.skills()[0] == ("python", "runs Python 3.12+", 0)


# == SQLite only: the file ======================================================================


@pytest.fixture
def board(tmp_path: Path) -> Path:
    return tmp_path / "colibri.sqlite"


def _pragma(path: Path, name: str) -> Any:
    with closing(sqlite3.connect(path)) as conn:
        return conn.execute(f"PRAGMA {name}").fetchone()[0]


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_new_board_is_marked_as_a_colibri_board(board: Path) -> None:
    SqliteStore(str(board)).close()
    assert _pragma(board, "application_id") == APPLICATION_ID
    assert _pragma(board, "user_version") == SCHEMA_VERSION
    assert SCHEMA_VERSION >= 1


def test_reopening_a_board_keeps_its_data(board: Path) -> None:
    first = SqliteStore(str(board))
    add(first, FULL_TASK)
    first.upsert_agent(Agent(name="a1", capabilities=["zfs"]), AT)
    first.ensure_skills(["zfs"])
    first.commit()
    rows = first.ledger(0, 10)
    first.close()
    for _ in range(2):
        again = SqliteStore(str(board))
        assert again.get_task(FULL_TASK.id) == FULL_TASK
        assert again.ledger(0, 10) == rows
        assert again.skills() == [("zfs", "", 1)]
        again.close()
    assert _pragma(board, "user_version") == SCHEMA_VERSION


@pytest.mark.parametrize(
    "content",
    [os.urandom(8192), b"just some notes\n", b"SQLite format 3\x00" + b"\xff" * 200],
    ids=["random-bytes", "text", "broken-header"],
)
def test_a_file_that_is_not_sqlite_is_refused_untouched(board: Path, content: bytes) -> None:
    board.write_bytes(content)
    board.chmod(0o644)
    with pytest.raises(ConfigError, match="not a usable SQLite board") as caught:
        SqliteStore(str(board))
    assert str(board) in str(caught.value)
    assert board.read_bytes() == content
    assert stat.S_IMODE(board.stat().st_mode) == 0o644
    assert sorted(p.name for p in board.parent.iterdir()) == [board.name]


@pytest.mark.parametrize(
    "setup",
    [
        [
            "CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)",
            "INSERT INTO notes VALUES (1, 'x')",
        ],
        ["PRAGMA application_id = 1234"],
        ["PRAGMA journal_mode = WAL", "CREATE TABLE tasks (id TEXT PRIMARY KEY)"],
    ],
    ids=["other-tables", "other-application-id", "other-wal-with-a-tasks-table"],
)
def test_an_sqlite_file_of_another_program_is_refused_untouched(
    board: Path, setup: list[str]
) -> None:
    with closing(sqlite3.connect(board)) as conn:
        for statement in setup:
            conn.execute(statement)
        conn.commit()
    before = _digest(board)
    with pytest.raises(ConfigError, match="another program") as caught:
        SqliteStore(str(board))
    assert str(board) in str(caught.value)
    assert _digest(board) == before
    with closing(sqlite3.connect(board)) as conn:
        assert conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID
        assert conn.execute("PRAGMA user_version").fetchone()[0] == 0


def test_a_board_from_a_newer_colibri_is_refused(board: Path) -> None:
    SqliteStore(str(board)).close()
    with closing(sqlite3.connect(board)) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    before = _digest(board)
    with pytest.raises(ConfigError, match="newer") as caught:
        SqliteStore(str(board))
    assert str(board) in str(caught.value)
    assert _digest(board) == before
    assert _pragma(board, "user_version") == SCHEMA_VERSION + 1


def test_an_empty_file_becomes_a_board(board: Path) -> None:
    board.touch()
    store = SqliteStore(str(board))
    add(store, make_task("t0001"))
    store.commit()
    store.close()
    assert _pragma(board, "application_id") == APPLICATION_ID


@pytest.mark.parametrize(("durability", "synchronous"), [("full", 2), ("relaxed", 1)])
def test_wal_and_synchronous(board: Path, durability: str, synchronous: int) -> None:
    store = SqliteStore(str(board), durability=durability)
    try:
        # synchronous is a setting of the connection: only the store's own connection shows it.
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == synchronous
        assert store._conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        store.close()
    assert _pragma(board, "journal_mode") == "wal"  # persistent in the file


def test_default_durability_is_full(board: Path) -> None:
    from colibri.store import open_store

    store = open_store(str(board))
    try:
        assert isinstance(store, SqliteStore)
        assert store._conn.execute("PRAGMA synchronous").fetchone()[0] == 2
    finally:
        store.close()


def test_unknown_durability_is_a_config_error(board: Path) -> None:
    with pytest.raises(ConfigError, match="durability"):
        SqliteStore(str(board), durability="sometimes")


def test_a_new_board_is_private_to_its_owner(board: Path) -> None:
    old = os.umask(0o002)
    try:
        store = SqliteStore(str(board))
    finally:
        os.umask(old)
    try:
        add(store, make_task("t0001"))
        store.commit()
        assert stat.S_IMODE(board.stat().st_mode) == 0o600
        wal = board.with_name(board.name + "-wal")
        assert stat.S_IMODE(wal.stat().st_mode) == 0o600  # SQLite copies the board's mode
    finally:
        store.close()


_FAULT_SCRIPT = textwrap.dedent(
    """
    import json, os, resource, signal, sys

    from colibri.core.errors import StorageUnavailable
    from colibri.core.model import LedgerEntry, Task
    from colibri.store.sqlite import SqliteStore

    path = sys.argv[1]

    def add(store, task_id, text):
        task = Task(id=task_id, text=text, capabilities=[], created_at="t", updated_at="t")
        store.insert_task(task, LedgerEntry(at="t", task=task_id, to_state="pending"))

    store = SqliteStore(path)
    add(store, "t1", "small")
    store.commit()
    # From here on no file may grow: the next commit cannot append to the WAL.
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    limit = max(os.path.getsize(path), os.path.getsize(path + "-wal"))
    resource.setrlimit(resource.RLIMIT_FSIZE, (limit, hard))
    result = {}
    try:
        add(store, "t2", "x" * 400_000)
        store.commit()
        result["refused"] = None
    except StorageUnavailable as exc:
        result["refused"] = exc.code
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    result["t2_after_fault"] = store.get_task("t2") is not None
    add(store, "t3", "after the fault")
    store.commit()
    store.close()
    print(json.dumps(result))
    """
)


def test_a_commit_that_cannot_write_raises_storage_unavailable_and_rolls_back(
    board: Path,
) -> None:
    """A real write fault: the child process may not grow any file (RLIMIT_FSIZE)."""
    done = subprocess.run(
        [sys.executable, "-c", _FAULT_SCRIPT, str(board)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert msgspec.json.decode(done.stdout) == {
        "refused": "storage_unavailable",
        "t2_after_fault": False,
    }
    store = SqliteStore(str(board))
    try:
        assert ids(store.list_tasks(TaskFilter())) == ["t1", "t3"]
        assert [e.task for e in store.ledger(0, 10)] == ["t1", "t3"]
    finally:
        store.close()


_SPILL_SCRIPT = textwrap.dedent(
    """
    import json, os, resource, signal, sys

    from colibri.core.errors import StorageUnavailable
    from colibri.core.model import LedgerEntry, Task
    from colibri.store.base import TaskFilter
    from colibri.store.sqlite import SqliteStore

    path = sys.argv[1]

    def add(store, task_id, text):
        task = Task(id=task_id, text=text, capabilities=[], created_at="t", updated_at="t")
        store.insert_task(task, LedgerEntry(at="t", task=task_id, to_state="pending"))

    store = SqliteStore(path, durability="relaxed")
    for n in range(3000):
        add(store, f"old{n:05}", "y" * 300)
    store.commit()
    store._conn.execute("PRAGMA cache_size=20")  # so that the read below must spill
    for n in range(200):
        add(store, f"new{n:05}", "z" * 3000)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (os.path.getsize(path + "-wal"), hard))
    result = {}
    try:
        store.list_tasks(TaskFilter(limit=10_000))
        result["read"] = "ok"
    except Exception as exc:
        result["read"] = type(exc).__name__
    resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
    try:
        store.commit()
        result["commit"] = "ok"
    except StorageUnavailable as exc:
        result["commit"] = exc.code
    result["new_stored"] = store.get_task("new00000") is not None
    store.close()
    print(json.dumps(result))
    """
)


def test_a_batch_sqlite_rolled_back_by_itself_is_never_committed_as_done(board: Path) -> None:
    """A read in the batch meets an I/O error while spilling its cache (a file that may not
    grow), and SQLite rolls the whole transaction back by itself. The commit that follows
    must say the batch is gone, not return as if it had committed (its writes would have been
    acknowledged and lost)."""
    done = subprocess.run([sys.executable, "-c", _SPILL_SCRIPT, str(board)],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert done.returncode == 0, done.stderr
    result = msgspec.json.decode(done.stdout)
    if result["read"] == "ok":
        pytest.skip("this SQLite did not spill its cache during the read")
    assert result == {"read": "OperationalError", "commit": "storage_unavailable",
                      "new_stored": False}  # fmt: skip
