"""An SQLite board made by any earlier build — at any schema version, with any text that
version's migrations were released with — is brought to the shape of a board made now, its
rows kept; a shape no release made is refused in one line and left untouched."""

from __future__ import annotations

import itertools
import sqlite3
from pathlib import Path

import pytest

from colibri.core.errors import ConfigError
from colibri.store.sqlite_schema import APPLICATION_ID, SCHEMA_VERSION, _split, open_board, shape
from tests.store.test_released_migrations import released_texts

TEXTS = released_texts("sqlite")


def histories() -> list[tuple[int, tuple[str, ...]]]:
    """Every board an earlier build could have made: each version, with each combination of
    the texts its migrations were released with (a board made by one build and migrated by
    later ones has the older texts of the first steps and the newer of the last)."""
    return [
        (version, combo)
        for version in range(1, max(TEXTS) + 1)
        for combo in itertools.product(*(TEXTS[n] for n in range(1, version + 1)))
    ]


def made_by(path: Path, version: int, steps: tuple[str, ...]) -> bool:
    """A board at ``path`` made by these migration texts, with a task and a ledger row; False
    when no build could have made it (a later step's text does not apply to that earlier
    shape: that upgrade failed, leaving the board as it was)."""
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        for text in steps:
            for statement in _split(text):
                conn.execute(statement)
        conn.execute(
            "INSERT INTO tasks (id, tenant, text, capabilities, state, labels, created_at, "
            "updated_at) VALUES ('01a-old', 'default', 'made long ago', '[]', 'pending', '[]', "
            "'2026-11-30T00:00:00.000Z', '2026-11-30T00:00:00.000Z')"
        )
        conn.execute(
            "INSERT INTO ledger (seq, at, task, tenant, to_state, epoch) "
            "VALUES (1, '2026-11-30T00:00:00.000Z', '01a-old', 'default', 'pending', 0)"
        )
        if version >= 8:  # each tenant's ledger numbered from its head
            conn.execute("INSERT INTO ledger_heads (tenant, seq) VALUES ('default', 1)")
        conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
        conn.execute(f"PRAGMA user_version={version}")
        return True
    except sqlite3.OperationalError:
        return False
    finally:
        conn.close()


def test_every_released_shape_of_every_version_becomes_a_fresh_boards(tmp_path: Path) -> None:
    fresh = open_board(str(tmp_path / "fresh.db"), "full")
    wanted = shape(fresh)
    fresh.close()
    built = 0
    for n, (version, steps) in enumerate(histories()):
        path = tmp_path / f"v{version}-{n}.db"
        if not made_by(path, version, steps):
            continue
        built += 1
        conn = open_board(str(path), "full")
        try:
            assert shape(conn) == wanted, (version, [s.splitlines()[0] for s in steps])
            assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
            tasks = [tuple(r) for r in conn.execute("SELECT id, text FROM tasks")]
            assert tasks == [("01a-old", "made long ago")]
            assert [tuple(r) for r in conn.execute("SELECT seq, task FROM ledger")] == [
                (1, "01a-old")
            ]
            # What the first builds' boards refused: a schedule's fire has no task.
            conn.execute(
                "INSERT INTO ledger (seq, at, task, schedule, tenant, to_state, epoch) "
                "VALUES (2, '2026-12-06T00:00:00.000Z', NULL, 'nightly', 'default', 'missed', 0)"
            )
            # Numbered per tenant since version 8: its head says where the default tenant is.
            assert [tuple(r) for r in conn.execute("SELECT tenant, seq FROM ledger_heads")] == [
                ("default", 1)
            ]
        finally:
            conn.close()
    # Every build's own board at least: each version's texts, newest steps before them.
    assert built >= sum(len(found) for found in TEXTS.values())


def test_the_boards_of_every_build_are_made_whole(tmp_path: Path) -> None:
    """The straight line of each build (the texts of its day for every step) is one of them."""
    for version, found in TEXTS.items():
        for k, text in enumerate(found):
            steps = tuple(TEXTS[n][-1] for n in range(1, version)) + (text,)
            assert made_by(tmp_path / f"b{version}-{k}.db", version, steps)


@pytest.mark.parametrize(
    "change",
    [
        "ALTER TABLE tasks ADD COLUMN colour TEXT",
        "CREATE TABLE notes (body TEXT)",
    ],
    ids=["a column", "a table"],
)
def test_a_shape_no_release_made_is_refused_and_left_untouched(tmp_path: Path, change: str) -> None:
    path = tmp_path / "board.db"
    assert made_by(path, 1, (TEXTS[1][0],))
    with sqlite3.connect(path) as conn:
        conn.execute(change)
    before = _contents(path)
    with pytest.raises(ConfigError) as refused:
        open_board(str(path), "full")
    message = refused.value.message
    assert "says schema version 1, but its" in message and "no release" in message
    assert "\n" not in message
    assert _contents(path) == before


def _contents(path: Path) -> object:
    with sqlite3.connect(path) as conn:
        return (
            conn.execute("SELECT type, name, sql FROM sqlite_master ORDER BY name").fetchall(),
            conn.execute("PRAGMA user_version").fetchone(),
            conn.execute("SELECT * FROM tasks").fetchall(),
            conn.execute("SELECT * FROM ledger").fetchall(),
        )
