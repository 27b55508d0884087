"""Opening an SQLite board: that the file is one, its pragmas, and its schema migrations.

A board is marked as ours (``application_id``) and carries its schema version
(``user_version``): a foreign SQLite file is never written to, a board from a newer Colibri is
refused, and an older one is brought up to date, one ``migration_N`` block of
``sql/sqlite.sql`` per transaction, before anything else reads it.
"""

from __future__ import annotations

import os
import sqlite3
from typing import cast

from colibri.core.errors import ConfigError
from colibri.store import sql

#: 'Coli' — marks the file as a Colibri board, so a foreign SQLite file is never written to.
APPLICATION_ID = 0x436F6C69
#: After a checkpoint resets the WAL, a larger file is cut back to this. In steady state the
#: WAL resets at the auto-checkpoint (1,000 pages, just under 4 MiB), so only a reader that
#: pinned it or one huge batch ever makes it grow past the limit, and never for long.
WAL_SIZE_LIMIT = 4 * 1024 * 1024
_MIGRATIONS = {
    int(name.split("_")[1]): body
    for name, body in sql.load("sqlite").items()
    if name.startswith("migration_")
}
SCHEMA_VERSION = max(_MIGRATIONS)
#: The board's file and the ones SQLite keeps beside it (suffixes of its path).
COMPANIONS = ("", "-wal", "-shm", "-journal")


