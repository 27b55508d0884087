"""The Store contract: every backend fixture of ``conftest.py`` must pass all of it.

Each test names the promise of ``colibri.store.base`` it checks. The tests use the ``Store``
protocol only (the stores they get refuse anything else) and read a table directly only for a
fact no method reads back. What only an SQLite file can show is in ``test_sqlite.py``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import random
import sqlite3
from collections.abc import Iterator

import msgspec
import pytest

from colibri.core import cursor
from colibri.core.model import Agent, Cost, LedgerEntry, Task
from colibri.core.tokens import Token
from colibri.store import BatchRefused, Store, StoreConflict, TaskFilter
from tests.store.conftest import Backend
from tests.store.values import (
    AT,
    FULL_ENTRY,
    FULL_SCHEDULE,
    FULL_TASK,
    LATER,
    MINIMAL_TASK,
    add,
    entry_for,
    ids,
    make_task,
    move,
    schedule,
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


def head(store: Store, tenant: str = "default") -> int:
    """The tenant's highest ledger seq (0 before its first row)."""
    return store.ledger_heads().get(tenant, 0)


@contextlib.contextmanager
def refused(store: Store, match: str | None = None) -> Iterator[None]:
    """The write in the block is refused by the stored rows, never with the driver's error: at
    once (``StoreConflict``), the batch's earlier writes standing; or — a store that
    ``defers_writes`` — as the batch is sent (here: by its next read), and then the whole batch
    is lost (``BatchRefused``): every call of it raises until it is rolled back, which this
    does."""
    if not store.defers_writes:
        with pytest.raises(StoreConflict, match=match) as caught:
            yield
        assert not isinstance(caught.value, sqlite3.Error)
        return
    yield
    with pytest.raises(BatchRefused, match=match):
        head(store)
    with pytest.raises(BatchRefused, match=match):
        store.commit()
    with pytest.raises(BatchRefused, match=match):
        add(store, make_task("t-after-the-refusal"))
    store.rollback()


def test_the_round_trip_values_set_every_field() -> None:
    """A field added to Task or LedgerEntry must be added here, and so get tested."""
    assert _unset_fields(FULL_TASK) == []
    assert _unset_fields(FULL_ENTRY) == ["seq"]
    assert _unset_fields(FULL_SCHEDULE) == []
    assert _unset_fields(FULL_SCHEDULE.task) == []


# -- tasks: round trip and the ledger row -----------------------------------------------------


@pytest.mark.parametrize("task", [FULL_TASK, MINIMAL_TASK, make_task("t0003", cost=Cost())])
def test_insert_and_get_round_trip_every_field(backend: Backend, store: Store, task: Task) -> None:
    add(store, task)
    assert store.get_task(task.id) == task  # the writer reads its own uncommitted write
    store.commit()
    assert backend.open().get_task(task.id) == task
    assert store.get_task("no-such-task") is None


def test_insert_writes_a_ledger_row_and_seq_grows_by_one(store: Store) -> None:
    assert head(store) == 0
    assert store.ledger({}, 100) == []
    rows = [add(store, make_task(f"t{n:04d}")) for n in range(5)]
    assert head(store) == 5  # (a store that defers writes numbers them by now)
    assert [r.seq for r in rows] == [1, 2, 3, 4, 5]
    store.commit()
    stored = store.ledger({}, 100)
    assert stored == rows
    assert [(e.task, e.from_state, e.to_state, e.reason) for e in stored] == [
        (f"t{n:04d}", None, "pending", "submitted") for n in range(5)
    ]
    task = store.get_task("t0002")
    assert task is not None
    _, row = move(store, task, state="running", agent="a1", epoch=1, attempts=1)
    assert head(store) == 6
    assert row.seq == 6


def test_ledger_entry_round_trips_every_field(store: Store) -> None:
    task = make_task("t0001", tenant="acme")
    first = add(store, task)
    entry = msgspec.structs.replace(FULL_ENTRY)  # the store sets seq on the value it is given
    done = msgspec.structs.replace(task, state="done", outcome="done", agent="linux-1", epoch=3)
    second = store.update_task(done, "pending", 0, entry)
    store.commit()
    assert second.seq == first.seq + 1
    assert store.ledger({}, 10) == [first, second]
    assert store.ledger({}, 10)[1] == msgspec.structs.replace(FULL_ENTRY, seq=2)


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
    assert head(writer) == 1
    # ... nobody else does.
    assert reader.get_task("t0001") is None
    assert reader.find_idempotent("default", "k") is None
    assert reader.list_tasks(TaskFilter()) == []
    assert reader.open_tasks() == []
    assert reader.count_by_state() == {}
    assert reader.ledger({}, 10) == []
    assert head(reader) == 0
    assert reader.agents() == []
    assert reader.skills() == []
    writer.commit()
    assert ids(reader.list_tasks(TaskFilter())) == ["t0001"]
    assert [e.task for e in reader.ledger({}, 10)] == ["t0001"]
    assert head(reader) == 1
    assert [a.name for a in reader.agents()] == ["a1"]
    assert reader.skills() == [("python", "", 1)]
    assert backend.query("SELECT name, created_at FROM tenants") == [("acme", AT)]


