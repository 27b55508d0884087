"""The group commit: every reply, assignment and event of a batch waits for the commit that
makes it true.

Requests are handled as they arrive, each writing into the store's open transaction. Replies,
assignments and events are held back. One callback per loop iteration (``flush``) then runs a
dispatch pass, commits once, and only then writes everything out and appends the new ledger
rows to ``ledger.jsonl`` (the mirror is completed from the store at start-up if a crash comes
between the two). So an acknowledgement always follows the commit that made it durable, and
a burst of requests from many clients costs one fsync instead of one each.

On a database server the commit is made aside (``Store.commit_aside``: on the store's own
thread), and the loop goes on meanwhile with the next batch: its requests are handled and its
dispatch pass runs while the server writes this one. One batch commits at a time. When it
lands, the next one starts its commit first, and then this one is let out, so the server
waits on neither. If it failed, the next one fails with it: memory holds both, the store
neither, and the board is read again. SQLite commits on the loop, where it costs no wait.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from colibri.core.errors import ColibriError, Internal, StorageUnavailable
from colibri.core.events import LedgerAppended
from colibri.core.model import LedgerEntry
from colibri.core.replies import ErrorReply, Reply, refusal
from colibri.daemon import crashpoints
from colibri.daemon.board import Board
from colibri.daemon.board.batch import Effects
from colibri.daemon.failures import BatchFailures, commit_error
from colibri.daemon.mirrors import LedgerMirrors
from colibri.store import BatchRefused

if TYPE_CHECKING:
    from colibri.daemon.connection import Connection

#: The server's records keep the logger they are known by in the logs (the "logger" field).
log = logging.getLogger("colibri.daemon.server")


@dataclass
class _Commit:
    """A batch as it commits: what it lets out once committed, or refuses if not."""

    replies: list[tuple[Connection, Reply | ErrorReply]]
    to_close: list[Connection]
    #: Why it failed (before its commit, or in it).
    error: ColibriError | None
    #: How many tasks its dispatch placed.
    placed: int
    #: Its ledger rows and messages (None when it failed before its commit).
    effects: Effects | None
    #: Who followed the ledger when it was sealed: its rows go to them.
    followers: list[Connection]
    #: Its commit, while it is made aside.
    aside: Future[float] | None = None


class GroupCommit(BatchFailures):
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
        #: The batch committing aside (``Store.commit_aside``) while the next is written; and
        #: whether a flush was asked for meanwhile.
        self._committing: _Commit | None = None
        self._flush_after = False
        #: How many tasks the batch's dispatch passes placed.
        self._placed = 0
        #: Whether the store has committed a batch aside: then batches grow by themselves,
        #: while one commits, and ``batch_grows`` is not asked.
        self._commits_aside = False
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
            self.loop.call_soon(self._flush_in_turn)

    def _flush_in_turn(self) -> None:
        """The loop's flush: the batch commits aside (``Store.commit_aside``), and the loop
        serves the next batch's requests while it does."""
        self._flush_scheduled = False
        if self.closed:
            return
        if self._committing is not None:
            # One batch commits at a time: this one, once it lands. Its dispatch pass runs
            # now, while the server works, rather than after.
            self._flush_after = True
            if self.unavailable is None:
                self._dispatch()
            return
        if not self._commits_aside and self.batch_grows():
            # Requests wait for their turn: serve them in this batch first, and commit after.
            # (A store that commits aside grows the next batch while this one commits.)
            self._flush_scheduled = True
            self.loop.call_soon(self._flush_in_turn)
            return
        self._guarded(aside=True)

    def flush(self) -> None:
        """Commit now, on the loop: the batch committing aside first, then this one; when it
        returns, both are committed and let out, or refused (start-up, a change of tenants,
        shutdown)."""
        if not self.closed:
            self._guarded(aside=False)

    def _guarded(self, aside: bool) -> None:
        try:
            if self._committing is not None:
                self._land()
            if not self.closed:
                self._flush(aside)
        except Exception as exc:
            # Half a flush may have let out some of a batch: memory, store and clients can no
            # longer be shown to agree. Stop, as a crash would, rather than serve on.
            log.exception("internal error in flush", extra={"event": "internal_error"})
            self.fatal(f"internal error while committing a batch ({exc!r})")

    def batch_grows(self) -> bool:
        """Whether the batch should take the requests still waiting before it commits: no, by
        default (``Admission`` says when)."""
        return False

    def _dropped_aside(self) -> None:
        batch, self._committing = self._committing, None
        aside = None if batch is None else batch.aside
        failed = aside.exception() if aside is not None and aside.done() else None
        if isinstance(failed, ColibriError):  # (the daemon stops before it could land)
            log.error("batch rolled back", extra={"event": "batch_failed",
                                                  "error": failed.message})  # fmt: skip

    def _flush(self, aside: bool) -> None:
        if self.unavailable is not None:
            self._flush_unavailable()
            return
        self._dispatch()
        seconds = 0.0
        if self._batch_error is None:
            started = time.perf_counter()
            try:
                if aside and self._commit_aside():
                    return
                if not aside:
                    self.board.store.commit()
            except (StorageUnavailable, BatchRefused) as exc:
                self._batch_error = commit_error(exc)
            seconds = time.perf_counter() - started
        self._let_out(self._seal(), seconds)

    def _dispatch(self) -> None:
        """The batch's dispatch pass, if one is wanted (``_placed`` counts what it placed)."""
        if self._batch_error is not None or not self.board.dispatch_wanted:
            return
        try:
            self._placed += self.board.dispatch()
        except StorageUnavailable as exc:
            self._batch_error = exc
        except Exception:
            log.exception("internal error in dispatch", extra={"event": "internal_error"})
            self._batch_error = Internal("internal error during dispatch; batch rolled back")

    def _commit_aside(self) -> bool:
        """Start the batch's commit aside: True if it is under way (it lands later), False if
        the store committed it here (or it wrote nothing)."""
        aside = self.board.store.commit_aside()
        if aside is None:
            return False
        self._commits_aside = True
        batch = self._seal()
        batch.aside = aside
        self._committing = batch
        aside.add_done_callback(self._landed_soon)
        return True

    def _seal(self) -> _Commit:
        """Take the batch as it commits: what it lets out once it is committed (or refuses if
        it is not), and whose rows it is; the next batch starts empty."""
        self.batch_work, self.batch_turns = 0.0, 0
        batch = _Commit(
            self._replies, self._to_close, self._batch_error, self._placed,
            None if self._batch_error else self.board.take_effects(),
            list(self._ledger_followers),
        )  # fmt: skip
        self._replies, self._to_close, self._batch_error, self._placed = [], [], None, 0
        return batch

    def _landed_soon(self, aside: Future[float]) -> None:
        """(On the store's thread.) The batch committing aside is through: to the loop."""
        with contextlib.suppress(RuntimeError):  # the loop closed: nothing is let out
            self.loop.call_soon_threadsafe(self._land_in_turn, aside)

    def land_if_through(self) -> None:
        """Between two requests: land the batch committing aside if it is through, rather
        than when the loop comes to its callback (the requests of a busy loop go first)."""
        committing = self._committing
        if committing is not None and committing.aside is not None and committing.aside.done():
            self._land_in_turn(committing.aside)

    def _land_in_turn(self, aside: Future[float]) -> None:
        if self._committing is None or self._committing.aside is not aside:
            return  # landed already (a flush waited for it), or the daemon stopped
        try:
            self._land()
        except Exception as exc:
            log.exception("internal error in flush", extra={"event": "internal_error"})
            self.fatal(f"internal error while committing a batch ({exc!r})")

    def _land(self) -> None:
        """Let the batch committing aside out, waiting for it if need be; if it failed, the
        batch written since goes with it: memory holds both, and the store neither."""
        batch, self._committing = self._committing, None
        assert batch is not None and batch.aside is not None
        seconds = 0.0
        try:
            seconds = batch.aside.result()
        except (StorageUnavailable, BatchRefused) as exc:
            batch.error = commit_error(exc)
        if batch.error is not None:
            if batch.effects is not None:
                self.board.batch.give_back(batch.effects)
            batch.replies += self._replies
            batch.to_close += self._to_close
            self._replies, self._to_close, self._batch_error = [], [], None
        elif self._flush_after and not self.closed:
            # The batch written meanwhile starts its commit before this one is let out: the
            # server works on it while the loop writes this one's replies and assignments.
            self._flush_after = False
            self._dispatch()
            if self._batch_error is None:
                try:
                    self._commit_aside()
                except (StorageUnavailable, BatchRefused) as exc:
                    self._batch_error = commit_error(exc)
        self._let_out(batch, seconds)
        if self._committing is None and (self._flush_after or self._replies or self._to_close
                                         or self._batch_error):  # fmt: skip
            self._flush_after = False
            self.schedule_flush()

    def _let_out(self, batch: _Commit, commit_seconds: float) -> None:
        """After the batch's commit (or its failure): its replies, assignments, events and
        ledger rows go out, in order, or its refusals."""
        board = self.board
        rows: list[LedgerEntry] = []
        if batch.error is not None:
            self._fail_batch(batch.replies, batch.error)
        else:
            assert batch.effects is not None
            rows, outbox = batch.effects.ledger_rows, batch.effects.outbox
            self.commits += 1
            self.last_commit = commit_seconds
            if self.on_committed is not None:
                self.on_committed(rows, commit_seconds)
            if rows:
                crashpoints.hit("after-commit")
            if batch.placed:
                crashpoints.hit("before-assign")
            for conn, message in batch.replies:
                conn.queue(message)
            # After the replies: a new follower's ``ledger`` reply comes before the rows of its
            # own batch, so it can tell the rows its reply holds from those that are new.
            self._push_ledger(batch.followers, rows)
            for peer, effect in outbox:
                peer.send(effect)
        self._write_out()
        if rows:  # the store has them already: a crash here is repaired at start-up
            crashpoints.hit("before-mirror")
            self.mirror.append(rows)  # (a tenant's broken file passes them over: repaired later)
        if not self.closed and self.mirror.repair_due(self.board.clock.monotonic()):
            # Here, after the commit (or the rollback), with no batch committing aside, the
            # store holds no uncommitted row the catch-up could copy; and every sweep flushes,
            # so the repair does not wait for new rows.
            if self._committing is None:
                self._repair_mirror()
        self._close_the_closing(batch.to_close)
        if board.dispatch_wanted and not board.paused and batch.error is None:
            self.schedule_flush()
        if self.on_flushed is not None:
            self.on_flushed()

    def _push_ledger(self, followers: list[Connection], rows: list[LedgerEntry]) -> None:
        """To each follower of the ledger when the batch committed (one that follows from a
        later batch had these rows in its reply), the rows it may see."""
        for conn in followers:
            principal = conn.principal
            for row in rows:
                if (conn.ledger_task is None or conn.ledger_task == row.task) and (
                    principal is None or principal.sees(row.tenant)
                ):
                    conn.queue(LedgerAppended(entry=row))
