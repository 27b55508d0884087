"""Crashes and restarts of a real daemon: durable board, reclaimed sessions, ledger mirror, lock."""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from colibri.client import socket_path
from tests.daemon.conftest import Spawn
from tests.helpers import PYTHON, Daemon, FakeAgent, sqlite_only
from tests.reliability.crash_scenarios import mirror_path

LONG_TTL = 30.0


def mirror_rows(root: Path) -> list[dict[str, Any]]:
    data = mirror_path(root).read_bytes()
    assert data == b"" or data.endswith(b"\n"), "the mirror ends in a torn line"
    return [json.loads(line) for line in data.splitlines()]


def normalised(row: dict[str, Any]) -> dict[str, Any]:
    """A row with its default fields filled in (a default may be written out or left out)."""
    return {"tenant": "default", "epoch": 0, **row}


def assert_mirror_matches_store(daemon: Daemon) -> list[dict[str, Any]]:
    """ledger.jsonl holds exactly the store's rows: same seqs, in order, no gaps or doubles."""
    stored = daemon.ledger()
    mirrored = mirror_rows(daemon.root)
    seqs = [row["seq"] for row in mirrored]
    assert seqs == list(range(1, len(stored) + 1))
    assert [normalised(row) for row in mirrored] == [normalised(row) for row in stored]
    return stored


def some_work(daemon: Daemon, agent: FakeAgent, n: int) -> None:
    """Submit n tasks; the agent finishes them alternately done and failed."""
    for i in range(n):
        daemon.call("submit", text=f"job {i}")
        assign = agent.next_assign(timeout=5)
        if i % 2:
            agent.fail(assign, "nope")
        else:
            agent.out(assign, "yes")


# -- the board survives ----------------------------------------------------------------------------


def test_pending_tasks_survive_sigkill_and_are_then_assigned(daemon: Daemon, spawn: Spawn) -> None:
    ids = [daemon.call("submit", text=f"keep {n}", priority=n)["task"]["id"] for n in range(3)]
    daemon.kill()
    daemon.start()
    listed = daemon.call("list", state="pending")["tasks"]
    assert sorted(t["id"] for t in listed) == sorted(ids)
    agent = spawn(daemon, "after", slots=3)
    got = [agent.next_assign(timeout=5)["task"]["id"] for _ in range(3)]
    assert got == list(reversed(ids))  # priority order holds after the restart too
    assert all(daemon.task(task_id)["state"] == "running" for task_id in ids)


def test_a_running_task_claimed_back_after_restart_stays_running(
    daemon: Daemon, spawn: Spawn
) -> None:
    task = daemon.call("submit", text="outlives the daemon")["task"]
    before = spawn(daemon, "keeper")
    assign = before.next_assign(timeout=5)
    daemon.kill()
    before.close()
    daemon.start()
    assert daemon.task(task["id"])["state"] == "running"
    after = spawn(
        daemon,
        "keeper",
        running=[{"task": task["id"], "epoch": assign["epoch"], "claim": assign["claim"]}],
    )
    assert after.registration["adopted"] == [task["id"]]
    kept = daemon.task(task["id"])
    assert (kept["state"], kept["agent"], kept["epoch"], kept["attempts"]) == (
        "running",
        "keeper",
        1,
        1,
    )
    assert after.out(assign, "finished across a crash")["task"]["outcome"] == "done"
    assert [r["to_state"] for r in daemon.ledger(task["id"])] == [
        "pending",
        "running",
        "done",
        "closed",
    ]


def test_a_running_task_nobody_claims_back_fails_as_session_lost(
    start_daemon: Callable[..., Daemon], spawn: Spawn
) -> None:
    daemon = start_daemon(agent_ttl="0.5s")
    task = daemon.call("submit", text="orphaned")["task"]
    holder = spawn(daemon, "holder", ttl=LONG_TTL)
    holder.next_assign(timeout=5)
    daemon.kill()
    holder.close()
    daemon.start()
    # A free agent that could run it is online, yet it is not replayed.
    spawn(daemon, "bystander", ttl=LONG_TTL)
    final = daemon.wait_closed(task["id"])
    assert final["outcome"] == "failed"
    assert final["attempts"] == 1
    rows = daemon.ledger(task["id"])
    assert [(r.get("from_state"), r["to_state"]) for r in rows] == [
        (None, "pending"),
        ("pending", "running"),
        ("running", "failed"),
        ("failed", "closed"),
    ]
    assert "session lost" in rows[2]["reason"]
    assert "restart" in rows[2]["reason"]


# -- the ledger mirror -----------------------------------------------------------------------------


def test_mirror_equals_the_store_after_a_normal_run(daemon: Daemon, spawn: Spawn) -> None:
    agent = spawn(daemon, "worker")
    some_work(daemon, agent, 4)
    stored = assert_mirror_matches_store(daemon)
    assert len(stored) == 4 * 4
    daemon.stop()
    daemon.start()
    assert_mirror_matches_store(daemon)