def test_a_batch_committed_aside_is_durable_once_its_future_says_so(backend: Backend) -> None:
    """``commit_aside``: the batch commits off the caller's thread where the store can (None
    where it committed at once); the next batch is written meanwhile, and reads of the store
    and its own commit come after; once the future answers, another connection sees it."""
    writer, reader = backend.open(), backend.open()
    first = add(writer, make_task("t0001"))
    aside = writer.commit_aside()
    if aside is not None:
        assert aside.result(timeout=30) >= 0
    assert ids(reader.list_tasks(TaskFilter())) == ["t0001"] and first.seq == 1
    writer.ensure_tenant("acme", AT)
    aside = writer.commit_aside()
    second = add(writer, make_task("t0002"))  # the next batch, written while it commits
    assert writer.get_task("t0002") is not None and writer.get_task("t0001") is not None
    if aside is not None:
        assert aside.done()  # (a read waits for the commit under way)
    assert ids(reader.list_tasks(TaskFilter())) == ["t0001"]
    assert backend.query("SELECT name FROM tenants") == [("acme",)]
    writer.commit()
    assert ids(reader.list_tasks(TaskFilter())) == ["t0001", "t0002"] and second.seq == 2
    assert writer.commit_aside() is None  # nothing written: nothing to commit


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
    assert head(store) == 1
    assert store.agents() == [] and store.skills() == []
    assert backend.query("SELECT name FROM tenants") == []
    store.rollback()  # nothing open: harmless
    store.commit()  # nothing open: harmless
    assert backend.open().get_task("t0001") == kept
    # The store is usable after a rollback.
    again = add(store, make_task("t0003"))
    store.commit()
    assert again.seq == 2
    assert backend.open().get_task("t0003") is not None


def test_close_discards_an_uncommitted_batch(backend: Backend) -> None:
    first = backend.open()
    add(first, make_task("t0001"))
    first.commit()
    add(first, make_task("t0002"))
    backend.close(first)
    again = backend.open()
    assert ids(again.list_tasks(TaskFilter())) == ["t0001"]
    assert head(again) == 1


def test_reachable_asked_from_another_thread_leaves_the_open_batch_alone(
    backend: Backend, store: Store
) -> None:
    """The daemon asks ``reachable`` off its loop while the store may be mid-batch."""
    import threading

    add(store, make_task("t0001"))
    move(store, make_task("t0001"), state="running", agent="a1", epoch=1)
    asked: list[BaseException | None] = []

    def ask() -> None:
        try:
            store.reachable()
            asked.append(None)
        except BaseException as exc:
            asked.append(exc)

    asker = threading.Thread(target=ask)
    asker.start()
    asker.join(30)
    assert asked == [None]
    add(store, make_task("t0002"))
    store.commit()
    assert ids(backend.open().list_tasks(TaskFilter())) == ["t0001", "t0002"]
    assert head(store) == 3


def test_location_names_the_board(backend: Backend, store: Store) -> None:
    assert store.location == backend.location


def test_closing_twice_is_harmless_and_discards_the_batch(backend: Backend) -> None:
    first = backend.open()
    add(first, make_task("t0001"))
    backend.close(first)
    first.close()
    assert backend.open().get_task("t0001") is None


