"""What only an SQLite board can show: its identity (application_id, user_version), refusing
files that are not Colibri boards without touching them, the durability pragmas, the file mode,
and real write faults (a file size limit set in a child process).

The behaviour every backend shares is in ``test_contract.py``.
"""

from __future__ import annotations

import hashlib
import os
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

from colibri.core.errors import ConfigError, StorageUnavailable
from colibri.core.model import Agent, LedgerEntry, Task
from colibri.store import TaskFilter
from colibri.store.sqlite import SqliteStore
from colibri.store.sqlite_schema import APPLICATION_ID, SCHEMA_VERSION
from tests.store.values import AT, FULL_TASK, add, ids, make_task


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
    rows = first.ledger({}, 10)
    first.close()
    for _ in range(2):
        again = SqliteStore(str(board))
        assert again.get_task(FULL_TASK.id) == FULL_TASK
        assert again.ledger({}, 10) == rows
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
        assert [e.task for e in store.ledger({}, 10)] == ["t1", "t3"]
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
    try:  # a write after it, as a later request of the same batch would make
        add(store, "later", "x")
        result["later_write"] = "ok"
    except StorageUnavailable as exc:
        result["later_write"] = exc.code
    try:
        store.commit()
        result["commit"] = "ok"
    except StorageUnavailable as exc:
        result["commit"] = exc.code
    store.rollback()
    result["new_stored"] = store.get_task("new00000") is not None
    result["later_stored"] = store.get_task("later") is not None
    result["ledger"] = [store.ledger_heads().get("default", 0), len(store.ledger({}, 10_000))]
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
    # The write after the fault is refused too, and nothing of the lost batch — none of its
    # ledger rows, numbered before the fault — is written into a transaction of its own.
    assert result == {"read": "OperationalError", "later_write": "storage_unavailable",
                      "commit": "storage_unavailable", "new_stored": False,
                      "later_stored": False, "ledger": [3000, 3000]}  # fmt: skip


def test_ledger_rows_that_cannot_be_written_before_a_read_lose_the_whole_batch(
    board: Path,
) -> None:
    """The store writes a batch's ledger rows before a read of the ledger. When that write
    fails, the batch is given up whole: no task of it commits without its ledger rows."""
    store = SqliteStore(str(board))
    try:
        first = Task(id="a", text="a", capabilities=[], created_at="t", updated_at="t")
        store.insert_task(first, LedgerEntry(at="t", task="a", to_state="pending"))
        # A row the ledger's NOT NULL refuses (a bug's doing: the board never makes one).
        store.append_ledger(LedgerEntry(at=None, to_state="missed"))  # type: ignore[arg-type]
        second = Task(id="b", text="b", capabilities=[], created_at="t", updated_at="t")
        store.insert_task(second, LedgerEntry(at="t", task="b", to_state="pending"))
        with pytest.raises(StorageUnavailable):
            store.ledger({}, 10)
        with pytest.raises(StorageUnavailable):
            store.commit()
        store.rollback()
        assert store.list_tasks(TaskFilter()) == []
        assert store.ledger_heads().get("default", 0) == 0
        # And the store serves again.
        store.insert_task(first, LedgerEntry(at="t", task="a", to_state="pending"))
        store.commit()
        assert [e.seq for e in store.ledger({}, 10)] == [1]
    finally:
        store.close()


def test_a_board_of_schema_4_gains_the_tenant_indexes_and_keeps_its_rows(tmp_path: Path) -> None:
    """Migration 5 adds indexes only: a board made before it (schema 4) is migrated in place,
    and its rows read by tenant as a new board's are."""
    from colibri.store import sql

    path = tmp_path / "old.sqlite"
    old = sqlite3.connect(path)
    for n in range(1, 5):
        old.executescript(sql.load("sqlite")[f"migration_{n}"])
    old.execute(
        "INSERT INTO ledger (at, task, tenant, to_state, epoch) "
        "VALUES ('2026-01-01T00:00:00.000Z', 't1', 'acme', 'pending', 0)"
    )
    old.execute(f"PRAGMA application_id={APPLICATION_ID}")
    old.execute("PRAGMA user_version=4")
    old.commit()
    old.close()
    store = SqliteStore(str(path))
    try:
        (entry,) = store.ledger({}, 10, tenant="acme")
        assert entry.task == "t1" and store.ledger({}, 10, tenant="default") == []
    finally:
        store.close()
    with closing(sqlite3.connect(path)) as check:
        assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
        names = {r[0] for r in check.execute("SELECT name FROM sqlite_master WHERE type='index'")}
        assert "tasks_tenant" in names  # (the ledger's key is its tenant's since migration 8)


