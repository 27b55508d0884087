"""Row-level security (S4): PostgreSQL itself keeps the tenants apart, under the role that
``colibri hive grant`` makes, whatever the daemon asks of it."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from colibri.core.errors import ConfigError
from colibri.core.model import Agent, Task, TaskSpec
from colibri.core.tokens import PREFIX, Token
from colibri.store.postgres import SCHEMA_VERSION, PostgresStore, grant_role
from tests.helpers import Daemon, colibri, one_line
from tests.postgres.tenants_apart import tenants_interleaved
from tests.store.conftest import PG_APP_ROLE, PG_REQUIRED, as_app_role
from tests.store.values import entry_for, make_task, schedule

#: Every table of a board that holds a tenant's rows, and its tenant column.
TENANT_TABLES = {
    "tasks": "tenant", "ledger": "tenant", "agents": "tenant", "tokens": "tenant",
    "schedules": "tenant", "schedule_fires": "tenant", "tenants": "name",
    "open_tasks": "tenant", "ledger_heads": "tenant",
}  # fmt: skip
#: The board's own rows: seen by a transaction that names any tenant, and by none that names
#: no tenant.
BOARD_TABLES = ("meta", "skills")


@pytest.fixture
def app_board(board: str) -> str:
    """The board granted to the suite's application role: its connection string as that role."""
    return as_app_role(board)


def _task(task_id: str, tenant: str, text: str) -> Task:
    return make_task(task_id, tenant=tenant, text=text)


def _fill(dsn: str) -> dict[str, str]:
    """Rows of tenants acme and beta in every table, written through the store as the
    application role (naming every tenant, as a daemon serving the whole board does)."""
    store = PostgresStore(dsn)
    try:
        ids = {}
        # beta first: acme's rows are the ledger's newest, which a store naming beta must number
        # its own after without seeing them.
        for n, tenant in enumerate(("beta", "acme")):
            task = _task(f"01a2-{tenant}", tenant, f"{tenant}'s plans")
            store.ensure_tenant(tenant, task.created_at)
            store.insert_task(task, entry_for(task))
            store.upsert_agent(
                Agent(name=f"{tenant}-1", capabilities=["x"], slots=1, ttl=30.0, tenant=tenant),
                task.created_at,
            )
            nightly = schedule(f"{tenant}-nightly", task=TaskSpec(text="t", tenant=tenant))
            store.upsert_schedule(nightly)
            assert store.record_fire(nightly.name, f"2026-12-0{n + 1}T00:00:00Z", "fired",
                                     task.id, task.created_at)  # fmt: skip
            store.insert_token(
                Token(id=f"{n:012x}", tenant=tenant, role="operator", created_at=task.created_at),
                f"{n}" * 64,
            )
            ids[tenant] = task.id
        store.ensure_skills(["x"])
        store.claim_key()
        store.commit()
        return ids
    finally:
        store.close()


def _app_connection(dsn: str) -> psycopg.Connection[Any]:
    return psycopg.connect(dsn, autocommit=True)


def test_the_daemons_role_is_bound_by_row_level_security_on_every_table(
    board: str, app_board: str
) -> None:
    with psycopg.connect(board, autocommit=True) as admin:
        role = admin.execute(
            "SELECT rolsuper, rolbypassrls FROM pg_roles WHERE rolname = %s", (PG_APP_ROLE,)
        ).fetchone()
        assert role == (False, False)
        tables = admin.execute(
            "SELECT c.relname, c.relrowsecurity, c.relforcerowsecurity, "
            "pg_get_userbyid(c.relowner) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace "
            "WHERE n.nspname = current_schema() AND c.relkind = 'r'"
        ).fetchall()
    names = {t[0] for t in tables}
    assert set(TENANT_TABLES) | set(BOARD_TABLES) <= names
    for name, enabled, forced, owner in tables:
        assert enabled and forced, f"table {name} is not held to row-level security"
        assert owner != PG_APP_ROLE, f"the daemons' role owns table {name}"


