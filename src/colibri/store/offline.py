"""An SQLite board read in place, without its daemon: ``colibri ledger`` when no daemon
answers, as ``colibri hive list`` reads a PostgreSQL board's daemons itself.

Read-only (``mode=ro``): nothing of the board changes, and a daemon may start meanwhile (a
reader never blocks its writes, WAL). SQLite makes the WAL and shared-memory files beside the
board if they are missing, as the daemon does, with the board's own mode. The rows of a daemon
that crashed are read too: those committed are in the WAL, which a reader reads.
"""

from __future__ import annotations

import os
import sqlite3
from urllib.request import pathname2url

from colibri.core import cursor
from colibri.core.errors import ConfigError
from colibri.core.replies import LedgerPage
from colibri.store import sql
from colibri.store.sqlite import ledger_of
from colibri.store.sqlite_schema import APPLICATION_ID, SCHEMA_VERSION, refuse_links
from colibri.store.task_query import TaskFilter, named_task

_Q = sql.load("sqlite")


def read_ledger(location: str, after: str, limit: int, task: str | None) -> LedgerPage:
    """Up to ``limit`` ledger rows beyond the cursor ``after`` (of ``task``, a whole id or its
    start or end), as the daemon's ``ledger`` answers them: ``entries``, ``next``, ``more``.

    :raises ConfigError: no board at ``location``, not a Colibri board, or of another schema
        version than this Colibri's (a daemon of this version migrates it).
    :raises AmbiguousTask: ``task`` is the start or the end of more than one id.
    """
    refuse_links(location)
    if not os.path.isfile(location):
        raise ConfigError(f"no board at {location}: check --root, or store.path in colibri.jsonc")
    uri = f"file:{pathname2url(location)}?mode=ro"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None)
    conn.row_factory = sqlite3.Row
    try:
        conn.execute("PRAGMA busy_timeout=5000")
        conn.execute("BEGIN")  # one snapshot for every read below
        if conn.execute("PRAGMA application_id").fetchone()[0] != APPLICATION_ID:
            raise ConfigError(f"{location} is not a Colibri board")
        version = conn.execute("PRAGMA user_version").fetchone()[0]
        if version != SCHEMA_VERSION:
            raise ConfigError(
                f"the board at {location} has schema version {version}, this Colibri reads "
                f"{SCHEMA_VERSION}: run a daemon of this version on it (colibri run), which "
                "migrates an older board"
            )
        position = cursor.parse(after)
        if task is not None:
            task = _resolve(conn, task)
        rows = ledger_of(conn, position, limit + 1, task)
    except sqlite3.Error as exc:
        raise ConfigError(f"cannot read the board at {location}: {exc}") from None
    finally:
        conn.close()
    entries = rows[:limit]
    return LedgerPage(
        entries=entries, next=cursor.render(cursor.advance(position, entries)),
        more=len(rows) > limit,
    )  # fmt: skip


def _resolve(conn: sqlite3.Connection, task: str) -> str:
    """The whole id ``task`` names, as the daemon resolves it (by its start or its end)."""

    def ids(query: TaskFilter) -> list[str]:
        text, args = sql.list_tasks_query(query, "?")
        return [row["id"] for row in conn.execute(text, args)]

    def count(query: TaskFilter) -> int:
        text, args = sql.count_tasks_query(query, "?")
        return int(conn.execute(text, args).fetchone()[0])

    return named_task(task, None, ids, count)
