"""A PostgreSQL board's tables: made, migrated to ``SCHEMA_VERSION``, and checked for shape.

The migrations are the ``migration_N`` blocks of ``sql/postgresql.sql``; ``colibri_schema``
holds the version a board is of. A board is changed only under the board's lock and while no
daemon serves it (``live_lease``): a daemon of the older version would go on writing the old
shape into the new one.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from colibri.core.errors import ConfigError, LockHeld, StorageUnavailable
from colibri.core.leases import BOARD_LEASE, lease_tenant
from colibri.store import sql
from colibri.store.postgres.connection import _NAME_TENANTS, _first_line

if TYPE_CHECKING:
    import psycopg

#: The named statements of ``sql/postgresql.sql``, by name.
_Q = sql.load("postgresql")
_MIGRATIONS = {
    int(name.split("_")[1]): body for name, body in _Q.items() if name.startswith("migration_")
}
SCHEMA_VERSION = max(_MIGRATIONS)
#: The columns of each table of a board of ``SCHEMA_VERSION``, as its migrations make them (a
#: test holds this to a fresh board's): a board that says it is of this version and lacks one
#: is of a shape no release made, and is refused rather than served with a column missing.
_COLUMNS = {
    "agents": "name tenant capabilities slots ttl workspace registered_at last_seen",
    "colibri_schema": "version",
    "hives": "id address host pid root ttl started_at last_beat sharing agents tenants",
    "leases": "name owner address epoch taken_at expires_at handover_to",
    "ledger_heads": "tenant seq",
    "ledger": "seq at task schedule tenant from_state to_state agent epoch reason cost uid pid",
    "meta": "name value",
    "open_tasks": "id tenant",
    "schedule_fires": "schedule nominal outcome task at reason tenant",
    "schedules": "name next_fire_at doc tenant",
    "skills": "name description",
    "tasks": (
        "id tenant text capabilities workspace agent pinned parent sender priority min_score state "
        "outcome output error cost attempts max_attempts epoch labels idempotency_key not_before "
        "schedule question budget_usd created_at updated_at fingerprint after if_dependency_fails "
        "base change"
    ),
    "tenants": "name created_at",
    "tokens": (
        "id tenant role agent capabilities workspace secret_hash created_at expires_at revoked_at "
        "last_used_at"
    ),
}
#: The advisory lock of a board's writers: one key per schema (a board), held per batch.
_BOARD_KEY = "SELECT hashtextextended('colibri board ' || current_schema(), 0)"


def _version(conn: psycopg.Connection[dict[str, Any]]) -> int | None:
    """The board's schema version; None when the schema holds no board yet."""
    if conn.execute("SELECT to_regclass('colibri_schema') AS ours").fetchone() == {"ours": None}:
        return None
    row = conn.execute("SELECT version FROM colibri_schema").fetchone()
    return int(row["version"]) if row else 0


def migrate(conn: psycopg.Connection[dict[str, Any]], location: str) -> None:
    """Make the board's tables in the schema of ``conn``, or migrate them to ``SCHEMA_VERSION``
    (under the board's lock, while no daemon of an older version serves it); refuse a board
    of another shape, or another program's tables, in one line."""
    import psycopg

    try:
        _make_tables(conn, location)
    except psycopg.OperationalError as exc:
        # (Its COMMIT's answer may be what was lost: the tables may be there. Making them
        # again is safe — the version says what is left to do.)
        raise StorageUnavailable(
            f"the connection to the PostgreSQL board at {location} broke while its "
            f"tables were being made ({_first_line(exc)}); run the command again"
        ) from None