@pytest.mark.parametrize(
    ("what", "index"),
    [("ledger", "PRIMARY KEY (tenant=? AND seq>?)"), ("list", "INDEX tasks_tenant"),
     ("prefix", "INDEX tasks_tenant"), ("count", "INDEX tasks_tenant"),
     ("cost", "PRIMARY KEY (tenant=?)"), ("end", "INDEX tasks_tail"),
     ("end of a tenant's", "INDEX tasks_tail")],
)  # fmt: skip
def test_a_tenants_reads_go_by_its_own_rows(board: Path, what: str, index: str) -> None:
    """What a token reads is found through an index on its tenant, so that an empty tenant's
    read of a large board costs nothing, and an id by its end through the index of ids' last
    characters, whoever asks: SQLite's plan for each read says so."""
    from colibri.store import sql
    from colibri.store.sqlite import _Q

    query = TaskFilter(tenant="acme", limit=10)
    statements: dict[str, tuple[str, list[Any]]] = {
        "ledger": (_Q["ledger_of_tenant"], ["acme", 0, 10]),
        "list": sql.list_tasks_query(query, "?"),
        "prefix": sql.list_tasks_query(TaskFilter(tenant="acme", prefix="0190", limit=3), "?"),
        "count": sql.count_tasks_query(query, "?"),
        "end": sql.list_tasks_query(TaskFilter(suffix="c874c933", limit=3), "?"),
        "end of a tenant's": sql.count_tasks_query(TaskFilter(tenant="acme", suffix="c933"), "?"),
        "cost": (
            sql.cost_query(_Q["cost_totals"], "agent").replace("{tenant}", "AND l.tenant = ?"),
            ["", "acme"],
        ),
    }
    text, args = statements[what]
    SqliteStore(str(board)).close()
    with closing(sqlite3.connect(board)) as conn:
        plan = " | ".join(r[-1] for r in conn.execute(f"EXPLAIN QUERY PLAN {text}", args))
    assert f"USING {index}" in plan or f"USING COVERING {index}" in plan, plan


def test_a_board_of_schema_7_is_numbered_per_tenant_keeping_each_tenants_order(
    tmp_path: Path,
) -> None:
    """Migration 8 renumbers the ledger tenant by tenant, in the order of the board's one
    sequence, sets each tenant's head, and the next row of a tenant follows its head."""
    from colibri.store import sql

    path = tmp_path / "v7.sqlite"
    old = sqlite3.connect(path)
    for n in range(1, 8):
        old.executescript(sql.load("sqlite")[f"migration_{n}"])
    for seq, tenant in [(1, "acme"), (2, "default"), (3, "acme"), (5, "beta"), (7, "default")]:
        old.execute(
            "INSERT INTO ledger (seq, at, task, tenant, to_state, epoch) "
            "VALUES (?, '2026-01-01T00:00:00.000Z', ?, ?, 'pending', 0)",
            (seq, f"old-{seq}", tenant),
        )
    old.execute(f"PRAGMA application_id={APPLICATION_ID}")
    old.execute("PRAGMA user_version=7")
    old.commit()
    old.close()
    store = SqliteStore(str(path))
    try:
        assert store.ledger_heads() == {"acme": 2, "beta": 1, "default": 2}
        rows = store.ledger({}, 10)
        assert sorted((e.tenant, e.seq, e.task) for e in rows) == [
            ("acme", 1, "old-1"), ("acme", 2, "old-3"), ("beta", 1, "old-5"),
            ("default", 1, "old-2"), ("default", 2, "old-7"),
        ]  # fmt: skip
        missed = LedgerEntry(
            at="2026-01-02T00:00:00.000Z", schedule="s", tenant="acme", to_state="missed"
        )
        entry = store.append_ledger(missed)
        store.commit()
        assert (entry.tenant, entry.seq) == ("acme", 3)
        assert store.ledger({"acme": 2}, 10, tenant="acme") == [entry]
    finally:
        store.close()
