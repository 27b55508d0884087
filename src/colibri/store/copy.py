"""Moving an SQLite board into one tenant of a PostgreSQL board (``colibri store copy``).

The source is read in one read transaction (a snapshot: whatever a writer does meanwhile, the
copy is of one moment); the caller holds the board's lock, so no daemon writes it meanwhile.
The target is written in one transaction: all of it or none. That transaction first locks the
``leases`` table, so that no daemon can take the board's lease until it ends, and refuses while
a daemon's lease is live — a serving daemon would not see rows written behind its back. The
ledger's rows are numbered after the tenant's highest ``seq``, its head row held until the
copy ends.

Tasks keep their ids; every task, ledger row, agent and schedule of the source lands in the one
tenant given. Clashes with the target's rows (a task id, an idempotency key in the tenant, an
agent's name in another tenant, a schedule's name) are found as each kind is written and
refuse the whole copy (``CopyConflict``), naming the first. docs/HIVE.md ("Moving a board into
the hive") says what is copied, what is not (tokens, the claim key) and why.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import msgspec

from colibri.core.errors import ConfigError, CopyConflict, LockHeld, StorageUnavailable
from colibri.core.leases import is_postgres
from colibri.core.model import check_name, rfc3339
from colibri.core.schedules import Schedule
from colibri.store import sql
from colibri.store.postgres.connection import _NAME_TENANTS, _connect, _first_line, shown_location
from colibri.store.postgres.schema import _BOARD_KEY, _MIGRATIONS, SCHEMA_VERSION, live_lease
from colibri.store.postgres.store import PostgresStore
from colibri.store.postgres.unit import _text
from colibri.store.rows import (
    agent_from_row,
    agent_row,
    ledger_from_row,
    ledger_row,
    task_from_row,
    task_row,
)
from colibri.store.sqlite_schema import open_board

if TYPE_CHECKING:
    import psycopg

_SQLITE = sql.load("sqlite")
_PG = sql.load("postgresql")
#: Rows written per round trip, and between two progress reports.
CHUNK = 1000
_schedule_decoder = msgspec.json.Decoder(Schedule)
_json = msgspec.json.Encoder()

#: Told, after each chunk, the kind of row (``tasks``, ``ledger``), how many are done, of how many.
Progress = Callable[[str, int, int], None]


def copy_board(
    source: str,
    target: str,
    tenant: str,
    *,
    dry_run: bool = False,
    progress: Progress | None = None,
) -> dict[str, Any]:
    """Copy the SQLite board at ``source`` into ``tenant`` of the PostgreSQL board at ``target``
    and return what was copied (with ``dry_run``: checked, then rolled back).

    The caller holds the source's lock (``<store>.lock``): no daemon may write it meanwhile.

    :raises BadRequest: ``tenant`` is not a valid name.
    :raises ConfigError: no SQLite board at ``source``, or ``target`` is not ``postgresql://``.
    :raises StorageUnavailable: PostgreSQL cannot be reached, or failed during the copy.
    :raises LockHeld: a daemon's lease on the target is live.
    :raises CopyConflict: a row clashes with the target's; nothing was written.
    """
    check_name(tenant, "tenant")
    if not is_postgres(target):
        raise ConfigError(
            f"the target {target} is not a PostgreSQL board: give --to postgresql://…"
        )
    check_source(source)
    reader = open_board(source, "full")
    try:
        reader.execute("BEGIN")  # one read transaction from its first read: a snapshot
        counts = dict(reader.execute(_SQLITE["copy_counts"]).fetchone())
        summary: dict[str, Any] = {
            "from": source, "to": shown_location(target), "tenant": tenant,
            "dry_run": dry_run, "tasks": 0, "by_state": {}, "running": 0,
            "ledger": 0, "ledger_seqs": None, "fires": 0, "schedules": 0,
            "agents": 0, "agents_kept": 0, "skills": 0, "tenants": [],
            "tokens_not_copied": int(counts["tokens"]),
        }  # fmt: skip
        summary["tenants"] = [r[0] for r in reader.execute(_SQLITE["copy_tenants"])]
        with _target(target, dry_run) as conn:
            _refuse_a_live_lease(conn)
            conn.execute(f"SELECT pg_advisory_xact_lock(({_BOARD_KEY}))".encode())
            conn.execute(_PG["ensure_tenant"].encode(), (tenant, rfc3339(time.time())))
            _copy_tasks(reader, conn, tenant, counts["tasks"], summary, progress)
            _copy_ledger(reader, conn, tenant, counts["ledger"], summary, progress)
            _copy_agents_and_skills(reader, conn, tenant, summary)
            _copy_schedules(reader, conn, tenant, summary)
        return summary
    finally:
        reader.close()


def check_source(source: str) -> None:
    """Refuse a source that is not an SQLite board's file (before its lock is taken: the lock
    file would be made beside nothing)."""
    if is_postgres(source):
        raise ConfigError(
            "the board to copy is in PostgreSQL already: give --from with an SQLite board's path"
        )
    if os.path.islink(source):
        # As a daemon refuses to open its board through a link: nothing is made beside it.
        raise ConfigError(
            f"{source} is a symbolic link: give --from the board's own path, "
            f"{os.path.realpath(source)}"
        )
    if not os.path.isfile(source):
        raise ConfigError(f"no SQLite board at {source}: give the board to copy with --from PATH")


def _target(dsn: str, dry_run: bool) -> _Transaction:
    if not dry_run:
        # The board's tables first, made or migrated as a daemon starting on it would.
        PostgresStore(dsn).close()
    return _Transaction(_connect(dsn), dry_run, shown_location(dsn))


class _Transaction:
    """The copy's one transaction on the target: committed at the end of the ``with`` unless
    it is a dry run; rolled back on any error. Driver errors become ours here."""

    def __init__(self, conn: psycopg.Connection[dict[str, Any]], dry_run: bool, where: str) -> None:
        self.conn = conn
        self.dry_run = dry_run
        self.where = where

    def __enter__(self) -> psycopg.Connection[dict[str, Any]]:
        try:
            self.conn.execute("BEGIN")
            # Row-level security: the copy reads the whole board (names taken in any tenant)
            # and writes into one tenant; it names them all, for its transaction alone.
            self.conn.execute(_NAME_TENANTS, ("*",))
            if self.dry_run:
                self._make_board_inside()
        except BaseException as exc:
            self.__exit__(type(exc), exc, None)
            raise
        return self.conn

    def _make_board_inside(self) -> None:
        """A board not made yet (or older) is made inside the transaction, and rolled back
        with it: a dry run writes nothing, tables included."""
        made = self.conn.execute(_PG["copy_board_made"].encode()).fetchone()
        version = 0
        if made is not None and made["made"]:
            found = self.conn.execute(_PG["copy_board_version"].encode()).fetchone()
            version = int(found["version"]) if found else 0
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"{self.where} has schema version {version}, newer than this Colibri "
                f"understands ({SCHEMA_VERSION}); upgrade colibri"
            )
        for n in range(version + 1, SCHEMA_VERSION + 1):
            self.conn.execute(_MIGRATIONS[n].encode())

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, _: Any) -> None:
        import psycopg

        committing = kind is None and not self.dry_run
        try:
            if committing:
                self.conn.execute("COMMIT")
            else:
                self._rollback()
        except psycopg.Error as failed:
            if committing and (self.conn.broken or isinstance(failed, psycopg.OperationalError)):
                # The COMMIT may have reached the server and committed before the answer was
                # lost: say so, never "nothing was copied". Copying again tells which.
                raise StorageUnavailable(
                    f"the connection to {self.where} broke while the copy was being committed "
                    f"({_first_line(failed)}), so whether it was written is not known; run "
                    "the same copy again: it is refused (copy_conflict) if it was written"
                ) from None
            raise StorageUnavailable(
                f"the copy to {self.where} could not commit ({_first_line(failed)}); "
                "nothing was copied"
            ) from None
        finally:
            self.conn.close()
        if isinstance(exc, psycopg.Error):
            raise StorageUnavailable(
                f"the copy to {self.where} failed ({_first_line(exc)}); nothing was copied"
            ) from None

    def _rollback(self) -> None:
        import psycopg

        if not self.conn.broken and not self.conn.closed:
            try:
                self.conn.execute("ROLLBACK")
            except psycopg.Error:
                pass  # the connection is gone: so is the transaction


def _refuse_a_live_lease(conn: psycopg.Connection[dict[str, Any]]) -> None:
    """While a daemon serves the board — any of it: the copy holds the leases' table and the
    writers' lock to its end, which every daemon's renewals and batches would wait behind —
    refuse."""
    conn.execute(_PG["copy_lock_leases"].encode())
    holder = live_lease(conn)
    if holder is not None:
        raise LockHeld(
            holder["owner"],
            f"{holder['said']}: stop it first, or wait for its lease to lapse; nothing was copied",
        )


def _chunks(cursor: sqlite3.Cursor) -> Iterator[list[sqlite3.Row]]:
    while rows := cursor.fetchmany(CHUNK):
        yield rows


def _copy_tasks(
    reader: sqlite3.Connection,
    conn: psycopg.Connection[dict[str, Any]],
    tenant: str,
    total: int,
    summary: dict[str, Any],
    progress: Progress | None,
) -> None:
    by_state: dict[str, int] = {}
    keys: dict[str, str] = {}  # idempotency key -> the source task that has it
    done = 0
    for rows in _chunks(reader.execute(_SQLITE["copy_tasks"])):
        tasks = [msgspec.structs.replace(task_from_row(r), tenant=tenant) for r in rows]
        ids = [t.id for t in tasks]
        clash = conn.execute(_PG["copy_task_clash"].encode(), (ids,)).fetchone()
        if clash is not None:
            raise CopyConflict(
                f"task {clash['id']} is on the target board already (copied before?); "
                "nothing was copied"
            )
        wanted = [t for t in tasks if t.idempotency_key is not None]
        for task in wanted:
            key = task.idempotency_key
            assert key is not None
            if key in keys:
                raise CopyConflict(
                    f"tasks {keys[key]} and {task.id} have the same idempotency key {key!r} "
                    f"and would both be in tenant {tenant}; nothing was copied"
                )
            keys[key] = task.id
        if wanted:
            taken = conn.execute(
                _PG["copy_key_clash"].encode(), (tenant, [t.idempotency_key for t in wanted])
            ).fetchone()
            if taken is not None:
                raise CopyConflict(
                    f"tenant {tenant} of the target has task {taken['id']} with idempotency key "
                    f"{taken['idempotency_key']!r}, as has task {keys[taken['idempotency_key']]}; "
                    "nothing was copied"
                )
        written = []
        for task, row in zip(tasks, rows, strict=True):
            values = _text(task_row(task))
            values["fingerprint"] = row["fingerprint"]
            written.append(values)
            by_state[task.state] = by_state.get(task.state, 0) + 1
        conn.cursor().executemany(_PG["insert_task"].encode(), written)
        done += len(rows)
        if progress is not None:
            progress("tasks", done, total)
    summary["tasks"] = done
    summary["by_state"] = dict(sorted(by_state.items()))
    summary["running"] = by_state.get("running", 0)


def _copy_ledger(
    reader: sqlite3.Connection,
    conn: psycopg.Connection[dict[str, Any]],
    tenant: str,
    total: int,
    summary: dict[str, Any],
    progress: Progress | None,
) -> None:
    # The tenant's head moved past every row the copy writes, and held: nobody numbers a row
    # of the tenant meanwhile.
    found = conn.execute(_PG["ledger_take"].encode(), {"tenant": tenant, "n": total}).fetchone()
    assert found is not None
    first = int(found["seq"]) - total + 1
    seq = first
    for rows in _chunks(reader.execute(_SQLITE["copy_ledger"])):
        written = []
        for row in rows:
            entry = msgspec.structs.replace(ledger_from_row(row), tenant=tenant)
            values = _text(ledger_row(entry))
            values["seq"] = seq
            written.append(values)
            seq += 1
        conn.cursor().executemany(_PG["insert_ledger"].encode(), written)
        if progress is not None:
            progress("ledger", seq - first, total)
    if seq - first != total:  # the snapshot counted them: it cannot differ
        raise RuntimeError(f"copied {seq - first} ledger rows of the {total} counted")
    summary["ledger"] = seq - first
    summary["ledger_seqs"] = [first, seq - 1] if seq > first else None
    fires = conn.cursor()
    fires.executemany(
        _PG["copy_insert_fire"].encode(),
        [(*r, tenant) for r in reader.execute(_SQLITE["copy_fires"])],
    )
    summary["fires"] = max(fires.rowcount, 0)


def _copy_agents_and_skills(
    reader: sqlite3.Connection,
    conn: psycopg.Connection[dict[str, Any]],
    tenant: str,
    summary: dict[str, Any],
) -> None:
    rows = reader.execute(_SQLITE["all_agents"]).fetchall()
    if rows:
        names = [r["name"] for r in rows]
        clash = conn.execute(_PG["copy_agent_clash"].encode(), (names, tenant)).fetchone()
        if clash is not None:
            raise CopyConflict(
                f"agent {clash['name']} is registered in tenant {clash['tenant']} of the target "
                "board (agent names are unique across tenants): rename one of them; nothing "
                "was copied"
            )
    added = 0
    for row in rows:
        agent = msgspec.structs.replace(agent_from_row(row), tenant=tenant)
        values = _text(agent_row(agent, row["registered_at"]))
        added += conn.execute(_PG["copy_insert_agent"].encode(), values).rowcount
    summary["agents"] = added
    summary["agents_kept"] = len(rows) - added
    before = conn.execute(_PG["copy_count_skills"].encode()).fetchone()
    skills = [tuple(r) for r in reader.execute(_SQLITE["copy_skills"])]
    conn.cursor().executemany(_PG["copy_merge_skill"].encode(), skills)
    after = conn.execute(_PG["copy_count_skills"].encode()).fetchone()
    assert before is not None and after is not None
    summary["skills"] = int(after["n"]) - int(before["n"])


def _copy_schedules(
    reader: sqlite3.Connection,
    conn: psycopg.Connection[dict[str, Any]],
    tenant: str,
    summary: dict[str, Any],
) -> None:
    schedules = [_schedule_decoder.decode(r[0]) for r in reader.execute(_SQLITE["all_schedules"])]
    if not schedules:
        return
    clash = conn.execute(
        _PG["copy_schedule_clash"].encode(), ([s.name for s in schedules],)
    ).fetchone()
    if clash is not None:
        raise CopyConflict(
            f"schedule {clash['name']} exists on the target board (schedule names are "
            "board-wide there): delete or rename one of them first; nothing was copied"
        )
    for schedule in schedules:
        # Its fires make tasks of the tenant; and it is the board's own now, as if added with
        # `colibri schedule add`: the colibri.jsonc that defined it is not the hive's.
        moved = msgspec.structs.replace(
            schedule, task=msgspec.structs.replace(schedule.task, tenant=tenant), source="cli"
        )
        conn.execute(
            _PG["upsert_schedule"].encode(),
            (moved.name, tenant, moved.next_fire_at, _json.encode(moved).decode()),
        )
    summary["schedules"] = len(schedules)
