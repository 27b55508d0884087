"""``colibri backup``: a consistent copy of an SQLite board, taken while its daemon runs.

The copy is SQLite's online backup (``sqlite3.Connection.backup``) from a connection that holds
one read transaction for the whole copy: in WAL mode a reader never blocks the daemon's writes
and sees one snapshot, so the copy is the board as of one commit, and the daemon committing
meanwhile does not make the backup start over (without the held snapshot, every commit by
another process restarts it, and a busy board is never copied). The pages go over in steps
with a short pause between them, so the copy's reads leave the disk to the daemon's fsyncs.
What the held snapshot costs the daemon: its WAL cannot be checkpointed past the snapshot
while the copy runs, so it grows by what is committed meanwhile, and is cut back after.

The copy is written beside its target under a temporary name, 0600, checked
(``quick_check``), synced, and only then given its name, so a crash never leaves half a backup
under the name; an existing file is replaced only when asked (``force``).
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import sqlite3
import stat
import time
from collections.abc import Collection
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.request import pathname2url

from colibri.core import cursor
from colibri.core.errors import ConfigError, FileExists, OsFailure
from colibri.core.leases import is_postgres
from colibri.store import sql
from colibri.store.sqlite_schema import APPLICATION_ID, COMPANIONS, refuse_links

#: Pages copied per step (4 MiB with SQLite's default 4 KiB pages), and the pause after each.
PAGES_PER_STEP = 1024
PAUSE_BETWEEN_STEPS = 0.005
_Q = sql.load("sqlite")
#: What link(2) says on a file system that has no hard links.
_NO_HARD_LINKS = (errno.EPERM, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EXDEV)


@dataclass(frozen=True, slots=True)
class BackupCopy:
    """What ``backup_board`` wrote, read back from the copy itself."""

    path: str
    board: str
    tasks: int
    ledger_rows: int
    #: Where its ledger stands: each tenant's highest seq (``acme:5,default:120``).
    ledger_at: str
    schema_version: int
    bytes: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def backup_board(
    location: str,
    target: str,
    *,
    force: bool = False,
    pages_per_step: int = PAGES_PER_STEP,
    keep_out: Collection[Path] = (),
    held: Collection[tuple[int, int]] = (),
) -> BackupCopy:
    """Copy the SQLite board at ``location`` to ``target`` (a file, or a folder to put a
    ``colibri-<UTC time>.sqlite`` in), whether or not a daemon has the board open.

    ``keep_out``: folders the copy may not go into, links resolved (the root's ``.colibri``);
    ``held``: the files, as (device, inode), it may not replace (those the daemon has open).
    Replacing one would not even stop the daemon: it would go on writing the file it has open,
    under no name, and a lock replaced so is free for a second daemon.

    :raises ConfigError: a PostgreSQL board (that is pg_dump's work); no board at
        ``location``, or one that is not a Colibri board; ``target`` is the board itself, in
        ``keep_out`` or ``held``.
    :raises FileExists: ``target`` exists and ``force`` is false, or it is not a file.
    :raises OsFailure: ``target``'s folder is missing, or the copy could not be written.
    """
    if is_postgres(location):
        raise ConfigError(
            "the board is a PostgreSQL database: back it up with pg_dump "
            "(see docs/OPERATIONS.md); colibri backup copies SQLite boards"
        )
    destination = _destination(Path(location), Path(target), force, keep_out, held)
    source = _open_board(location)
    partial = destination.with_name(f".{destination.name}.{secrets.token_hex(6)}.partial")
    created = False
    try:
        try:
            _create_private(partial)
            created = True
            _copy(source, partial, pages_per_step)
        finally:
            source.close()
        tasks, ledger_rows, ledger_at, version = _check_copy(partial)
        size = _sync(partial)
        _publish(partial, destination, force)
    except (sqlite3.Error, OSError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise OsFailure(f"the copy to {destination} failed ({why}); nothing was written") from None
    finally:
        for companion in COMPANIONS if created else ():
            with contextlib.suppress(FileNotFoundError):
                os.unlink(f"{partial}{companion}")
    return BackupCopy(
        path=str(destination), board=location, tasks=tasks, ledger_rows=ledger_rows,
        ledger_at=ledger_at, schema_version=version, bytes=size,
    )  # fmt: skip


def _destination(
    board: Path,
    target: Path,
    force: bool,
    keep_out: Collection[Path],
    held: Collection[tuple[int, int]],
) -> Path:
    """The path to write: ``target``, or a new name in it if it is a folder."""
    target = target.expanduser().absolute()
    if target.is_dir() and not target.is_symlink():
        target = target / time.strftime("colibri-%Y%m%dT%H%M%SZ.sqlite", time.gmtime())
    if not target.parent.is_dir():
        raise OsFailure(f"the folder {target.parent} does not exist; create it first")
    real = os.path.realpath(target)
    if any(real == os.path.realpath(f"{board}{c}") for c in (*COMPANIONS, ".lock")):
        raise ConfigError(f"{target} is the board itself (or a file of it); give another path")
    for folder in keep_out:
        inside = os.path.realpath(folder)
        if real == inside or real.startswith(inside.rstrip(os.sep) + os.sep):
            raise ConfigError(
                f"{target} is in {folder}, the daemon's state folder, whose files are the "
                "daemon's alone (even with --force); give a path outside it"
            )
    try:
        info = os.lstat(target)
    except FileNotFoundError:
        return target
    if (info.st_dev, info.st_ino) in held:
        raise ConfigError(
            f"{target} is a file the daemon has open; it is not replaced, even with --force: "
            "give another path"
        )
    if not stat.S_ISREG(info.st_mode):
        raise FileExists(f"{target} exists and is not a file; it is not replaced, even with "
                         "--force: move it away or give another path")  # fmt: skip
    if not force:
        raise _exists(target)
    return target


def _exists(path: Path) -> FileExists:
    return FileExists(f"{path} exists already; pass --force to replace it")


def _open_board(location: str) -> sqlite3.Connection:
    """A connection to the board that writes nothing and creates no file in its place."""
    refuse_links(location)
    if not os.path.isfile(location):
        raise ConfigError(
            f"no board at {location} (nothing to back up): check --root, --store or store.path"
        )
    uri = f"file:{pathname2url(location)}?mode=rw"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
    try:
        conn.execute("PRAGMA busy_timeout=5000")
        app_id = conn.execute("PRAGMA application_id").fetchone()[0]
        version = conn.execute("PRAGMA user_version").fetchone()[0]
    except sqlite3.Error as exc:
        conn.close()
        raise ConfigError(
            f"{location} is not a Colibri board ({exc}); nothing was copied"
        ) from None
    if app_id != APPLICATION_ID or version < 1:
        conn.close()
        raise ConfigError(f"{location} is not a Colibri board; nothing was copied")
    return conn


def _create_private(path: Path) -> None:
    """A new file of ours, 0600 whatever the umask: never through a link, never one that was
    there before."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
    finally:
        os.close(fd)


def _copy(source: sqlite3.Connection, partial: Path, pages_per_step: int) -> None:
    target = sqlite3.connect(partial, isolation_level=None)
    try:
        # One snapshot for the whole copy (see the module's docstring).
        source.execute("BEGIN")
        source.execute("SELECT COUNT(*) FROM sqlite_master").fetchone()
        source.backup(
            target,
            pages=pages_per_step,
            progress=lambda _status, _remaining, _total: time.sleep(PAUSE_BETWEEN_STEPS),
        )
        source.execute("COMMIT")
        # The copy stands alone: no WAL beside it, whatever the board's journal mode.
        target.execute("PRAGMA journal_mode=DELETE")
    finally:
        target.close()


def _check_copy(partial: Path) -> tuple[int, int, str, int]:
    """The copy's tasks, ledger rows, where its ledger stands and its schema version, once
    SQLite found it whole."""
    with contextlib.closing(sqlite3.connect(partial, isolation_level=None)) as copy:
        verdict = copy.execute("PRAGMA quick_check").fetchone()[0]
        if verdict != "ok":
            raise OsFailure(f"the copy is damaged ({verdict}); nothing was written")
        tasks, ledger_rows = copy.execute(_Q["backup_counts"]).fetchone()
        at = cursor.render(dict(copy.execute(_Q["ledger_heads"]).fetchall()))
        version = copy.execute("PRAGMA user_version").fetchone()[0]
    return int(tasks), int(ledger_rows), at, int(version)


def _sync(path: Path) -> int:
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        os.fsync(fd)
        return os.fstat(fd).st_size
    finally:
        os.close(fd)


def _publish(partial: Path, destination: Path, force: bool) -> None:
    """Give the synced copy its name, atomically; without ``force``, never over a file that
    appeared meanwhile (a hard link fails on it where a rename would replace it)."""
    if force:
        os.replace(partial, destination)
    else:
        try:
            os.link(partial, destination)
        except FileExistsError:
            raise _exists(destination) from None
        except OSError as exc:
            if exc.errno not in _NO_HARD_LINKS:
                raise
            # A file system without hard links: a rename, after one more look.
            if os.path.lexists(destination):
                raise _exists(destination) from None
            os.rename(partial, destination)
        else:
            os.unlink(partial)
    fd = os.open(destination.parent, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)  # the new name, durable
    finally:
        os.close(fd)
