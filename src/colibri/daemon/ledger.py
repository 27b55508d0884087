"""``ledger.jsonl``: an append-only mirror of the store's ledger, one JSON object per line.

The store is the truth; the mirror is written after each commit and completed from the store at
start-up, so a crash between the two loses no row and writes none twice. A torn last line (a
crash mid-write) is cut off before anything is appended, never fused with the next line.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from pathlib import Path

import msgspec

from colibri.core.model import LedgerEntry
from colibri.daemon import crashpoints
from colibri.store import Store

log = logging.getLogger(__name__)

_encode = msgspec.json.Encoder().encode
_seq_only = msgspec.json.Decoder(dict[str, object])
CATCH_UP_PAGE = 10_000


class LedgerMirror:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._fd = -1
        self.last_seq = 0
        #: Set when a write failed (disk full): rows are safe in the store, and the next
        #: ``catch_up`` repairs the tail and copies them over.
        self.broken = False

    def open(self, store: Store) -> int:
        """Repair the tail, append what the store has beyond it; return rows appended."""
        self.close()
        self.broken = False
        self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        self.last_seq = self._repair_tail()
        stored = store.max_ledger_seq()
        if self.last_seq > stored:
            aside = self.path.with_name(f"{self.path.name}.{self.last_seq}.orphaned")
            log.warning(
                "ledger mirror is ahead of the store; moved aside",
                extra={"event": "ledger_mirror_ahead", "path": str(aside)},
            )
            os.close(self._fd)
            os.replace(self.path, aside)
            self._fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
            self.last_seq = 0
        appended = 0
        while True:
            rows = store.ledger(self.last_seq, CATCH_UP_PAGE)
            if not rows:
                break
            self.append(rows)
            appended += len(rows)
        return appended

    def _repair_tail(self) -> int:
        size = os.fstat(self._fd).st_size
        if size == 0:
            return 0
        block = 65536
        pos = size
        tail = b""
        while pos > 0:
            start = max(0, pos - block)
            tail = os.pread(self._fd, pos - start, start) + tail
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
            os.ftruncate(self._fd, keep)
            tail = tail[:cut]
        lines = tail.rstrip(b"\n").rsplit(b"\n", 1)
        last = lines[-1] if lines else b""
        if not last:
            return 0
        seq = _seq_only.decode(last).get("seq", 0)
        return seq if isinstance(seq, int) else 0

    def append(self, entries: Iterable[LedgerEntry]) -> None:
        data = bytearray()
        last = self.last_seq
        for entry in entries:
            if entry.seq <= last:
                continue  # already mirrored
            data += _encode(entry)
            data += b"\n"
            last = entry.seq
        if not data or self.broken:
            return
        try:
            if crashpoints.armed is not None and crashpoints.due("mid-mirror-write"):
                os.write(self._fd, crashpoints.torn(data))  # a torn line, then death
                crashpoints.crash()
            if os.write(self._fd, data) != len(data):
                raise OSError("short write (disk full?)")
        except OSError as exc:
            self.broken = True
            log.error(
                "could not append to the ledger mirror; will catch up from the store",
                extra={"event": "ledger_mirror_failed", "error": str(exc)},
            )
            return
        self.last_seq = last

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
