"""A PostgreSQL board keeps its open tasks' ids in a table of their own (migration_12), so that
no index of tasks holds a column a transition changes and a transition's update is heap-only
(HOT): no new entry in any index of tasks. The ids follow the tasks' own statements (triggers),
a board of version 11 is migrated with its open tasks, and the reads of open tasks go by them."""

from __future__ import annotations

import re
import threading
from collections.abc import Callable, Iterator
from typing import Any

import msgspec
import psycopg
import psycopg.sql
import pytest

from colibri.core.model import Task
from colibri.store.postgres import SCHEMA_VERSION, PostgresStore, bulk
from colibri.store.rows import CHANGE_COLUMNS
from colibri.store.task_query import TaskFilter
from tests.helpers import wait_until
from tests.postgres.test_migrations import TEXTS, made_by
from tests.store.conftest import as_app_role, pg_schema
from tests.store.values import LATER, entry_for, ids, make_task, move

N = 200


@pytest.fixture
def filled(board: str) -> Iterator[tuple[str, list[Task]]]:
    """A board with N pending tasks of two tenants, written by the store in one batch."""
    store = PostgresStore(board)
    try:
        tasks = [make_task(f"t{n:04d}", tenant=("acme", "beta")[n % 2]) for n in range(N)]
        for tenant in ("acme", "beta"):
            store.ensure_tenant(tenant, LATER)
        for task in tasks:
            store.insert_task(task, entry_for(task))
        store.commit()
    finally:
        store.close()
    yield board, tasks


def _open_ids(conn: psycopg.Connection[Any]) -> list[str]:
    return [r[0] for r in conn.execute("SELECT id FROM open_tasks ORDER BY id")]


def _transition(
    conn: psycopg.Connection[Any], tasks: list[Task], **changes: object
) -> tuple[list[Task], int]:
    """The tasks moved by the statement a batch sends for them, in a transaction of its own;
    the moved tasks, and how many of the updates were heap-only."""
    moved = [msgspec.structs.replace(t, updated_at=LATER, **changes) for t in tasks]
    # (The backend's own counts, not yet sent, taken before and after inside the transaction:
    # no wait for the statistics to be sent, and nothing sent between.)
    counts = (
        "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_xact_user_tables "
        "WHERE relid = 'tasks'::regclass"
    )
    with conn.transaction():
        conn.execute("SELECT set_config('colibri.tenants', '*', true)")
        conn.execute(bulk.BY_INDEX)
        before = conn.execute(counts).fetchone()
        rows = [
            bulk.task_change(new, old.state, old.epoch)
            for new, old in zip(moved, tasks, strict=True)
        ]
        assert conn.execute(bulk.AS_ONE["update_task"], bulk.parameters(rows)).rowcount == N
        after = conn.execute(counts).fetchone()
    assert before is not None and after is not None and after[0] - before[0] == N
    return moved, int(after[1] - before[1])


def test_no_index_of_tasks_holds_a_column_a_transition_changes(board: str) -> None:
    PostgresStore(board).close()
    with psycopg.connect(board) as conn:
        indexes = conn.execute(
            "SELECT indexname, indexdef FROM pg_indexes "
            "WHERE schemaname = current_schema() AND tablename = 'tasks'"
        ).fetchall()
        (options,) = conn.execute(  # type: ignore[misc]
            "SELECT reloptions FROM pg_class WHERE oid = 'tasks'::regclass"
        ).fetchone()
    assert {name for name, _ in indexes} >= {"tasks_pkey", "tasks_parent", "tasks_tenant"}
    for name, definition in indexes:
        keyed = definition.split(" USING ", 1)[1]  # the columns, expressions and predicate
        held = [c for c in CHANGE_COLUMNS if re.search(rf"\b{c}\b", keyed)]
        assert not held, f"index {name} holds {held}, which a transition changes: {definition}"
    # Room in each page for the next version of its tasks.
    assert options == ["fillfactor=50"]


def test_a_transition_is_heap_only_and_the_open_ids_follow_the_tasks(
    filled: tuple[str, list[Task]],
) -> None:
    board, tasks = filled
    with psycopg.connect(board, autocommit=True) as conn:
        conn.execute("SELECT set_config('colibri.tenants', '*', false)")
        assert _open_ids(conn) == ids(tasks)
        running, hot = _transition(conn, tasks, state="running", agent="a1", epoch=1, attempts=1)
        # Every task's new version fits beside it but at the ends of a few pages: without the
        # room, or with an index on the state or the agent, none would.
        assert hot >= N * 0.9, f"{hot} of {N} updates were heap-only"
        assert _open_ids(conn) == ids(tasks)
        done, _ = _transition(conn, running, state="done", outcome="done")
        assert _open_ids(conn) == ids(tasks)
        # Half closed in one statement, half left open: only the closed leave.
        closing = done[::2]
        moved = [msgspec.structs.replace(t, state="closed", updated_at=LATER) for t in closing]
        with conn.transaction():
            rows = [bulk.task_change(new, "done", new.epoch) for new in moved]
            conn.execute(bulk.AS_ONE["update_task"], bulk.parameters(rows))
        assert _open_ids(conn) == ids(done[1::2])
    store = PostgresStore(board)
    try:
        assert ids(store.open_tasks()) == ids(done[1::2])
        assert ids(store.list_tasks(TaskFilter(state="done", limit=N))) == ids(done[1::2])
        assert ids(store.list_tasks(TaskFilter(state="done", newest=True, limit=3))) == ids(
            done[1::2][::-1][:3]
        )
        assert store.count_tasks(TaskFilter(state="done", tenant="beta")) == N // 2
        assert store.count_tasks(TaskFilter(state="closed")) == N // 2
    finally:
        store.close()


