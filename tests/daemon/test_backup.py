"""``colibri backup``: a consistent copy of a running board, and that copy restored as the board."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import sqlite3
import stat
import threading
from pathlib import Path
from typing import Any

import pytest

from colibri.client import Client
from colibri.store.backup import backup_board
from tests.daemon.conftest import Spawn
from tests.helpers import Daemon, colibri, error_code, one_line, sqlite_only, wait_until
from tests.reliability.crash_scenarios import mirror_path


def board_of(root: Path) -> Path:
    return root / ".colibri" / "colibri.sqlite"


def copy_rows(path: Path) -> tuple[list[str], list[tuple[int, str]]]:
    """The task ids and the (seq, task) of every ledger row of a copy, read with sqlite3."""
    with contextlib.closing(sqlite3.connect(f"file:{path}?mode=ro", uri=True)) as db:
        tasks = [row[0] for row in db.execute("SELECT id FROM tasks ORDER BY id")]
        ledger = [
            (row[0], row[1]) for row in db.execute("SELECT seq, task FROM ledger ORDER BY seq")
        ]
    return tasks, ledger


def backup(root: Path, *args: str) -> dict[str, Any]:
    result = colibri(root, "backup", *args, "--json")
    assert result.returncode == 0, result.stderr
    copied: dict[str, Any] = json.loads(result.stdout)
    return copied


# -- the copy --------------------------------------------------------------------------------------


@sqlite_only
def test_a_backup_restored_is_the_board_again(root: Path, daemon: Daemon, spawn: Spawn) -> None:
    """Back up a board with work in every state, go on working, stop, put the copy back: the
    daemon serves the board as the copy had it — tasks, states, ledger — and numbers on from it."""
    agent = spawn(daemon, "worker")
    done = daemon.submit("finished before the backup")["id"]
    agent.out(agent.next_assign())
    held = daemon.submit("running at the backup")["id"]
    held_assign = agent.next_assign()
    waiting = daemon.submit("pending at the backup", capabilities=["nobody"])["id"]
    ledger_then = daemon.ledger()
    states_then = {t: daemon.task(t)["state"] for t in (done, held, waiting)}

    copy_path = root.parent / f"{root.name}-backup.sqlite"
    copied = backup(root, str(copy_path))
    assert copied["path"] == str(copy_path)
    assert copied["board"] == str(board_of(root))
    assert copied["tasks"] == 3
    assert copied["ledger_rows"] == len(ledger_then)
    assert copied["ledger_at"] == f"default:{ledger_then[-1]['seq']}"
    assert copied["bytes"] == copy_path.stat().st_size > 0
    assert stat.S_IMODE(copy_path.stat().st_mode) == 0o600

    later = daemon.submit("after the backup")["id"]
    agent.out(held_assign)  # the held task ends after the backup was taken
    assert daemon.ledger()[-1]["seq"] > ledger_then[-1]["seq"]
    agent.close()
    daemon.stop()

    # The restore, as docs/OPERATIONS.md says it: the daemon stopped, the board's own WAL and
    # shared memory (if any) removed with it, the copy put in its place.
    board = board_of(root)
    for companion in ("-wal", "-shm"):
        Path(f"{board}{companion}").unlink(missing_ok=True)
    shutil.copyfile(copy_path, board)
    daemon.start()

    listed = {t["id"]: t["state"] for t in daemon.call("list", limit=100)["tasks"]}
    assert listed == states_then
    assert error_code(lambda: daemon.task(later)) == "unknown_task"
    assert daemon.ledger() == ledger_then
    # The mirror had the rows of the lost history: set aside, and written anew from the store.
    assert list(root.joinpath(".colibri").glob("ledger.jsonl.*.orphaned"))
    mirrored = [json.loads(line) for line in mirror_path(root).read_text().splitlines()]
    assert [row["seq"] for row in mirrored] == [row["seq"] for row in ledger_then]
    # It serves, and its ledger goes on from the copy's.
    again = daemon.submit("after the restore")["id"]
    assert daemon.ledger(again)[0]["seq"] == ledger_then[-1]["seq"] + 1
    assert daemon.call("ping")["pong"] is True


@sqlite_only
def test_the_copy_is_one_snapshot_while_the_daemon_commits(root: Path, daemon: Daemon) -> None:
    """Submissions from another process go on during a copy made a few pages at a time; the
    copy is one moment of the board (each task with its one ledger row, nothing half) and the
    daemon answered throughout."""
    text = "x" * 8000  # a board of a few MiB, so the copy takes many steps
    with Client(daemon.socket) as client:
        for _ in range(300):
            client.submit(text)
    stop = threading.Event()
    acknowledged: list[str] = []

    def submit_meanwhile() -> None:
        with Client(daemon.socket) as client:
            while not stop.is_set():
                acknowledged.append(client.submit(text).id)

    writer = threading.Thread(target=submit_meanwhile)
    writer.start()
    try:
        while len(acknowledged) < 5:
            threading.Event().wait(0.01)
        before = len(acknowledged)
        copied = backup_board(str(board_of(root)), str(root / "copy.sqlite"), pages_per_step=4)
        during = len(acknowledged) - before
    finally:
        stop.set()
        writer.join()
    assert during > 0, "the daemon acknowledged nothing while the copy ran"
    tasks, ledger = copy_rows(root / "copy.sqlite")
    assert len(tasks) == copied.tasks == copied.ledger_rows == len(ledger)
    assert 300 + before <= copied.tasks < 300 + len(acknowledged)
    assert {task for _seq, task in ledger} == set(tasks)
    assert [seq for seq, _task in ledger] == list(range(1, len(ledger) + 1))


@sqlite_only
def test_a_board_without_a_daemon_is_copied_and_left_as_it_was(root: Path, daemon: Daemon) -> None:
    ids = [daemon.submit(f"task {n}")["id"] for n in range(3)]
    daemon.stop()
    state_dir = sorted(p.name for p in root.joinpath(".colibri").iterdir())
    board_bytes = board_of(root).read_bytes()
    copied = backup(root, str(root / "copy.sqlite"))
    assert copied["tasks"] == 3
    assert copy_rows(root / "copy.sqlite")[0] == sorted(ids)
    # No WAL left beside the board, nothing written to it, no partial file beside the copy.
    assert sorted(p.name for p in root.joinpath(".colibri").iterdir()) == state_dir
    assert board_of(root).read_bytes() == board_bytes
    assert [p.name for p in root.glob("*copy*")] == ["copy.sqlite"]
    # The copy stands alone: SQLite opens it in rollback mode, no -wal needed beside it.
    with contextlib.closing(sqlite3.connect(root / "copy.sqlite")) as db:
        assert db.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@sqlite_only
def test_a_folder_gets_a_dated_copy(root: Path, daemon: Daemon) -> None:
    daemon.submit()
    folder = root / "backups"
    folder.mkdir()
    copied = backup(root, str(folder))
    (made,) = folder.iterdir()
    assert copied["path"] == str(made)
    assert made.name.startswith("colibri-") and made.name.endswith("Z.sqlite")


# -- refusals --------------------------------------------------------------------------------------


@sqlite_only
def test_an_existing_file_is_replaced_only_with_force(root: Path, daemon: Daemon) -> None:
    target = root / "copy.sqlite"
    target.write_text("an older backup")
    refused = colibri(root, "backup", str(target))
    assert refused.returncode == 1
    assert one_line(refused.stderr) == (
        f"colibri: {target} exists already; pass --force to replace it"
    )
    assert target.read_text() == "an older backup"
    as_json = colibri(root, "backup", str(target), "--json")
    assert json.loads(as_json.stdout)["error"]["code"] == "file_exists"
    daemon.submit()
    assert backup(root, str(target), "--force")["tasks"] == 1
    assert copy_rows(target)[0] != []
    assert sorted(p.name for p in root.iterdir() if "copy" in p.name) == ["copy.sqlite"]


@sqlite_only
def test_a_link_or_folder_at_the_target_is_never_replaced(root: Path, daemon: Daemon) -> None:
    elsewhere = root / "elsewhere.txt"
    elsewhere.write_text("not a board")
    link = root / "copy.sqlite"
    link.symlink_to(elsewhere)
    refused = colibri(root, "backup", str(link), "--force", "--json")
    assert json.loads(refused.stdout)["error"]["code"] == "file_exists"
    assert link.is_symlink() and elsewhere.read_text() == "not a board"


@sqlite_only
def test_the_board_itself_is_not_a_target(root: Path, daemon: Daemon) -> None:
    for target in (board_of(root), Path(f"{board_of(root)}-wal")):
        refused = colibri(root, "backup", str(target), "--force")
        assert refused.returncode == 1
        assert "is the board itself" in one_line(refused.stderr)
    assert daemon.call("ping")["pong"] is True


def fingerprint(path: Path) -> tuple[int, int, bytes]:
    info = os.lstat(path)
    return info.st_ino, info.st_mtime_ns, path.read_bytes()


@sqlite_only
@pytest.mark.parametrize("name", ["daemon.lock", "ledger.jsonl", "daemon.log", "new.sqlite", "."])
def test_nothing_in_the_state_folder_is_a_target_even_with_force(
    root: Path, daemon: Daemon, tmp_path: Path, name: str
) -> None:
    """A lock replaced is free for a second daemon (and ``stop`` finds none); a mirror
    replaced is one the daemon goes on appending to under no name. By its own path, through a
    link to the folder from outside, as a new file, or as the folder for a dated copy."""
    daemon.submit("a row for the mirror")
    state = root / ".colibri"
    wait_until(lambda: (state / "ledger.jsonl").read_text().endswith("\n"))  # mirrored
    (state / "daemon.log").touch()
    outside = tmp_path / "state-link"
    outside.symlink_to(state)
    # (The board's own files change as the daemon commits; these change only by the copy.)
    kept = [state / "daemon.lock", state / "ledger.jsonl", state / "daemon.log"]
    before = [fingerprint(p) for p in kept]
    for target in (state / name, outside / name):
        refused = colibri(root, "backup", str(target), "--force")
        assert refused.returncode == 1
        line = one_line(refused.stderr)
        assert f"in {state}, the daemon's state folder" in line and "Traceback" not in line
    assert [fingerprint(p) for p in kept] == before
    assert sorted(p.name for p in state.iterdir() if p.name.endswith(".partial")) == []
    assert colibri(root, "stop").returncode == 0  # the daemon's lock still names it


@sqlite_only
def test_a_file_the_daemon_has_open_is_not_a_target_from_outside_its_root(
    root: Path, daemon: Daemon, tmp_path: Path
) -> None:
    """The board named by --store from a folder outside any root: the files of the daemon
    holding it are known from the process itself — here through a hard link to its mirror."""
    daemon.submit("a row for the mirror")
    mirror = root / ".colibri" / "ledger.jsonl"
    wait_until(lambda: mirror.read_text().endswith("\n"))  # mirrored
    linked = tmp_path / "ledger-copy"
    os.link(mirror, linked)
    before = fingerprint(mirror)
    refused = colibri(None, "backup", "--store", str(board_of(root)), str(linked), "--force",
                      cwd=tmp_path)  # fmt: skip
    assert refused.returncode == 1
    assert one_line(refused.stderr) == (
        f"colibri: {linked} is a file the daemon has open; it is not replaced, even with "
        "--force: give another path"
    )
    assert fingerprint(mirror) == before and linked.exists()
    assert backup(root, str(tmp_path / "copy.sqlite"))["tasks"] == 1  # elsewhere: copied


def test_a_missing_folder_is_named(root: Path) -> None:
    refused = colibri(root, "backup", str(root / "no" / "such" / "copy.sqlite"))
    assert refused.returncode == 1
    assert one_line(refused.stderr) == (
        f"colibri: the folder {root / 'no' / 'such'} does not exist; create it first"
    )


@sqlite_only
@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into a read-only folder")
def test_a_folder_it_cannot_write_is_named(root: Path, daemon: Daemon) -> None:
    folder = root / "locked"
    folder.mkdir(mode=0o500)
    refused = colibri(root, "backup", str(folder / "copy.sqlite"))
    assert one_line(refused.stderr) == (
        f"colibri: the copy to {folder / 'copy.sqlite'} failed (Permission denied); "
        "nothing was written"
    )


def test_no_board_to_copy(root: Path) -> None:
    """A root whose daemon never ran has no board yet: nothing is copied, nothing is made."""
    refused = colibri(root, "backup", str(root / "copy.sqlite"), "--json")
    assert refused.returncode == 1
    error = json.loads(refused.stdout)["error"]
    assert error["code"] == "config_error"
    assert error["message"].startswith(f"no board at {board_of(root)}")
    assert not board_of(root).exists()
    assert not (root / "copy.sqlite").exists()


@pytest.mark.parametrize(
    "content", ["sqlite of another program", "not sqlite", "empty sqlite"], ids=str
)
def test_what_is_not_a_board_is_refused(root: Path, content: str) -> None:
    store = root / "other.db"
    if content == "not sqlite":
        store.write_text("hello, I am a text file that is long enough to have a header\n" * 10)
    else:
        with contextlib.closing(sqlite3.connect(store)) as db:
            if content == "sqlite of another program":
                db.execute("CREATE TABLE things (x)")
                db.commit()
    before = store.read_bytes()
    refused = colibri(root, "backup", str(root / "copy.sqlite"), "--store", str(store))
    assert refused.returncode == 1
    line = one_line(refused.stderr)
    assert f"{store} is not a Colibri board" in line and "nothing was copied" in line
    assert store.read_bytes() == before
    assert not (root / "copy.sqlite").exists()


@sqlite_only
def test_a_link_at_the_board_is_refused(root: Path, daemon: Daemon) -> None:
    daemon.stop()
    link = root / "linked.sqlite"
    link.symlink_to(board_of(root))
    refused = colibri(root, "backup", str(root / "copy.sqlite"), "--store", str(link))
    assert "is a symbolic link" in one_line(refused.stderr)
    assert not (root / "copy.sqlite").exists()


def test_a_postgresql_board_points_to_pg_dump_and_shows_no_password(root: Path) -> None:
    (root / "colibri.jsonc").write_text(
        '{"store": {"path": "postgresql://colibri:s3cret@db.example/board"}}'
    )
    refused = colibri(root, "backup", str(root / "copy.sqlite"))
    assert refused.returncode == 1
    line = one_line(refused.stderr)
    assert "pg_dump" in line and "s3cret" not in line
    as_json = colibri(root, "backup", str(root / "copy.sqlite"), "--json")
    assert json.loads(as_json.stdout)["error"]["code"] == "config_error"
    assert not (root / "copy.sqlite").exists()


def test_backup_is_local_only(root: Path) -> None:
    """It copies this host's file: --connect after the command is a usage error."""
    refused = colibri(root, "backup", str(root / "x.sqlite"), "--connect", "tcp://127.0.0.1:9")
    assert refused.returncode == 2
    assert "--connect" in refused.stderr
    assert not (root / "x.sqlite").exists()