def test_a_transaction_that_names_no_tenant_sees_no_row(board: str, app_board: str) -> None:
    _fill(app_board)
    with psycopg.connect(board) as admin:  # the superuser sees them all: they are there
        for table in (*TENANT_TABLES, *BOARD_TABLES):
            (count,) = admin.execute(f"SELECT COUNT(*) FROM {table}").fetchone()  # type: ignore[misc]
            assert count >= 1, table
    with _app_connection(app_board) as conn:
        # A tenant named by an earlier transaction of the same connection is not carried over.
        with conn.transaction():
            conn.execute("SELECT set_config('colibri.tenants', '*', true)")
        for table in (*TENANT_TABLES, *BOARD_TABLES):
            with conn.transaction():
                (count,) = conn.execute(f"SELECT COUNT(*) FROM {table}").fetchone()  # type: ignore[misc]
            assert count == 0, f"{table}: {count} rows seen without a tenant named"
        with conn.transaction():
            written = conn.execute("UPDATE tasks SET text = 'overwritten'").rowcount
        assert written == 0


def test_a_transaction_of_one_tenant_cannot_read_or_write_anothers_rows(
    board: str, app_board: str
) -> None:
    ids = _fill(app_board)
    with _app_connection(app_board) as conn:
        with conn.transaction():
            conn.execute("SELECT set_config('colibri.tenants', 'beta', true)")
            for table, column in TENANT_TABLES.items():
                seen = {r[0] for r in conn.execute(f"SELECT {column} FROM {table}")}
                assert seen == {"beta"}, table
            # Crafted ids: acme's task by its id is not there, for reading or writing.
            acme = ids["acme"]
            assert conn.execute("SELECT * FROM tasks WHERE id = %s", (acme,)).fetchone() is None
            assert conn.execute(
                "UPDATE tasks SET state = 'cancelled' WHERE id = %s", (acme,)
            ).rowcount == 0  # fmt: skip
            assert conn.execute("DELETE FROM agents WHERE name = 'acme-1'").rowcount == 0
            assert conn.execute("DELETE FROM schedules WHERE name = 'acme-nightly'").rowcount == 0
        # Writing a row into another tenant, or moving one there: WITH CHECK refuses it.
        for statement in (
            "INSERT INTO ledger (seq, at, tenant, to_state, epoch) "
            "VALUES (1000, 'x', 'acme', 'pending', 0)",
            "UPDATE agents SET tenant = 'acme' WHERE tenant = 'beta'",
            "INSERT INTO tokens (id, tenant, role, capabilities, secret_hash, created_at) "
            "VALUES ('t1', 'acme', 'operator', '[]', 'h', 'x')",
        ):
            with pytest.raises(psycopg.errors.InsufficientPrivilege, match="row-level security"):
                with conn.transaction():
                    conn.execute("SELECT set_config('colibri.tenants', 'beta', true)")
                    conn.execute(statement)
        # A task moved to another tenant: refused before the policy is asked (a task never
        # moves, whatever tenants the transaction names: its open id could not follow it).
        with pytest.raises(psycopg.errors.CheckViolation, match="keeps its id and its tenant"):
            with conn.transaction():
                conn.execute("SELECT set_config('colibri.tenants', 'beta', true)")
                conn.execute("UPDATE tasks SET tenant = 'acme' WHERE tenant = 'beta'")
    with psycopg.connect(board) as admin:
        states: dict[str, str] = dict(admin.execute("SELECT tenant, state FROM tasks").fetchall())
    assert states == {"acme": "pending", "beta": "pending"}


def test_a_store_that_names_one_tenant_reads_and_writes_only_its_rows(
    board: str, app_board: str
) -> None:
    """The store's own reads and batches go through the same policies: a store naming beta
    (as a daemon owning only beta will) finds nothing of acme's, by any path, and numbers its
    ledger rows after every tenant's."""
    from colibri.store.base import TaskFilter

    ids = _fill(app_board)
    store = PostgresStore(app_board)
    try:
        store.tenants = "beta"
        assert [t.id for t in store.list_tasks(TaskFilter(limit=10))] == [ids["beta"]]
        assert store.get_task(ids["acme"]) is None
        assert {a.name for a in store.agents()} == {"beta-1"}
        assert [s.name for s in store.schedules()] == ["beta-nightly"]
        assert store.fires("acme-nightly", 10) == []
        assert {e.tenant for e in store.ledger({}, 100)} == {"beta"}
        before = store.count_by_state()
        task = _task("01a2-beta-2", "beta", "more")
        entry = store.insert_task(task, entry_for(task))
        # Numbered from beta's own head: the rest of the batch still sees nothing of acme's.
        assert store.get_task(ids["acme"]) is None
        assert {a.name for a in store.agents()} == {"beta-1"}
        store.commit()
        assert entry.seq == 2  # beta's second: acme's rows number on their own
        assert store.count_by_state() == {"pending": before["pending"] + 1}
        # Named for each transaction, never for the connection: between them it names none.
        after = store._conn.execute("SELECT current_setting('colibri.tenants', true) AS t")
        assert after.fetchone() == {"t": ""}
    finally:
        store.close()