def test_a_rollback_gives_its_ledger_numbers_back(backend: Backend, store: Store) -> None:
    """``seq`` has no gaps: the rows a rollback discarded leave no hole for the next ones."""
    add(store, make_task("t0001"))
    store.commit()
    numbered = [add(store, make_task(f"t000{n}")) for n in (2, 3)]
    assert head(store) == 3
    assert [e.seq for e in numbered] == [2, 3]
    store.rollback()
    assert head(store) == 1
    again = add(store, make_task("t0004"))
    missed = store.append_ledger(LedgerEntry(at=LATER, schedule="s", to_state="missed"))
    store.commit()
    assert (again.seq, missed.seq) == (2, 3)
    assert [e.seq for e in backend.open().ledger({}, 10)] == [1, 2, 3]


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
    store.commit()
    assert (out.seq, out.from_state, out.to_state) == (3, "running", "done")
    assert backend.open().get_task("t0001") == done
    assert [e.to_state for e in store.ledger({}, 10, task="t0001")] == [
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
    with refused(store):
        store.update_task(new, expected_state, expected_epoch, entry_for(new, expected_state))
    assert store.get_task("t0001") == task
    assert head(store) == 1
    store.commit()
    assert backend.open().get_task("t0001") == task
    assert [e.seq for e in backend.open().ledger({}, 10)] == [1]
    # The compare-and-set with the right expectation still goes through afterwards.
    store.update_task(new, "pending", 0, entry_for(new, "pending"))
    store.commit()
    assert backend.open().get_task("t0001") == new


def test_update_of_an_unknown_task_is_a_conflict(store: Store) -> None:
    ghost = make_task("t-ghost", state="running", epoch=1)
    with refused(store):
        store.update_task(ghost, "pending", 0, entry_for(ghost, "pending"))
    assert store.get_task("t-ghost") is None
    assert head(store) == 0


def test_only_one_of_two_racing_claims_wins(store: Store) -> None:
    task = make_task("t0001")
    add(store, task)
    store.commit()
    one = msgspec.structs.replace(task, state="running", agent="a1", epoch=1)
    two = msgspec.structs.replace(task, state="running", agent="a2", epoch=1)
    store.update_task(one, "pending", 0, entry_for(one, "pending"))
    with refused(store):
        store.update_task(two, "pending", 0, entry_for(two, "pending"))
    if store.defers_writes:  # the batch was lost with the refusal: the winner alone again
        assert store.get_task("t0001") == task
        store.update_task(one, "pending", 0, entry_for(one, "pending"))
    assert store.get_task("t0001") == one
    assert [e.agent for e in store.ledger({}, 10, task="t0001")] == [None, "a1"]


def test_update_task_writes_only_what_a_transition_changes(backend: Backend, store: Store) -> None:
    """The fields a transition never changes stay as inserted, whatever the new value says."""
    task = make_task("t0001", workspace="api", labels=["a"], priority=2, budget_usd=1.0)
    add(store, task)
    changed = msgspec.structs.replace(
        task, text="rewritten", capabilities=["x"], workspace="web", pinned=True, parent="p",
        sender="s", priority=9, min_score=0.5, max_attempts=7, tenant="acme", labels=["b"],
        idempotency_key="k", schedule="nightly", budget_usd=9.0, created_at=LATER,
        state="running", agent="a1", epoch=1, attempts=1, question="why?", updated_at=LATER,
    )  # fmt: skip
    store.update_task(changed, "pending", 0, entry_for(changed, "pending"))
    store.commit()
    expected = msgspec.structs.replace(
        task, state="running", agent="a1", epoch=1, attempts=1, question="why?", updated_at=LATER
    )
    assert backend.open().get_task("t0001") == expected
    assert store.find_idempotent("acme", "k") is None


def test_update_task_appends_every_row_of_the_change_in_order(store: Store) -> None:
    task = make_task("t0001", state="running", agent="a1", epoch=1)
    add(store, task)
    done = msgspec.structs.replace(task, state="done", outcome="done", updated_at=LATER)
    closed = msgspec.structs.replace(done, state="closed")
    first, second = entry_for(done, "running", "out"), entry_for(closed, "done")
    assert store.update_task(closed, "running", 1, first, second) is first
    assert store.ledger({"default": 1}, 10) == [first, second]
    assert (first.seq, second.seq) == (2, 3)
    assert store.get_task("t0001") == closed


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
    # A key names its task whatever becomes of it: ended, closed.
    done, _ = move(store, mine, state="done", outcome="done")
    closed, _ = move(store, done, state="closed")
    store.commit()
    assert store.find_idempotent("default", "deploy-42") == closed


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

    Only the failing insert is undone — or, by a store that defers writes, the whole batch —
    and the store stays usable. The daemon never gets there: it looks the key up first with
    ``find_idempotent``.
    """
    first = make_task("t0001", idempotency_key="k")
    add(store, first)
    store.commit()
    add(store, make_task("t0000"))  # in the same batch as the conflict
    with refused(store, match="idempotency key"):
        add(store, make_task("t0002", idempotency_key="k"))
    kept = [] if store.defers_writes else ["t0000"]
    assert store.get_task("t0002") is None
    assert head(store) == 1 + len(kept)
    store.commit()
    assert ids(backend.open().list_tasks(TaskFilter())) == [*kept, "t0001"]
    assert store.find_idempotent("default", "k") == first
    # Another tenant may use the same key; tasks without a key never collide.
    add(store, make_task("t0003", tenant="acme", idempotency_key="k"))
    add(store, make_task("t0004"))
    add(store, make_task("t0005"))
    store.commit()
    assert ids(backend.open().list_tasks(TaskFilter())) == [
        *kept, "t0001", "t0003", "t0004", "t0005"
    ]  # fmt: skip
    found = store.find_idempotent("acme", "k")
    assert found is not None and found.id == "t0003"


@pytest.mark.parametrize("tenant", ["default", "acme"])
def test_duplicate_task_id_is_refused(backend: Backend, store: Store, tenant: str) -> None:
    """A task id is unique across tenants: a second insert is a ``StoreConflict`` that writes
    nothing of itself (no task, no ledger row) and leaves the rest of the batch to commit —
    or, by a store that defers writes, loses the whole batch."""
    first = make_task("t0001")
    add(store, first)
    store.commit()
    add(store, make_task("t0000"))
    with refused(store, match="t0001"):
        add(store, make_task("t0001", text="another", tenant=tenant))
    kept = [] if store.defers_writes else ["t0000"]
    assert store.get_task("t0001") == first
    assert head(store) == 1 + len(kept)
    store.commit()
    reader = backend.open()
    assert reader.get_task("t0001") == first
    assert ids(reader.list_tasks(TaskFilter())) == [*kept, "t0001"]
    assert [e.task for e in reader.ledger({}, 10)] == ["t0001", *kept]


# -- the claim key -------------------------------------------------------------------------------


def test_the_claim_key_is_made_once_and_kept(backend: Backend) -> None:
    first = backend.open()
    key = first.claim_key()
    assert isinstance(key, bytes) and len(key) == 32
    assert key != bytes(32)
    assert first.claim_key() == key
    assert backend.open().claim_key() == key  # another store on the board: the same key
    backend.close_all()
    assert backend.open().claim_key() == key  # committed: reopening keeps it


def test_the_claim_key_commits_the_open_batch_with_it(backend: Backend, store: Store) -> None:
    """Documented so that nobody calls it mid-batch by mistake: the batch commits too."""
    add(store, make_task("t0001"))
    store.claim_key()
    assert backend.open().get_task("t0001") is not None
    store.rollback()  # nothing left to discard
    assert backend.open().get_task("t0001") is not None


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
        (TaskFilter(outcome="done"), "t03 t07"),
        (TaskFilter(outcome="failed"), "t04 t12"),
        (TaskFilter(outcome="cancelled"), "t06"),
        (TaskFilter(outcome="done", tenant="acme"), "t07"),
        (TaskFilter(prefix="t1"), "t10 t11 t12"),
        (TaskFilter(prefix="t0"), "t01 t02 t03 t04 t05 t06 t07 t08 t09"),
        (TaskFilter(prefix="t11"), "t11"),
        (TaskFilter(prefix="t13"), ""),
        (TaskFilter(prefix="u"), ""),
        (TaskFilter(prefix="t1", tenant="acme"), "t10"),
        (TaskFilter(suffix="1"), "t01 t11"),
        (TaskFilter(suffix="11"), "t11"),
        (TaskFilter(suffix="t11"), "t11"),
        (TaskFilter(suffix="xt11"), ""),
        (TaskFilter(suffix="0", tenant="acme"), "t10"),
        (TaskFilter(prefix="t1", suffix="1"), "t11"),
        (TaskFilter(prefix="t0", suffix="0"), ""),
        (TaskFilter(before="t03"), "t01 t02"),
        (TaskFilter(after="t03", before="t06"), "t04 t05"),
        (TaskFilter(newest=True), "t12 t11 t10 t09 t08 t07 t06 t05 t04 t03 t02 t01"),
        (TaskFilter(newest=True, limit=3), "t12 t11 t10"),
        (TaskFilter(newest=True, before="t10", limit=2), "t09 t08"),
        (TaskFilter(newest=True, state="pending"), "t10 t09 t05 t01"),
    ],
)
def test_list_tasks_filters(store: Store, query: TaskFilter, expected: str) -> None:
    tasks = {t.id: t for t in _board(store)}
    found = store.list_tasks(query)
    assert ids(found) == expected.split()
    assert all(t == tasks[t.id] for t in found)
    # count_tasks counts what the same filter lists, whatever the limit and the order.
    whole = dataclasses.replace(query, limit=1000)
    assert store.count_tasks(query) == len(store.list_tasks(whole))


def test_ids_are_found_by_their_end_through_any_length_of_it(store: Store) -> None:
    """A suffix longer than the index's tail is matched whole, not by its tail alone."""
    for task_id, tenant in (
        ("0190aaaa-0000-7000-8000-0000c874c933", "default"),
        ("0190aaaa-0000-7000-8000-00001111c933", "default"),
        ("0190aaaa-0000-7000-8000-00002222c933", "acme"),
        ("0190aaaa-0000-7000-8000-0000c874c934", "default"),
    ):
        add(store, make_task(task_id, tenant=tenant))
    store.commit()

    def ends(suffix: str, tenant: str | None = None) -> list[str]:
        found = ids(store.list_tasks(TaskFilter(suffix=suffix, tenant=tenant)))
        assert store.count_tasks(TaskFilter(suffix=suffix, tenant=tenant)) == len(found)
        return [i[-12:] for i in found]

    assert ends("c933") == ["00001111c933", "00002222c933", "0000c874c933"]
    assert ends("c933", tenant="acme") == ["00002222c933"]
    assert ends("c874c933") == ["0000c874c933"]
    assert ends("74c933") == ["0000c874c933"]
    assert ends("c874c93") == []
    assert ends("8000-0000c874c933") == ["0000c874c933"]
    assert ends("00000190aaaa-0000-7000-8000-0000c874c933") == []


def test_count_by_outcome_counts_every_ended_task_closed_or_not(store: Store) -> None:
    assert store.count_by_outcome() == {}
    _board(store)
    assert store.count_by_outcome() == {"done": 2, "failed": 2, "cancelled": 1}
    assert store.count_tasks(TaskFilter()) == 12
    assert store.count_tasks(TaskFilter(state="closed", outcome="done")) == 1


@pytest.mark.parametrize("limit", [1, 5, 40])
def test_newest_pages_with_before_cover_every_task_once_newest_first(
    store: Store, limit: int
) -> None:
    all_ids = [f"t{n:03d}" for n in range(40)]
    for task_id in random.Random(limit).sample(all_ids, len(all_ids)):
        add(store, make_task(task_id))
    store.commit()
    seen: list[str] = []
    before: str | None = None
    while page := store.list_tasks(TaskFilter(newest=True, before=before, limit=limit)):
        seen += ids(page)
        before = page[-1].id
        assert store.count_tasks(TaskFilter(before=before)) == 40 - len(seen)
    assert seen == all_ids[::-1]


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


def test_count_children_counts_the_direct_children_in_any_state(store: Store) -> None:
    tasks = _board(store)
    for task in tasks:
        assert store.count_children(task.id) == len(store.children(task.id)), task.id
    assert store.count_children("t01") == 3  # t03 done, t04 failed, t09 pending
    assert store.count_children("t03") == 1  # t11 is a grandchild of t01: not counted there
    assert store.count_children("no-such-task") == 0
    add(store, make_task("t13", parent="t12"))  # the writer counts its own batch
    assert store.count_children("t12") == 1


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


def test_set_question_changes_the_task_and_writes_no_ledger_row(
    backend: Backend, store: Store
) -> None:
    task = make_task("t0001", state="running", agent="a1", epoch=1)
    add(store, task)
    store.commit()
    store.set_question("t0001", "which database?")
    assert store.get_task("t0001") == msgspec.structs.replace(task, question="which database?")
    assert backend.open().get_task("t0001") == task  # part of the batch
    store.rollback()
    assert store.get_task("t0001") == task
    store.set_question("t0001", "which database?")
    store.commit()
    asked = backend.open().get_task("t0001")
    assert asked is not None and asked.question == "which database?"
    assert (asked.state, asked.epoch, asked.updated_at) == ("running", 1, task.updated_at)
    store.set_question("t0001", None)
    store.set_question("no-such-task", "anyone?")  # no error, nothing written
    store.commit()
    assert backend.open().get_task("t0001") == task
    assert store.get_task("no-such-task") is None
    assert head(store) == 1


def test_set_after_changes_what_a_task_waits_for_and_writes_no_ledger_row(
    backend: Backend, store: Store
) -> None:
    task = make_task("t0001", after=["t0000"], if_dependency_fails="wait")
    add(store, task)
    store.commit()
    store.set_after("t0001", ["t0009", "t0000"])
    waits = msgspec.structs.replace(task, after=["t0009", "t0000"])
    assert store.get_task("t0001") == waits
    assert backend.open().get_task("t0001") == task  # part of the batch
    store.rollback()
    assert store.get_task("t0001") == task
    store.set_after("t0001", ["t0009", "t0000"])
    store.set_after("no-such-task", ["t0001"])  # no error, nothing written
    store.commit()
    assert backend.open().get_task("t0001") == waits  # in order, every other field as it was
    assert store.get_task("no-such-task") is None
    assert head(store) == 1


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
    default = [r for r in rows if r.tenant == "default"]
    # Each tenant numbered on its own, from 1, with no gap.
    assert [r.seq for r in default] == list(range(1, 8))
    assert [(r.tenant, r.seq) for r in rows if r.tenant == "acme"] == [("acme", 1)]
    assert store.ledger_heads() == {"acme": 1, "default": 7}
    # Every tenant's rows, merged by time, then tenant (each tenant's stamps only grow here).
    rows = sorted(rows, key=lambda r: (r.at, r.tenant))
    assert rows[0].tenant == "acme"
    assert store.ledger({}, 100) == rows
    assert store.ledger({}, 3) == rows[:3]
    assert store.ledger({"default": 2}, 3) == [r for r in rows if r not in default[:2]][:3]
    assert store.ledger({"default": 7, "acme": 1}, 100) == []
    assert store.ledger({"default": 100, "acme": 100}, 100) == []
    assert store.ledger({"default": 7}, 100) == [r for r in rows if r.tenant == "acme"]
    assert head(store) == 7
    # Paged by a cursor moved past each page: every row once, in the one order.
    pages: list[LedgerEntry] = []
    position: dict[str, int] = {}
    while page := store.ledger(position, 3):
        pages += page
        cursor.advance(position, page)
    assert pages == rows


def test_tenants_are_numbered_apart_and_merged_by_time(backend: Backend, store: Store) -> None:
    """Interleaved rows of three tenants: each tenant's seq is its own, with no gap; a read of
    them all merges them by ``at`` and keeps each tenant's order — even where a clock set back
    made a tenant's later row look older (a cursor must never pass a row over)."""
    times = [f"2026-01-02T03:04:{s:02d}.000Z" for s in range(60)]
    written = []
    for i, tenant in enumerate(["a", "b", "a", "c", "b", "a", "c", "a"]):
        task = make_task(f"t{i:04d}", tenant=tenant)
        entry = LedgerEntry(at=times[10 + i], task=task.id, tenant=tenant, to_state="pending")
        written.append(store.insert_task(task, entry))
    # Tenant b's third row stamped earlier than its others (its host's clock was set back).
    late = store.append_ledger(LedgerEntry(at=times[0], schedule="s", tenant="b",
                                           to_state="missed"))  # fmt: skip
    store.commit()
    assert [(e.tenant, e.seq) for e in written] == [
        ("a", 1), ("b", 1), ("a", 2), ("c", 1), ("b", 2), ("a", 3), ("c", 2), ("a", 4)
    ]
    assert (late.tenant, late.seq) == ("b", 3)
    assert store.ledger_heads() == {"a": 4, "b": 3, "c": 2}
    merged = backend.open().ledger({}, 100)
    assert sorted(merged, key=lambda e: (e.tenant, e.seq)) == sorted(
        [*written, late], key=lambda e: (e.tenant, e.seq)
    )
    for tenant in "abc":
        assert [e.seq for e in merged if e.tenant == tenant] == sorted(
            e.seq for e in merged if e.tenant == tenant
        )
    # Right after b's second row, though the oldest stamp of all; the others in time order.
    assert merged.index(late) == merged.index(written[4]) + 1
    others = [e for e in merged if e is not late and e != late]
    assert [e.at for e in others] == sorted(e.at for e in others)
    # Any page size, from any cursor: every row exactly once, in that order.
    for size in (1, 2, 3, 5, 100):
        position: dict[str, int] = {}
        pages: list[LedgerEntry] = []
        while page := store.ledger(position, size):
            pages += page
            cursor.advance(position, page)
        assert pages == merged
    # One tenant's alone, by its own numbers; a cursor's other tenants change nothing of it.
    assert store.ledger({"a": 2, "b": 99}, 100, tenant="a") == [written[5], written[7]]
    assert store.ledger({}, 100, tenant="b") == [written[1], written[4], late]


def test_a_rolled_back_batch_gives_each_tenant_its_numbers_back(store: Store) -> None:
    for tenant in ("a", "b"):
        add(store, make_task(f"t-{tenant}", tenant=tenant))
    store.commit()
    add(store, make_task("t-a2", tenant="a"))
    add(store, make_task("t-b2", tenant="b"))
    assert store.ledger_heads() == {"a": 2, "b": 2}
    store.rollback()
    assert store.ledger_heads() == {"a": 1, "b": 1}
    again = add(store, make_task("t-b3", tenant="b"))
    store.commit()
    assert (again.tenant, again.seq) == ("b", 2)
    assert store.ledger_heads() == {"a": 1, "b": 2}


def test_ledger_of_one_task(store: Store) -> None:
    rows = _ledger_history(store)
    of_a = [r for r in rows if r.task == "t-a"]
    assert [(r.from_state, r.to_state) for r in of_a] == [
        (None, "pending"),
        ("pending", "running"),
        ("running", "done"),
        ("done", "closed"),
    ]
    assert store.ledger({}, 100, task="t-a") == of_a
    assert store.ledger({}, 2, task="t-a") == of_a[:2]
    assert store.ledger({"default": of_a[1].seq}, 100, task="t-a") == of_a[2:]
    assert store.ledger({"default": of_a[1].seq}, 1, task="t-a") == of_a[2:3]
    assert store.ledger({}, 100, task="t-c") == [r for r in rows if r.task == "t-c"]
    assert store.ledger({}, 100, task="no-such-task") == []


def test_ledger_of_one_tenant(store: Store) -> None:
    rows = _ledger_history(store)
    acme = [r for r in rows if r.tenant == "acme"]
    default = [r for r in rows if r.tenant == "default"]
    assert len(acme) == 1 and len(default) == 7
    assert store.ledger({}, 100, tenant="acme") == acme
    assert store.ledger({}, 100, tenant="default") == default
    assert store.ledger({}, 2, tenant="default") == default[:2]
    assert store.ledger({"default": default[1].seq}, 100, tenant="default") == default[2:]
    assert store.ledger({"acme": acme[0].seq}, 100, tenant="acme") == []
    assert store.ledger({"default": 7}, 100, tenant="acme") == acme
    assert store.ledger({}, 100, tenant="nobody") == []
    # With a task, the task's rows if it is the tenant's, and none if it is not.
    assert store.ledger({}, 100, task="t-c", tenant="acme") == acme
    assert store.ledger({}, 100, task="t-c", tenant="default") == []


def test_append_ledger_writes_a_row_that_changes_no_task(backend: Backend, store: Store) -> None:
    add(store, make_task("t0001"))
    row = LedgerEntry(
        at=LATER, schedule="nightly", tenant="acme", to_state="missed",
        reason="missed: the daemon was down; nominal 2026-01-02T03:00:00.000Z", uid=7, pid=8,
    )  # fmt: skip
    given = msgspec.structs.replace(row)
    assert store.append_ledger(given) is given
    assert store.ledger_heads() == {"acme": 1, "default": 1}
    assert given.seq == 1  # acme's first
    store.commit()
    assert backend.open().ledger({"default": 1}, 10) == [msgspec.structs.replace(row, seq=1)]
    assert [e.seq for e in store.ledger({}, 10, task="t0001")] == [1]  # no task, never matched
    assert store.count_by_state() == {"pending": 1}


#: Ledger rows for ``cost_totals``: (at, task, agent, tenant, cost). Tasks t1 (workspace api),
#: t2 and t3 (none); agent a2 is registered in workspace ws-a2, ghost is not registered.
_COST_ROWS = [
    ("2026-01-01T10:00:00.000Z", "t1", "a1", "default", Cost(tokens_in=10, tokens_out=20, usd=0.5)),
    ("2026-01-02T10:00:00.000Z", "t2", "a2", "acme", Cost(tokens_in=1, tokens_out=2, usd=0.25)),
    ("2026-01-02T11:00:00.000Z", "t1", "a1", "default", Cost(tokens_in=5)),
    ("2026-01-02T11:30:00.000Z", "t1", "a1", "default", None),  # no cost: not a session's
    ("2026-01-03T00:00:00.000Z", "t3", "ghost", "acme", Cost(usd=1.0, model="m")),
]  # fmt: skip


def _costs(store: Store) -> None:
    for task in (make_task("t1", workspace="api"), make_task("t2"), make_task("t3")):
        add(store, task)  # their submissions carry no cost
    store.upsert_agent(Agent(name="a2", capabilities=[], workspace="ws-a2"), AT)
    for at, task_id, agent, tenant, cost in _COST_ROWS:
        store.append_ledger(
            LedgerEntry(at=at, task=task_id, agent=agent, tenant=tenant, to_state="done", cost=cost)
        )
    store.commit()


def _totals(rows: list[dict[str, object]]) -> list[tuple[object, ...]]:
    return [(r["key"], r["sessions"], r["usd"], r["tokens_in"], r["tokens_out"]) for r in rows]


@pytest.mark.parametrize(
    ("by", "expected"),
    [
        ("agent", [("a1", 2, 0.5, 15, 20), ("a2", 1, 0.25, 1, 2), ("ghost", 1, 1.0, 0, 0)]),
        ("tenant", [("acme", 2, 1.25, 1, 2), ("default", 2, 0.5, 15, 20)]),
        ("day", [("2026-01-01", 1, 0.5, 10, 20), ("2026-01-02", 2, 0.25, 6, 2),
                 ("2026-01-03", 1, 1.0, 0, 0)]),
        # t3 has no workspace and ghost none registered: a None key, listed first
        ("workspace", [(None, 1, 1.0, 0, 0), ("api", 2, 0.5, 15, 20), ("ws-a2", 1, 0.25, 1, 2)]),
    ],
)  # fmt: skip
def test_cost_totals_by_each_key(store: Store, by: str, expected: list[tuple[object, ...]]) -> None:
    assert store.cost_totals(by, "") == []
    _costs(store)
    rows = store.cost_totals(by, "")
    assert _totals(rows) == expected
    assert all(set(r) == {"key", "sessions", "usd", "tokens_in", "tokens_out"} for r in rows)
    assert all(isinstance(r["usd"], float) for r in rows)
    assert all(type(r["tokens_in"]) is int and type(r["tokens_out"]) is int for r in rows)


def test_cost_totals_count_from_since_on(store: Store) -> None:
    _costs(store)
    assert _totals(store.cost_totals("agent", "2026-01-02T00:00:00.000Z")) == [
        ("a1", 1, 0.0, 5, 0), ("a2", 1, 0.25, 1, 2), ("ghost", 1, 1.0, 0, 0),
    ]  # fmt: skip
    # ``since`` itself counts; later than every row: nothing
    assert _totals(store.cost_totals("tenant", "2026-01-03T00:00:00.000Z")) == [
        ("acme", 1, 1.0, 0, 0)
    ]
    assert store.cost_totals("day", "2026-01-03T00:00:00.001Z") == []


def test_cost_totals_of_one_tenant_count_its_rows_only(store: Store) -> None:
    _costs(store)
    assert _totals(store.cost_totals("agent", "", "acme")) == [
        ("a2", 1, 0.25, 1, 2), ("ghost", 1, 1.0, 0, 0),
    ]  # fmt: skip
    assert _totals(store.cost_totals("day", "2026-01-02T00:00:00.000Z", "default")) == [
        ("2026-01-02", 1, 0.0, 5, 0)
    ]
    assert store.cost_totals("agent", "", "nobody") == []


def test_cost_totals_by_an_unknown_key_is_a_value_error(store: Store) -> None:
    with pytest.raises(ValueError, match="week"):
        store.cost_totals("week", "")


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


# -- schedules -----------------------------------------------------------------------------------


def test_a_schedule_round_trips_every_field(backend: Backend, store: Store) -> None:
    assert store.get_schedule("nightly") is None
    store.upsert_schedule(FULL_SCHEDULE)
    assert store.get_schedule("nightly") == FULL_SCHEDULE
    store.commit()
    assert backend.open().get_schedule("nightly") == FULL_SCHEDULE
    assert backend.open().schedules() == [FULL_SCHEDULE]


def test_schedules_are_listed_by_name_and_replaced_whole(backend: Backend, store: Store) -> None:
    assert store.schedules() == []
    for name in ("b", "c", "a"):
        store.upsert_schedule(schedule(name))
    assert backend.open().schedules() == []  # nothing committed yet
    store.commit()
    assert [s.name for s in backend.open().schedules()] == ["a", "b", "c"]
    fired = schedule("a", fires=1, next_fire_at=LATER, last_task="t0001", paused=True)
    store.upsert_schedule(fired)
    store.upsert_schedule(schedule("d"))
    store.rollback()
    assert store.get_schedule("a") == schedule("a") and store.get_schedule("d") is None
    store.upsert_schedule(fired)
    store.upsert_schedule(msgspec.structs.replace(schedule("b"), every=5.0, next_fire_at=None))
    store.commit()
    reader = backend.open()
    assert reader.get_schedule("a") == fired
    assert reader.get_schedule("b") == msgspec.structs.replace(schedule("b"), every=5.0)
    assert reader.schedules() == [fired, reader.get_schedule("b"), schedule("c")]


def test_delete_schedule_says_whether_there_was_one(backend: Backend, store: Store) -> None:
    store.upsert_schedule(schedule("a"))
    store.upsert_schedule(schedule("b"))
    store.commit()
    assert store.delete_schedule("a") is True
    assert store.get_schedule("a") is None
    assert store.delete_schedule("a") is False
    assert store.delete_schedule("no-such-schedule") is False
    assert [s.name for s in backend.open().schedules()] == ["a", "b"]  # not committed yet
    store.commit()
    assert [s.name for s in backend.open().schedules()] == ["b"]
    assert store.delete_schedule("b") is True
    store.rollback()
    assert [s.name for s in backend.open().schedules()] == ["b"]


def test_fires_outlive_their_schedule(backend: Backend, store: Store) -> None:
    """A schedule removed and added again never fires a nominal time recorded before."""
    store.upsert_schedule(schedule("nightly"))
    assert store.record_fire("nightly", AT, "fired", "t0001", AT) is True
    store.commit()
    store.delete_schedule("nightly")
    store.commit()
    store.upsert_schedule(schedule("nightly"))
    assert store.fire_recorded("nightly", AT)
    assert store.record_fire("nightly", AT, "fired", "t0002", LATER) is False
    store.commit()
    assert [f["task"] for f in backend.open().fires("nightly", 10)] == ["t0001"]


def test_a_fire_recorded_twice_in_one_batch_is_refused_and_spares_the_batch(
    backend: Backend, store: Store
) -> None:
    """The double fire is refused also before anything commits, and refusing it undoes
    nothing else: the task the first fire made commits with it."""
    add(store, make_task("t0001", schedule="nightly"))
    assert store.record_fire("nightly", AT, "fired", "t0001", AT) is True
    assert store.fire_recorded("nightly", AT)
    assert backend.open().fire_recorded("nightly", AT) is False  # not committed
    add(store, make_task("t0002", schedule="nightly"))
    assert store.record_fire("nightly", AT, "fired", "t0002", AT) is False
    store.commit()
    reader = backend.open()
    assert ids(reader.list_tasks(TaskFilter())) == ["t0001", "t0002"]
    assert [(f["nominal"], f["task"]) for f in reader.fires("nightly", 10)] == [(AT, "t0001")]


def test_a_fire_rolled_back_was_never_recorded(backend: Backend, store: Store) -> None:
    assert store.record_fire("nightly", AT, "fired", "t0001", AT) is True
    store.rollback()
    assert store.fire_recorded("nightly", AT) is False
    assert store.fires("nightly", 10) == []
    assert store.record_fire("nightly", AT, "missed", None, LATER) is True
    store.commit()
    assert [f["outcome"] for f in backend.open().fires("nightly", 10)] == ["missed"]


def test_fires_are_the_latest_nominal_times_first_of_one_schedule(store: Store) -> None:
    nominals = [f"2026-01-0{day}T00:00:00.000Z" for day in range(1, 8)]
    for nominal in random.Random(3).sample(nominals, len(nominals)):
        store.record_fire("nightly", nominal, "fired", None, LATER)
        store.record_fire("hourly", nominal, "skipped", None, LATER)
    store.commit()
    latest = [f["nominal"] for f in store.fires("nightly", 3)]
    assert latest == nominals[::-1][:3]
    assert [f["nominal"] for f in store.fires("nightly", 100)] == nominals[::-1]
    assert {f["schedule"] for f in store.fires("nightly", 100)} == {"nightly"}
    assert {f["outcome"] for f in store.fires("hourly", 100)} == {"skipped"}
    assert store.fires("no-such-schedule", 10) == []


# -- tokens ------------------------------------------------------------------------------------

FULL_TOKEN = Token(
    id="0123456789ab", tenant="acme", role="agent", agent="build-1", capabilities=["zfs", "py"],
    workspace="api",
    created_at=AT, expires_at=LATER, revoked_at=LATER, last_used_at=LATER,
)  # fmt: skip


def test_a_token_round_trips_every_field_with_its_hash(backend: Backend, store: Store) -> None:
    assert _unset_fields(FULL_TOKEN) == []
    store.insert_token(FULL_TOKEN, "ab" * 32)
    store.commit()
    assert backend.open().token(FULL_TOKEN.id) == (FULL_TOKEN, "ab" * 32)
    assert store.token("ffffffffffff") is None


def test_a_taken_token_id_is_a_conflict_that_spares_the_batch(
    backend: Backend, store: Store
) -> None:
    plain = Token(id="aaaaaaaaaaaa", tenant="default", role="operator", created_at=AT)
    store.insert_token(plain, "00" * 32)
    with pytest.raises(StoreConflict):
        store.insert_token(msgspec.structs.replace(plain, tenant="other"), "11" * 32)
    store.commit()
    assert backend.open().token(plain.id) == (plain, "00" * 32)


def test_tokens_are_listed_oldest_first_revoked_ones_too(store: Store) -> None:
    made = [
        Token(id=f"{n:012x}", tenant="default", role="operator", created_at=at)
        for n, at in ((3, AT), (1, LATER), (2, AT))
    ]
    for token in made:
        store.insert_token(token, "00" * 32)
    assert store.revoke_token(made[0].id, LATER) is True
    assert [t.id for t in store.tokens()] == [made[2].id, made[0].id, made[1].id]
    assert store.tokens()[1].revoked_at == LATER


def test_revoking_keeps_the_first_time_and_says_whether_it_changed(
    backend: Backend, store: Store
) -> None:
    token = Token(id="bbbbbbbbbbbb", tenant="default", role="operator", created_at=AT)
    store.insert_token(token, "00" * 32)
    assert store.revoke_token(token.id, AT) is True
    assert store.revoke_token(token.id, LATER) is False
    assert store.revoke_token("cccccccccccc", AT) is False
    store.commit()
    found = backend.open().token(token.id)
    assert found is not None and found[0].revoked_at == AT


def test_touching_a_token_sets_when_it_was_last_used(backend: Backend, store: Store) -> None:
    token = Token(id="dddddddddddd", tenant="default", role="operator", created_at=AT)
    store.insert_token(token, "00" * 32)
    store.commit()
    store.touch_token(token.id, LATER)
    store.touch_token("eeeeeeeeeeee", LATER)  # unknown: nothing
    store.rollback()
    assert backend.open().token(token.id) == (token, "00" * 32)
    store.touch_token(token.id, LATER)
    store.commit()
    found = backend.open().token(token.id)
    assert found is not None and found[0].last_used_at == LATER
    assert [t.id for t in store.tokens()] == [token.id]


def test_a_deadline_passed_gives_a_wait_up_and_one_ahead_changes_nothing(
    backend: Backend, store: Store
) -> None:
    """The daemon's lease deadline (``heed_deadline``), asked anew as the store goes on: ahead,
    the store works as before; passed, a wait for the server is given up as a silence is
    (``StorageUnavailable``), and once it is ahead again the store is usable after
    ``reachable`` and ``rollback``. SQLite waits for no server: nothing is given up."""
    import time

    from colibri.core.errors import StorageUnavailable

    deadline = [time.monotonic() + 3600]
    store.heed_deadline(lambda: deadline[0])
    add(store, make_task("t0001"))
    store.commit()
    deadline[0] = time.monotonic() - 1  # passed (a renewal moves it on)
    if backend.name == "sqlite":
        assert store.get_task("t0001") is not None
        return
    with pytest.raises(StorageUnavailable, match="lease deadline"):
        store.get_task("t0001")
    deadline[0] = time.monotonic() + 3600
    store.reachable()
    store.rollback()
    assert store.get_task("t0001") is not None
    add(store, make_task("t0002"))
    store.commit()
    assert ids(backend.open().list_tasks(TaskFilter())) == ["t0001", "t0002"]
