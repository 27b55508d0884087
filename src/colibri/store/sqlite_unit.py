"""The SQLite store's unit of work: a batch is one ``BEGIN IMMEDIATE`` … ``COMMIT`` on the file.

Durability: ``synchronous=FULL`` by default, so a committed (and so acknowledged) task survives
power loss; ``relaxed`` durability (``synchronous=NORMAL``) survives a process crash only.
Writes open with ``BEGIN IMMEDIATE`` so a writer never upgrades a read lock and deadlocks; the
daemon commits many requests at once (group commit), so the fsync is paid once per batch.
``journal_size_limit`` bounds the WAL file after each checkpoint. A storage fault (a full
disk, an I/O error) loses the whole batch until ``rollback``; a COMMIT whose sync failed
leaves the batch in doubt until a synced commit of the store's own settles it (``_settle``).
"""

from __future__ import annotations

import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from colibri.core.errors import StorageUnavailable
from colibri.core.model import LedgerEntry
from colibri.store import sql
from colibri.store.rows import ledger_values
from colibri.store.sqlite_schema import open_board

#: The named statements of ``sql/sqlite.sql``, by name.
_Q = sql.load("sqlite")

#: SQLite result codes that mean the storage, not the statement, is at fault.
_STORAGE_CODES = (
    "SQLITE_FULL", "SQLITE_IOERR", "SQLITE_READONLY", "SQLITE_CANTOPEN", "SQLITE_BUSY",
    "SQLITE_LOCKED", "SQLITE_NOMEM", "SQLITE_PROTOCOL", "SQLITE_CORRUPT", "SQLITE_NOTADB",
)  # fmt: skip


def _is_storage_fault(exc: sqlite3.Error) -> bool:
    return str(getattr(exc, "sqlite_errorname", "")).startswith(_STORAGE_CODES)


def _storage_error(exc: sqlite3.Error) -> StorageUnavailable:
    return StorageUnavailable(f"the board's store could not write ({exc}); nothing was changed")


#: SQLite's extended code for a failed fsync (``SQLITE_IOERR_FSYNC``): at a COMMIT in WAL mode
#: the batch's frames, commit frame included, are in the WAL file already, and a crash before
#: the next commit would let recovery replay them.
_FSYNC_FAILED = 1034
_IN_DOUBT = (
    "the disk did not confirm this batch ({why}), so whether it was written is not known until "
    "the board's store can write again; retry with the same idempotency key, or look the task "
    "up once the daemon serves again"
)

#: A batch written to whose transaction SQLite rolled back by itself.
_ROLLED_BACK_BY_SQLITE = (
    "the board's store lost the batch it was writing (an I/O error or a full disk); nothing "
    "was changed"
)