@pytest.fixture
def board_of_version_11() -> Iterator[str]:
    dsn, drop = pg_schema()
    try:
        made_by(dsn, tuple(TEXTS[n][-1] for n in range(1, 12)))
        yield dsn
    finally:
        drop()


def test_a_board_of_version_11_is_migrated_with_its_open_tasks(board_of_version_11: str) -> None:
    dsn = board_of_version_11
    states = {"t1": "pending", "t2": "running", "t3": "closed", "t4": "done", "t5": "closed"}
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('colibri.tenants', '*', false)")
        for n, (task, state) in enumerate(states.items()):
            conn.execute(
                "INSERT INTO tasks (id, tenant, text, capabilities, state, labels, created_at, "
                "updated_at) VALUES (%s, %s, 'x', '[]', %s, '[]', 'at', 'at')",
                (task, ("acme", "beta")[n % 2], state),
            )
    PostgresStore(dsn).close()
    with psycopg.connect(dsn) as conn:
        conn.execute("SELECT set_config('colibri.tenants', '*', false)")
        found = conn.execute("SELECT id, tenant FROM open_tasks ORDER BY id").fetchall()
        assert found == [("t1", "acme"), ("t2", "beta"), ("t4", "beta")]
        version = conn.execute("SELECT version FROM colibri_schema").fetchone()
        assert version is not None and version[0] == SCHEMA_VERSION
    store = PostgresStore(dsn)
    try:
        assert ids(store.open_tasks()) == ["t1", "t2", "t4"]
    finally:
        store.close()


def test_every_writer_of_tasks_keeps_the_open_ids(board: str) -> None:
    """Not only the store's statements: the triggers are the table's, whoever writes it."""
    PostgresStore(board).close()
    with psycopg.connect(board, autocommit=True) as conn:
        conn.execute("SELECT set_config('colibri.tenants', '*', false)")
        insert: Callable[[str, str], object] = lambda task, state: conn.execute(  # noqa: E731
            "INSERT INTO tasks (id, tenant, text, capabilities, state, labels, created_at, "
            "updated_at) VALUES (%s, 'acme', 'x', '[]', %s, '[]', 'at', 'at')",
            (task, state),
        )
        insert("a", "pending")
        insert("b", "closed")  # (a task copied in closed is never open)
        conn.execute("UPDATE tasks SET state = 'running' WHERE id = 'a'")
        assert _open_ids(conn) == ["a"]
        conn.execute("UPDATE tasks SET state = 'closed' WHERE id = 'a'")
        assert _open_ids(conn) == []


def test_the_open_ids_are_kept_beside_the_tasks_whatever_the_sessions_search_path() -> None:
    """An operator's session whose path leads to another board (or to none) writing this
    board's tasks by their schema's name keeps this board's ids, not the other's."""
    (ours, drop_ours), (theirs, drop_theirs) = pg_schema(), pg_schema()
    try:
        for dsn in (ours, theirs):
            PostgresStore(dsn).close()
        with psycopg.connect(ours) as conn:
            (schema,) = conn.execute("SELECT current_schema()").fetchone()  # type: ignore[misc]
        with psycopg.connect(theirs, autocommit=True) as conn:
            conn.execute("SELECT set_config('colibri.tenants', '*', false)")
            tasks = psycopg.sql.Identifier(schema, "tasks")
            conn.execute(
                psycopg.sql.SQL(
                    "INSERT INTO {} (id, tenant, text, capabilities, state, labels, created_at, "
                    "updated_at) VALUES ('a', 'acme', 'x', '[]', 'pending', '[]', 'at', 'at'), "
                    "('b', 'acme', 'x', '[]', 'pending', '[]', 'at', 'at')"
                ).format(tasks)
            )
            conn.execute(
                psycopg.sql.SQL("UPDATE {} SET state = 'closed' WHERE id = 'a'").format(tasks)
            )
            assert _open_ids(conn) == []  # this session's board: untouched
        with psycopg.connect(ours, autocommit=True) as conn:
            conn.execute("SELECT set_config('colibri.tenants', '*', false)")
            assert _open_ids(conn) == ["b"]
    finally:
        drop_ours()
        drop_theirs()


