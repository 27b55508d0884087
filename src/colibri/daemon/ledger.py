"""``ledger.jsonl``: an append-only mirror of the store's ledger, one JSON object per line.

One file per tenant, as each tenant's ledger is numbered on its own: ``ledger.jsonl`` holds
the ``default`` tenant's rows, ``ledger.<tenant>.jsonl`` another's, each in its ``seq`` order
with no gap (``daemon/mirrors.py``; what follows is said of each file).

The store is the truth; the mirror is written after each commit and completed from the store at
start-up, so a crash between the two loses no row and writes none twice. A torn last line (a
crash mid-write) is cut off before anything is appended, never fused with the next line.

The daemon rotates the mirror itself — past ``ledger.rotate_mib``, or on SIGUSR1 — by renames
only: ``ledger.jsonl.1`` → ``.2`` …, ``ledger.jsonl`` → ``.1``, then a new ``ledger.jsonl``.
Nothing is copied or truncated, so no row can fall between two files, and the files read
oldest (highest number) to newest, then ``ledger.jsonl``, give every row once, in order. A
crash between two renames leaves at most a missing number, never a reordering; a crash before
the new file exists leaves none, and start-up reads the last ``seq`` from the newest rotated
file.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Iterable
from pathlib import Path

import msgspec

from colibri.core.errors import RootError, StorageUnavailable
from colibri.core.model import DEFAULT_TENANT, LedgerEntry
from colibri.daemon import crashpoints
from colibri.daemon.clock import Clock, SystemClock
from colibri.privatefiles import open_private
from colibri.store import Store

log = logging.getLogger(__name__)

_encode = msgspec.json.Encoder().encode
_seq_only = msgspec.json.Decoder(dict[str, object])
CATCH_UP_PAGE = 10_000
#: A broken mirror (disk full, a file that cannot be replaced) is tried again this often.
REPAIR_EVERY = 5.0
_NUMBER = re.compile(r"[0-9]+")


def _last_row(lines: bytes | bytearray) -> dict[str, object] | None:
    """The last of these whole lines, decoded; None if there is none."""
    end = len(lines)
    while end and lines[end - 1] == 0x0A:  # newline
        end -= 1
    if not end:
        return None
    row = _seq_only.decode(lines[lines.rfind(b"\n", 0, end) + 1 : end])
    seq = row.get("seq")
    if not isinstance(seq, int) or isinstance(seq, bool) or seq < 1:
        raise ValueError("its last line has no seq")  # not a row of ours: set aside
    return row


def _last_seq(lines: bytes | bytearray) -> int | None:
    """The ``seq`` of the last of these whole lines; None if there is none."""
    row = _last_row(lines)
    return None if row is None else _seq_of(row)


def _seq_of(row: dict[str, object]) -> int:
    seq = row["seq"]
    assert isinstance(seq, int)  # (``_last_row`` refuses a row without one)
    return seq


class LedgerMirror:
    """One tenant's mirror file."""

    def __init__(
        self,
        path: Path,
        rotate_bytes: int = 0,
        keep: int = 5,
        clock: Clock | None = None,
        tenant: str = DEFAULT_TENANT,
    ) -> None:
        self.path = path
        self.tenant = tenant
        #: For when a broken mirror is tried again, and the names of files set aside.
        self.clock: Clock = clock or SystemClock()
        #: Rotate once ``ledger.jsonl`` has at least this many bytes; 0 never.
        self.rotate_bytes = rotate_bytes
        #: Rotated files kept: ``ledger.jsonl.1`` to ``ledger.jsonl.<keep>``.
        self.keep = keep
        self._fd = -1
        self._size = 0
        self.last_seq = 0
        #: The last line of the file at its opening, decoded (None: empty, or not read yet).
        self._last_line: dict[str, object] | None = None
        #: Set when a write failed (disk full): rows are safe in the store, and the next
        #: ``catch_up`` repairs the tail and copies them over.
        self.broken = False
        #: Monotonic time before which a broken mirror is not tried again.
        self.retry_at = 0.0

    def open(self, store: Store) -> int:
        """Repair the tail, append what the store has beyond it; return rows appended.

        The mirror is derived from the store, so nothing found here may keep the daemon from
        starting: a ``ledger.jsonl`` that is a link, a folder or not ours, or whose last line
        is not a ledger row, is set aside (renamed, never followed or read) and written anew
        from the store; one that cannot even be set aside (immutable) leaves the mirror
        ``broken`` — said in the log, retried later — while the board runs on."""
        self.close()
        self.broken = False
        self.retry_at = 0.0
        self._last_line = None
        try:
            last = self._open_checked()
        except (OSError, RootError) as exc:
            self._failed("cannot write the ledger mirror", exc)
            return 0
        if last is None:  # nothing in ledger.jsonl: a rotation just began it, or none has
            last = self._newest_rotated_seq()
        self.last_seq = last or 0
        try:
            return self._catch_up(store)
        except StorageUnavailable as exc:
            # Not caught up: appending the next rows would leave a gap. Tried again later.
            self._failed("cannot catch the ledger mirror up", exc)
            raise

    def _catch_up(self, store: Store) -> int:
        if self.last_seq and not self._follows(store):
            self._move_aside()
        if self.rotate_bytes and self._size >= self.rotate_bytes:
            self.rotate()  # killed between the write that passed the limit and its rotation
        appended = 0
        while True:
            rows = store.ledger({self.tenant: self.last_seq}, CATCH_UP_PAGE, tenant=self.tenant)
            if not rows:
                break
            self.append(rows)
            appended += len(rows)
        return appended

    def _open_checked(self) -> int | None:
        """Open ``ledger.jsonl`` and cut a torn tail; the last row's ``seq`` (None if empty).
        What is not a mirror file of ours is set aside first."""
        try:
            self._open_live()
        except (OSError, RootError) as exc:
            self._set_aside(str(exc))
            self._open_live()
            return None
        try:
            return self._repair_tail(self._fd)
        except (msgspec.DecodeError, ValueError) as exc:
            self._set_aside(f"its last line is not a ledger row ({exc})")
            self._open_live()
            return None

    def _set_aside(self, why: str) -> None:
        """Rename ``ledger.jsonl`` (whatever it is: a link is renamed, not followed) out of
        the way; OSError if even that fails."""
        self.close()
        aside = self.path.with_name(f"{self.path.name}.{int(self.clock.time() * 1000)}.aside")
        os.rename(self.path, aside)
        log.warning(
            f"{self.path.name} {why}; set aside, and written anew from the store",
            extra={"event": "ledger_mirror_set_aside", "path": str(aside)},
        )

    def _open_live(self) -> None:
        # 0600 whatever the umask or an earlier chmod: the ledger is the daemon user's alone
        self._fd = open_private(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND)
        self._size = os.fstat(self._fd).st_size

    def repair_due(self, now: float) -> bool:
        """Whether a broken mirror should be tried again (at most every REPAIR_EVERY s)."""
        return self.broken and now >= self.retry_at

    def _move_aside(self) -> None:
        """The mirror's last row is not the store's (the mirror is ahead of the store, or of
        another store, one restored from a backup, or rows numbered before each tenant's ledger
        was numbered on its own): it is another history, so all of it goes aside and the
        store's is written afresh."""
        aside = self.path.with_name(f"{self.path.name}.{self.last_seq}.orphaned")
        log.warning(
            "ledger mirror is not the store's history (ahead of it, or another); moved aside",
            extra={"event": "ledger_mirror_ahead", "path": str(aside)},
        )
        self.close()
        os.replace(self.path, aside)
        for number, path in self.rotated():
            os.replace(path, f"{aside}.{number}")
        self._open_live()
        self.last_seq = 0

    def rotated(self) -> list[tuple[int, Path]]:
        """The rotated files there are, newest (lowest number) first."""
        prefix = f"{self.path.name}."
        found = []
        for name in os.listdir(self.path.parent):
            if name.startswith(prefix) and _NUMBER.fullmatch(name, len(prefix)):
                found.append((int(name[len(prefix) :]), self.path.with_name(name)))
        return sorted(found)

    def _newest_rotated_seq(self) -> int | None:
        for _number, path in self.rotated():
            try:
                fd = open_private(path, os.O_RDWR)
            except (OSError, RootError) as exc:
                log.warning(
                    "a rotated ledger file is not usable; skipped",
                    extra={"event": "ledger_rotated_skipped", "path": str(path), "error": str(exc)},
                )
                continue
            try:
                last = self._repair_tail(fd)
            except (msgspec.DecodeError, ValueError):
                last = None  # not rows of ours at its end: an older file may say
            finally:
                os.close(fd)
            if last is not None:
                return last
        return None

    def _follows(self, store: Store) -> bool:
        """Whether the file's last row is the store's row of its seq: if not, the file is of
        another history (ahead of the store, another board, one restored from a backup, or
        rows numbered before the ledger was numbered per tenant)."""
        found = store.ledger({self.tenant: self.last_seq - 1}, 1, tenant=self.tenant)
        if not found or found[0].seq != self.last_seq:
            return False
        stored = found[0]
        row = self._last_line
        if row is None:
            return True
        same = all(row.get(name) == getattr(stored, name) for name in ("at", "task", "to_state"))
        return same and row.get("tenant", self.tenant) == self.tenant

    def _repair_tail(self, fd: int) -> int | None:
        """Cut a torn last line; the last line's ``seq``, or None if no line is left (the
        line itself kept in ``_last_line``)."""
        size = os.fstat(fd).st_size
        if size == 0:
            return None
        block = 65536
        pos = size
        tail = b""
        while pos > 0:
            start = max(0, pos - block)
            tail = os.pread(fd, pos - start, start) + tail
            pos = start
            if tail.count(b"\n") >= 2 or (pos == 0):
                break
        cut = tail.rfind(b"\n") + 1  # keep up to the last newline
        if cut < len(tail):
            keep = pos + cut
            log.warning(
                "ledger mirror had a torn last line; cut it off",
                extra={"event": "ledger_torn_tail", "bytes": size - keep},
            )
            os.ftruncate(fd, keep)
            if fd == self._fd:
                self._size = keep
            tail = tail[:cut]
        self._last_line = _last_row(tail)
        return None if self._last_line is None else _seq_of(self._last_line)

    def append(self, entries: Iterable[LedgerEntry]) -> None:
        if self.broken:
            return
        data = bytearray()
        last = self.last_seq
        for entry in entries:
            if entry.seq <= last:
                continue  # already mirrored
            data += _encode(entry)
            data += b"\n"
            last = entry.seq
        limit = self.rotate_bytes
        while limit and data and self._size + len(data) >= limit:
            # rotate at the row that passes the limit, not at the end of a long catch-up
            cut = data.index(b"\n", max(0, limit - self._size - 1)) + 1
            head = data[:cut]
            if not self._write(head, _last_seq(head) or last) or not self.rotate():
                return
            del data[:cut]
        if data:
            self._write(data, last)

    def _write(self, data: bytearray, last: int) -> bool:
        try:
            if crashpoints.armed is not None and crashpoints.due("mid-mirror-write"):
                os.write(self._fd, crashpoints.torn(data))  # a torn line, then death
                crashpoints.crash()
            if os.write(self._fd, data) != len(data):
                raise OSError("short write (disk full?)")
        except OSError as exc:
            self._failed("could not append to the ledger mirror", exc)
            return False
        self._size += len(data)
        self.last_seq = last
        return True

    def rotate(self) -> bool:
        """``ledger.jsonl`` becomes ``ledger.jsonl.1`` (older files one number up, those past
        ``keep`` deleted) and a new, empty ``ledger.jsonl`` is started. False if there was
        nothing to rotate or it failed (then ``broken``: the next commit repairs it)."""
        if self._fd < 0 or self.broken or self._size == 0:
            return False  # an empty rotated file would hide the last seq from start-up
        try:
            for number, path in reversed(self.rotated()):  # oldest first: nothing overwritten
                if number >= self.keep:
                    os.unlink(path)
                else:
                    os.rename(path, path.with_name(f"{self.path.name}.{number + 1}"))
            os.rename(self.path, self.path.with_name(f"{self.path.name}.1"))
            crashpoints.hit("mid-rotate")
            self.close()
            self._open_live()
        except (OSError, RootError) as exc:
            self._failed("could not rotate the ledger mirror", exc)
            return False
        log.info(
            "ledger mirror rotated",
            extra={"event": "ledger_rotated", "seq": self.last_seq, "keep": self.keep},
        )
        return True

    def _failed(self, message: str, exc: Exception) -> None:
        self.broken = True
        self.retry_at = self.clock.monotonic() + REPAIR_EVERY
        log.error(
            f"{message}; will catch up from the store",
            extra={"event": "ledger_mirror_failed", "error": str(exc)},
        )

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
