"""A PostgreSQL board made by any earlier build — at any schema version, with any text that
version's migrations were released with — is migrated to the shape of a board made now
(columns, indexes, constraints, policies, functions); a board whose version says more than
its tables have is refused in one line and left unchanged, by the daemon and by hive list."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from pathlib import Path

import psycopg
import pytest

from colibri.core.errors import ConfigError, LockHeld
from colibri.core.model import LedgerEntry
from colibri.store.postgres import _COLUMNS, SCHEMA_VERSION, PostgresStore, hive_list
from tests.helpers import Daemon, colibri, one_line
from tests.store.conftest import pg_schema
from tests.store.test_released_migrations import released_texts

TEXTS = released_texts("postgresql")


@pytest.fixture
def boards() -> Iterator[Callable[[], str]]:
    """Fresh boards (schemas) on demand, all dropped after the test."""
    drops: list[Callable[[], None]] = []

    def make() -> str:
        dsn, drop = pg_schema()
        drops.append(drop)
        return dsn

    try:
        yield make
    finally:
        for drop in drops:
            drop()


def shape(dsn: str) -> dict[str, object]:
    """What makes a board's shape, its schema's name taken out: every column (in order, with
    type, nullability, default and collation), index, constraint, policy, row-level security
    flag and function, and the version it says."""
    with psycopg.connect(dsn) as conn:
        schema = str(conn.execute("SELECT current_schema()").fetchone()[0])  # type: ignore[index]

        def rows(query: str) -> list[tuple[object, ...]]:
            return [
                tuple(str(v).replace(schema + ".", "S.") if isinstance(v, str) else v for v in r)
                for r in conn.execute(query, {"schema": schema}).fetchall()
            ]

        return {
            "columns": rows(
                "SELECT c.relname, a.attnum, a.attname, format_type(a.atttypid, a.atttypmod), "
                "a.attnotnull, pg_get_expr(d.adbin, d.adrelid), co.collname "
                "FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
                "LEFT JOIN pg_collation co ON co.oid = a.attcollation "
                "WHERE n.nspname = %(schema)s AND c.relkind = 'r' AND a.attnum > 0 "
                "AND NOT a.attisdropped ORDER BY 1, 2"
            ),
            "tables": rows(
                "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity FROM pg_class c "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %(schema)s AND c.relkind = 'r' ORDER BY 1"
            ),
            "indexes": rows(
                "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %(schema)s "
                "ORDER BY 1"
            ),
            "constraints": rows(
                "SELECT c.relname, k.conname, pg_get_constraintdef(k.oid) FROM pg_constraint k "
                "JOIN pg_class c ON c.oid = k.conrelid "
                "JOIN pg_namespace n ON n.oid = c.relnamespace "
                "WHERE n.nspname = %(schema)s ORDER BY 1, 2"
            ),
            "policies": rows(
                "SELECT tablename, policyname, permissive, roles::text, cmd, qual, with_check "
                "FROM pg_policies WHERE schemaname = %(schema)s ORDER BY 1, 2"
            ),
            "functions": rows(
                "SELECT p.proname, pg_get_functiondef(p.oid), p.proconfig::text FROM pg_proc p "
                "JOIN pg_namespace n ON n.oid = p.pronamespace "
                "WHERE n.nspname = %(schema)s ORDER BY 1"
            ),
            "version": rows("SELECT version FROM colibri_schema"),
        }


def made_by(dsn: str, steps: tuple[str, ...]) -> None:
    """A board made by these migration texts (steps 1 to N), as the builds made them, with a
    daemon's beat in it when it has the table of daemons."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('colibri.tenants', '*', false)")
        for n, text in enumerate(steps, 1):
            conn.execute(text.encode())
            conn.execute("UPDATE colibri_schema SET version = %s", (n,))
        if len(steps) >= 3:
            conn.execute(
                "INSERT INTO hives (id, host, pid, ttl, started_at, last_beat) "
                "VALUES ('0ld-daemon', 'vm', 1, 10, now(), now())"
            )


