"""Administering a PostgreSQL board from the command line, where no daemon need serve it.

``hive_list`` (its daemons and the leases they hold), ``hand_over`` and ``lease_holder_of``
(``colibri hive move``: a tenant's lease marked for another sharing daemon), and
``grant_role`` (``colibri hive grant``: the role daemons should connect as, which row-level
security binds). Each opens a connection of its own and closes it.
"""

from __future__ import annotations

import re
from typing import Any

from colibri.core.errors import ConfigError, StorageUnavailable, shown
from colibri.core.leases import lease_name, lease_tenant
from colibri.store.postgres.connection import _connect, _first_line, shown_location
from colibri.store.postgres.schema import _Q, SCHEMA_VERSION, check_shape
from colibri.store.postgres.store import PostgresStore


def hive_list(dsn: str) -> list[dict[str, Any]]:
    """The daemons of the board at ``dsn``, oldest first, each with its live leases (``leases``
    rows, ``tenants`` served: ``*`` for the whole board), their epoch and least time left."""
    conn = _connect(dsn)
    try:
        if conn.execute("SELECT to_regclass('hives') AS t").fetchone() == {"t": None}:
            return []
        found = conn.execute(_Q["copy_board_version"].encode()).fetchone()
        version = 0 if found is None else int(found["version"])
        where = shown_location(dsn)
        if version < SCHEMA_VERSION:
            raise ConfigError(
                f"the board at {where} has schema version {version}, older than this Colibri "
                f"reads ({SCHEMA_VERSION}): start a daemon of this version on it (it migrates "
                "the board), or run colibri hive grant with the tables' owner's connection string"
            )
        if version > SCHEMA_VERSION:
            raise ConfigError(
                f"the board at {where} has schema version {version}, newer than this Colibri "
                f"understands ({SCHEMA_VERSION}); upgrade colibri"
            )
        check_shape(conn, where)
        rows = [dict(r) for r in conn.execute(_Q["hive_list"].encode()).fetchall()]
    finally:
        conn.close()
    for row in rows:
        # What it serves: "*" (the whole board), or its tenants.
        row["tenants"] = [lease_tenant(n) for n in row["leases"]]
    return rows


def hand_over(dsn: str, tenant: str, to: str) -> dict[str, Any]:
    """Mark ``tenant``'s lease to be handed to the sharing daemon whose id starts with ``to``
    (``colibri hive move``): its owner gives it back at its next renewal, and only that daemon
    takes it while it lives. What was marked: tenant, from (owner), to, epoch. Refused, in one
    line and marking nothing, unless both daemons share tenants out and the tenant is served."""
    import psycopg

    from colibri.core.model import check_name

    check_name(tenant, "tenant")
    if not re.fullmatch(r"[0-9a-f-]{1,36}", to):
        raise ConfigError(
            f"--to {shown(to)} is not a daemon's id: give its id, or the start of it, as colibri "
            "hive list shows it"
        )
    where = shown_location(dsn)
    conn = _connect(dsn)
    try:
        with conn.transaction():
            daemons = conn.execute(_Q["live_daemons_like"].encode(), (to + "%",)).fetchall()
            if len(daemons) != 1:
                said = "no daemon of the board" if not daemons else "more than one daemon"
                raise ConfigError(
                    f"{said} has an id starting with {to!r} and beat within its ttl; see "
                    "colibri hive list"
                )
            target = daemons[0]
            if not target["sharing"]:
                raise ConfigError(
                    f"daemon {target['id'][:8]} serves the tenants it was started with, not a "
                    "share: move tenants only to a daemon started with --share"
                )
            held = conn.execute(_Q["lease_of_tenant"].encode(), (tenant,)).fetchone()
            if held is None:
                raise ConfigError(
                    f"no daemon serves tenant {tenant} now (a sharing daemon takes a free tenant "
                    "within seconds); nothing was marked"
                )
            if held["owner"] == target["id"]:
                return {"tenant": tenant, "from": held["owner"], "to": target["id"],
                        "epoch": int(held["epoch"]), "already": True}  # fmt: skip
            if not held["sharing"]:
                raise ConfigError(
                    f"tenant {tenant} is served by daemon {str(held['owner'])[:8]}, which serves "
                    "it by --tenants (or the whole board): stop that daemon to move it; "
                    "nothing was marked"
                )
            marked = conn.execute(
                _Q["lease_hand_over"].encode(), {"to": target["id"], "name": lease_name(tenant)}
            ).fetchone()
            if marked is None:  # (its lease lapsed since it was read)
                raise ConfigError(
                    f"no daemon serves tenant {tenant} now (its lease just lapsed); nothing was "
                    "marked"
                )
    except psycopg.OperationalError as exc:
        raise StorageUnavailable(
            f"the connection to {where} broke ({_first_line(exc)}); run the command again"
        ) from None
    finally:
        conn.close()
    return {"tenant": tenant, "from": held["owner"], "to": target["id"],
            "epoch": int(held["epoch"]), "already": False}  # fmt: skip


