"""Storage faults against a real daemon: a full disk, a read-only store, a corrupt store,
other writers on the board file, and a reader that pins the WAL.

Each fault is real: a small tmpfs filled to the last block (or a file-size limit set on the
daemon process), immutable files (``chattr +i``), a read-only mount, random bytes where the
board should be, and other processes holding SQLite locks on the board.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Protocol

import pytest

from colibri.core.errors import ConnectionClosed
from colibri.store.sqlite_schema import WAL_SIZE_LIMIT
from tests.helpers import PYTHON, Daemon, one_line, run_refused, wait_until

DB_NAME = "colibri.sqlite"


# -- helpers -------------------------------------------------------------------------------------


def request(daemon: Daemon, cmd: str, **fields: Any) -> dict[str, Any]:
    """One request on a fresh connection; the reply as it came, error or not."""
    with daemon.client() as client:
        request_id = client.send(cmd, **fields)
        while True:
            reply = client.read()
            if reply.get("id") == request_id and "event" not in reply:
                return reply


def board_path(root: Path) -> Path:
    return root / ".colibri" / DB_NAME


def stored(db: Path) -> tuple[set[str], list[int]]:
    """Task ids and ledger seqs in the board file, read by a connection of our own."""
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        ids = {row[0] for row in conn.execute("SELECT id FROM tasks")}
        seqs = [row[0] for row in conn.execute("SELECT seq FROM ledger ORDER BY seq")]
    finally:
        conn.close()
    return ids, seqs


def mirrored_seqs(root: Path) -> list[int]:
    path = root / ".colibri" / "ledger.jsonl"
    return [json.loads(line)["seq"] for line in path.read_bytes().splitlines()]


def task_ids(daemon: Daemon) -> list[str]:
    return [t["id"] for t in daemon.call("list", limit=10_000)["tasks"]]


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@contextmanager
def tmpfs(path: Path, size: str, *options: str) -> Iterator[None]:
    """A tmpfs of ``size`` mounted on ``path`` (skip the test where mounting is not allowed)."""
    opts = ",".join((f"size={size}", "mode=0700", *options))
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", opts, "tmpfs", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({mounted.stderr.strip() or 'mount failed'})")
    try:
        yield
    finally:
        if subprocess.run(["umount", str(path)], capture_output=True, check=False).returncode:
            subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def chattr(flag: str, *paths: Path) -> None:
    subprocess.run(["chattr", flag, *map(str, paths)], capture_output=True, check=True)


def require_chattr(directory: Path) -> None:
    """Skip unless ``chattr +i`` works here and really stops this process from writing."""
    if shutil.which("chattr") is None:
        pytest.skip("chattr is not installed")
    probe = directory / "immutable-probe"
    probe.write_bytes(b"x")
    try:
        done = subprocess.run(["chattr", "+i", str(probe)], capture_output=True, text=True)
        if done.returncode != 0:
            pytest.skip(f"chattr +i is not supported here ({done.stderr.strip()})")
        try:
            with open(probe, "ab") as handle:
                handle.write(b"y")
        except PermissionError:
            pass
        else:
            pytest.skip("chattr +i does not stop writes here")
        finally:
            chattr("-i", probe)
    finally:
        probe.unlink()


# -- disk full -----------------------------------------------------------------------------------


_NO_SIGXFSZ = (
    "import os, signal, sys; signal.signal(signal.SIGXFSZ, signal.SIG_IGN); "
    "os.execv(sys.executable, [sys.executable, *sys.argv[1:]])"
)


class NoFsizeSignalDaemon(Daemon):
    """The daemon exec'd by a wrapper that ignores SIGXFSZ (ignored signals survive exec).

    Lowering its RLIMIT_FSIZE below the size of its files then makes every write that would
    grow a file fail with EFBIG, as a full disk does with ENOSPC, instead of killing it.
    """

    def command(self) -> list[str]:
        return [PYTHON, "-c", _NO_SIGXFSZ, *super().command()[1:]]


class DiskFull(Protocol):
    daemon: Daemon

    def fill(self) -> None: ...

    def free(self) -> None: ...


class FilledTmpfs:
    """``.colibri/`` (board, WAL, ledger, socket) on an 8 MiB tmpfs, filled by a filler file."""

    def __init__(self, root: Path) -> None:
        self.daemon: Daemon = Daemon(root)
        self.filler = root / ".colibri" / "filler"

    def fill(self) -> None:
        with open(self.filler, "wb", buffering=0) as handle:
            for chunk in (1 << 20, 4096, 512, 1):
                block = b"\0" * chunk
                while True:
                    try:
                        if handle.write(block) != chunk:
                            break
                    except OSError as exc:
                        assert exc.errno == errno.ENOSPC, exc
                        break
        free = os.statvfs(self.filler.parent)
        assert free.f_bavail == 0, "the tmpfs still has free blocks"

    def free(self) -> None:
        self.filler.unlink()


class FileSizeLimit:
    """RLIMIT_FSIZE of the running daemon lowered to 1 byte: no file of it can grow."""

    def __init__(self, root: Path) -> None:
        self.daemon: Daemon = NoFsizeSignalDaemon(root)
        self.saved: tuple[int, int] | None = None

    def fill(self) -> None:
        assert self.daemon.process is not None
        pid = self.daemon.process.pid
        self.saved = resource.prlimit(pid, resource.RLIMIT_FSIZE)
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (1, self.saved[1]))

    def free(self) -> None:
        assert self.daemon.process is not None and self.saved is not None
        resource.prlimit(self.daemon.process.pid, resource.RLIMIT_FSIZE, self.saved)


@contextmanager
def disk(kind: str, root: Path) -> Iterator[DiskFull]:
    if kind == "tmpfs":
        with tmpfs(root / ".colibri", "8m"):
            yield FilledTmpfs(root)
    else:
        yield FileSizeLimit(root)


@pytest.mark.parametrize("kind", ["tmpfs", "rlimit"])
def test_disk_full_refuses_submits_keeps_serving_and_recovers_without_loss(
    root: Path, kind: str
) -> None:
    with disk(kind, root) as full:
        daemon = full.daemon
        daemon.start()
        try:
            acked = {request(daemon, "submit", text=f"before {i}")["task"]["id"] for i in range(20)}
            assert len(acked) == 20

            full.fill()
            try:
                for i in range(20):
                    reply = request(daemon, "submit", text=f"full {i}", idempotency_key=f"k{i}")
                    assert reply["ok"] is False, reply  # never an acknowledgement
                    assert reply["error"]["code"] == "storage_unavailable", reply
                    assert request(daemon, "ping")["ok"] is True
                status = request(daemon, "status")
                assert status["ok"] is True
                assert daemon.process is not None and daemon.process.poll() is None
                ids, seqs = stored(board_path(root))
                assert ids == acked
                assert mirrored_seqs(root)[-1] <= seqs[-1], "the ledger is ahead of the store"
            finally:
                full.free()

            # Space is back: the next submit is taken (within 5 s), with nothing lost.
            started = time.monotonic()
            after = wait_until(
                lambda: (r := request(daemon, "submit", text="after")).get("ok") and r,
                timeout=5,
            )
            assert time.monotonic() - started <= 5
            acked.add(after["task"]["id"])
            # The refused submissions left nothing behind: each key makes a task now, once.
            retried = {
                request(daemon, "submit", text=f"full {i}", idempotency_key=f"k{i}")["task"]["id"]
                for i in range(20)
            }
            assert len(retried) == 20 and not retried & acked
            acked |= retried
            assert set(task_ids(daemon)) == acked

            # The mirror caught up with the store: same rows, no gap, none doubled.
            def mirror_matches() -> bool:
                return mirrored_seqs(root) == stored(board_path(root))[1]

            wait_until(mirror_matches, timeout=10)
            seqs = mirrored_seqs(root)
            assert seqs == list(range(1, len(seqs) + 1))

            # And it is all on disk: a crash and a restart find every acknowledged task.
            daemon.restart()
            assert set(task_ids(daemon)) == acked
        finally:
            if daemon.process is not None and daemon.process.poll() is None:
                daemon.process.send_signal(signal.SIGKILL)
                daemon.process.wait(timeout=10)


# -- a recovery that fails -----------------------------------------------------------------------


def test_a_rebuild_that_fails_stops_the_daemon_with_one_line_and_exit_1(root: Path) -> None:
    """A failed commit makes the daemon reload its board from the store. If that reload fails
    too (here: a row another program corrupted), the daemon must stop, saying so in one line,
    with a non-zero exit — not stay up answering nothing. Started again, it refuses in one
    line, naming the store, until the row is mended."""
    db = board_path(root)
    # A full disk, not a file-size limit: that would also keep the daemon's log from growing.
    with disk("tmpfs", root) as full:
        daemon = full.daemon
        daemon.start()
        try:
            acked = request(daemon, "submit", text="acknowledged before the fault")["task"]["id"]
            planted = sqlite3.connect(db, timeout=10)
            with planted:
                planted.execute(
                    "UPDATE tasks SET capabilities = '{not json' WHERE id = ?", (acked,)
                )
            planted.close()
            full.fill()  # the next commit fails; the reload after it reads the corrupt row
            with pytest.raises(ConnectionClosed):  # dropped, as in a crash: never acknowledged
                request(daemon, "submit", text="never acknowledged")
            assert daemon.process is not None
            assert daemon.process.wait(timeout=15) == 1
        finally:
            if daemon.process is not None and daemon.process.poll() is None:
                daemon.kill()
            full.free()
        again = run_refused(root)
        ids, _ = stored(db)
    fatal = [line for line in daemon.log().splitlines() if "the daemon stops (exit 1)" in line]
    assert len(fatal) == 1, daemon.log()
    assert "could not be reloaded from the store" in fatal[0]
    assert again.returncode == 1
    # The refusal is one line. Before it the daemon may log, at start-up, that it caught its
    # ledger mirror up: the reply to the first submit leaves before the mirror is written, so
    # the disk may have filled under that write (the store has the row; the mirror is mended).
    lines = again.stderr.strip().splitlines()
    message = one_line("\n".join(x for x in lines if x.startswith("colibri:")))
    assert all(
        re.match(r"\d\d:\d\d:\d\d info +ledger mirror caught up", x)
        for x in lines if not x.startswith("colibri:")
    ), again.stderr  # fmt: skip
    assert str(db) in message and "could not be loaded" in message, message
    assert ids == {acked}  # the acknowledged task is there; the unacknowledged one is not


# -- read-only store -----------------------------------------------------------------------------


def test_store_made_immutable_while_running_refuses_writes_then_recovers(root: Path) -> None:
    require_chattr(root)
    daemon = Daemon(root)
    daemon.start()
    db = board_path(root)
    wal = db.with_name(DB_NAME + "-wal")
    try:
        acked = {request(daemon, "submit", text=f"before {i}")["task"]["id"] for i in range(5)}
        assert wal.exists()
        chattr("+i", db, wal)
        try:
            for i in range(5):
                reply = request(daemon, "submit", text=f"read-only {i}")
                assert reply["ok"] is False, reply
                assert reply["error"]["code"] == "storage_unavailable", reply
            assert request(daemon, "status")["ok"] is True
            assert daemon.process is not None and daemon.process.poll() is None
        finally:
            chattr("-i", db, wal)
        after = wait_until(
            lambda: (r := request(daemon, "submit", text="after")).get("ok") and r, timeout=5
        )
        acked.add(after["task"]["id"])
        assert set(task_ids(daemon)) == acked
    finally:
        daemon.stop()


def test_immutable_store_at_start_up_is_a_clear_one_line_error(root: Path) -> None:
    require_chattr(root)
    daemon = Daemon(root)
    daemon.start()
    daemon.call("submit", text="kept")
    daemon.stop()
    db = board_path(root)
    before = digest(db)
    chattr("+i", db)
    try:
        done = run_refused(root)
    finally:
        chattr("-i", db)
    assert done.returncode == 1
    message = one_line(done.stderr)
    assert str(db) in message and "cannot be opened for writing" in message
    assert digest(db) == before


def test_store_on_a_read_only_mount_is_a_clear_one_line_error(root: Path) -> None:
    mount_point = root / "ro"
    mount_point.mkdir()
    db = mount_point / DB_NAME
    with tmpfs(mount_point, "8m"):
        daemon = Daemon(root, "--store", str(db))
        daemon.start()
        daemon.call("submit", text="kept")
        daemon.stop()
        before = digest(db)
        remounted = subprocess.run(
            ["mount", "-o", "remount,ro", str(mount_point)], capture_output=True, text=True
        )
        if remounted.returncode != 0:
            pytest.skip(f"cannot remount read-only here ({remounted.stderr.strip()})")
        done = run_refused(root, "--store", str(db))
        assert done.returncode == 1
        message = one_line(done.stderr)
        assert str(db) in message and "Read-only file system" in message
        assert digest(db) == before


# -- corrupt store at start-up -------------------------------------------------------------------


def test_random_bytes_as_the_board_refuse_start_and_stay_untouched(root: Path) -> None:
    db = board_path(root)
    db.write_bytes(os.urandom(64 * 1024))
    before = digest(db)
    done = run_refused(root)
    assert done.returncode == 1
    message = one_line(done.stderr)
    assert str(db) in message and "not a usable SQLite board" in message
    assert digest(db) == before
    assert not db.with_name(DB_NAME + "-wal").exists()
    assert not (root / ".colibri" / "colibri.sock").exists()


def test_an_sqlite_file_of_another_program_refuses_start_and_stays_untouched(root: Path) -> None:
    db = board_path(root)
    other = sqlite3.connect(db)
    other.execute("CREATE TABLE accounts (name TEXT, balance INTEGER)")
    other.execute("INSERT INTO accounts VALUES ('alice', 100)")
    other.commit()
    other.close()
    before = digest(db)
    done = run_refused(root)
    assert done.returncode == 1
    message = one_line(done.stderr)
    assert str(db) in message and "another program" in message
    assert digest(db) == before
    assert not db.with_name(DB_NAME + "-wal").exists()
    check = sqlite3.connect(db)
    try:
        assert check.execute("SELECT * FROM accounts").fetchall() == [("alice", 100)]
        assert check.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    finally:
        check.close()


# -- A4: other writers on the board file ---------------------------------------------------------


_WRITER = textwrap.dedent(
    """
    import json, sqlite3, sys

    db, name = sys.argv[1], sys.argv[2]
    conn = sqlite3.connect(db, isolation_level=None, timeout=5.0)
    conn.execute("PRAGMA busy_timeout=5000")
    conn.execute("PRAGMA synchronous=NORMAL")
    errors = []
    for i in range(200):
        try:
            conn.execute("BEGIN IMMEDIATE")
            conn.execute("CREATE TABLE IF NOT EXISTS scratch (writer TEXT, n INTEGER)")
            conn.execute("INSERT INTO scratch VALUES (?, ?)", (name, i))
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            errors.append(str(exc))
            if conn.in_transaction:
                conn.execute("ROLLBACK")
    conn.close()
    print(json.dumps({"errors": errors}))
    """
)


def test_other_writers_on_the_board_surface_no_errors_to_clients(daemon: Daemon) -> None:
    db = board_path(daemon.root)
    writers = [
        subprocess.Popen(
            [PYTHON, "-c", _WRITER, str(db), f"w{n}"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for n in range(4)
    ]
    replies: list[dict[str, Any]] = []
    lock = threading.Lock()

    def submitter(n: int) -> None:
        with daemon.client(timeout=30) as client:
            i = 0
            while i < 25 or any(w.poll() is None for w in writers):
                request_id = client.send("submit", text=f"client {n} task {i}")
                reply = client.read()
                assert reply["id"] == request_id
                with lock:
                    replies.append(reply)
                i += 1

    threads = [threading.Thread(target=submitter, args=(n,)) for n in range(2)]
    for thread in threads:
        thread.start()
    outputs = [w.communicate(timeout=120) for w in writers]
    for thread in threads:
        thread.join(timeout=60)
    assert not any(thread.is_alive() for thread in threads)

    failed = [r for r in replies if not r.get("ok")]
    assert failed == [], failed[:3]
    assert len(replies) >= 50
    for writer, (out, err) in zip(writers, outputs, strict=True):
        assert writer.returncode == 0, err
        assert json.loads(out) == {"errors": []}
    check = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        assert check.execute("SELECT COUNT(*) FROM scratch").fetchone()[0] == 800
    finally:
        check.close()
    assert set(task_ids(daemon)) == {r["task"]["id"] for r in replies}


# -- A5: a reader pinning the WAL ----------------------------------------------------------------


def test_wal_grows_only_while_a_reader_pins_it_and_is_cut_back_after(root: Path) -> None:
    """2,000 submits of 36 KiB while another connection holds a read transaction: the WAL
    cannot be reset under the reader, so it grows with what is written (and no further); once
    the reader ends, a few more submits checkpoint it, reset it, and cut it back to the
    journal size limit. (SQLite cannot keep the WAL small under a reader that pins it, and
    nothing shrinks it below the limit afterwards: the limit is the bound.)"""
    daemon = Daemon(root, "--durability", "relaxed")  # fsyncs play no part in WAL size
    daemon.start()
    db = board_path(root)
    wal = db.with_name(DB_NAME + "-wal")
    text = "w" * (36 * 1024)
    written = 0
    try:
        reader = sqlite3.connect(f"file:{db}?mode=ro", uri=True, isolation_level=None)
        reader.execute("BEGIN")
        assert reader.execute("SELECT COUNT(*) FROM tasks").fetchone()[0] == 0
        with daemon.client(timeout=60) as client:
            # Pipelined: one thread writes the requests while this one reads the replies.
            sender = threading.Thread(
                target=lambda: [client.send("submit", text=text) for _ in range(2000)]
            )
            sender.start()
            for request_id in range(1, 2001):
                reply = client.read()
                assert reply["id"] == request_id and reply["ok"], reply
                written += len(text)
            sender.join()
            pinned = wal.stat().st_size
        # The reader still sees its snapshot: the WAL could not be reset under it.
        assert reader.execute("SELECT COUNT(*) FROM tasks").fetchone()[0] == 0
        reader.execute("COMMIT")
        reader.close()
        # With what is written, and no further: each commit also rewrites the b-tree pages it
        # touched, the more of them the fewer submits a batch holds (a loaded machine batches
        # fewer: 2.06 times the text at one or two a batch), so three times the text.
        assert WAL_SIZE_LIMIT < pinned <= 3 * written, (pinned, written)

        sizes: list[int] = []

        def cut_back() -> bool:
            request(daemon, "submit", text="after the reader")
            sizes.append(wal.stat().st_size)
            return sizes[-1] <= WAL_SIZE_LIMIT

        wait_until(cut_back, timeout=30, interval=0.05)
        # At most the one small commit that triggers the checkpoint lands before the reset.
        assert max(sizes) <= pinned + 1024 * 1024
        assert sum(request(daemon, "status")["tasks"].values()) == 2000 + len(sizes)
    finally:
        daemon.stop()


if sys.platform != "linux":  # pragma: no cover
    pytestmark = pytest.mark.skip(reason="these faults use Linux mounts, chattr and prlimit")