def histories() -> list[tuple[str, ...]]:
    """Every version with every combination of the texts its migrations were released with."""
    return [
        combo
        for version in range(1, max(TEXTS) + 1)
        for combo in itertools.product(*(TEXTS[n] for n in range(1, version + 1)))
    ]


@pytest.mark.parametrize(
    "steps",
    histories(),
    ids=lambda steps: "+".join(f"{n}.{TEXTS[n].index(t) + 1}" for n, t in enumerate(steps, 1)),
)
def test_a_board_of_every_released_shape_is_migrated_to_a_fresh_boards(
    boards: Callable[[], str], steps: tuple[str, ...]
) -> None:
    fresh = boards()
    PostgresStore(fresh).close()
    old = boards()
    made_by(old, steps)
    PostgresStore(old).close()
    assert shape(old) == shape(fresh)
    assert shape(old)["version"] == [(SCHEMA_VERSION,)]
    if len(steps) >= 3:
        (daemon,) = hive_list(old)
        assert daemon["id"] == "0ld-daemon" and daemon["agents"] == 0


def test_the_columns_a_board_is_checked_for_are_a_fresh_boards(board: str) -> None:
    PostgresStore(board).close()
    found: dict[str, list[str]] = {}
    for table, _, column, *_ in shape(board)["columns"]:  # type: ignore[attr-defined]
        found.setdefault(table, []).append(column)
    assert {t: " ".join(c) for t, c in found.items()} == _COLUMNS


def test_a_board_of_the_first_version_6_is_served_and_listed_after_its_migration(
    board: str,
) -> None:
    """The builds that first had version 6 made boards without hives.agents and
    hives.tenants: hive list said to start a daemon of this version, which then stopped with
    'a bug in colibri: UndefinedColumn', and hive list said the same again."""
    made_by(board, tuple(TEXTS[n][0] for n in range(1, 7)))
    with pytest.raises(ConfigError) as refused:
        hive_list(board)
    assert "has schema version 6, older than this Colibri reads" in refused.value.message
    assert "start a daemon of this version on it" in refused.value.message
    PostgresStore(board).close()
    assert [d["id"] for d in hive_list(board)] == ["0ld-daemon"]


@pytest.mark.parametrize(
    ("version", "change", "said"),
    [
        (SCHEMA_VERSION, "ALTER TABLE hives DROP COLUMN tenants", "lacks hives.tenants"),
        (SCHEMA_VERSION, "DROP TABLE tokens", "lacks tokens.id"),
        (6, "DROP TABLE hives", 'relation "hives" does not exist'),
        # (A board of version 6 that says 5: migration 6 finds its columns made already.)
        (5, "COMMENT ON TABLE hives IS NULL", 'column "sharing" of relation "hives" already'),
    ],
    ids=["a column missing", "a table missing", "older, a table missing", "older, made ahead"],
)
def test_a_board_unlike_its_version_is_refused_in_one_line_and_left_unchanged(
    board: str, version: int, change: str, said: str
) -> None:
    PostgresStore(board).close()
    with psycopg.connect(board, autocommit=True) as conn:
        conn.execute(change)
        conn.execute("UPDATE colibri_schema SET version = %s", (version,))
    before = shape(board)
    with pytest.raises(ConfigError) as refused:
        PostgresStore(board)
    message = refused.value.message
    assert said in message and "not those of any release of Colibri" in message
    assert "\n" not in message
    assert shape(board) == before
    if version == SCHEMA_VERSION and "hives" not in change:
        with pytest.raises(ConfigError, match=said):
            hive_list(board)


def test_a_board_of_a_newer_version_is_refused_in_one_line(board: str) -> None:
    PostgresStore(board).close()
    with psycopg.connect(board, autocommit=True) as conn:
        conn.execute("UPDATE colibri_schema SET version = %s", (SCHEMA_VERSION + 1,))
    for refused_by in (PostgresStore, hive_list):
        with pytest.raises(ConfigError) as refused:
            refused_by(board)
        message = refused.value.message
        assert f"has schema version {SCHEMA_VERSION + 1}, newer than this Colibri" in message
        assert "upgrade colibri" in message and "\n" not in message