def test_mirror_equals_the_store_after_sigkill(daemon: Daemon, spawn: Spawn) -> None:
    agent = spawn(daemon, "worker")
    some_work(daemon, agent, 3)
    daemon.call("submit", text="left pending", capabilities=["nobody"])
    daemon.kill()
    agent.close()
    daemon.start()
    stored = assert_mirror_matches_store(daemon)
    assert len(stored) == 3 * 4 + 1
    again = spawn(daemon, "worker")
    some_work(daemon, again, 2)
    assert len(assert_mirror_matches_store(daemon)) == 3 * 4 + 1 + 2 * 4


def test_a_torn_last_line_is_cut_at_start_up(daemon: Daemon, spawn: Spawn) -> None:
    agent = spawn(daemon, "worker")
    some_work(daemon, agent, 2)
    daemon.stop()
    agent.close()
    path = mirror_path(daemon.root)
    intact = path.read_bytes()
    with path.open("ab") as f:
        f.write(b'{"seq":9,"at":"2026-01-01T00:00:00.000Z","ta')
    daemon.start()
    assert path.read_bytes() == intact
    assert "torn" in daemon.log()
    again = spawn(daemon, "worker")
    some_work(daemon, again, 1)
    assert len(assert_mirror_matches_store(daemon)) == 3 * 4
    assert path.read_bytes().startswith(intact)


def test_a_short_mirror_is_completed_from_the_store(daemon: Daemon, spawn: Spawn) -> None:
    agent = spawn(daemon, "worker")
    some_work(daemon, agent, 3)
    daemon.stop()
    agent.close()
    path = mirror_path(daemon.root)
    lines = path.read_bytes().splitlines(keepends=True)
    assert len(lines) == 12
    path.write_bytes(b"".join(lines[:5]))
    daemon.start()
    assert len(assert_mirror_matches_store(daemon)) == 12
    path.write_bytes(b"")
    daemon.restart()
    assert len(assert_mirror_matches_store(daemon)) == 12


# -- one daemon per root, and clean exits ----------------------------------------------------------


def test_a_second_daemon_on_the_same_root_exits_naming_the_first(daemon: Daemon) -> None:
    assert daemon.process is not None
    second = subprocess.run(
        [PYTHON, "-m", "colibri", "--root", str(daemon.root), "run"],
        capture_output=True,
        timeout=30,
    )
    assert second.returncode == 1
    stderr = second.stderr.decode()
    assert f"pid {daemon.process.pid}" in stderr
    # The first daemon is untouched: its socket still answers.
    assert daemon.socket.exists()
    assert daemon.call("ping")["pong"] is True


