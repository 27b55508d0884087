"""F3: ledger hygiene. ``ledger.jsonl`` and its rotated files are 0600 and the daemon's own;
rotating during 10,000 writes, through SIGKILLs and crashes inside a write and inside a rotation,
loses no row, doubles none and fuses none.

Real daemons, real files: the rotated files are read as bytes, oldest (``ledger.jsonl.N``) to
newest (``ledger.jsonl``), and handed to the history checker as one mirror.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import stat
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Daemon, RawConnection, wait_until
from tests.reliability import history
from tests.reliability.crash_scenarios import (
    armed,
    assert_died_at,
    mirror_path,
    restart_clean,
    store_path,
)

MIB = 1024 * 1024


def configure(root: Path, rotate_mib: float, keep: int) -> int:
    """Relaxed durability (the mirror does not depend on it, and it keeps 10,000 rows quick)."""
    (root / "colibri.jsonc").write_text(
        json.dumps(
            {
                "store": {"durability": "relaxed"},
                "ledger": {"rotate_mib": rotate_mib, "keep": keep},
            }
        )
    )
    return int(rotate_mib * MIB)


def rotated(root: Path) -> dict[int, Path]:
    """``ledger.jsonl.<n>`` files by number (not the ``.orphaned`` ones)."""
    found = {}
    for path in (root / ".colibri").iterdir():
        match = re.fullmatch(r"ledger\.jsonl\.([0-9]+)", path.name)
        if match:
            found[int(match[1])] = path
    return found


def mirror_files(root: Path) -> list[Path]:
    """Oldest first: the highest number down to ``.1``, then ``ledger.jsonl`` if it exists."""
    files = [path for _n, path in sorted(rotated(root).items(), reverse=True)]
    live = mirror_path(root)
    return files + [live] if live.exists() else files


def read_all(files: list[Path]) -> history.Mirror:
    """The files as one mirror; a torn tail in any of them counts."""
    whole = history.Mirror([], [], False)
    for path in files:
        part = history.read_mirror(path)
        whole.rows += part.rows
        whole.bad_lines += part.bad_lines
        whole.torn_tail = whole.torn_tail or part.torn_tail
    return whole


def check_mirror(root: Path, ops: list[dict[str, Any]]) -> list[int]:
    """The store against every mirror file: nothing missing, doubled, extra, fused or out of
    order; every acknowledged submission stored. Returns the mirrored seqs."""
    mirror = read_all(mirror_files(root))
    report = history.check(
        history.read_store(store_path(root)), ops=ops, mirror=mirror, check_stuck=False
    )
    assert not report.problems(), report.problems()
    return [row["seq"] for row in mirror.rows]


def burst(daemon: Daemon, prefix: str, n: int) -> list[dict[str, Any]]:
    """``n`` submissions in one write (one ledger row each); the acknowledged ones as ops, read
    until EOF if the daemon dies (a reply cut by its death is not an acknowledgement)."""
    keys = [f"{prefix}-{i}" for i in range(n)]
    conn = RawConnection(daemon.socket, timeout=60)
    ops: list[dict[str, Any]] = []
    try:
        conn.send(
            b"".join(
                json.dumps({"cmd": "submit", "id": i, "text": key, "idempotency_key": key}).encode()
                + b"\n"
                for i, key in enumerate(keys)
            )
        )
        while len(ops) < n and (line := conn.file.readline()).endswith(b"\n"):
            reply = json.loads(line)
            assert reply["ok"], reply
            ops.append(
                {
                    "op": "submit",
                    "idempotency_key": keys[reply["id"]],
                    "invoke_t": time.time(),
                    "outcome": "ok",
                    "task_id": reply["task"]["id"],
                }
            )
    except ConnectionResetError:
        pass  # the daemon died with replies unread
    finally:
        conn.close()
    return ops


def stored_rows(root: Path) -> int:
    return len(history.read_store(store_path(root), integrity_check=False).ledger)


def assert_private(files: list[Path], uid: int) -> None:
    for path in files:
        info = os.stat(path)
        assert stat.S_IMODE(info.st_mode) == 0o600, f"{path}: {oct(info.st_mode)}"
        assert info.st_uid == uid, f"{path}: owner {info.st_uid}, the daemon runs as {uid}"


def daemon_uid(daemon: Daemon) -> int:
    assert daemon.process is not None
    return os.stat(f"/proc/{daemon.process.pid}").st_uid  # the process's effective uid


def test_rows_across_rotations_and_kills_lose_nothing(root: Path) -> None:
    """Every kill of the 10,000-row soak (from outside, inside a rotation, halfway through a
    write, between the commit and the mirror's append, between bursts), with bursts of 450
    rows, five rotations or so each, up to 2,500 rows."""
    rotations_through_kills(root, burst_rows=450, rows=2_500)


@pytest.mark.slow  # a soak: 10,000 rows through a rotation every ~90
def test_10k_rows_across_rotations_and_kills_lose_nothing(root: Path) -> None:
    rotations_through_kills(root, burst_rows=1_500, rows=10_000)


def rotations_through_kills(root: Path, burst_rows: int, rows: int) -> None:
    """Bursts of ``burst_rows`` submits (twice that for the outside kill) through each kill,
    then bursts until the store holds ``rows`` ledger rows."""
    limit = configure(root, rotate_mib=0.02, keep=1000)  # ~20 KiB: a rotation per ~90 rows
    ops: list[dict[str, Any]] = []
    daemon = Daemon(root)
    daemon.start()
    try:
        ops += burst(daemon, "a", burst_rows)

        # An outside SIGKILL while a burst is being written and rotated.
        files_before = len(rotated(root))
        writer = threading.Thread(target=lambda: ops.extend(burst(daemon, "b", 2 * burst_rows)))
        writer.start()
        wait_until(lambda: len(rotated(root)) >= files_before + 3 or not writer.is_alive())
        daemon.kill()
        writer.join(timeout=30)
        daemon.start()
        check_mirror(root, ops)

        # Killed inside a rotation: ledger.jsonl renamed to .1, no new one yet.
        daemon.stop()
        daemon = armed(root, "mid-rotate", 3)
        ops += burst(daemon, "c", burst_rows)
        assert_died_at(daemon, "mid-rotate")
        assert not mirror_path(root).exists() and 1 in rotated(root)
        restart_clean(daemon)
        check_mirror(root, ops)

        # Killed halfway through a write: a torn last line, cut at start-up.
        daemon.stop()
        daemon = armed(root, "mid-mirror-write", 8)
        ops += burst(daemon, "d", burst_rows)
        assert_died_at(daemon, "mid-mirror-write")
        assert history.read_mirror(mirror_path(root)).torn_tail
        restart_clean(daemon)
        assert "torn last line" in daemon.log()
        check_mirror(root, ops)

        # Killed after the commit, before the mirror append: caught up at start-up.
        daemon.stop()
        daemon = armed(root, "before-mirror", 1)
        ops += burst(daemon, "e", burst_rows)
        assert_died_at(daemon, "before-mirror")
        restart_clean(daemon)
        check_mirror(root, ops)

        n = 0
        while n == 0 or stored_rows(root) < rows:
            ops += burst(daemon, f"f{n}", 2 * burst_rows // 3)
            if n == 0:
                daemon.restart()  # a SIGKILL between bursts
            n += 1
        uid = daemon_uid(daemon)
    finally:
        daemon.stop()

    seqs = check_mirror(root, ops)
    assert len(seqs) >= rows and seqs == list(range(1, len(seqs) + 1))
    numbers = sorted(rotated(root))
    assert len(numbers) >= rows // 200  # rotations: keep holds every file
    # A kill between two renames of a rotation leaves a number unused (the order holds, as
    # check_mirror saw); only the outside SIGKILLs can land there, the crash points do not.
    assert len(set(range(1, numbers[-1] + 1)) - set(numbers)) <= 2
    longest = max(len(line) + 1 for p in mirror_files(root) for line in p.read_bytes().splitlines())
    for number in numbers:  # each rotated at the row that passed the limit
        size = rotated(root)[number].stat().st_size
        assert limit <= size < limit + longest, (number, size)
    assert_private(mirror_files(root), uid)
    assert not list((root / ".colibri").glob("*.orphaned*"))


def test_files_beyond_keep_are_deleted_and_the_rest_stay_contiguous(root: Path) -> None:
    configure(root, rotate_mib=0.005, keep=3)  # ~5 KiB
    daemon = Daemon(root)
    daemon.start()
    try:
        burst(daemon, "a", 500)
        daemon.restart()
        burst(daemon, "b", 500)
    finally:
        daemon.stop()
    assert sorted(rotated(root)) == [1, 2, 3]
    mirror = read_all(mirror_files(root))
    assert not mirror.bad_lines and not mirror.torn_tail
    seqs = [row["seq"] for row in mirror.rows]
    total = stored_rows(root)
    assert seqs[0] > 1 and seqs == list(range(seqs[0], total + 1))  # the newest rows, in order

    configure(root, rotate_mib=0.005, keep=1)  # fewer kept: the next rotation deletes the rest
    daemon.start()
    try:
        burst(daemon, "c", 100)
    finally:
        daemon.stop()
    assert sorted(rotated(root)) == [1]


def test_rotate_on_sigusr1_and_restart_with_an_empty_ledger_jsonl(root: Path) -> None:
    configure(root, rotate_mib=0, keep=5)  # never by size
    live = mirror_path(root)
    daemon = Daemon(root)
    daemon.start()
    try:
        burst(daemon, "a", 300)
        assert rotated(root) == {}
        assert daemon.process is not None
        os.kill(daemon.process.pid, signal.SIGUSR1)
        wait_until(lambda: 1 in rotated(root))
        assert live.stat().st_size == 0
        os.kill(daemon.process.pid, signal.SIGUSR1)  # nothing to rotate: no empty .2
        wait_until(lambda: "ledger mirror not rotated" in daemon.log())
        assert sorted(rotated(root)) == [1]
        assert_private([live, rotated(root)[1]], daemon_uid(daemon))
        # ledger.jsonl is empty at start-up: the last seq comes from ledger.jsonl.1
        daemon.kill()
        live.chmod(0o644)  # a wider mode is set back at start-up
        daemon.start()
        assert live.stat().st_size == 0
        assert_private([live], daemon_uid(daemon))
        daemon.call("submit", text="one more")
    finally:
        daemon.stop()
    assert [row["seq"] for row in history.read_mirror(live).rows] == [301]
    assert check_mirror(root, []) == list(range(1, 302))


def test_a_mirror_ahead_of_a_restored_store_is_moved_aside_whole(root: Path) -> None:
    configure(root, rotate_mib=0.005, keep=100)
    backup = root / "backup"
    daemon = Daemon(root)
    daemon.start()
    try:
        burst(daemon, "a", 200)
        daemon.stop()
        backup.mkdir()
        for path in (root / ".colibri").glob("colibri.sqlite*"):
            shutil.copy2(path, backup / path.name)
        daemon.start()
        burst(daemon, "b", 300)
        daemon.stop()
        old = read_all(mirror_files(root))
        assert len(rotated(root)) > 5
        for path in (root / ".colibri").glob("colibri.sqlite*"):
            path.unlink()
        for path in backup.iterdir():  # the store restored from the backup: 200 rows
            shutil.copy2(path, root / ".colibri" / path.name)
        daemon.start()
    finally:
        daemon.stop()
    assert "ledger mirror is not the store's history (ahead of it, or another)" in daemon.log()
    # the old history, whole and in order, aside; the store's own written afresh
    aside = sorted(
        (root / ".colibri").glob("ledger.jsonl.500.orphaned.*"),
        key=lambda p: int(p.suffix[1:]),
        reverse=True,
    ) + [root / ".colibri" / "ledger.jsonl.500.orphaned"]
    assert read_all(aside).rows == old.rows
    assert [row["seq"] for row in old.rows] == list(range(1, 501))
    assert check_mirror(root, []) == list(range(1, 201))