def test_a_daemon_serves_a_board_of_the_first_version_6_and_hive_list_shows_it(
    board: str, tmp_path: Path
) -> None:
    """The daemon itself, and `colibri hive list` as an operator runs it (they stopped with
    'a bug in colibri: UndefinedColumn', and said to start a daemon of this version)."""
    made_by(board, tuple(TEXTS[n][0] for n in range(1, 7)))
    before = colibri(None, "hive", "list", "--store", board, cwd=tmp_path)
    assert before.returncode == 1 and "older than this Colibri reads" in one_line(before.stderr)
    daemon = Daemon(tmp_path / "root", "--store", board, "--lease-ttl", "4s")
    daemon.root.mkdir()
    daemon.start()
    try:
        assert daemon.submit("on a board of the first version 6")["state"] == "pending"
        listed = colibri(None, "hive", "list", "--store", board, "--json", cwd=tmp_path)
        assert listed.returncode == 0, listed.stderr
        daemons = {d["pid"]: d for d in json.loads(listed.stdout)}
        assert daemons[daemon.pid]["tenants"] == ["*"] and daemons[1]["id"] == "0ld-daemon"
    finally:
        daemon.stop()


def test_a_board_of_version_10_is_numbered_per_tenant_keeping_each_tenants_order(
    boards: Callable[[], str],
) -> None:
    """Migration 11 renumbers the one sequence's rows tenant by tenant, in their order, and
    sets each tenant's head; the board's next rows follow each tenant's own; and while a
    daemon serves a board of version 10, it is left unmigrated, refused in one line."""
    dsn = boards()
    made_by(dsn, tuple(TEXTS[n][-1] for n in range(1, 11)))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('colibri.tenants', '*', false)")
        for seq, tenant in [(1, "acme"), (2, "default"), (3, "acme"), (5, "beta"), (8, "acme")]:
            conn.execute(
                "INSERT INTO ledger (seq, at, task, tenant, to_state, epoch) "
                "VALUES (%s, '2026-01-01T00:00:00.000Z', %s, %s, 'pending', 0)",
                (seq, f"old-{seq}", tenant),
            )
        conn.execute(
            "INSERT INTO leases (name, owner, address, epoch, taken_at, expires_at) "
            "VALUES ('board', '0ld-daemon', NULL, 1, now(), now() + interval '1 hour')"
        )
    with pytest.raises(LockHeld) as refused:
        PostgresStore(dsn)
    said = refused.value.message
    assert "\n" not in said and f"schema version 10 and this Colibri needs {SCHEMA_VERSION}" in said
    assert "holds the board's lease" in said and "stop the daemons of the older version" in said
    with psycopg.connect(dsn, autocommit=True) as conn:
        assert conn.execute("SELECT version FROM colibri_schema").fetchone() == (10,)
        conn.execute("DELETE FROM leases")
    store = PostgresStore(dsn)
    try:
        assert store.ledger_heads() == {"acme": 3, "beta": 1, "default": 1}
        rows = sorted((e.tenant, e.seq, e.task) for e in store.ledger({}, 10))
        assert rows == [
            ("acme", 1, "old-1"), ("acme", 2, "old-3"), ("acme", 3, "old-8"),
            ("beta", 1, "old-5"), ("default", 1, "old-2"),
        ]  # fmt: skip
        store.fence = ("nobody", [], [])
        entry = store.append_ledger(
            LedgerEntry(at="2026-01-02T00:00:00.000Z", schedule="s", tenant="beta",
                        to_state="missed")  # fmt: skip
        )
        store.commit()
        assert (entry.tenant, entry.seq) == ("beta", 2)
    finally:
        store.close()
