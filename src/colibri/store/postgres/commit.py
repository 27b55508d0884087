"""How a PostgreSQL batch ends: its commit, a commit whose answer was lost, its rollback.

A commit can fail without the store knowing whether it happened: the COMMIT may reach the
server and commit while its answer is lost with the connection. The store then asks the server
over a new connection (``_outcome``), with what the batch's opening took along: its
transaction id, its backend's pid and the server's start time; and, once the server cannot
tell by the id, the batch's first ledger row (``_outcome_from_ledger``). Until it is settled,
the board is not read again (``rollback`` refuses).
"""

from __future__ import annotations

import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from colibri.core.errors import StorageUnavailable
from colibri.store.base import BatchRefused
from colibri.store.postgres.connected import _END_BACKEND
from colibri.store.postgres.connection import _first_line
from colibri.store.postgres.unit import UnitOfWork, _Batch

_SERVER_STARTED = b"SELECT pg_postmaster_start_time() AS started"
_XACT_STATUS = b"SELECT txid_status(%s) AS status"
_LEDGER_ROW = (
    b"SELECT at, task, schedule, to_state, epoch, reason FROM ledger WHERE tenant = %s AND seq = %s"
)
#: How long the loop waits for a commit whose answer was lost to settle on the server.
_OUTCOME_WAIT = 1.0


@dataclass
class _InDoubt:
    """A batch whose COMMIT was sent and whose answer was lost."""

    #: The row of ``_OPENING``: xid, backend, started.
    opened: dict[str, Any]
    #: Its first ledger row as written (``seq`` included), if it wrote one.
    first_row: dict[str, Any] | None


