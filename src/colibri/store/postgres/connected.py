"""The PostgreSQL store's one connection: bounded by the daemon's lease, made again after a loss.

One connection in autocommit mode, used by one thread. A lost connection, a server shut down,
a read-only or full database are ``StorageUnavailable``; the next ``rollback`` connects again
(``_reset``) — or, after a silence, takes the connection ``reachable`` made off the loop, and
until there is one keeps saying so: connecting to a silent server on the loop could take as
long as the silence did. ``durability="relaxed"`` turns ``synchronous_commit`` off: a crash of
the server may lose the last commits, never corrupt.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from concurrent.futures import Future, wait
from typing import TYPE_CHECKING, Any

from colibri.core.errors import StorageUnavailable
from colibri.store.postgres.connection import (
    _NAME_TENANTS,
    LEAST_SILENCE,
    _connect,
    _first_line,
    shown_location,
)

if TYPE_CHECKING:
    from colibri.store.postgres.connection import HeedingConnection

#: Ends the backend of a connection that is no more (its transaction, and the locks it holds).
_END_BACKEND = b"SELECT pg_terminate_backend(%s)"


class StoreConnection:
    """The connection a ``PostgresStore`` runs its statements on, and how long it waits."""

    def __init__(
        self, dsn: str, *, durability: str = "full", lease_ttl: float | None = None
    ) -> None:
        self._dsn = dsn
        self._durability = durability
        self.location = shown_location(dsn)
        #: How long a batch waits for the writers' lock, and may sit idle in its transaction
        #: (PostgreSQL's ``lock_timeout`` and ``idle_in_transaction_session_timeout``, for the
        #: batch only); "0" waits for ever. And how long any wait gives up after without a
        #: word from the server (``_heard_within``); None waits for ever. A daemon's store is
        #: bounded by its lease (``lease_ttl``): see ``_bound``.
        self.bounds = ("0", "0")
        self.silence: float | None = None
        #: The daemon's lease deadline, past which no wait of its connections goes on
        #: (``heed_deadline``); None: no such bound.
        self._deadline: Callable[[], float] | None = None
        if lease_ttl is not None:
            self._bound(lease_ttl)
        #: A connection made off the loop by ``reachable``, taken by ``_reset`` in place of one
        #: that went silent.
        self._spare: HeedingConnection | None = None
        self._conn = _connect(dsn, self.silence, durability, self._until)
        #: Why the store cannot be used until ``rollback`` ("": it can): its batch was lost,
        #: or the connection could not be made again.
        self._lost = ""
        #: A batch being committed on the store's own thread (``commit_aside``): the
        #: connection is its until it is through (``_join``).
        self._committing: Future[float] | None = None

    def _join(self) -> None:
        """Wait for the batch committing aside, if any, to be through (committed or not: its
        outcome is its future's, for the one who started it). Every use of the connection
        from the loop comes after this (never from the commit's own thread)."""
        committing, self._committing = self._committing, None
        if committing is not None:
            wait([committing])

    def _bound(self, ttl: float) -> None:
        """Bound a batch's waits by a lease of ``ttl`` seconds: the writers' lock waited for a
        third of it at most (a batch waiting longer is refused ``storage_unavailable`` and
        tried again, rather than carrying the daemon past its lease), and a transaction left
        idle (its daemon stopped mid-batch) ended by the server after half of it, so that it
        holds the other daemons' batches up no longer; and a connection whose server says
        nothing for half of it (``LEAST_SILENCE`` at least) given up (``_heard_within``), so
        that the daemon's loop, which runs the statements, waits no longer either."""
        self.bounds = (f"{int(ttl * 1000 / 3)}ms", f"{int(ttl * 1000 / 2)}ms")
        self.silence = max(ttl / 2, LEAST_SILENCE)

    def heed_deadline(self, deadline: Callable[[], float]) -> None:
        """Give every wait of the store's connections up by ``deadline()`` (the monotonic time
        by which the daemon's lease must have been renewed), silent server or not: the daemon's
        loop runs the statements, and must be free at its deadline to stop serving."""
        self._deadline = deadline

    def _until(self) -> float | None:
        return None if self._deadline is None else self._deadline()

    def reachable(self) -> None:
        """Asked on a connection of its own, which is kept (if none is yet) for ``_reset`` to
        take in place of one that went silent: connecting again is never done on the loop
        after a silence, where it could take as long."""
        import psycopg

        try:
            conn = _connect(self._dsn, self.silence, self._durability, self._until)
            try:
                conn.execute(b"SELECT 1")
            except BaseException:
                conn.close()
                raise
        except psycopg.Error as exc:
            raise StorageUnavailable(
                f"the PostgreSQL board at {self.location} does not answer ({_first_line(exc)})"
            ) from None
        if self._spare is None:
            self._spare = conn
        else:
            conn.close()

    def _reset(self) -> None:
        """End whatever transaction is open; connect again if the connection is gone — but not
        after it went silent: then a connection ``reachable`` made is taken, and until there is
        one the store stays lost (connecting to a silent server would hold the caller up)."""
        import psycopg

        spare, self._spare = self._spare, None
        if self._conn.closed or self._conn.broken:
            if spare is not None:
                silent, self._conn = self._conn, spare
                if silent.went_silent:
                    # Its backend may still be in the batch's transaction, holding the writers'
                    # lock until the server ends it as idle (half the ttl): end it now.
                    with contextlib.suppress(psycopg.Error):
                        spare.execute(_END_BACKEND, (silent.backend,))
                return
            if self._conn.went_silent:
                self._lost = f"the PostgreSQL board said nothing for {self.silence:g} s"
                return
            try:
                self._conn = _connect(self._dsn, self.silence, self._durability, self._until)
            except StorageUnavailable as exc:
                self._lost = exc.message
            return
        try:
            if self._conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE:
                self._conn.execute("ROLLBACK")
        except psycopg.Error:
            pass
        # A pipeline cut short by an error (a lock timeout) may leave psycopg counting as
        # prepared a statement whose PREPARE the server skipped: each later use of it fails
        # "prepared statement … does not exist", every batch with it refused. Forget them
        # all, here and (at the next statement) on the server; they are prepared again.
        prepared = getattr(self._conn, "_prepared", None)
        if prepared is not None:
            prepared.clear()
        if spare is not None:
            if self._conn.broken:  # (the ROLLBACK found it gone after all)
                self._spare = spare
            else:
                spare.close()

    def close(self) -> None:
        # Closing the connection ends its transaction on the server; nothing is waited for
        # (a ROLLBACK would wait on a server gone silent) and nothing is connected again.
        self._conn.close()
        if self._spare is not None:
            self._spare.close()

    def _read(self, query: bytes, args: Any, tenants: str) -> list[dict[str, Any]]:
        """A read outside a batch. Each statement is then a transaction of its own, and
        row-level security shows it only the rows of the tenants it names: the read goes in a
        transaction that names them, pipelined (one round trip), and rolled back. Always —
        also as a role RLS does not bind now: a role's attributes can change under a live
        connection, and a board read blind (a rebuild finding no task) must never be what
        that looks like."""
        import psycopg

        conn = self._conn
        try:
            with conn.pipeline():
                conn.execute(b"BEGIN")
                conn.execute(_NAME_TENANTS, (tenants,))
                cursor = conn.execute(query, args)
                # A read writes nothing: ended so, it cannot keep anything by mistake either.
                conn.execute(b"ROLLBACK")
        except psycopg.Error:
            # A statement refused skips the rest of the pipeline, its ROLLBACK too: end the
            # transaction here, or the next batch would begin inside a failed one.
            if (
                not conn.broken
                and conn.info.transaction_status != psycopg.pq.TransactionStatus.IDLE
            ):
                conn.execute(b"ROLLBACK")
            raise
        return cursor.fetchall()