def test_two_tenants_interleaved_over_four_connections_never_cross(
    board: str, app_board: str
) -> None:
    """S4 at the suite's size (``bench/chaos.py --only S4``: the plan's): 2 tenants, 1,000
    operations interleaved over a pool of 4 connections, each transaction naming its tenant."""
    figures = tenants_interleaved(app_board, board, operations=1000)
    assert figures["tasks"]["acme"] >= 300 and figures["tasks"]["beta"] >= 300
    assert figures["ledger_rows_read"] > 1000  # the reads did find rows: their own
    assert figures["crossed_reads"] == 0
    assert figures["own_task_missed"] == 0
    assert figures["misplaced_writes"] == 0
    assert figures["ledger_gaps"] == 0  # one ledger, numbered across the tenants


def test_hive_grant_refuses_a_role_that_rls_would_not_bind(board: str, scratch: Path) -> None:
    import uuid

    owner = f"colibri_owner_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(board, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {owner}")
        PostgresStore(board).close()  # the board's tables, made
        admin.execute(f"ALTER TABLE skills OWNER TO {owner}")
    try:
        for role, why in (
            ("postgres", "is the one this command connects as"),
            (owner, "owns table skills of the board"),
            ("Robert'); DROP TABLE tasks;--", "is not one this command takes"),
            ("pg_monitor", "is not one this command takes"),
            ("public", "is not one this command takes"),
        ):
            result = colibri(None, "hive", "grant", role, "--store", board, cwd=scratch)
            assert result.returncode == 1
            assert why in one_line(result.stderr)
        with pytest.raises(ConfigError, match="is a superuser: row-level security would not"):
            _grant_superuser(board)
    finally:
        with psycopg.connect(board, autocommit=True) as admin:
            admin.execute(f"ALTER TABLE skills OWNER TO current_user; DROP ROLE {owner}")
    with psycopg.connect(board) as admin:
        assert admin.execute("SELECT COUNT(*) FROM tasks").fetchone() == (0,)