def open_board(location: str, durability: str) -> sqlite3.Connection:
    """A connection to the board at ``location`` (created if missing), migrated to
    ``SCHEMA_VERSION``, in WAL mode, with ``synchronous`` set by ``durability``.

    :raises ConfigError: an unknown durability; a link at the board or a companion file; a
        file that cannot be opened for writing, is not SQLite, is another program's, or is
        from a newer Colibri. Nothing was written to it.
    """
    if durability not in ("full", "relaxed"):
        raise ConfigError(f"unknown durability {durability!r}: use full or relaxed")
    refuse_links(location)
    try:
        fd = os.open(location, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        raise ConfigError(
            f"{location} cannot be opened for writing ({exc.strerror}); fix its permissions "
            "or pass --store with another path"
        ) from None
    os.close(fd)
    conn = sqlite3.connect(
        location, isolation_level=None, check_same_thread=False, cached_statements=256
    )
    conn.row_factory = sqlite3.Row
    try:
        _check_identity(conn, location)
        conn.execute("PRAGMA journal_mode=WAL")
        # Schema changes are synced whatever the durability: a power cut right after
        # creating a board must not leave a file without its tables.
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("PRAGMA busy_timeout=5000")
        conn.execute(f"PRAGMA journal_size_limit={WAL_SIZE_LIMIT}")
        _migrate(conn, location)
        if durability == "relaxed":
            conn.execute("PRAGMA synchronous=NORMAL")
    except sqlite3.DatabaseError as exc:
        conn.close()
        raise ConfigError(
            f"{location} is not a usable SQLite board ({exc}); move it aside or pass "
            "--store with another path"
        ) from None
    except BaseException:
        conn.close()
        raise
    return conn


def refuse_links(location: str) -> None:
    """SQLite follows links, and writes the WAL and shared memory beside the board: none of
    them may be a link planted to make it write (or a copy read) elsewhere.

    :raises ConfigError: one of them is a symbolic link.
    """
    for companion in COMPANIONS:
        if os.path.islink(location + companion):
            raise ConfigError(
                f"{location + companion} is a symbolic link; give the board's real path "
                "with --store, or remove the link"
            )


def _check_identity(conn: sqlite3.Connection, location: str) -> None:
    app_id = conn.execute("PRAGMA application_id").fetchone()[0]
    if app_id == APPLICATION_ID:
        return
    tables = conn.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()[0]
    if app_id != 0 or tables:
        raise ConfigError(
            f"{location} is an SQLite file of another program, not a Colibri board; "
            "it was left untouched (pass --store with another path)"
        )


def _migrate(conn: sqlite3.Connection, location: str) -> None:
    version = conn.execute("PRAGMA user_version").fetchone()[0]
    if version > SCHEMA_VERSION:
        raise ConfigError(
            f"{location} has schema version {version}, newer than this Colibri "
            f"understands ({SCHEMA_VERSION}); upgrade colibri"
        )
    if version and shape(conn) != released_shape(version):
        conn.execute("BEGIN IMMEDIATE")
        try:
            _converge(conn, version, location)
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise
    for n in range(version + 1, SCHEMA_VERSION + 1):
        conn.execute("BEGIN IMMEDIATE")
        try:
            for statement in _split(_MIGRATIONS[n]):
                conn.execute(statement)
            conn.execute(f"PRAGMA application_id={APPLICATION_ID}")
            conn.execute(f"PRAGMA user_version={n}")
            conn.execute("COMMIT")
        except BaseException:
            conn.execute("ROLLBACK")
            raise


def _split(script: str) -> list[str]:
    """Split a migration into statements; sqlite3 decides where one is complete."""
    statements: list[str] = []
    buffer = ""
    for line in script.splitlines(keepends=True):
        buffer += line
        if sqlite3.complete_statement(buffer):
            statements.append(buffer.strip())
            buffer = ""
    if buffer.strip() and not _only_comments(buffer):
        statements.append(buffer.strip())
    return statements


def _only_comments(statement: str) -> bool:
    return all(not line.strip() or line.strip().startswith("--") for line in statement.splitlines())


# -- released shapes -------------------------------------------------------------------------
#
# Migrations 1, 3 and 4 were changed after builds had made boards with them (which a released
# migration never is again): a board of one version may have been made by any of them — tasks
# without the columns added since, a ledger whose task may not be NULL, no schedules tables, no
# tokens' workspace. Before it is migrated further (each migration as released expects the last
# shape of the version it follows), such a board is brought to the last shape of its version:
# what a board made by migrations 1 to that version as they stand now has.


def shape(conn: sqlite3.Connection) -> dict[str, object]:
    """The board's tables (columns in order: name, type, not null, default, primary key; WITHOUT
    ROWID; AUTOINCREMENT) and indexes (their SQL), as two boards are compared."""
    tables: dict[str, object] = {}
    indexes: dict[str, str] = {}
    for kind, name, text in conn.execute(
        "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE 'sqlite_%' ORDER BY name"
    ).fetchall():
        if kind == "table":
            columns = [tuple(c)[1:] for c in conn.execute(f'PRAGMA table_info("{name}")')]
            said = " ".join(text.upper().split())
            tables[name] = (columns, "WITHOUT ROWID" in said, "AUTOINCREMENT" in said)
        elif kind == "index" and text is not None:
            indexes[name] = " ".join(text.split())
    return {"tables": tables, "indexes": indexes}


_SHAPES: dict[int, tuple[dict[str, object], dict[str, str]]] = {}


def _released(version: int) -> tuple[dict[str, object], dict[str, str]]:
    """The last released shape of ``version``, and the SQL of each of its tables and indexes:
    read from a board made in memory by migrations 1 to ``version``."""
    if version not in _SHAPES:
        made = sqlite3.connect(":memory:", isolation_level=None)
        try:
            for n in range(1, version + 1):
                for statement in _split(_MIGRATIONS[n]):
                    made.execute(statement)
            texts = dict(made.execute("SELECT name, sql FROM sqlite_master WHERE sql IS NOT NULL"))
            _SHAPES[version] = (shape(made), texts)
        finally:
            made.close()
    return _SHAPES[version]


def released_shape(version: int) -> dict[str, object]:
    return _released(version)[0]


def _converge(conn: sqlite3.Connection, version: int, location: str) -> None:
    """Bring a board of ``version`` made by an earlier build to the version's last shape, in the
    caller's transaction: a table that differs is made again as the version has it and its rows
    copied (the columns both have); a missing table or index is made, an index that differs made
    again. A table or column no release had is refused: nothing is changed."""
    wanted, texts = _released(version)
    have = shape(conn)
    tables = cast(dict[str, tuple[list[tuple[object, ...]], bool, bool]], wanted["tables"])
    found = cast(dict[str, tuple[list[tuple[object, ...]], bool, bool]], have["tables"])
    for name, (columns, _, _) in found.items():
        known = {c[0] for c in tables[name][0]} if name in tables else None
        extra = sorted({str(c[0]) for c in columns} - known) if known is not None else None
        if known is None or extra:
            what = (
                f"table {name}" if known is None else f"column {name}.{extra[0] if extra else ''}"
            )
            raise ConfigError(
                f"{location} says schema version {version}, but its {what} is one no release "
                "of Colibri made; it was left untouched (restore it from a backup, or pass "
                "--store with another path)"
            )
    for name, table in tables.items():
        if name not in found:
            conn.execute(texts[name])
        elif found[name] != table:
            _remake(conn, name, texts[name], [str(c[0]) for c in found[name][0]])
    indexes = cast(dict[str, str], wanted["indexes"])
    present = cast(dict[str, str], shape(conn)["indexes"])
    for name, text in indexes.items():
        if present.get(name) != text:
            conn.execute(f'DROP INDEX IF EXISTS "{name}"')
            conn.execute(texts[name])


def _remake(conn: sqlite3.Connection, name: str, text: str, columns: list[str]) -> None:
    """Make table ``name`` again by ``text``, its rows copied (``columns``, those it had)."""
    # (An AUTOINCREMENT table's highest id so far is kept in sqlite_sequence, made with the
    # first such table: the ledger's goes on from where it was.)
    counted = conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'").fetchone()
    sequence = (
        conn.execute("SELECT seq FROM sqlite_sequence WHERE name = ?", (name,)).fetchone()
        if counted
        else None
    )
    old = f"{name}_released"
    conn.execute(f'ALTER TABLE "{name}" RENAME TO "{old}"')
    conn.execute(text)
    listed = ", ".join(f'"{c}"' for c in columns)
    conn.execute(f'INSERT INTO "{name}" ({listed}) SELECT {listed} FROM "{old}"')
    conn.execute(f'DROP TABLE "{old}"')
    if sequence is not None:
        conn.execute("DELETE FROM sqlite_sequence WHERE name = ?", (name,))
        conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)", (name, sequence[0]))
