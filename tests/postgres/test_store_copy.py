"""``colibri store copy``: an SQLite board made by a real daemon, copied into a tenant of a
PostgreSQL board, then served there by a real daemon; and every refusal writes nothing."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    Daemon,
    FakeAgent,
    colibri,
    on_a_terminal,
    one_line,
    wait_until,
    write_config,
)

#: The tables a copy writes, counted before and after a refusal.
TABLES = (
    "tenants", "tasks", "ledger", "ledger_heads", "agents", "skills", "schedules", "schedule_fires",
    "leases",
)


@dataclass
class Source:
    """An SQLite board made by a real daemon, now stopped."""

    root: Path
    path: Path
    done: str  # ran to done by small-1, at a cost
    running: str  # held by slow-1 when the daemon stopped
    pending: str  # waits for a gpu agent, with an idempotency key
    other_tenant: str  # submitted in tenant team-b
    tasks: list[dict[str, Any]]
    ledger: list[dict[str, Any]]
    fires: list[dict[str, Any]]


def new_root() -> Path:
    from colibri.config import init_root

    path = Path(tempfile.mkdtemp(prefix="cb", dir="/tmp"))  # a short socket path
    init_root(path)
    return path


@pytest.fixture(scope="module")
def source() -> Iterator[Source]:
    root = new_root()
    write_config(root, tick="1s")
    path = root / ".colibri" / "colibri.sqlite"
    daemon = Daemon(root, "--store", str(path))
    daemon.start()
    try:
        small = FakeAgent(daemon, "small-1", ["py"])
        done = daemon.submit("ran here", capabilities=["py"])
        small.out(small.next_assign(), output="ok", cost={"usd": 0.5, "tokens_in": 7})
        daemon.wait_closed(done["id"])
        slow = FakeAgent(daemon, "slow-1", ["slow"])
        running = daemon.submit("runs while we move", capabilities=["slow"], max_attempts=2)
        slow.next_assign()
        pending = daemon.submit("waits for a gpu", capabilities=["gpu"], idempotency_key="k-1")
        other = daemon.submit("of team b", capabilities=["gpu"], tenant="team-b")
        daemon.call("describe-skill", name="py", description="runs python")
        daemon.call("schedule-add", name="tick", schedule={
            "every": "1s", "task": {"text": "tick work", "capabilities": ["gpu"]}})  # fmt: skip

        def fired() -> list[dict[str, Any]]:
            return daemon.call("schedule-get", name="tick", next=0, fires=100)["fires"]

        wait_until(fired)
        daemon.call("schedule-pause", name="tick")
        small.close()
        slow.close()
        tasks = daemon.call("list", limit=10_000)["tasks"]
        ledger = daemon.ledger()
        fires = fired()
    finally:
        daemon.stop()
    yield Source(root, path, done["id"], running["id"], pending["id"], other["id"], tasks,
                 ledger, fires)  # fmt: skip
    shutil.rmtree(root, ignore_errors=True)


def copy(*args: str, root: Path | None = None) -> Any:
    return colibri(root, "store", "copy", *args)


def counts(dsn: str) -> dict[str, int]:
    """Rows in each table of the board at ``dsn``; empty while the schema holds no board."""
    import psycopg

    with psycopg.connect(dsn) as conn:
        if conn.execute("SELECT to_regclass('tasks')").fetchone() == (None,):
            return {}
        return {t: conn.execute(f"SELECT COUNT(*) FROM {t}").fetchone()[0] for t in TABLES}  # type: ignore[index]


def copied(source: Source, board: str, tenant: str = "acme") -> dict[str, Any]:
    return copied_from(source.path, board, tenant)


def test_a_copied_board_is_served_by_a_daemon_on_the_hive_under_its_tenant(
    source: Source, board: str
) -> None:
    summary = copied(source, board)
    ids = sorted(t["id"] for t in source.tasks)
    assert summary["tasks"] == len(ids) and summary["ledger"] == len(source.ledger)
    assert summary["ledger_seqs"] == [1, len(source.ledger)]
    assert summary["running"] == 1 and summary["by_state"]["running"] == 1
    assert summary["schedules"] == 1 and summary["fires"] == len(source.fires)
    assert (summary["agents"], summary["skills"]) == (2, 2)  # small-1 and slow-1; py and slow
    assert summary["tenants"] == ["default", "team-b"]

    root = new_root()
    write_config(root, tick="1s", agent_ttl="2s")
    hive = Daemon(root, "--store", board, "--lease-ttl", "2s")
    hive.start()
    try:
        listed = hive.call("list", tenant="acme", limit=10_000)["tasks"]
        assert sorted(t["id"] for t in listed) == ids  # the ids kept, every one in acme
        assert hive.call("list", tenant="default", limit=10_000)["tasks"] == []
        shown = hive.task(source.done)
        assert (shown["tenant"], shown["state"], shown["output"]) == ("acme", "closed", "ok")
        assert hive.task(source.other_tenant)["tenant"] == "acme"
        ledger = hive.ledger()
        assert [r["seq"] for r in ledger][: len(source.ledger)] == list(
            range(1, len(source.ledger) + 1)
        )
        mine = [(r["task"], r["from_state"], r["to_state"]) for r in ledger[: len(source.ledger)]]
        assert mine == [(r["task"], r["from_state"], r["to_state"]) for r in source.ledger]
        assert {r["tenant"] for r in ledger[: len(source.ledger)]} == {"acme"}
        cost = hive.call("cost", by="tenant")["totals"]
        assert [(c["key"], c["usd"]) for c in cost] == [("acme", 0.5)]
        schedule = hive.call("schedule-get", name="tick", next=0, fires=100)
        assert schedule["fires"] == source.fires  # the history kept: nothing fires twice
        assert schedule["schedule"]["task"]["tenant"] == "acme"
        # The running task was an orphan here: not claimed back in the window, it is retried.
        wait_until(lambda: hive.task(source.running)["state"] == "pending", timeout=20)
        gpu = FakeAgent(hive, "hive-gpu", ["gpu"], tenant="acme")
        assign = gpu.next_assign()
        assert assign["task"]["tenant"] == "acme"
        assert assign["task"]["id"] in {source.pending, source.other_tenant} | {
            t["id"] for t in source.tasks if t["schedule"] == "tick"
        }
        gpu.out(assign, output="ran on the hive")
        assert hive.wait_closed(assign["task"]["id"])["output"] == "ran on the hive"
        gpu.close()
    finally:
        hive.stop()
        shutil.rmtree(root, ignore_errors=True)


def test_the_text_summary_says_what_was_copied_and_what_was_not(
    source: Source, board: str
) -> None:
    done = copy("--from", str(source.path), "--to", board, "--tenant", "acme")
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0].startswith(f"copied {len(source.tasks)} tasks (")
    assert f"{len(source.ledger)} ledger rows (seq 1-{len(source.ledger)})" in lines[0]
    assert "the rows of tenants default, team-b are in tenant acme now" in lines
    assert any(line.startswith("1 task running: ") for line in lines)


def test_a_dry_run_checks_and_writes_nothing(source: Source, board: str) -> None:
    dry = copy("--from", str(source.path), "--to", board, "--tenant", "acme", "--dry-run",
               "--json")  # fmt: skip
    assert dry.returncode == 0, dry.stderr
    assert json.loads(dry.stdout)["tasks"] == len(source.tasks)
    assert counts(board) == {}  # not even the board's tables
    before = counts(board) or (copied(source, board), counts(board))[1]
    again = copy("--from", str(source.path), "--to", board, "--tenant", "b", "--dry-run")
    assert again.returncode == 1
    assert "is on the target board already" in one_line(again.stderr)
    assert counts(board) == before


def test_a_dry_run_says_what_it_would_do_not_what_it_did(source: Source, board: str) -> None:
    """Every line of a dry run's summary is in the conditional (before: ``the rows of tenants
    … are in tenant acme now``, of rows it had not written), and the copy made after it says
    the same in the past."""
    args = ("--from", str(source.path), "--to", board, "--tenant", "acme")
    dry = copy(*args, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    lines = dry.stdout.splitlines()
    assert lines[0].startswith(f"would copy {len(source.tasks)} tasks (")
    assert lines[1] == "the rows of tenants default, team-b would be in tenant acme"
    assert lines[2].startswith("1 task running: the first daemon to serve the hive would hold")
    assert "each would be retried" in lines[2]
    assert lines[3:] == ["dry run: nothing was written"]
    assert counts(board) == {}
    done = copy(*args)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[1:] == [
        "the rows of tenants default, team-b are in tenant acme now",
        lines[2].replace("would hold", "holds").replace("would be", "is"),
    ]
    # A second board, with an agent acme has now and a token, tried dry.
    root = new_root()
    path = root / ".colibri" / "colibri.sqlite"
    daemon = Daemon(root, "--store", str(path))
    daemon.start()
    try:
        FakeAgent(daemon, "small-1", ["py"]).close()
        daemon.call("token-create", role="operator", tenant="default")
    finally:
        daemon.stop()
    try:
        again = copy("--from", str(path), "--to", board, "--tenant", "acme", "--dry-run")
        assert again.returncode == 0, again.stderr
        assert again.stdout.splitlines()[1:] == [
            "1 agent registered in tenant acme already would keep the target's registration",
            "1 token would not be copied: make the hive's own with colibri token create "
            "--tenant acme",
            "dry run: nothing was written",
        ]
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_copying_twice_is_refused_at_the_first_task_and_writes_nothing(
    source: Source, board: str
) -> None:
    copied(source, board)
    before = counts(board)
    again = copy("--from", str(source.path), "--to", board, "--tenant", "other", "--json")
    assert again.returncode == 1
    error = json.loads(again.stdout)["error"]
    first = min(t["id"] for t in source.tasks)
    assert error["code"] == "copy_conflict"
    assert error["message"].startswith(f"task {first} is on the target board already")
    assert counts(board) == before


def test_a_clash_found_late_leaves_the_target_untouched(source: Source, board: str) -> None:
    """The schedules are written last: the tasks and ledger rows before them are rolled back."""
    from colibri.core.schedules import Schedule
    from colibri.store.postgres import PostgresStore

    store = PostgresStore(board)
    try:
        store.upsert_schedule(Schedule(name="tick", kind="interval", every=60.0,
                                       task=_spec()))  # fmt: skip
        store.commit()
    finally:
        store.close()
    before = counts(board)
    refused = copy("--from", str(source.path), "--to", board, "--tenant", "acme")
    assert refused.returncode == 1
    assert one_line(refused.stderr) == (
        "colibri: schedule tick exists on the target board (schedule names are board-wide "
        "there): delete or rename one of them first; nothing was copied"
    )
    assert counts(board) == before


def test_an_agent_of_another_tenant_with_the_name_is_refused(source: Source, board: str) -> None:
    from colibri.core.model import Agent
    from colibri.store.postgres import PostgresStore

    store = PostgresStore(board)
    try:
        store.upsert_agent(Agent(name="slow-1", tenant="zeta", capabilities=[], slots=1,
                                 ttl=30.0), "2026-01-01T00:00:00.000Z")  # fmt: skip
        store.commit()
    finally:
        store.close()
    before = counts(board)
    refused = copy("--from", str(source.path), "--to", board, "--tenant", "acme")
    assert refused.returncode == 1
    assert "agent slow-1 is registered in tenant zeta" in one_line(refused.stderr)
    assert counts(board) == before
    # Into zeta itself the agent is the same one: it keeps the target's registration.
    summary = copied(source, board, tenant="zeta")
    assert (summary["agents"], summary["agents_kept"]) == (1, 1)


def test_an_idempotency_key_taken_in_the_tenant_is_refused(source: Source, board: str) -> None:
    root = new_root()
    hive = Daemon(root, "--store", board, "--lease-ttl", "2s")
    hive.start()
    try:
        theirs = hive.submit("the hive's own", tenant="acme", idempotency_key="k-1")
        hive.submit("another tenant's key", tenant="zeta", idempotency_key="k-2")
    finally:
        hive.stop()
        shutil.rmtree(root, ignore_errors=True)
    before = counts(board)
    refused = copy("--from", str(source.path), "--to", board, "--tenant", "acme")
    assert refused.returncode == 1
    assert one_line(refused.stderr) == (
        f"colibri: tenant acme of the target has task {theirs['id']} with idempotency key "
        f"'k-1', as has task {source.pending}; nothing was copied"
    )
    assert counts(board) == before
    # Keys are per tenant: into another tenant the same key is no clash.
    summary = copied(source, board, tenant="zeta")
    assert summary["tasks"] == len(source.tasks)
    # The copied rows follow zeta's own (its one submission), gap-free; acme's are apart.
    assert summary["ledger_seqs"] == [2, 1 + len(source.ledger)]
    import psycopg

    with psycopg.connect(board) as conn:
        rows = conn.execute("SELECT tenant, seq FROM ledger ORDER BY tenant, seq").fetchall()
        found = conn.execute("SELECT tenant, seq FROM ledger_heads").fetchall()
    heads: dict[str, int] = dict(found)
    for tenant in ("acme", "zeta"):
        seqs = [seq for t, seq in rows if t == tenant]
        assert seqs == list(range(1, len(seqs) + 1)) and heads[tenant] == len(seqs)
    assert heads["zeta"] == summary["ledger_seqs"][1]
    assert {t for t, _ in rows} == {"acme", "zeta"}


def test_a_live_lease_on_the_target_is_refused_until_its_daemon_stops(
    source: Source, board: str
) -> None:
    root = new_root()
    hive = Daemon(root, "--store", board, "--lease-ttl", "30s")
    hive.start()
    try:
        before = counts(board)
        refused = copy("--from", str(source.path), "--to", board, "--tenant", "acme")
        assert refused.returncode == 1
        line = one_line(refused.stderr)
        assert f"(pid {hive.pid} on " in line
        assert "holds the board's lease (epoch 1, " in line
        assert line.endswith("stop it first, or wait for its lease to lapse; nothing was copied")
        assert counts(board) == before
    finally:
        hive.stop()  # a clean stop gives the lease back
        shutil.rmtree(root, ignore_errors=True)
    assert copied(source, board)["tasks"] == len(source.tasks)


def test_a_daemon_on_the_source_is_refused(board: str) -> None:
    root = new_root()
    daemon = Daemon(root, "--store", str(root / ".colibri" / "colibri.sqlite"))
    daemon.start()
    try:
        daemon.submit("stays here")
        refused = copy("--to", board, "--tenant", "acme", root=root)
        assert refused.returncode == 1
        assert one_line(refused.stderr) == (
            f"colibri: a daemon has the board {root}/.colibri/colibri.sqlite open: stop the "
            f"daemon (pid {daemon.pid}) first; nothing was copied"
        )
        assert counts(board) == {}
    finally:
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)


@pytest.mark.parametrize(
    "tenant", ["", "Acme", "a b", "-acme", "acme\n", "x" * 65, "ümlaut"]
)  # fmt: skip
def test_a_bad_tenant_is_one_line_and_writes_nothing(
    source: Source, board: str, tenant: str
) -> None:
    refused = copy("--from", str(source.path), "--to", board, "--tenant", tenant)
    assert refused.returncode == 1
    assert one_line(refused.stderr).startswith(f"colibri: invalid tenant {tenant!r}: use 1-64")
    assert counts(board) == {}


def test_the_longest_tenant_name_is_taken(source: Source, board: str) -> None:
    assert copied(source, board, tenant="a" * 64)["tenant"] == "a" * 64


def test_an_unreachable_postgresql_is_one_line(source: Source) -> None:
    refused = copy("--from", str(source.path), "--to",
                   "postgresql://nobody:hunter2@127.0.0.1:1/none", "--tenant", "acme")  # fmt: skip
    assert refused.returncode == 1
    line = one_line(refused.stderr)
    assert "cannot reach the PostgreSQL board at postgresql://nobody@127.0.0.1:1/none" in line
    assert "hunter2" not in refused.stderr


def test_a_missing_source_or_a_target_that_is_no_postgresql_is_one_line(
    tmp_path: Path, board: str, source: Source
) -> None:
    missing = tmp_path / "none.sqlite"
    refused = copy("--from", str(missing), "--to", board, "--tenant", "acme")
    assert refused.returncode == 1
    assert one_line(refused.stderr) == (
        f"colibri: no SQLite board at {missing}: give the board to copy with --from PATH"
    )
    assert list(tmp_path.iterdir()) == []  # no lock file left either
    sqlite = copy("--from", str(source.path), "--to", str(tmp_path / "x.sqlite"), "--tenant", "a")
    assert sqlite.returncode == 1
    assert "is not a PostgreSQL board: give --to postgresql://" in one_line(sqlite.stderr)
    assert list(tmp_path.iterdir()) == []
    link = tmp_path / "link.sqlite"
    link.symlink_to(source.path)
    linked = copy("--from", str(link), "--to", board, "--tenant", "acme")
    assert linked.returncode == 1
    assert one_line(linked.stderr) == (
        f"colibri: {link} is a symbolic link: give --from the board's own path, "
        f"{os.path.realpath(source.path)}"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["link.sqlite"]  # no lock beside it
    link.unlink()
    from_pg = copy("--from", board, "--to", board, "--tenant", "acme")
    assert from_pg.returncode == 1
    assert one_line(from_pg.stderr) == (
        "colibri: the board to copy is in PostgreSQL already: give --from with an SQLite "
        "board's path"
    )
    assert counts(board) == {}


def _spec() -> Any:
    from colibri.core.model import TaskSpec

    return TaskSpec(text="the hive's own")


def test_keys_of_two_source_tenants_that_would_meet_in_one_are_refused(board: str) -> None:
    root = new_root()
    path = root / ".colibri" / "colibri.sqlite"
    daemon = Daemon(root, "--store", str(path))
    daemon.start()
    try:
        first = daemon.submit("of a", tenant="a", idempotency_key="nightly")
        second = daemon.submit("of b", tenant="b", idempotency_key="nightly")
    finally:
        daemon.stop()
    try:
        refused = copy("--from", str(path), "--to", board, "--tenant", "ab")
        assert refused.returncode == 1
        assert one_line(refused.stderr) == (
            f"colibri: tasks {first['id']} and {second['id']} have the same idempotency key "
            "'nightly' and would both be in tenant ab; nothing was copied"
        )
        assert all(n == 0 for n in counts(board).values())
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_progress_goes_to_stderr_on_a_terminal_only(source: Source, board: str) -> None:
    import sys

    piped = copy("--from", str(source.path), "--to", board, "--tenant", "acme", "--dry-run")
    assert piped.returncode == 0 and piped.stderr == ""  # not a terminal: no progress
    done, shown = on_a_terminal(
        [sys.executable, "-m", "colibri", "store", "copy", "--from", str(source.path),
         "--to", board, "--tenant", "acme"], timeout=60,
    )  # fmt: skip
    assert done.returncode == 0
    assert f"copying tasks: {len(source.tasks)} of {len(source.tasks)}".encode() in shown
    assert f"copying ledger: {len(source.ledger)} of {len(source.ledger)}".encode() in shown
    assert "copying" not in done.stdout


def test_a_connection_lost_midway_is_one_line_and_writes_nothing(
    source: Source, board: str
) -> None:
    """The copy waits for the board's writers' lock (held here by another connection), and its
    connection is cut there: after the leases were locked and the tenant written."""
    import subprocess
    import sys

    import psycopg

    from colibri.store.postgres import PostgresStore

    PostgresStore(board).close()  # the board's tables, so that there is something to count
    before = counts(board)
    with psycopg.connect(board, autocommit=True) as holder:
        key = holder.execute("SELECT hashtextextended('colibri board ' || current_schema(), 0)")
        (value,) = key.fetchone()  # type: ignore[misc]
        holder.execute("BEGIN")
        holder.execute("SELECT pg_advisory_xact_lock(%s)", (value,))
        copying = subprocess.Popen(
            [sys.executable, "-m", "colibri", "store", "copy", "--from", str(source.path),
             "--to", board, "--tenant", "acme"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip

        def waiting() -> int | None:
            row = holder.execute(
                "SELECT pid FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                "AND classid::bigint = %s AND objid::bigint = %s",
                ((value >> 32) & 0xFFFFFFFF, value & 0xFFFFFFFF),
            ).fetchone()
            return None if row is None else int(row[0])

        pid = wait_until(waiting)
        holder.execute("SELECT pg_terminate_backend(%s)", (pid,))
        _, stderr = copying.communicate(timeout=60)
        holder.execute("ROLLBACK")
    assert copying.returncode == 1
    line = one_line(stderr)
    assert line.startswith("colibri: the copy to postgresql://postgres@127.0.0.1")
    assert line.endswith("nothing was copied")
    assert counts(board) == before


def test_a_board_of_a_newer_colibri_is_refused(source: Source, board: str) -> None:
    import psycopg

    from colibri.store.postgres import PostgresStore

    PostgresStore(board).close()
    with psycopg.connect(board, autocommit=True) as conn:
        conn.execute("UPDATE colibri_schema SET version = 999")
    before = counts(board)
    for dry in ([], ["--dry-run"]):
        refused = copy("--from", str(source.path), "--to", board, "--tenant", "acme", *dry)
        assert refused.returncode == 1
        assert "has schema version 999, newer than this Colibri understands" in one_line(
            refused.stderr
        )
    assert counts(board) == before


def test_every_field_of_a_task_and_its_ledger_row_is_copied(tmp_path: Path, board: str) -> None:
    """A task with every field set (tests/store/values.py), written by the SQLite store itself,
    read back by the PostgreSQL store: equal but for its tenant, its fingerprint kept."""
    import msgspec

    from colibri.store.postgres import PostgresStore
    from colibri.store.sqlite import SqliteStore
    from tests.store.values import FULL_TASK, MINIMAL_TASK, entry_for

    path = tmp_path / "full.sqlite"
    sqlite = SqliteStore(str(path))
    try:
        sqlite.insert_task(FULL_TASK, entry_for(FULL_TASK), fingerprint="fp-1")
        sqlite.insert_task(MINIMAL_TASK, entry_for(MINIMAL_TASK))
        sqlite.commit()
        entries = sqlite.ledger({}, 10)
    finally:
        sqlite.close()
    summary = copied_from(path, board, "hive")
    assert summary["tenants"] == ["acme", "default"]
    hive = PostgresStore(board)
    try:
        for task in (FULL_TASK, MINIMAL_TASK):
            assert hive.get_task(task.id) == msgspec.structs.replace(task, tenant="hive")
        assert hive.fingerprint(FULL_TASK.id) == "fp-1"
        assert hive.fingerprint(MINIMAL_TASK.id) is None
        # Every tenant's rows, merged by time, numbered again as the one tenant's.
        assert hive.ledger({}, 10) == [
            msgspec.structs.replace(e, tenant="hive", seq=n)
            for n, e in enumerate(sorted(entries, key=lambda e: (e.at, e.tenant, e.seq)), 1)
        ]
        assert hive.find_idempotent("hive", "key-1") == hive.get_task(FULL_TASK.id)
    finally:
        hive.close()


def copied_from(path: Path, board: str, tenant: str) -> dict[str, Any]:
    done = copy("--from", str(path), "--to", board, "--tenant", tenant, "--json")
    assert done.returncode == 0, done.stderr
    summary: dict[str, Any] = json.loads(done.stdout)
    return summary


def test_a_copy_whose_commit_answer_is_lost_does_not_say_nothing_was_copied(
    source: Source, board: str, relayed_board: tuple[Any, str]
) -> None:
    """The copy's COMMIT reaches the server and commits; the answer is lost with the
    connection. The copy says its outcome is not known (it was written), never "nothing was
    copied"; copying again is refused as a copy already made."""
    import threading
    import time

    relay, through = relayed_board
    from colibri.store.postgres import PostgresStore

    PostgresStore(board).close()  # the board's tables made: the COMMIT lost is the copy's
    relay.deaf_after = b"COMMIT"

    def cut_once_deaf() -> None:
        if relay.deafened.wait(60):
            time.sleep(0.5)
            relay.deaf = False
            relay.drop()

    cutter = threading.Thread(target=cut_once_deaf, daemon=True)
    cutter.start()
    done = copy("--from", str(source.path), "--to", through, "--tenant", "acme")
    cutter.join(10)
    assert done.returncode == 1, done.stderr
    line = one_line(done.stderr)
    assert "whether it was written is not known" in line and "nothing was copied" not in line
    written = counts(board)
    again = copy("--from", str(source.path), "--to", board, "--tenant", "acme")
    assert again.returncode == 1, again.stderr  # refused: it had been written
    assert counts(board) == written


def test_a_connection_broken_while_the_tables_are_made_is_one_line(
    source: Source, relayed_board: tuple[Any, str]
) -> None:
    import threading
    import time

    relay, through = relayed_board
    relay.deaf_after = b"COMMIT"  # the first COMMIT: the one that makes the board's tables

    def cut_once_deaf() -> None:
        if relay.deafened.wait(60):
            time.sleep(0.5)
            relay.deaf = False
            relay.drop()

    cutter = threading.Thread(target=cut_once_deaf, daemon=True)
    cutter.start()
    done = copy("--from", str(source.path), "--to", through, "--tenant", "acme")
    cutter.join(10)
    assert done.returncode == 1
    assert "broke while its tables were being made" in one_line(done.stderr)
    again = copy("--from", str(source.path), "--to", through, "--tenant", "acme")
    assert again.returncode == 0, again.stderr  # made again, or found made: the copy goes on
