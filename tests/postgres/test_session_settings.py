"""Every connection of the store sets the session it relies on, whatever the server, the
database or the role make the default: here the defaults come from the connection's own
options (as ``ALTER ROLE … SET`` or ``PGOPTIONS`` would give them), never from ``ALTER
DATABASE`` — the server is shared."""

from __future__ import annotations

import os
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, quote, urlencode, urlsplit, urlunsplit

import psycopg
import pytest

from colibri.store.postgres import SCHEMA_VERSION, PostgresStore
from tests.helpers import wait_until
from tests.postgres.hive import Member
from tests.store.values import entry_for, make_task

#: The isolation levels a database or role may default to, besides the one the store needs.
OTHER_ISOLATIONS = ("repeatable read", "serializable")


def with_defaults(dsn: str, **settings: str) -> str:
    """``dsn`` with these settings as its session's defaults (``-c name=value`` options)."""
    parts = urlsplit(dsn)
    query = parse_qs(parts.query)
    extra = " ".join(f"-c{name}={value.replace(' ', chr(92) + ' ')}"
                     for name, value in settings.items())  # fmt: skip
    query["options"] = [" ".join([*query.get("options", []), extra])]
    return urlunsplit(parts._replace(query=urlencode(query, doseq=True, quote_via=quote)))


def _board_key(dsn: str) -> tuple[int, int]:
    """The board's advisory lock (its writers', which migrations take too) as pg_locks shows
    it: classid, objid."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT hashtextextended('colibri board ' || current_schema(), 0)"
        ).fetchone()
    assert row is not None
    key = int(row[0]) & 0xFFFFFFFFFFFFFFFF
    return key >> 32, key & 0xFFFFFFFF


def _waiting(dsn: str, key: tuple[int, int]) -> int:
    """How many backends wait for the board's advisory lock."""
    with psycopg.connect(dsn) as conn:
        row = conn.execute(
            "SELECT COUNT(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND classid::bigint = %s AND objid::bigint = %s",
            key,
        ).fetchone()
    return 0 if row is None else int(row[0])


@pytest.fixture
def held_lock(
    board: str,
) -> Iterator[tuple[psycopg.Connection[tuple[object, ...]], tuple[int, int]]]:
    """A transaction holding the board's advisory lock: committed by the test when it lets go."""
    key = _board_key(board)
    conn = psycopg.connect(board)
    conn.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('colibri board ' || current_schema(), 0))"
    )
    try:
        yield conn, key
    finally:
        conn.close()


@pytest.mark.parametrize("isolation", OTHER_ISOLATIONS)
def test_stores_opening_a_fresh_board_at_once_all_open_it(
    board: str, held_lock: tuple[psycopg.Connection[tuple[object, ...]], tuple[int, int]],
    isolation: str,
) -> None:  # fmt: skip
    """Four stores make the board's tables at once, each under a default isolation where a
    snapshot is taken at a transaction's first statement: all wait for the lock, the first
    makes the tables, the others find them made (before: DuplicateTable, 'a bug')."""
    lock, key = held_lock
    dsn = with_defaults(board, default_transaction_isolation=isolation)
    failures: list[BaseException] = []

    def open_it() -> None:
        try:
            PostgresStore(dsn).close()
        except BaseException as exc:  # (said below, with the others')
            failures.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(4)]
    for thread in threads:
        thread.start()
    try:
        wait_until(lambda: _waiting(board, key) == 4, timeout=15)
    finally:
        lock.commit()  # the lock let go: the four go on
        for thread in threads:
            thread.join(timeout=30)
    assert failures == []
    with psycopg.connect(board) as conn:
        assert conn.execute("SELECT version FROM colibri_schema").fetchall() == [(SCHEMA_VERSION,)]


def _blocked(dsn: str, store: PostgresStore) -> bool:
    """Whether ``store``'s backend waits for a lock another holds."""
    pid = store._conn.info.backend_pid
    with psycopg.connect(dsn) as conn:
        row = conn.execute("SELECT cardinality(pg_blocking_pids(%s))", (pid,)).fetchone()
    return row is not None and int(row[0]) > 0


@pytest.mark.parametrize("isolation", OTHER_ISOLATIONS)
def test_a_batch_numbers_its_ledger_rows_after_a_batch_of_its_tenant_that_held_its_head(
    board: str, isolation: str
) -> None:
    """Batch A waits for its tenant's ledger head while batch B, of the same tenant, holds it;
    B commits a ledger row, A numbers its own after it. Under a snapshot taken before the
    wait, A would read the head from before B and take B's seq (a duplicate key: 'internal';
    under serializable a serialization failure: 'storage_unavailable')."""
    PostgresStore(board).close()
    dsn = with_defaults(board, default_transaction_isolation=isolation)
    a, b = PostgresStore(dsn), PostgresStore(dsn)
    a.fence = b.fence = ("nobody", [], [])  # (a fence that reads nothing: the lease's place)
    failures: list[BaseException] = []
    try:
        first, second = make_task("01b-first"), make_task("01b-second")
        b.insert_task(first, entry_for(first))
        assert b.get_task(first.id) is not None  # (a read in the batch: B holds the head now)
        a.insert_task(second, entry_for(second))

        def commit_a() -> None:
            try:
                a.commit()
            except BaseException as exc:
                failures.append(exc)

        committing = threading.Thread(target=commit_a)
        committing.start()
        wait_until(lambda: _blocked(board, a), timeout=15)
        b.commit()
        committing.join(timeout=30)
        assert failures == []
        seqs = {e.task: e.seq for e in a.ledger({}, 10)}
        assert seqs == {first.id: 1, second.id: 2}
    finally:
        a.close()
        b.close()