def test_a_deleted_or_truncated_task_takes_its_id_along_and_a_task_cannot_leave_or_reopen(
    board: str,
) -> None:
    """Colibri deletes no task, moves none between tenants and reopens none; an operator's
    hand may. A delete is followed; the others are refused, since the ids could not follow."""
    PostgresStore(board).close()
    with psycopg.connect(board, autocommit=True) as conn:
        conn.execute("SELECT set_config('colibri.tenants', '*', false)")
        for task, state in (("a", "pending"), ("b", "closed"), ("c", "running")):
            conn.execute(
                "INSERT INTO tasks (id, tenant, text, capabilities, state, labels, created_at, "
                "updated_at) VALUES (%s, 'acme', 'x', '[]', %s, '[]', 'at', 'at')",
                (task, state),
            )
        conn.execute("DELETE FROM tasks WHERE id IN ('a', 'b')")
        assert _open_ids(conn) == ["c"]
        conn.execute("TRUNCATE tasks")  # (no delete trigger fires: a truncate one does)
        assert _open_ids(conn) == []
        conn.execute(
            "INSERT INTO tasks (id, tenant, text, capabilities, state, labels, created_at, "
            "updated_at) VALUES ('c', 'acme', 'x', '[]', 'running', '[]', 'at', 'at')"
        )
        conn.execute(  # the id free again, in both tables
            "INSERT INTO tasks (id, tenant, text, capabilities, state, labels, created_at, "
            "updated_at) VALUES ('a', 'acme', 'x', '[]', 'pending', '[]', 'at', 'at'), "
            "('b', 'acme', 'x', '[]', 'closed', '[]', 'at', 'at')"
        )
        assert _open_ids(conn) == ["a", "c"]
        for change in (
            "SET tenant = 'beta' WHERE id = 'c'",
            "SET id = 'd' WHERE id = 'c'",
            "SET state = 'pending' WHERE id = 'b'",
            "SET text = 'y', tenant = 'beta'",  # one row of many
        ):
            with pytest.raises(psycopg.errors.CheckViolation, match="stays closed"):
                conn.execute(f"UPDATE tasks {change}".encode())
        rows = conn.execute("SELECT id, tenant, state, text FROM tasks ORDER BY id").fetchall()
        assert rows == [
            ("a", "acme", "pending", "x"), ("b", "acme", "closed", "x"),
            ("c", "acme", "running", "x"),
        ]  # fmt: skip
        assert _open_ids(conn) == ["a", "c"]


def test_the_open_ids_follow_the_store_of_a_role_bound_by_row_level_security(board: str) -> None:
    store = PostgresStore(as_app_role(board))
    try:
        tasks = [make_task(f"t{n}", tenant=tenant) for n, tenant in enumerate(("acme", "beta"))]
        for task in tasks:
            store.ensure_tenant(task.tenant, LATER)
            store.insert_task(task, entry_for(task))
        store.commit()
        move(store, tasks[0], state="cancelled", outcome="cancelled")
        store.commit()
        store.update_task(
            msgspec.structs.replace(tasks[0], state="closed", outcome="cancelled"), "cancelled",
            0, entry_for(tasks[0], "cancelled"),
        )  # fmt: skip
        store.commit()
        assert ids(store.open_tasks()) == ["t1"]
    finally:
        store.close()
    with psycopg.connect(board, autocommit=True) as conn:
        conn.execute("SELECT set_config('colibri.tenants', '*', false)")
        assert conn.execute("SELECT id, tenant FROM open_tasks").fetchall() == [("t1", "beta")]


def test_a_migration_meeting_an_older_daemons_open_batch_keeps_what_it_commits(
    board_of_version_11: str,
) -> None:
    """A batch of a daemon of version 11 is open as the board is migrated (its lease ran out
    while it stalled: nothing but the lease kept the migration away). The migration waits for
    it, and the open ids are those of the board the batch left, not of the one before it."""
    dsn = board_of_version_11
    insert = (
        "INSERT INTO tasks (id, tenant, text, capabilities, state, labels, created_at, "
        "updated_at) VALUES (%s, 'acme', 'x', '[]', %s, '[]', 'at', 'at')"
    )
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('colibri.tenants', '*', false)")
        conn.execute(insert, ("t-running", "running"))
        conn.execute(insert, ("t-pending", "pending"))
    older = psycopg.connect(dsn)
    migrated: list[BaseException | None] = []
    try:
        older.execute("SELECT set_config('colibri.tenants', '*', true)")
        older.execute(insert, ("t-new", "pending"))
        older.execute("UPDATE tasks SET state = 'closed' WHERE id = 't-running'")

        def migrate() -> None:
            try:
                PostgresStore(dsn).close()
                migrated.append(None)
            except BaseException as exc:
                migrated.append(exc)

        thread = threading.Thread(target=migrate, daemon=True)
        thread.start()
        with psycopg.connect(dsn, autocommit=True) as watch:
            waiting = (
                "SELECT COUNT(*) FROM pg_locks WHERE NOT granted AND relation = 'tasks'::regclass"
            )
            wait_until(lambda: watch.execute(waiting).fetchone() == (1,), timeout=15)
        older.commit()
        thread.join(30)
        assert migrated == [None], migrated
    finally:
        older.close()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('colibri.tenants', '*', false)")
        assert _open_ids(conn) == ["t-new", "t-pending"]