def lease_holder_of(dsn: str, tenant: str) -> dict[str, Any] | None:
    """The live lease of ``tenant`` (owner, epoch, sharing), or None."""
    conn = _connect(dsn)
    try:
        row = conn.execute(_Q["lease_of_tenant"].encode(), (tenant,)).fetchone()
        return None if row is None else dict(row)
    finally:
        conn.close()


#: A role's name as ``colibri hive grant`` takes it: an SQL identifier that needs no quoting,
#: not one of PostgreSQL's own (``pg_…``) nor a word it reserves for roles.
_ROLE_NAME = re.compile(r"(?!pg_)[a-z_][a-z0-9_]{0,62}")
_RESERVED_ROLES = frozenset({"public", "none", "current_user", "session_user", "current_role"})


def grant_role(dsn: str, role: str) -> dict[str, Any]:
    """Make ``role`` the one daemons connect as, row-level security binding it: made (LOGIN,
    no password) if it does not exist; refused if PostgreSQL would not hold it to the
    policies — a superuser, BYPASSRLS, the owner of a table of the board or of its schema, a
    member of any of those (it could ``SET ROLE`` to one), or CREATEROLE (it could make itself
    such a member). It may read and write the rows of the board's tables, those of tables later
    migrations make too, and nothing else: whatever it was granted on them before is taken back
    first (no TRUNCATE, which RLS does not govern). Run with the tables' owner's connection
    string: the board is made or migrated first, as a daemon starting on it would."""
    import psycopg
    from psycopg import sql as pgsql

    if not _ROLE_NAME.fullmatch(role) or role in _RESERVED_ROLES:
        raise ConfigError(
            f"role name {shown(role)} is not one this command takes: 1 to 63 of a-z, 0-9 and _, "
            "not starting with a digit or pg_, and not a name PostgreSQL reserves"
        )
    PostgresStore(dsn).close()
    where = shown_location(dsn)
    conn = _connect(dsn)
    try:
        with conn.transaction():
            found = conn.execute(_Q["grant_role_found"].encode(), (role,)).fetchone()
            assert found is not None
            _refuse_unbound(role, found)
            ident, schema = pgsql.Identifier(role), pgsql.Identifier(found["schema"])
            if not found["exists"]:
                conn.execute(pgsql.SQL("CREATE ROLE {} LOGIN").format(ident))
            conn.execute(
                pgsql.SQL("REVOKE ALL ON ALL TABLES IN SCHEMA {schema} FROM {role}").format(
                    schema=schema, role=ident
                )
            )
            # What it still has through a group it is in, or PUBLIC, is not this grant's to
            # take back: refused (TRUNCATE empties a table whatever the policies say).
            beyond = conn.execute(_Q["grant_role_beyond_rows"].encode(), (role,)).fetchone()
            if beyond is not None:
                raise ConfigError(
                    f"role {role} may {beyond['what']} table {beyond['name']} of the board "
                    "through a role it is a member of (or PUBLIC), which row-level security "
                    "does not govern: revoke that first; nothing was granted"
                )
            for statement in (
                "GRANT USAGE ON SCHEMA {schema} TO {role}",
                "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {role}",
                "ALTER DEFAULT PRIVILEGES IN SCHEMA {schema} "
                "GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO {role}",
            ):
                conn.execute(pgsql.SQL(statement).format(schema=schema, role=ident))
            tables = conn.execute(_Q["board_tables_rls"].encode()).fetchall()
    except psycopg.OperationalError as exc:
        raise StorageUnavailable(
            f"the connection to {where} broke ({_first_line(exc)}); nothing was granted: run "
            "the command again"
        ) from None
    except psycopg.errors.InsufficientPrivilege as exc:
        raise ConfigError(
            f"cannot grant {role} the board at {where}: {_first_line(exc)} (connect as the "
            "owner of its tables, with the right to make roles)"
        ) from None
    except psycopg.Error as exc:
        raise ConfigError(
            f"cannot grant {role} the board at {where}: {_first_line(exc)}; nothing was granted"
        ) from None
    finally:
        conn.close()
    return {
        "role": role,
        "created": not found["exists"],
        "schema": found["schema"],
        "board": where,
        "tables": [t["name"] for t in tables],
        "not_forced": [t["name"] for t in tables if not t["forced"]],
    }


def _refuse_unbound(role: str, found: dict[str, Any]) -> None:
    """Refuse a role that row-level security would not bind (``grant_role_found``)."""
    why = None
    if found["me"] == role:
        why = "is the one this command connects as, the tables' owner"
    elif found["superuser"] or found["bypassrls"]:
        why = "is a superuser" if found["superuser"] else "has BYPASSRLS"
    elif found["member_of_unbound"]:
        why = (
            f"is a member of {found['member_of_unbound']}, which row-level security never binds "
            "(or which can make roles)"
        )
    elif found["owns"]:
        why = f"owns table {found['owns']} of the board (or is a member of its owner)"
    elif found["owns_schema"]:
        why = f"owns schema {found['schema']} (or is a member of its owner)"
    elif found["createrole"]:
        why = "has CREATEROLE, with which it can make itself a member of the tables' owner"
    if why is not None:
        raise ConfigError(
            f"role {role} {why}: row-level security would not hold it; give the daemons a role "
            "of their own that owns nothing; nothing was granted"
        )
