"""A batch's held writes (``PostgresStore.defers_writes``): sent together, and a batch whose
sending fails in any way is lost whole — never committed in part, never acknowledged."""

from __future__ import annotations

import contextlib

import psycopg
import pytest

from colibri.store import BatchRefused, StoreConflict, TaskFilter
from colibri.store.postgres import PostgresStore
from tests.helpers import wait_until
from tests.store.conftest import PG_APP_ROLE, as_app_role
from tests.store.values import add, entry_for, make_task, move


def _stored_ids(board: str) -> list[str]:
    with psycopg.connect(board) as admin:
        return [r[0] for r in admin.execute("SELECT id FROM tasks ORDER BY id")]


def test_a_sending_that_fails_half_way_loses_the_whole_batch(board: str) -> None:
    """The batch was sent once (a read), so part of it is on the server; a ledger row planted
    behind the store's back then takes the seq its next row is numbered with. The second
    sending fails on a unique index no task owns (the ledger's key): the batch is lost whole,
    its first part too, and the store goes on after a rollback."""
    store = PostgresStore(board)
    try:
        add(store, make_task("t-first"))
        assert store.get_task("t-first") is not None  # sent: the transaction holds it
        add(store, make_task("t-second"))  # held, its ledger row to be numbered 2
        with psycopg.connect(board, autocommit=True) as admin:
            admin.execute(
                "INSERT INTO ledger (seq, at, tenant, to_state, epoch) "
                "VALUES (2, '2026-01-01T00:00:00.000Z', 'default', 'planted', 0)"
            )
        with pytest.raises(BatchRefused, match="ledger_pkey"):
            store.commit()
        assert not issubclass(BatchRefused, StoreConflict)  # no call's own refusal
        with pytest.raises(BatchRefused):  # lost until rolled back
            store.get_task("t-first")
        store.rollback()
        assert _stored_ids(board) == []
        add(store, make_task("t-after"))
        store.commit()
        assert _stored_ids(board) == ["t-after"]
    finally:
        store.close()


def test_a_read_refused_inside_a_batch_loses_the_batch(board: str) -> None:
    """A read the server refuses inside the batch aborts its transaction there: the batch is
    lost, and its commit refuses rather than send a COMMIT the server would answer by rolling
    back — the batch's earlier writes, read by the daemon as stored, are not acknowledged."""
    app = as_app_role(board)
    store = PostgresStore(app)
    try:
        add(store, make_task("t-held"))
        with psycopg.connect(board, autocommit=True) as admin:
            admin.execute(f"REVOKE SELECT ON schedule_fires FROM {PG_APP_ROLE}")
        with pytest.raises(psycopg.errors.InsufficientPrivilege):
            store.fires("nightly", 5)
        with pytest.raises(BatchRefused, match="a read inside it failed"):
            store.commit()
        store.rollback()
        assert _stored_ids(board) == []
    finally:
        store.close()


def test_held_writes_of_one_statement_go_together_in_order(board: str) -> None:
    """Consecutive updates go as one statement (``bulk``), run in order: two compare-and-sets
    of one task in a row (claimed, then closed) chain, in statements of their own; one whose
    row moved among 200 loses the batch."""
    store = PostgresStore(board)
    try:
        tasks = [make_task(f"t{n:04d}") for n in range(200)]
        for task in tasks:
            add(store, task)
        store.commit()
        for task in tasks:
            running, _ = move(store, task, state="running", agent="a1", epoch=1, attempts=1)
            move(store, running, state="closed", outcome="done")
        store.commit()
        with psycopg.connect(board) as admin:
            states = admin.execute("SELECT state, COUNT(*) FROM tasks GROUP BY state").fetchall()
            seqs = [r[0] for r in admin.execute("SELECT seq FROM ledger ORDER BY seq")]
        assert states == [("closed", 200)]
        assert seqs == list(range(1, 601))
        # One of 200 expects a state its row no longer has: all 200 are refused together.
        stored = [store.get_task(t.id) for t in tasks]  # read first: a read sends the batch
        for n, found in enumerate(stored):
            assert found is not None
            expected = "pending" if n == 117 else "closed"
            store.update_task(found, expected, found.epoch, entry_for(found, expected))
        with pytest.raises(BatchRefused, match="1 of the batch's 200 task updates"):
            store.commit()
        store.rollback()
        assert sum(store.ledger_heads().values()) == 600
    finally:
        store.close()


