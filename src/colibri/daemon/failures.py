"""What a daemon does when a batch fails: its replies turned into refusals and the board
read again from the store; or, while the store is away, nothing served but refusals until it
answers (``recover``); or, when memory and store can no longer be made to agree, a stop."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from colibri.core.errors import ColibriError, Internal, LeaseLost, StorageUnavailable
from colibri.core.replies import ErrorReply, Reply
from colibri.daemon.board import Board
from colibri.daemon.mirrors import LedgerMirrors
from colibri.store import BatchRefused

if TYPE_CHECKING:
    from colibri.daemon.connection import Connection

#: The server's records keep the logger they are known by in the logs (the "logger" field).
log = logging.getLogger("colibri.daemon.server")


def commit_error(exc: StorageUnavailable | BatchRefused) -> ColibriError:
    """What the replies of a batch whose commit failed say."""
    if isinstance(exc, StorageUnavailable):
        return exc
    # A write the stored rows refused when the batch was sent (PostgreSQL sends a batch's
    # writes together): memory went where the store would not.
    log.error("a write of the batch was refused", extra={
        "event": "internal_error", "error": str(exc)})  # fmt: skip
    return Internal(
        "internal error: a write of the batch was refused by the store; the batch was rolled "
        "back, retry it"
    )


class BatchFailures:
    """The group commit's failures (``GroupCommit`` holds the state named here)."""

    board: Board
    mirror: LedgerMirrors
    connections: set[Connection]
    anonymous: set[Connection]
    dirty: set[Connection]
    closed: bool
    fatal_error: str | None
    unavailable: str | None
    on_fatal: Callable[[], None]
    _reload: Callable[[], None]
    _replies: list[tuple[Connection, Reply | ErrorReply]]
    _to_close: list[Connection]
    _batch_error: ColibriError | None
    schedule_flush: Callable[[], None]

    def _dropped_aside(self) -> None:
        """The batch committing aside, if any, is let go unanswered (the daemon stops; the
        store was rolled back after it), its failure logged."""

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
            self.board.store.rollback()  # (after the batch committing aside, if any)
        self._dropped_aside()
        for conn in [*self.connections, *self.anonymous]:
            conn.closing = True
            if conn.transport is not None:
                conn.transport.abort()  # nothing held back may leave now
        self.on_fatal()

    def _flush_unavailable(self) -> None:
        """While the store is away: only refusals go out; nothing is dispatched or committed."""
        replies, self._replies = self._replies, []
        self._batch_error = None
        for conn, message in replies:
            conn.queue(message)
        self._write_out()
        self._close_the_closing(self._to_close)
        self._to_close = []

    def _write_out(self) -> None:
        for conn in self.dirty:
            conn.write_out()
        self.dirty.clear()

    def _close_the_closing(self, to_close: list[Connection]) -> None:
        """Close the connections told their last line (``close_after_flush``), now written."""
        for conn in to_close:
            if conn.transport is not None:
                conn.transport.close()

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
