"""S3: every ledger row a request causes names the peer's uid and pid (SO_PEERCRED)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
from collections.abc import Callable
from pathlib import Path

from colibri.store import sql
from colibri.store.sqlite import SqliteStore
from colibri.store.sqlite_schema import APPLICATION_ID, SCHEMA_VERSION
from tests.daemon.conftest import Spawn
from tests.helpers import PYTHON, Daemon, wait_until


def rows(daemon: Daemon, task: str) -> list[dict[str, object]]:
    return daemon.call("ledger", task=task)["entries"]


def test_rows_name_the_requesting_peer_and_the_daemons_own_decisions_name_nobody(
    daemon: Daemon, spawn: Spawn
) -> None:
    task = daemon.call("submit", text="audited", capabilities=["x"])["task"]["id"]
    (submitted,) = rows(daemon, task)
    assert (submitted["uid"], submitted["pid"]) == (os.getuid(), os.getpid())

    agent = spawn(daemon, "worker", ["x"])
    assign = agent.next_assign()
    # The claim came from a dispatch pass; the report, from the agent's request.
    assert agent.out(assign, "fine")["ok"] is True
    by_state = {r["to_state"]: r for r in rows(daemon, task)}
    assert by_state["done"]["pid"] == os.getpid()

    # Another process (the CLI) cancels a second task: its own pid is on the row.
    other = daemon.call("submit", text="to cancel", capabilities=["nobody"])["task"]["id"]
    cli = subprocess.Popen(
        [PYTHON, "-m", "colibri", "--root", str(daemon.root), "cancel", other],
        stdout=subprocess.DEVNULL,
    )
    assert cli.wait(timeout=30) == 0
    cancelled = [r for r in rows(daemon, other) if r["to_state"] == "cancelled"]
    assert [(r["uid"], r["pid"]) for r in cancelled] == [(os.getuid(), cli.pid)]


def test_an_expiry_is_the_daemons_own_decision(
    start_daemon: Callable[..., Daemon], spawn: Spawn
) -> None:
    daemon = start_daemon(tick="1s", agent_ttl="1s")
    agent = spawn(daemon, "silent", ["x"])
    task = daemon.call("submit", text="will be lost", capabilities=["x"])["task"]["id"]
    agent.next_assign()
    failed = wait_until(
        lambda: [r for r in rows(daemon, task) if r["to_state"] == "failed"], timeout=20
    )
    assert failed[0]["uid"] is None and failed[0]["pid"] is None, failed
    running = [r for r in rows(daemon, task) if r["to_state"] == "running"]
    assert running[0]["uid"] is None  # assigned by a dispatch pass


def test_a_board_of_schema_1_gains_the_columns_and_keeps_its_rows(tmp_path: Path) -> None:
    path = tmp_path / "old.sqlite"
    old = sqlite3.connect(path)
    old.executescript(sql.load("sqlite")["migration_1"])
    old.execute(
        "INSERT INTO ledger (at, task, tenant, to_state, epoch) "
        "VALUES ('2026-01-01T00:00:00.000Z', 't1', 'default', 'pending', 0)"
    )
    old.execute(f"PRAGMA application_id={APPLICATION_ID}")
    old.execute("PRAGMA user_version=1")
    old.commit()
    old.close()
    assert SCHEMA_VERSION >= 2
    store = SqliteStore(str(path))
    try:
        (entry,) = store.ledger({}, 10)
        assert entry.task == "t1" and entry.uid is None and entry.pid is None
    finally:
        store.close()
    check = sqlite3.connect(path)
    assert check.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    check.close()
