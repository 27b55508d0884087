"""The group commit: every reply, assignment and event of a batch waits for the commit that
makes it true.

Requests are handled as they arrive, each writing into the store's open transaction. Replies,
assignments and events are held back. One callback per loop iteration (``flush``) then runs a
dispatch pass, commits once, and only then writes everything out and appends the new ledger
rows to ``ledger.jsonl`` (the mirror is completed from the store at start-up if a crash comes
between the two). So an acknowledgement always follows the commit that made it durable, and
a burst of requests from many clients costs one fsync instead of one each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from colibri.core.errors import ColibriError, Internal, LeaseLost, StorageUnavailable
from colibri.core.events import LedgerAppended
from colibri.core.model import LedgerEntry
from colibri.core.replies import ErrorReply, Reply, refusal
from colibri.daemon import crashpoints
from colibri.daemon.board import Board
from colibri.daemon.mirrors import LedgerMirrors
from colibri.store import BatchRefused

if TYPE_CHECKING:
    from colibri.daemon.connection import Connection

#: The server's records keep the logger they are known by in the logs (the "logger" field).
log = logging.getLogger("colibri.daemon.server")


class GroupCommit:
    """The server's batch: the replies held back, the connections to write out and to close
    after it, and the flush that commits it; ``Server`` handles the requests that fill it."""

    def __init__(self, board: Board, mirror: LedgerMirrors) -> None:
        self.board = board
        self.mirror = mirror
        #: Runs after a rollback, with the board's rebuild (given by ``Server.attach``).
        self._reload: Callable[[], None] = lambda: None
        self.loop = asyncio.get_running_loop()
        self.connections: set[Connection] = set()
        #: TCP peers past TLS that have not authenticated yet (``Connection.authenticated``).
        self.anonymous: set[Connection] = set()
        self.dirty: set[Connection] = set()
        self._replies: list[tuple[Connection, Reply | ErrorReply]] = []
        self._to_close: list[Connection] = []
        self._flush_scheduled = False
        self._batch_error: ColibriError | None = None
        self._ledger_followers: set[Connection] = set()
        self.commits = 0
        #: How long the last batch's commit took, and the time spent handling requests since
        #: (``Server.handle_line`` adds to it): a batch grows while it has cost less than that.
        self.last_commit = 0.0
        self.batch_work = 0.0
        self.batch_turns = 0
        #: Set at shutdown, after the last flush: the store is about to close.
        self.closed = False
        self.on_flushed: Callable[[], None] | None = None
        #: Told each committed batch's ledger rows and how long its commit took (metrics).
        self.on_committed: Callable[[list[LedgerEntry], float], None] | None = None
        #: Why the daemon must stop at once (memory and store can no longer be made to
        #: agree); set by ``fatal``, which also calls ``on_fatal``.
        self.fatal_error: str | None = None
        self.on_fatal: Callable[[], None] = lambda: None
        #: Why the board cannot be served now: a batch failed on the store and the board could
        #: not be reloaded from it (the store is unreachable). Until ``recover`` reloads it,
        #: every request but ``ping`` is answered ``storage_unavailable`` and nothing runs.
        self.unavailable: str | None = None

    def _reply(self, conn: Connection, message: Reply | ErrorReply) -> None:
        self._replies.append((conn, message))
        self.schedule_flush()

    def fail_batch(self, error: ColibriError) -> None:
        """Work the daemon did by itself went wrong half-way: roll back the whole batch."""
        if self._batch_error is None:
            self._batch_error = error
        self.schedule_flush()

    def reply_error(self, conn: Connection, request_id: Any, error: ColibriError) -> None:
        self._reply(conn, refusal(request_id, error))

    def close_after_flush(self, conn: Connection) -> None:
        self._to_close.append(conn)
        self.schedule_flush()

    def follow_ledger(self, conn: Connection, task: str | None) -> None:
        conn.follows_ledger = True
        conn.ledger_task = task
        self._ledger_followers.add(conn)

    def schedule_flush(self) -> None:
        if not self._flush_scheduled and not self.closed:
            self._flush_scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        """Dispatch, commit once, then let out replies, assignments and events, in order."""
        self._flush_scheduled = False
        if self.closed:
            return
        if self.batch_grows():
            # Requests wait for their turn: serve them in this batch first, and commit after.
            self._flush_scheduled = True
            self.loop.call_soon(self.flush)
            return
        try:
            self._flush()
        except Exception as exc:
            # Half a flush may have let out some of a batch: memory, store and clients can no
            # longer be shown to agree. Stop, as a crash would, rather than serve on.
            log.exception("internal error in flush", extra={"event": "internal_error"})
            self.fatal(f"internal error while committing a batch ({exc!r})")

    def batch_grows(self) -> bool:
        """Whether the batch should take the requests still waiting before it commits: no, by
        default (``Admission`` says when)."""
        return False

    def fatal(self, why: str) -> None:
        """Stop serving at once and make the daemon exit non-zero: what was acknowledged is in
        the store, what was not is rolled back; harnesses keep running, to be adopted."""
        if self.fatal_error is not None:
            return
        self.fatal_error = why
        log.critical(
            f"{why}; the daemon stops (exit 1). Nothing acknowledged is lost: start it again",
            extra={"event": "fatal", "error": why},
        )
        self.closed = True
        with contextlib.suppress(Exception):
            self.board.store.rollback()
        for conn in [*self.connections, *self.anonymous]:
            conn.closing = True
            if conn.transport is not None:
                conn.transport.abort()  # nothing held back may leave now
        self.on_fatal()

    def _flush(self) -> None:
        if self.unavailable is not None:
            self._flush_unavailable()
            return
        board = self.board
        placed = 0
        rows: list[LedgerEntry] = []
        if self._batch_error is None and board.dispatch_wanted:
            try:
                placed = board.dispatch()
            except StorageUnavailable as exc:
                self._batch_error = exc
            except Exception:
                log.exception("internal error in dispatch", extra={"event": "internal_error"})
                self._batch_error = Internal("internal error during dispatch; batch rolled back")
        commit_seconds = 0.0
        if self._batch_error is None:
            try:
                started = time.perf_counter()
                board.store.commit()
                commit_seconds = time.perf_counter() - started
                self.commits += 1
                self.last_commit = commit_seconds
            except StorageUnavailable as exc:
                self._batch_error = exc
            except BatchRefused as exc:
                # A write the stored rows refused when the batch was sent (PostgreSQL sends
                # a batch's writes together): memory went where the store would not.
                log.error("a write of the batch was refused", extra={
                    "event": "internal_error", "error": str(exc)})  # fmt: skip
                self._batch_error = Internal(
                    "internal error: a write of the batch was refused by the store; the batch "
                    "was rolled back, retry it"
                )
        self.batch_work, self.batch_turns = 0.0, 0
        replies, self._replies = self._replies, []
        if self._batch_error is not None:
            self._fail_batch(replies, self._batch_error)
        else:
            rows, outbox = board.take_effects()
            if self.on_committed is not None:
                self.on_committed(rows, commit_seconds)
            if rows:
                crashpoints.hit("after-commit")
            if placed:
                crashpoints.hit("before-assign")
            for conn, message in replies:
                conn.queue(message)
            # After the replies: a new follower's ``ledger`` reply comes before the rows of its
            # own batch, so it can tell the rows its reply holds from those that are new.
            self._push_ledger(rows)
            for peer, effect in outbox:
                peer.send(effect)
        self._write_out()
        if rows:  # the store has them already: a crash here is repaired at start-up
            crashpoints.hit("before-mirror")
            self.mirror.append(rows)  # (a tenant's broken file passes them over: repaired later)
        if not self.closed and self.mirror.repair_due(self.board.clock.monotonic()):
            # Here, after the commit (or the rollback), the store holds no uncommitted row the
            # catch-up could copy; and every sweep flushes, so the repair does not wait for
            # new rows.
            self._repair_mirror()
        self._close_the_closing()
        if board.dispatch_wanted and not board.paused and self._batch_error is None:
            self.schedule_flush()
        self._batch_error = None
        if self.on_flushed is not None:
            self.on_flushed()

    def _flush_unavailable(self) -> None:
        """While the store is away: only refusals go out; nothing is dispatched or committed."""
        replies, self._replies = self._replies, []
        self._batch_error = None
        for conn, message in replies:
            conn.queue(message)
        self._write_out()
        self._close_the_closing()

    def _write_out(self) -> None:
        for conn in self.dirty:
            conn.write_out()
        self.dirty.clear()

    def _close_the_closing(self) -> None:
        """Close the connections told their last line (``close_after_flush``), now written."""
        for conn in self._to_close:
            if conn.transport is not None:
                conn.transport.close()
        self._to_close.clear()

    def recover(self) -> bool:
        """Try to reload the board from a store that was away (``unavailable``); True once it
        serves again. Called by the sweep, every second at most."""
        if self.unavailable is None:
            return True
        try:
            self.board.store.rollback()  # and connect again, for a database server
            self.board.rebuild()
            self._reload()
        except StorageUnavailable as exc:
            self.unavailable = exc.message
            return False
        except Exception as exc:
            log.debug("rebuild failed", exc_info=True)
            self.fatal(f"the board could not be reloaded from the store ({exc!r})")
            return False
        self.unavailable = None
        self.board.restart_clocks()
        log.warning("the store answers again: serving", extra={"event": "storage_back"})
        self.schedule_flush()
        return True

    def _fail_batch(
        self, replies: list[tuple[Connection, Reply | ErrorReply]], error: ColibriError
    ) -> None:
        """The batch did not commit: nothing in it happened. Say so and reload from the store."""
        log.error("batch rolled back", extra={"event": "batch_failed", "error": error.message})
        if isinstance(error, LeaseLost):
            # Another daemon serves the board now: this one's memory is stale for good.
            self.fatal(error.message)
            return
        try:
            self.board.store.rollback()
            self.board.rebuild()
            self._reload()
        except StorageUnavailable as exc:
            # The store itself is away (a database server down): memory cannot be made to
            # agree with it now. Serve nothing but refusals, and reload once it is back.
            self.unavailable = exc.message
            log.error(
                "the store is unavailable; refusing every request until it is back",
                extra={"event": "storage_unavailable", "error": exc.message},
            )
        except Exception as exc:  # a recovery that fails must not leave a daemon answering nothing
            log.debug("rebuild failed", exc_info=True)
            self.fatal(f"the board could not be reloaded from the store after a failed batch "
                       f"({exc!r})")  # fmt: skip
            return
        wire = error.to_wire()
        for conn, message in replies:
            if isinstance(message, Reply):
                message = ErrorReply(id=message.id, error=wire)
            conn.queue(message)
        self.board.dispatch_wanted = False  # retried at the next tick, not in a hot loop

    def _repair_mirror(self) -> None:
        try:
            self.mirror.repair(self.board.store)
        except StorageUnavailable:
            pass  # the store away: the repair waits for it, as the board does
        except OSError as exc:  # from the catch-up's writes: open itself marks it broken
            log.error(
                "ledger mirror still failing",
                extra={"event": "ledger_mirror_failed", "error": str(exc)},
            )

    def _push_ledger(self, rows: list[LedgerEntry]) -> None:
        for conn in self._ledger_followers:
            principal = conn.principal
            for row in rows:
                if (conn.ledger_task is None or conn.ledger_task == row.task) and (
                    principal is None or principal.sees(row.tenant)
                ):
                    conn.queue(LedgerAppended(entry=row))