class SqliteUnitOfWork:
    """A ``SqliteStore``'s batches: opened at the first write, their ledger rows numbered and
    written together, committed, or lost as a whole and rolled back."""

    def __init__(self, location: str, *, durability: str = "full") -> None:
        self.location = location
        self._conn = open_board(location, durability)
        #: Whether the open batch has written (see ``commit``), and why it was lost if a
        #: storage fault rolled it back (then nothing is written or committed until
        #: ``rollback``).
        self._dirty = False
        self._lost = ""
        #: Why a batch whose COMMIT's sync failed is still in doubt ("" when none is).
        self._in_doubt = ""
        #: The highest ledger seq of each tenant the open batch has written rows of (read from
        #: ``ledger_heads`` at its first), and the batch's ledger rows, numbered but not yet
        #: written: they go in one ``executemany`` before the commit, or before a read of the
        #: ledger, and the heads after them.
        self._heads: dict[str, int] = {}
        self._unsent: list[tuple[Any, ...]] = []

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        if self._lost:
            raise StorageUnavailable(self._lost)
        if self._dirty and not self._conn.in_transaction:
            # SQLite rolled the batch back by itself (an I/O error or a full disk met by a
            # read): what it wrote is gone, so nothing more may be written into a new
            # transaction and committed as if the batch were whole.
            self._lose_batch(_ROLLED_BACK_BY_SQLITE)
        try:
            if not self._conn.in_transaction:
                self._conn.execute("BEGIN IMMEDIATE")
            self._dirty = True
            yield self._conn
        except sqlite3.OperationalError as exc:
            if not _is_storage_fault(exc):
                raise  # a bug in a statement, not a storage problem: reported as internal
            # The batch's earlier writes are gone with it: until the caller gives the batch
            # up (``rollback``), nothing more is written and nothing commits — a write that
            # came after it must not commit on its own and pass for the whole batch.
            self._abort()
            error = _storage_error(exc)
            self._lost = error.message
            raise error from None

    def commit(self) -> None:
        if self._lost:
            raise StorageUnavailable(self._lost)
        if not self._conn.in_transaction:
            if self._dirty:
                # Written to, and no transaction left to commit: SQLite rolled it back by
                # itself (an I/O error or a full disk met by a read's cache spill, say). The
                # writes are gone: say so, never let them be acknowledged.
                self._dirty = False
                self._forget_ledger()
                raise StorageUnavailable(_ROLLED_BACK_BY_SQLITE)
            return
        try:
            self._send_ledger()
            self._conn.execute("COMMIT")
            self._dirty = False
        except sqlite3.Error as exc:
            self.rollback()
            if getattr(exc, "sqlite_errorcode", None) == _FSYNC_FAILED:
                # Written to the WAL, not confirmed on disk: neither committed nor not, as far
                # as the daemon can tell. Settled (a later commit overwrites its frames), it
                # did not happen; until then it is in doubt, and nothing is read again.
                self._in_doubt = _IN_DOUBT.format(why=exc)
                if not self._settle():
                    raise StorageUnavailable(self._in_doubt) from None
            raise _storage_error(exc) from None
        self._heads.clear()

    def commit_aside(self) -> None:
        # A local commit costs no round trip that another thread could wait out.
        self.commit()

    def _settle(self) -> bool:
        """After a COMMIT whose sync failed: commit a write of our own, synced. Its frames go
        where the failed batch's are (SQLite writes at the end of what it knows committed), so
        once it is on disk no recovery can replay the failed batch: it did not happen. True
        then; False while the disk still fails (the batch stays in doubt)."""
        try:
            self._conn.execute("BEGIN IMMEDIATE")
            self._conn.execute(_Q["put_settled"], (f"{time.time():.6f}".encode(),))
            self._conn.execute("COMMIT")
        except sqlite3.Error:
            self._abort()
            return False
        self._in_doubt = ""
        return True

    def rollback(self) -> None:
        self._dirty = False
        self._lost = ""
        self._abort()
        if self._in_doubt and not self._settle():
            # Read again now, the board could hold a batch that a crash would bring back.
            raise StorageUnavailable(self._in_doubt)

    def reachable(self) -> None:
        return  # a file on this host: whether it can be written, the next batch says

    def heed_deadline(self, deadline: Callable[[], float]) -> None:
        return  # no lease: a board of SQLite is this host's alone

    def _lose_batch(self, why: str) -> None:
        """Give the open batch up: nothing of it commits until ``rollback``."""
        self._abort()
        self._lost = why
        raise StorageUnavailable(why)

    def _forget_ledger(self) -> None:
        self._heads.clear()
        self._unsent.clear()

    def _abort(self) -> None:
        self._forget_ledger()
        if self._conn.in_transaction:
            try:
                self._conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass  # SQLite may already have rolled back by itself (e.g. on SQLITE_FULL)

    def close(self) -> None:
        try:
            self.rollback()
        except sqlite3.ProgrammingError:
            return  # already closed
        self._conn.close()

    def _ledger(self, conn: sqlite3.Connection, entry: LedgerEntry) -> LedgerEntry:
        """Number a ledger row (one more than its tenant's highest: the batch holds the write
        lock, so nobody else numbers meanwhile) and keep it for ``_send_ledger``."""
        head = self._heads.get(entry.tenant)
        if head is None:
            found = conn.execute(_Q["ledger_head"], (entry.tenant,)).fetchone()
            head = int(found[0]) if found else 0
        entry.seq = self._heads[entry.tenant] = head + 1
        self._unsent.append((entry.seq, *ledger_values(entry)))
        return entry

    def _send_ledger(self) -> None:
        """Write the batch's numbered ledger rows, all in one ``executemany`` (one prepared
        statement stepped in C, not a Python call per row)."""
        if self._unsent:
            rows, self._unsent = self._unsent, []
            self._conn.executemany(_Q["insert_ledger"], rows)
            self._conn.executemany(_Q["ledger_set_head"], self._heads.items())

    def _ledger_read(self) -> None:
        """Before a read of the ledger: the batch's own rows are part of what it reads. If they
        cannot be written, the batch is lost (a read must not leave half its rows behind)."""
        if self._unsent:
            try:
                with self._writing():
                    self._send_ledger()
            except sqlite3.Error as exc:
                self._lose_batch(f"the board's store could not write its ledger rows ({exc}); "
                                 "nothing was changed")  # fmt: skip