class Committing(UnitOfWork):
    """A ``PostgresStore``'s batches as they end: committed, settled when the answer to the
    commit was lost, or rolled back."""

    def __init__(
        self, dsn: str, *, durability: str = "full", lease_ttl: float | None = None
    ) -> None:
        super().__init__(dsn, durability=durability, lease_ttl=lease_ttl)
        #: A batch whose COMMIT's answer was lost and whose outcome the server could not tell
        #: yet (``rollback`` waits for it).
        self._in_doubt: _InDoubt | None = None
        #: The thread ``commit_aside`` commits on, made at its first use.
        self._committer: ThreadPoolExecutor | None = None

    def commit(self) -> None:
        self._join()
        self._check_lost()
        batch, self._batch = self._batch, _Batch()
        self._commit(batch)

    def commit_aside(self) -> Future[float] | None:
        """Commit the batch on the store's own thread, and return at once: its future gives
        how long the commit took, or raises what ``commit`` would have. The next batch is
        written meanwhile; its writes are held, and anything of it that needs the connection
        (a read, a write sent at once, its commit) waits for this one to be through. None:
        nothing was written. The caller acknowledges nothing of the batch before its future
        says so, and, if it failed, nothing of the next one either (built on it in memory)."""
        self._join()
        self._check_lost()
        if not self._batch.dirty:
            return None
        batch, self._batch = self._batch, _Batch()
        if self._committer is None:
            self._committer = ThreadPoolExecutor(1, thread_name_prefix="colibri-commit")
        self._committing = self._committer.submit(self._timed_commit, batch)
        return self._committing

    def _timed_commit(self, batch: _Batch) -> float:
        started = time.perf_counter()
        self._commit(batch)
        return time.perf_counter() - started

    def _commit(self, batch: _Batch) -> None:
        """Send what ``batch`` still holds and commit it; it is no longer the store's open
        batch (``_batch``), which may be a new one being written meanwhile."""
        import psycopg

        self._check_lost()
        if not batch.dirty:
            return
        self._send(batch)
        if self._conn.info.transaction_status != psycopg.pq.TransactionStatus.INTRANS:
            # Aborted on the server (a statement of it failed) or ended: a COMMIT would be
            # answered as a ROLLBACK, quietly. Never acknowledge such a batch.
            self._abandon("its transaction was aborted or ended on the server before the commit")
            raise BatchRefused(self._lost)
        opened, first = batch.opened, batch.first_row
        try:
            self._conn.execute(b"COMMIT")
        except psycopg.Error as exc:
            self._reset()
            if opened is not None:
                # The COMMIT may have reached the server, and committed, before its answer
                # was lost (a server shut down or crashing answers FATAL, not always on a
                # connection psycopg marks broken yet): ask PostgreSQL, never guess.
                doubt = _InDoubt(opened, first)
                outcome = self._outcome(doubt)
                if outcome == "committed":
                    return
                if outcome in (None, "unknowable"):
                    if outcome is None:
                        # Until it is settled, the board must not be read again (``rollback``):
                        # rebuilt from before a commit that lands later, it would not be true.
                        self._in_doubt = doubt
                    raise StorageUnavailable(
                        f"the PostgreSQL board's connection broke while this batch was being "
                        f"committed ({_first_line(exc)}), and whether it was written is not "
                        "known until the server answers; retry with the same idempotency key, "
                        "or look the task up once the daemon serves again"
                    ) from None
            raise StorageUnavailable(
                f"the PostgreSQL board could not commit ({_first_line(exc)}); nothing was changed"
            ) from None

    def _outcome(self, doubt: _InDoubt) -> str | None:
        """``committed`` or ``aborted``: what became of a batch whose COMMIT's answer was lost,
        asked over the connection made again; ``unknowable`` when it is settled either way but
        cannot be told (see ``_outcome_from_ledger``); None while the server cannot say."""
        import psycopg

        if self._lost:
            return None  # the connection could not be made again
        conn = self._conn
        try:
            now = conn.execute(_SERVER_STARTED).fetchone()
            if now is None or now["started"] != doubt.opened["started"]:
                # The server started again (or another took its place) since the batch began:
                # a transaction id whose commit never reached its disk is handed out again, so
                # the id's status may be another transaction's. The batch's own rows decide.
                return self._outcome_from_ledger(doubt)
            deadline = time.monotonic() + _OUTCOME_WAIT
            ended_backend = False
            while True:
                row = conn.execute(_XACT_STATUS, (doubt.opened["xid"],)).fetchone()
                status = None if row is None else row["status"]
                if status in ("committed", "aborted"):
                    return str(status)
                if status is None:  # too old to be known: the rows decide
                    return self._outcome_from_ledger(doubt)
                # In progress: the old connection's backend still has it, finishing the
                # commit or waiting for a COMMIT that never came. Ended, it settles at once
                # (a commit under way completes first).
                if not ended_backend:
                    conn.execute(_END_BACKEND, (doubt.opened["backend"],))
                    ended_backend = True
                if time.monotonic() > deadline:
                    return None
                time.sleep(0.005)
        except psycopg.Error:
            self._reset()
            return None

    def _outcome_from_ledger(self, doubt: _InDoubt) -> str:
        """Whether the batch's first ledger row is in the ledger, as the batch wrote it; for a
        batch that wrote none, ``unknowable`` (nothing of it can be told from another's). Only
        asked when no backend can still hold the transaction — the server started again, or
        the transaction is too old for its status to be kept — so whatever it was, it is
        settled in the data: the board may be read again."""
        first = doubt.first_row
        if first is None:
            return "unknowable"
        # (Whatever the row there now is: a daemon that took the tenant over may have taken the
        # seq since.)
        rows = self._read(_LEDGER_ROW, (first["tenant"], first["seq"]), "*")
        if not rows:
            return "aborted"
        row = rows[0]
        same = all(row[key] == first[key] for key in ("at", "task", "schedule", "to_state",
                                                       "epoch", "reason"))  # fmt: skip
        return "committed" if same else "aborted"

    def rollback(self) -> None:
        self._join()
        self._lost = ""
        self._lost_as = StorageUnavailable
        self._end_batch()
        self._reset()
        if self._lost and self._conn.went_silent:
            raise StorageUnavailable(self._lost)  # no connection yet (``reachable`` makes one)
        if self._in_doubt is not None:
            outcome = self._outcome(self._in_doubt)
            if outcome is None:
                raise StorageUnavailable(
                    "the PostgreSQL board cannot say yet whether a batch whose commit's answer "
                    "was lost was written; the daemon reads the board again once it can"
                )
            self._in_doubt = None

    def close(self) -> None:
        # A batch in doubt is settled in what the server has, which the next daemon reads.
        self._join()
        self._end_batch()
        if self._committer is not None:
            self._committer.shutdown()
        super().close()