def _make_tables(conn: psycopg.Connection[dict[str, Any]], location: str) -> None:
    import psycopg

    #: What a migration meets on a board unlike its version: a table or column it follows
    #: never had, or one it makes already there.
    unlike_its_version = (
        psycopg.errors.UndefinedTable,
        psycopg.errors.UndefinedColumn,
        psycopg.errors.UndefinedObject,
        psycopg.errors.DuplicateTable,
        psycopg.errors.DuplicateColumn,
        psycopg.errors.DuplicateObject,
    )

    if _version(conn) == SCHEMA_VERSION:
        # The common case: no lock, so opening never waits for a writer's batch.
        check_shape(conn, location)
        return
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock((" + _BOARD_KEY + "))")
        found = conn.execute(
            "SELECT to_regclass('colibri_schema') AS ours, "
            "(SELECT COUNT(*) FROM pg_tables WHERE schemaname = current_schema()) AS n"
        ).fetchone()
        assert found is not None
        if found["ours"] is None and found["n"]:
            raise ConfigError(
                f"the schema of {location} holds another program's tables, not a "
                "Colibri board; it was left untouched (give another schema with "
                "options=-csearch_path=…)"
            )
        version = 0
        if found["ours"] is not None:
            row = conn.execute("SELECT version FROM colibri_schema").fetchone()
            version = int(row["version"]) if row else 0
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"{location} has schema version {version}, newer than this Colibri "
                f"understands ({SCHEMA_VERSION}); upgrade colibri"
            )
        if version == SCHEMA_VERSION:
            # Made or migrated by another while this one waited for the lock.
            check_shape(conn, location)
            return
        # A daemon of the older version serving the board would go on writing the old
        # shape into the new one: the board is changed only while none serves it.
        holder = live_lease(conn) if version >= 2 else None
        if holder is not None:
            raise LockHeld(
                holder["owner"],
                f"the board at {location} has schema version {version} and this "
                f"Colibri needs {SCHEMA_VERSION}, but {holder['said']}: stop the daemons of "
                "the older version first (a clean stop gives the lease back at once), then "
                "start again",
            )
        # Rows a migration moves are every tenant's (the owner is held to RLS too).
        conn.execute(_NAME_TENANTS, ("*",))
        try:
            for n in range(version + 1, SCHEMA_VERSION + 1):
                conn.execute(_MIGRATIONS[n].encode())
                conn.execute("UPDATE colibri_schema SET version = %s", (n,))
            # (Inside the transaction: a shape refused leaves the board as it was.)
            check_shape(conn, location)
        except unlike_its_version as exc:
            raise ConfigError(
                f"the board at {location} says schema version {version}, but its "
                f"tables are not those of any release of Colibri ({_first_line(exc)}); it "
                "was left unchanged: restore it from a backup, or give another schema"
            ) from None
        except psycopg.errors.InsufficientPrivilege as exc:
            if version:
                raise ConfigError(
                    f"the board at {location} has schema version {version} and this "
                    f"Colibri needs {SCHEMA_VERSION}, which only the owner of its tables "
                    f"can make ({_first_line(exc)}); run `colibri hive grant ROLE --store` "
                    "with the owner's connection string once (it migrates the board), then "
                    "start again"
                ) from None
            raise ConfigError(
                f"cannot create the board's tables in {location}: {exc}".strip()
            ) from None


def check_shape(conn: psycopg.Connection[dict[str, Any]], location: str) -> None:
    """Refuse, in one line, a board of ``SCHEMA_VERSION`` that lacks a column a board of that
    version has (``_COLUMNS``): made by no release (or changed by hand), it would fail later,
    mid-batch."""
    found: dict[str, set[str]] = {}
    for row in conn.execute(_Q["board_columns"].encode()).fetchall():
        found.setdefault(row["table_name"], set()).add(row["column_name"])
    missing = [
        f"{table}.{column}"
        for table, columns in _COLUMNS.items()
        for column in columns.split()
        if column not in found.get(table, ())
    ]
    if missing:
        more = len(missing) - 5
        shown = ", ".join(missing[:5]) + (f" and {more} more" if more > 0 else "")
        raise ConfigError(
            f"the board at {location} says schema version {SCHEMA_VERSION} but lacks {shown}: "
            "its tables are not those of any release of Colibri; it was left unchanged: "
            "restore it from a backup, or give another schema"
        )


def live_lease(
    conn: psycopg.Connection[dict[str, Any]], tenant: str | None = None
) -> dict[str, Any] | None:
    """A lease a daemon holds now (by the server's clock) — any, or one that covers ``tenant``
    (its own or the whole board's): its ``owner`` and what to say of it (``said``: the daemon,
    its pid, host and address, the lease, its epoch and time left)."""
    live = conn.execute(_Q["live_lease"].encode(), {"tenant": tenant}).fetchone()
    if live is None:
        return None
    who = f"daemon {str(live['owner'])[:8]}"
    # (A board of schema version 2 has its lease but no table of daemons yet.)
    if conn.execute(_Q["hives_made"].encode()).fetchone() == {"made": True}:
        daemon = conn.execute(_Q["hive_of"].encode(), (live["owner"],)).fetchone()
        if daemon is not None:
            who += f" (pid {daemon['pid']} on {daemon['host']})"
    where = f" at {live['address']}" if live["address"] else ""
    name = str(live["name"])
    lease = (
        "the board's lease" if name == BOARD_LEASE else f"the lease of tenant {lease_tenant(name)}"
    )
    said = f"{who}{where} holds {lease} (epoch {live['epoch']}, {float(live['left_s']):.1f}s left)"
    return {"owner": str(live["owner"]), "said": said}
