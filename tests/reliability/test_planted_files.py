"""Files planted where the daemon and the harness write, under ``.colibri/``: links to files
and folders elsewhere, folders, garbage, immutable files. Nothing outside the root is ever
written, read into the board or chmodded; the derived mirror is set aside and written anew;
what cannot be used safely is refused in one line.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from tests.helpers import Daemon, run_refused, wait_until
from tests.reliability.test_storage_faults import chattr, require_chattr
from tests.sessions.support import ECHO

STATE = ".colibri"


def fingerprint(path: Path) -> tuple[object, ...]:
    """What must not change about a file or folder outside the root."""
    info = path.lstat()
    content = path.read_bytes() if path.is_file() else tuple(sorted(os.listdir(path)))
    return (stat.S_IMODE(info.st_mode), info.st_mtime_ns, content)


def with_workspace(root: Path) -> None:
    (root / "colibri.jsonc").write_text(json.dumps(
        {"workspaces": {"w": {"session": {"command": ECHO}}}}
    ))  # fmt: skip


@pytest.fixture
def outside(tmp_path: Path) -> dict[str, Path]:
    """A file and a folder outside the root, that links will point at."""
    target_file = tmp_path / "precious.txt"
    target_file.write_text("keep me\n")
    target_file.chmod(0o644)
    target_dir = tmp_path / "elsewhere"
    target_dir.mkdir()
    (target_dir / "kept").write_text("x")
    return {"file": target_file, "dir": target_dir}


# Each name under .colibri/, and whether the daemon may still run with a link planted there
# (the derived mirror is set aside; a lock, the board's companions and the folders it keeps
# sessions and harness state in are refused, or fail what uses them, in one line).
PLANTED = [
    ("ledger.jsonl", "file", "runs"),
    ("ledger.jsonl", "dir", "runs"),
    ("ledger.jsonl.1", "file", "runs"),
    ("daemon.lock", "file", "refused"),
    ("colibri.sqlite.lock", "file", "refused"),
    ("colibri.sqlite-wal", "file", "refused"),
    ("colibri.sqlite-shm", "file", "refused"),
    ("harness", "dir", "refused"),
    ("sessions", "dir", "runs"),
    ("tmux", "dir", "runs"),
]


@pytest.mark.parametrize(("name", "kind", "expect"), PLANTED)
def test_a_link_planted_under_the_state_folder_is_never_followed(
    root: Path, outside: dict[str, Path], name: str, kind: str, expect: str
) -> None:
    with_workspace(root)
    target = outside[kind]
    before = fingerprint(target)
    (root / STATE / name).symlink_to(target)
    if expect == "refused":
        done = run_refused(root)
        assert done.returncode == 1, done.stderr
        lines = done.stderr.strip().splitlines()
        assert len(lines) == 1 and "symbolic link" in lines[0], lines
        assert "Traceback" not in done.stderr
    else:
        daemon = Daemon(root)
        daemon.start()
        try:
            task = daemon.call("submit", text="run beside a planted link", workspace="w")["task"]
            wait_until(lambda: daemon.call("get", task=task["id"])["task"]["state"] == "closed",
                       timeout=20)  # fmt: skip
            ended = daemon.call("get", task=task["id"])["task"]
            if name == "sessions":  # where task files go: each session fails, saying why
                assert ended["outcome"] == "failed" and "not a folder" in ended["error"], ended
            else:
                assert ended["outcome"] == "done", ended
        finally:
            daemon.stop()
    assert fingerprint(target) == before


def test_a_ledger_link_is_set_aside_and_the_mirror_written_anew(
    root: Path, outside: dict[str, Path]
) -> None:
    daemon = Daemon(root)
    daemon.start()
    daemon.call("submit", text="before")
    daemon.stop()
    mirror = root / STATE / "ledger.jsonl"
    mirror.unlink()
    mirror.symlink_to(outside["file"])
    daemon.start()
    try:
        daemon.call("submit", text="after")
        wait_until(lambda: mirror.is_file() and len(mirror.read_text().splitlines()) == 2)
        assert not mirror.is_symlink() and stat.S_IMODE(mirror.stat().st_mode) == 0o600
        aside = [p for p in (root / STATE).iterdir() if p.name.endswith(".aside")]
        assert len(aside) == 1 and aside[0].is_symlink()
        assert "set aside" in daemon.log()
    finally:
        daemon.stop()
    assert outside["file"].read_text() == "keep me\n"
    assert stat.S_IMODE(outside["file"].stat().st_mode) == 0o644


@pytest.mark.parametrize(
    "last_line",
    [b"not json at all\n", b'{"seq": "x"\n', b"[1,2,3]\n", b'{"no": "seq"}\n', b'{"seq": -5}\n'],
)
def test_a_mirror_whose_last_line_is_not_a_row_is_set_aside(root: Path, last_line: bytes) -> None:
    daemon = Daemon(root)
    daemon.start()
    daemon.call("submit", text="kept in the store")
    daemon.stop()
    mirror = root / STATE / "ledger.jsonl"
    with open(mirror, "ab") as handle:
        handle.write(last_line)
    daemon.start()
    try:
        rows = [json.loads(line) for line in mirror.read_bytes().splitlines()]
        assert [r["seq"] for r in rows] == [1]
    finally:
        daemon.stop()


def test_an_immutable_mirror_does_not_stop_the_board(root: Path) -> None:
    require_chattr(root)
    daemon = Daemon(root)
    daemon.start()
    daemon.stop()
    mirror = root / STATE / "ledger.jsonl"
    mirror.write_bytes(b"")
    chattr("+i", mirror)
    try:
        daemon.start()
        try:
            task = daemon.call("submit", text="the board works on")["task"]
            assert daemon.call("get", task=task["id"])["task"]["state"] == "pending"
            assert "cannot write the ledger mirror" in daemon.log()
        finally:
            daemon.stop()
    finally:
        chattr("-i", mirror)


def test_harness_logs_are_private(root: Path) -> None:
    with_workspace(root)
    daemon = Daemon(root)
    daemon.start()
    try:
        log = root / STATE / "harness" / "w.log"
        wait_until(log.exists)
        assert stat.S_IMODE(log.stat().st_mode) == 0o600
    finally:
        daemon.stop()


def test_a_planted_harness_log_link_is_not_written_through(
    root: Path, outside: dict[str, Path]
) -> None:
    with_workspace(root)
    (root / STATE / "harness").mkdir(mode=0o700)
    (root / STATE / "harness" / "w.log").symlink_to(outside["file"])
    before = fingerprint(outside["file"])
    daemon = Daemon(root)
    daemon.start()
    try:
        task = daemon.call("submit", text="logs nowhere, runs anyway", workspace="w")["task"]
        wait_until(lambda: daemon.call("get", task=task["id"])["task"]["outcome"] == "done",
                   timeout=20)  # fmt: skip
        assert "cannot open the harness log" in daemon.log()
    finally:
        daemon.stop()
    assert fingerprint(outside["file"]) == before


def test_a_state_folder_that_is_a_file_is_one_line(root: Path) -> None:
    state = root / STATE
    for child in state.iterdir():
        child.unlink() if not child.is_dir() else None
    os.rmdir(state)
    state.write_text("not a folder")
    done = run_refused(root)
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize(
    ("name", "expect"),
    [
        ("ledger.jsonl", "runs"),
        ("harness/w.log", "runs"),
        ("sessions/w.12345.pgid", "runs"),
        ("daemon.lock", "refused"),
        ("colibri.sqlite.lock", "refused"),
    ],
)
def test_a_fifo_planted_under_the_state_folder_blocks_nothing(
    root: Path, name: str, expect: str
) -> None:
    """Opening a FIFO blocks until its other end is opened: one planted where the daemon or
    a harness opens a file must be refused at once, not hang the daemon's loop."""
    with_workspace(root)
    planted = root / STATE / name
    planted.parent.mkdir(mode=0o700, exist_ok=True)
    os.mkfifo(planted, 0o600)
    if expect == "refused":
        done = run_refused(root)
        assert done.returncode == 1 and len(done.stderr.strip().splitlines()) == 1, done.stderr
        return
    daemon = Daemon(root)
    daemon.start(timeout=20)
    try:
        task = daemon.call("submit", text="beside a fifo", workspace="w")["task"]
        wait_until(lambda: daemon.call("get", task=task["id"])["task"]["outcome"] == "done",
                   timeout=20)  # fmt: skip
        assert daemon.call("ping")["pong"] is True
    finally:
        daemon.stop()