def test_a_batchs_task_updates_find_their_rows_by_the_primary_key(board: str) -> None:
    """A board of some thousands of tasks, its statistics not yet gathered: the updates of a
    batch, sent as one statement, look each task up by its key and never scan the table — the
    planner, left alone, hashed the rows and read every task, closed ones too."""
    store = PostgresStore(board)
    try:
        tasks = [make_task(f"t{n:05d}") for n in range(20_000)]
        for task in tasks:
            add(store, task)
        _counted_once_idle(store)
        store.commit()
        before = wait_until(lambda: _scans(board, inserted=20_000))
        for task in tasks[:300]:
            move(store, task, state="running", agent="a1", epoch=1, attempts=1)
        _counted_once_idle(store)
        store.commit()
        after = wait_until(lambda: _scans(board, updated=300))
        assert after["seq_scan"] == before["seq_scan"], (before, after)
        assert len(store.list_tasks(TaskFilter(state="running", limit=1000))) == 300
    finally:
        store.close()


def _counted_once_idle(store: PostgresStore) -> None:
    """The store's backend passes its counts on to the statistics as soon as it is idle next,
    not up to 10 s later (then they are waited for, never slept on)."""
    store._one("SELECT pg_stat_force_next_flush()")


def _scans(board: str, inserted: int = 0, updated: int = 0) -> dict[str, int] | None:
    """The tasks table's scans, once its statistics count ``inserted`` and ``updated`` rows."""
    with psycopg.connect(board) as admin:
        row = admin.execute(
            "SELECT seq_scan, n_tup_ins, n_tup_upd FROM pg_stat_user_tables "
            "WHERE relid = 'tasks'::regclass"
        ).fetchone()
    if row is None or row[1] < inserted or row[2] < updated:
        return None
    return {"seq_scan": row[0]}


def test_a_batch_committed_aside_that_is_refused_takes_the_batch_after_it_along(
    board: str,
) -> None:
    """``commit_aside``: the batch's ledger row meets a row planted behind the store's back, so
    its commit, made on the store's thread, is refused; its future says so. The batch written
    meanwhile was built on it in memory: the store refuses it too (whether its write came
    before the refusal or after), nothing of either is stored, and after a rollback the store
    goes on."""
    store = PostgresStore(board)
    try:
        add(store, make_task("t-first"))  # its ledger row to be numbered 1
        with psycopg.connect(board, autocommit=True) as admin:
            admin.execute(
                "INSERT INTO ledger (seq, at, tenant, to_state, epoch) "
                "VALUES (1, '2026-01-01T00:00:00.000Z', 'default', 'planted', 0)"
            )
        aside = store.commit_aside()
        assert aside is not None
        with contextlib.suppress(BatchRefused):
            add(store, make_task("t-meanwhile"))
        with pytest.raises(BatchRefused, match="ledger_pkey"):
            aside.result(timeout=30)
        with pytest.raises(BatchRefused):
            store.commit()
        with pytest.raises(BatchRefused):
            store.get_task("t-first")
        store.rollback()
        assert _stored_ids(board) == []
        with psycopg.connect(board, autocommit=True) as admin:
            admin.execute("DELETE FROM ledger WHERE to_state = 'planted'")
        add(store, make_task("t-after"))
        aside = store.commit_aside()
        assert aside is not None and aside.result(timeout=30) >= 0
        assert _stored_ids(board) == ["t-after"]
    finally:
        store.close()