def _grant_superuser(board: str) -> None:
    """Grant to a superuser that exists on every server: the one the suite connects as."""
    from urllib.parse import urlsplit

    with psycopg.connect(board) as admin:
        (me,) = admin.execute("SELECT current_user").fetchone()  # type: ignore[misc]
    assert urlsplit(board).username == me
    other = f"su_probe_{int(time.time() * 1000) % 100000}"
    with psycopg.connect(board, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {other} SUPERUSER")
    try:
        grant_role(board, other)
    finally:
        with psycopg.connect(board, autocommit=True) as admin:
            admin.execute(f"DROP ROLE {other}")


def test_hive_grant_says_what_it_did(board: str, scratch: Path) -> None:
    import json

    result = colibri(None, "hive", "grant", PG_APP_ROLE, "--store", board, "--json", cwd=scratch)
    assert result.returncode == 0, result.stderr
    done = json.loads(result.stdout)
    assert done["role"] == PG_APP_ROLE and done["not_forced"] == []
    assert set(TENANT_TABLES) | set(BOARD_TABLES) <= set(done["tables"])
    again = colibri(None, "hive", "grant", PG_APP_ROLE, "--store", board, cwd=scratch)
    assert again.returncode == 0 and again.stdout.count("\n") == 1
    assert f"role {PG_APP_ROLE}: the rows of the" in again.stdout  # granted again: the same


def test_the_daemons_role_cannot_migrate_and_says_who_can(board: str, app_board: str) -> None:
    with psycopg.connect(board, autocommit=True) as admin:
        admin.execute("UPDATE colibri_schema SET version = 4")
        admin.execute("ALTER TABLE schedules DROP COLUMN tenant CASCADE")
    with pytest.raises(ConfigError) as caught:
        PostgresStore(app_board)
    message = caught.value.message
    assert "has schema version 4 and this Colibri needs" in message
    assert "only the owner of its tables" in message and "\n" not in message


@pytest.fixture
def pg_dump() -> str:
    found = shutil.which("pg_dump")
    if found is None:
        if PG_REQUIRED:
            raise AssertionError("pg_dump is needed here (PostgreSQL's client programs)")
        pytest.skip("pg_dump is not installed: install PostgreSQL's client programs")
    return found


@pytest.fixture
def app_daemon(root: Path, app_board: str) -> Iterator[Daemon]:
    d = Daemon(root, "--store", app_board, "--lease-ttl", "2s")
    d.start()
    yield d
    d.stop()


def test_a_pg_dump_holds_no_token_in_plain_text(
    board: str, app_daemon: Daemon, pg_dump: str
) -> None:
    secrets = [
        str(app_daemon.call("token-create", role=role, tenant=tenant, **extra)["secret"])
        for role, tenant, extra in (
            ("operator", "default", {}), ("operator", "acme", {}),
            ("agent", "acme", {"agent": "far-1"}), ("agent", "beta", {"agent": "far-2"}),
        )
    ]  # fmt: skip
    from urllib.parse import parse_qs, urlsplit

    schema = parse_qs(urlsplit(board).query)["options"][0].removeprefix("-csearch_path=")
    dump = subprocess.run(
        [pg_dump, "--data-only", "--schema", schema, board.split("?")[0]],
        capture_output=True, text=True, timeout=60, check=True,
    ).stdout  # fmt: skip
    assert dump.count("COPY ") >= 10 and "far-1" in dump  # the tokens' rows are in it
    for secret in secrets:
        assert secret not in dump
        assert secret[len(PREFIX) + 13 :] not in dump  # nor its secret part alone


def _role_dsn(board: str, role: str) -> str:
    from urllib.parse import urlsplit, urlunsplit

    parts = urlsplit(board)
    return urlunsplit(parts._replace(netloc=f"{role}@{parts.netloc.rpartition('@')[2]}"))


@pytest.fixture
def roles(board: str) -> Iterator[Callable[[str], str]]:
    """Make roles for one test (``make("LOGIN BYPASSRLS")`` → its name); dropped after it,
    with whatever they own."""
    import uuid

    made: list[str] = []

    def make(attributes: str = "LOGIN") -> str:
        name = f"colibri_t_{uuid.uuid4().hex[:10]}"
        with psycopg.connect(board, autocommit=True) as admin:
            admin.execute(f"CREATE ROLE {name} {attributes}")
        made.append(name)
        return name

    yield make
    with psycopg.connect(board, autocommit=True) as admin:
        for name in made:
            admin.execute(f"DROP OWNED BY {name} CASCADE")
            admin.execute(f"DROP ROLE {name}")


def test_hive_grant_refuses_a_role_that_could_get_past_the_policies(
    board: str, roles: Callable[[str], str]
) -> None:
    """Not only the role's own attributes: membership of a role RLS does not bind lets it
    SET ROLE to that one, and CREATEROLE lets it make itself such a member."""
    PostgresStore(board).close()
    owner = roles("NOLOGIN")
    with psycopg.connect(board, autocommit=True) as admin:
        admin.execute(f"ALTER SCHEMA {_schema(board)} OWNER TO {owner}")
    bypass = roles("LOGIN BYPASSRLS")
    member_of_bypass = roles("LOGIN")
    member_of_owner = roles("LOGIN")
    creates_roles = roles("LOGIN CREATEROLE")
    with psycopg.connect(board, autocommit=True) as admin:
        admin.execute(f"GRANT {bypass} TO {member_of_bypass}")
        admin.execute(f"GRANT {owner} TO {member_of_owner}")
    for role, why in (
        (bypass, "has BYPASSRLS"),
        (member_of_bypass, f"is a member of {bypass}"),
        (member_of_owner, f"owns schema {_schema(board)} (or is a member of its owner)"),
        (creates_roles, "has CREATEROLE"),
    ):
        with pytest.raises(ConfigError, match="nothing was granted") as caught:
            grant_role(board, role)
        assert why in caught.value.message
    with psycopg.connect(board) as admin:  # none of them was given a table
        granted = admin.execute(
            "SELECT COUNT(*) FROM information_schema.role_table_grants WHERE grantee = ANY(%s)",
            ([bypass, member_of_bypass, member_of_owner, creates_roles],),
        ).fetchone()
    assert granted == (0,)


def test_hive_grant_takes_back_what_the_role_had_beyond_rows(board: str, app_board: str) -> None:
    with psycopg.connect(board, autocommit=True) as admin:
        admin.execute(f"GRANT TRUNCATE, TRIGGER, REFERENCES ON tasks TO {PG_APP_ROLE}")
    grant_role(board, PG_APP_ROLE)
    with psycopg.connect(board) as admin:
        kinds = {r[0] for r in admin.execute(
            "SELECT privilege_type FROM information_schema.role_table_grants "
            "WHERE grantee = %s AND table_name = 'tasks' AND table_schema = current_schema()",
            (PG_APP_ROLE,),
        )}  # fmt: skip
    assert kinds == {"SELECT", "INSERT", "UPDATE", "DELETE"}
    with _app_connection(app_board) as conn, pytest.raises(psycopg.errors.InsufficientPrivilege):
        conn.execute("TRUNCATE tasks")


def test_a_board_owned_by_a_role_that_is_not_a_superuser_is_made_granted_and_bound(
    board: str, roles: Callable[[str], str]
) -> None:
    """The usual production set-up: the tables' owner is an ordinary role. It can make the
    board (nothing in the schema needs a superuser) and grant the daemons' role; FORCE holds
    the owner to the policies too."""
    owner = roles("LOGIN")
    with psycopg.connect(board, autocommit=True) as admin:
        admin.execute(f"ALTER SCHEMA {_schema(board)} OWNER TO {owner}")
    owner_board = _role_dsn(board, owner)
    done = grant_role(owner_board, PG_APP_ROLE)
    assert done["not_forced"] == [] and "tasks" in done["tables"]
    ids = _fill(_role_dsn(board, PG_APP_ROLE))
    store = PostgresStore(owner_board)  # the owner's own store names every tenant
    try:
        assert store.get_task(ids["acme"]) is not None
    finally:
        store.close()
    with _app_connection(owner_board) as conn, conn.transaction():
        (count,) = conn.execute("SELECT COUNT(*) FROM tasks").fetchone()  # type: ignore[misc]
    assert count == 0  # the owner naming no tenant sees nothing either


def _schema(board: str) -> str:
    from urllib.parse import parse_qs, urlsplit

    return parse_qs(urlsplit(board).query)["options"][0].removeprefix("-csearch_path=")


def _board_of_version_4(board: str) -> None:
    from colibri.store.postgres import _MIGRATIONS

    with psycopg.connect(board, autocommit=True) as admin:
        for n in range(1, 5):
            admin.execute(_MIGRATIONS[n].encode())
        admin.execute("UPDATE colibri_schema SET version = 4")


def test_migration_5_gives_existing_schedules_and_fires_their_tenant(board: str) -> None:
    _board_of_version_4(board)
    with psycopg.connect(board, autocommit=True) as admin:
        for name, task in (
            ("acme-nightly", {"text": "a", "tenant": "acme"}),
            ("plain", {"text": "p"}),
            ("nulled", {"text": "n", "tenant": None}),
        ):
            doc = {"name": name, "kind": "interval", "every": 60.0, "task": task}
            admin.execute(
                "INSERT INTO schedules (name, next_fire_at, doc) VALUES (%s, NULL, %s)",
                (name, json.dumps(doc)),
            )
            admin.execute(
                "INSERT INTO schedule_fires (schedule, nominal, outcome, at) "
                "VALUES (%s, '2026-01-01T00:00:00Z', 'fired', 'x')",
                (name,),
            )
        admin.execute(
            "INSERT INTO schedule_fires (schedule, nominal, outcome, at) "
            "VALUES ('deleted-since', '2026-01-01T00:00:00Z', 'fired', 'x')"
        )
    PostgresStore(board).close()
    with psycopg.connect(board) as admin:
        schedules: dict[str, str] = dict(admin.execute("SELECT name, tenant FROM schedules"))
        fires: dict[str, str] = dict(admin.execute("SELECT schedule, tenant FROM schedule_fires"))
        (version,) = admin.execute("SELECT version FROM colibri_schema").fetchone()  # type: ignore[misc]
    assert schedules == {"acme-nightly": "acme", "plain": "default", "nulled": "default"}
    assert fires == {**schedules, "deleted-since": "default"}
    assert version == SCHEMA_VERSION


def test_a_board_is_not_migrated_while_a_daemon_serves_it(board: str, scratch: Path) -> None:
    """A daemon of the older version serving the board would go on writing the old shape: the
    newer one refuses to change it, in one line naming who serves, and changes nothing."""
    _board_of_version_4(board)
    with psycopg.connect(board, autocommit=True) as admin:
        admin.execute(
            "INSERT INTO leases (name, owner, address, epoch, taken_at, expires_at) VALUES "
            "('board', 'a1b2c3d4-old', 'tcp://10.0.0.9:7433', 3, now(), now() + interval '1 min')"
        )
    result = colibri(None, "hive", "grant", PG_APP_ROLE, "--store", board, cwd=scratch)
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert "has schema version 4 and this Colibri needs" in line
    assert "daemon a1b2c3d4 at tcp://10.0.0.9:7433 holds the board's lease (epoch 3" in line
    assert "stop the daemons of the older version first" in line
    with psycopg.connect(board) as admin:
        assert admin.execute("SELECT version FROM colibri_schema").fetchone() == (4,)
        # Expired, the lease no longer stands in the way.
        admin.execute("UPDATE leases SET expires_at = now() - interval '1 second'")
        admin.commit()
    PostgresStore(board).close()
    with psycopg.connect(board) as admin:
        assert admin.execute("SELECT version FROM colibri_schema").fetchone() == (SCHEMA_VERSION,)


def test_a_lease_lost_at_a_batchs_start_leaves_no_transaction_open(
    board: str, app_board: str
) -> None:
    """Refused by the fence, the batch's transaction is ended at once: the batch's reads do not
    go on inside a transaction that names no tenant (and would see nothing)."""
    import psycopg.pq

    from colibri.core.errors import LeaseLost

    ids = _fill(app_board)
    store = PostgresStore(app_board)
    try:
        store.fence = ("a daemon that never held it", ["board"], [7])
        # Held, then refused as the batch is sent (its commit here; a read would do the same).
        store.insert_task(_task("01a2-late", "acme", "late"), entry_for(_task("x", "acme", "")))
        with pytest.raises(LeaseLost):
            store.commit()
        store.rollback()
        assert store._conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        assert store.get_task(ids["acme"]) is not None  # read in a transaction of its own
    finally:
        store.close()
    with psycopg.connect(board) as admin:
        assert admin.execute("SELECT COUNT(*) FROM tasks WHERE id = '01a2-late'").fetchone() == (0,)


def test_a_board_of_version_2_is_migrated_and_its_lease_judged(board: str) -> None:
    """Version 2 has the lease but not yet the table of daemons: a live lease is still found
    (and named without a pid), an expired one lets the board be migrated."""
    from colibri.core.errors import LockHeld
    from colibri.store.postgres import _MIGRATIONS

    with psycopg.connect(board, autocommit=True) as admin:
        for n in (1, 2):
            admin.execute(_MIGRATIONS[n].encode())
        admin.execute("UPDATE colibri_schema SET version = 2")
        admin.execute(
            "INSERT INTO leases (name, owner, address, epoch, taken_at, expires_at) VALUES "
            "('board', 'feedface-v2', NULL, 1, now(), now() + interval '1 min')"
        )
    with pytest.raises(LockHeld, match="daemon feedface holds the board's lease"):
        PostgresStore(board)
    with psycopg.connect(board, autocommit=True) as admin:
        admin.execute("UPDATE leases SET expires_at = now() - interval '1 second'")
    PostgresStore(board).close()
    with psycopg.connect(board) as admin:
        assert admin.execute("SELECT version FROM colibri_schema").fetchone() == (SCHEMA_VERSION,)


def test_hive_grant_refuses_what_a_role_has_through_its_groups(
    board: str, roles: Callable[[str], str]
) -> None:
    """A member of a role that can make roles could make itself the owner's member; a member
    of a group that may TRUNCATE a table empties it whatever the policies say. Neither is
    taken back by revoking what the role was granted by name: both are refused."""
    PostgresStore(board).close()
    creator, truncator = roles("NOLOGIN CREATEROLE"), roles("NOLOGIN")
    under_creator, under_truncator = roles("LOGIN"), roles("LOGIN")
    with psycopg.connect(board, autocommit=True) as admin:
        admin.execute(f"GRANT {creator} TO {under_creator}")
        admin.execute(f"GRANT TRUNCATE ON tasks TO {truncator}")
        admin.execute(f"GRANT {truncator} TO {under_truncator}")
    with pytest.raises(ConfigError, match=f"is a member of {creator}"):
        grant_role(board, under_creator)
    with pytest.raises(ConfigError, match="may TRUNCATE table tasks of the board through a role"):
        grant_role(board, under_truncator)
    with psycopg.connect(board) as admin:
        granted = admin.execute(
            "SELECT COUNT(*) FROM information_schema.role_table_grants WHERE grantee = ANY(%s)",
            ([under_creator, under_truncator],),
        ).fetchone()
    assert granted == (0,)