@pytest.fixture
def other_root() -> Iterator[Path]:
    """A second root, beside the ``root`` fixture's."""
    from colibri.config import init_root

    path = Path(tempfile.mkdtemp(prefix="cb2", dir="/tmp"))
    init_root(path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@sqlite_only
@pytest.mark.parametrize("how", ["--store", "store.path"])
def test_a_daemon_of_another_root_on_the_same_board_exits_naming_the_first(
    root: Path, other_root: Path, how: str
) -> None:
    """Two roots pointed at one board file: the second daemon gets one line naming the pid
    of the first and exits 1, before it opens the board; once the first is gone (a crash, or
    SIGKILL: the kernel drops its lock), the second starts on that board."""
    board = root / ".colibri" / "colibri.sqlite"  # the first root's own board
    first = Daemon(root)
    first.start()
    second: Daemon | None = None
    try:
        task = first.call("submit", text="on the shared board")["task"]
        assert first.process is not None
        if how == "--store":
            args = ["--store", str(board)]
        else:
            (other_root / "colibri.jsonc").write_text(json.dumps({"store": {"path": str(board)}}))
            args = []
        refused = subprocess.run(
            [PYTHON, "-m", "colibri", "--root", str(other_root), "run", *args],
            capture_output=True, text=True, timeout=30,
        )  # fmt: skip
        assert refused.returncode == 1, refused.stderr
        lines = refused.stderr.strip().splitlines()
        assert len(lines) == 1, refused.stderr
        assert f"pid {first.process.pid}" in lines[0] and str(board) in lines[0], lines
        assert "Traceback" not in refused.stderr
        assert not socket_path(other_root).exists()
        assert first.task(task["id"])["state"] == "pending"  # the first serves on, untouched
        first.kill()
        second = Daemon(other_root, *args)
        second.start()
        assert second.task(task["id"])["text"] == "on the shared board"
    finally:
        if second is not None:
            second.stop()
        first.stop()


def test_a_stale_socket_and_lock_do_not_block_the_next_start(daemon: Daemon) -> None:
    task = daemon.call("submit", text="still here")["task"]
    daemon.kill()
    assert daemon.socket.is_socket()  # left behind by the crash
    assert (daemon.root / ".colibri" / "daemon.lock").exists()
    daemon.start()
    assert daemon.call("ping")["pong"] is True
    assert daemon.task(task["id"])["state"] == "pending"


def test_sigterm_exits_zero_and_removes_the_socket(daemon: Daemon, spawn: Spawn) -> None:
    assert daemon.process is not None
    spawn(daemon, "connected")
    daemon.call("submit", text="running at shutdown")
    path = socket_path(daemon.root)
    assert path.exists()
    daemon.process.send_signal(signal.SIGTERM)
    assert daemon.process.wait(timeout=15) == 0
    assert not path.exists()


def _building_a_large_board(root: Path) -> Daemon:
    """A daemon started on a board of 30,000 open tasks, returned once it builds the board
    (every open task read back), which takes it a while. (Once it held its lock, as this
    waited for before, a signal could still come before the build, where the loop's handlers
    take it only after the build: twice under a loaded suite.)"""
    import time

    from colibri.store.sqlite import SqliteStore
    from tests.store.values import add, make_task

    store = SqliteStore(str(root / ".colibri" / "colibri.sqlite"))
    for n in range(30_000):
        add(store, make_task(f"01a2b3c4-0000-7000-8000-{n:012x}", capabilities=["nobody"]))
    store.commit()
    store.close()
    daemon = Daemon(root)
    log = open(daemon.log_path, "ab")
    daemon.process = subprocess.Popen(
        daemon.command(), stdin=subprocess.DEVNULL, stdout=log, stderr=log,
        start_new_session=True,
    )  # fmt: skip
    log.close()
    deadline = time.monotonic() + 30
    while "event=building" not in daemon.log():
        if daemon.process.poll() is not None or time.monotonic() > deadline:
            daemon.process.kill()
            daemon.process.wait(timeout=10)
            raise AssertionError(f"the daemon never started building:\n{daemon.log()}")
        time.sleep(0.005)
    assert "daemon ready" not in daemon.log()
    return daemon


@sqlite_only
def test_a_sigterm_while_the_board_is_being_built_stops_the_daemon_cleanly(root: Path) -> None:
    """Between taking its locks and serving, the daemon builds its board: on a large board
    that takes a while, and a SIGTERM then must not end it by the signal's default action. It
    is noted, and the daemon stops as it would once serving."""
    daemon = _building_a_large_board(root)
    assert daemon.process is not None
    try:
        daemon.process.send_signal(signal.SIGTERM)
        assert daemon.process.wait(timeout=60) == 0, daemon.log()
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait(timeout=10)
    assert "daemon stopped" in daemon.log()
    assert not socket_path(root).exists()


@sqlite_only
def test_a_second_signal_while_the_board_is_being_built_ends_the_daemon_at_once(
    root: Path,
) -> None:
    """As once it serves: a second signal is the way to stop a daemon now, not cleanly, and
    it is taken while the board is still being built (not after it, when the loop runs)."""
    import time

    daemon = _building_a_large_board(root)
    assert daemon.process is not None
    try:
        daemon.process.send_signal(signal.SIGTERM)
        time.sleep(0.02)
        daemon.process.send_signal(signal.SIGINT)
        assert daemon.process.wait(timeout=60) == 1, daemon.log()
    finally:
        if daemon.process.poll() is None:
            daemon.process.kill()
            daemon.process.wait(timeout=10)
    assert "daemon ready" not in daemon.log()


def test_tasks_that_wait_survive_sigkills_and_are_released_once(
    daemon: Daemon, spawn: Spawn
) -> None:
    first = daemon.submit("first", capabilities=["w"])
    second = daemon.submit("second", capabilities=["x"], after=[first["id"]])
    # (Each step needs an agent of its own: the agent that ran the step before is closed, and
    # would take the next step, assigned to it at once, down with it.)
    third = daemon.submit("third", capabilities=["y"], after=[second["id"], first["id"]])
    daemon.restart()  # SIGKILL: the waits are in the rows, not in memory only
    assert daemon.call("status")["blocked"] == 2
    agent = spawn(daemon, "a1", ["w"])
    assign = agent.next_assign()
    assert assign["task"]["id"] == first["id"]
    agent.out(assign)
    daemon.wait_closed(first["id"])
    agent.close()
    daemon.restart()  # second released, not yet run: released again? never
    for name, capability, expected in (("a2", "x", second), ("a3", "y", third)):
        agent = spawn(daemon, name, [capability])
        assign = agent.next_assign()
        assert assign["task"]["id"] == expected["id"]
        agent.out(assign)
        daemon.wait_closed(expected["id"])
    rows = daemon.ledger()
    released = [r["task"] for r in rows if (r.get("reason") or "").startswith("released")]
    assert sorted(released) == sorted([second["id"], third["id"]])