def test_batches_of_different_tenants_never_wait_for_each_other(board: str) -> None:
    """The board has no writers' lock any more: while a batch of tenant a is open, its ledger
    rows sent and its head held, a batch of tenant b commits at once, and so do a's after it;
    each tenant numbered from 1."""
    PostgresStore(board).close()
    a, b = PostgresStore(board), PostgresStore(board)
    a.fence = b.fence = ("nobody", [], [])
    try:
        first = make_task("01b-of-a", tenant="a")
        a.insert_task(first, entry_for(first))
        assert a.get_task(first.id) is not None  # sent: a holds its head, its batch open
        second = make_task("01b-of-b", tenant="b")
        b.insert_task(second, entry_for(second))
        b.commit()  # in this thread: a wait here would hang the test, not pass it
        assert not _blocked(board, a)
        a.commit()
        assert {(e.tenant, e.seq) for e in a.ledger({}, 10)} == {("a", 1), ("b", 1)}
    finally:
        a.close()
        b.close()


#: Defaults a database or role may set that the store relies on being otherwise: each broke
#: a store connected under it.
HOSTILE = {
    # writes refused: 'cannot execute INSERT in a read-only transaction'
    "default_transaction_read_only": "on",
    # the board's tables made, the first batch's statements: cancelled (the store's own
    # settings, set as it connects, take well under this)
    "statement_timeout": "5",
    # psycopg cannot parse the timestamps a batch reads (the server's start)
    "DateStyle": "SQL, DMY",
}


@pytest.mark.parametrize("setting", sorted(HOSTILE))
def test_a_store_connected_under_hostile_defaults_sets_its_own(board: str, setting: str) -> None:
    dsn = with_defaults(board, **{setting: HOSTILE[setting]})
    store = PostgresStore(dsn)
    try:
        _a_batch_and_a_read(store)
    finally:
        store.close()


def _a_batch_and_a_read(store: PostgresStore) -> None:
    task = make_task("01c-task")
    store.insert_task(task, entry_for(task))
    store.commit()
    assert store.get_task(task.id) is not None
    assert [e.task for e in store.ledger({}, 10)] == [task.id]


def test_an_idle_store_is_not_ended_by_a_default_idle_session_timeout(board: str) -> None:
    """A daemon's store sits idle between batches (a lease's connection between renewals): a
    role's ``idle_session_timeout`` ended it, and the next batch was refused."""
    dsn = with_defaults(board, idle_session_timeout="300ms")
    store = PostgresStore(dsn)
    try:
        # Idle since it opened; a session idle for less time, ended by the server, shows that
        # the store's has been idle past the timeout too.
        with psycopg.connect(dsn, autocommit=True) as probe:
            pid = probe.info.backend_pid
            wait_until(lambda: not _alive(board, pid), timeout=15)
        _a_batch_and_a_read(store)
    finally:
        store.close()


def _alive(dsn: str, pid: int) -> bool:
    with psycopg.connect(dsn) as conn:
        return (
            conn.execute("SELECT 1 FROM pg_stat_activity WHERE pid = %s", (pid,)).fetchone()
            is not None
        )


@pytest.mark.parametrize("durability", ["full", "relaxed"])
def test_durability_full_is_not_weakened_by_a_default(board: str, durability: str) -> None:
    """A database or role with ``synchronous_commit`` off would silently make a full-durability
    board lose acknowledged commits in a crash of the server: the store sets it either way."""
    store = PostgresStore(with_defaults(board, synchronous_commit="off"), durability=durability)
    try:
        found = store._conn.execute("SHOW synchronous_commit").fetchone()
    finally:
        store.close()
    assert found == {"synchronous_commit": "on" if durability == "full" else "off"}


def _launch(member: Member) -> None:
    """Start the daemon without waiting for it (it may serve or stand by)."""
    with open(member.log_path, "ab") as log:
        member.process = subprocess.Popen(member.command(), stdin=subprocess.DEVNULL, stdout=log,
                                          stderr=log, start_new_session=True,
                                          env={**os.environ, **member.env})  # fmt: skip


def test_daemons_started_at_once_on_a_fresh_board_under_repeatable_read_all_come_up(
    tmp_path: Path,
    board: str,
    held_lock: tuple[psycopg.Connection[tuple[object, ...]], tuple[int, int]],
) -> None:
    """Four daemons, their connection string's options defaulting every transaction to
    repeatable read (PGOPTIONS would do the same, were the board's schema not named by
    options already), started together on one fresh schema (the board's lock held until all
    four wait for it, to make the tables): one serves, three stand by, none dies (three died
    'a bug in colibri: DuplicateTable')."""
    lock, key = held_lock
    dsn = with_defaults(board, default_transaction_isolation="repeatable read")
    members = [Member(tmp_path / f"d{n}", dsn, ttl="4s") for n in range(4)]
    try:
        for member in members:
            _launch(member)
        try:
            wait_until(lambda: _waiting(board, key) == 4, timeout=60)
        finally:
            lock.commit()
        wait_until(
            lambda: (
                sum(m.serving() for m in members) == 1
                and sum("standby: daemon" in m.log() for m in members) == 3
            ),
            timeout=60,
        )
        assert all(m.process is not None and m.process.poll() is None for m in members)
        serving = next(m for m in members if m.serving())
        task = serving.submit("under repeatable read", capabilities=["nobody"])
        assert serving.task(task["id"])["state"] == "pending"
    finally:
        members[0].stop_with(*members[1:])
