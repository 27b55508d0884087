"""The socket server: each request line read, checked against its principal and handled,
into the batch the group commit (``commit.py``) lets out; who may connect and whose turn it
is are ``admission.py``'s."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Any

from colibri.config import Config
from colibri.core import protocol
from colibri.core.errors import (
    ColibriError,
    Forbidden,
    Internal,
    StorageUnavailable,
    Throttled,
    Unauthorized,
)
from colibri.core.model import rfc3339
from colibri.core.replies import Reply
from colibri.daemon import crashpoints
from colibri.daemon.admission import EVICT_AFTER, Admission
from colibri.daemon.board import Board
from colibri.daemon.bus import Bus
from colibri.daemon.connection import Connection
from colibri.daemon.mirrors import LedgerMirrors

__all__ = ["EVICT_AFTER", "Server"]  # EVICT_AFTER: where the tests have read it

log = logging.getLogger(__name__)


def _not_attached(req: protocol.Request[Any], conn: Connection) -> Reply | None:
    raise Internal("the server has no command handler")


class Server(Admission):
    """The daemon's server: its connections' requests handled (here), admitted and given
    their turns (``Admission``), and let out by the group commit (``GroupCommit``)."""

    def __init__(self, config: Config, board: Board, mirror: LedgerMirrors) -> None:
        super().__init__(config, board, mirror)
        # Given by ``attach`` (daemon/app.py wires the daemon): who answers requests, who
        # holds replies still to come, what is reloaded after a rollback.
        self._handle: Callable[[protocol.Request[Any], Connection], Reply | None] = _not_attached
        self._seq = 0
        #: The TCP addresses listened on, as bound (``gateway.py``).
        self.listening: list[str] = []
        #: Where Prometheus scrapes the metrics (``daemon/metrics.py``), if it may.
        self.metrics_url: str | None = None

    def attach(
        self,
        handle: Callable[[protocol.Request[Any], Connection], Reply | None],
        bus: Bus,
        reload: Callable[[], None],
    ) -> None:
        """``handle`` answers each request; ``bus`` may owe replies and forgets connections;
        ``reload`` runs after a rollback, with the board's rebuild."""
        self._handle, self.bus, self._reload = handle, bus, reload

    @property
    def connection_count(self) -> int:
        return len(self.connections)

    def next_seq(self) -> int:
        self._seq += 1
        return self._seq

    def connection_for(self, remote: str, accepted: float) -> Connection:
        """A connection for a TCP peer at ``remote``, accepted at ``accepted`` (loop time)."""
        return Connection(self, remote, accepted)

    def handle_line(self, conn: Connection, line: bytes) -> None:
        started = time.perf_counter()
        try:
            self._handle_line(conn, line)
        finally:
            key = self._principal_of(conn)
            took = time.perf_counter() - started
            self._spent[key] = self._spent.get(key, 0.0) + took
            self.batch_work += took
            self._next_turn_soon()
            self.land_if_through()

    def _handle_line(self, conn: Connection, line: bytes) -> None:
        try:
            req = protocol.decode_request(line)
        except ColibriError as exc:
            self.reply_error(conn, protocol.request_id(line), exc)
            if conn.principal is None:  # nobody yet: one answer, then the door
                self.close_after_flush(conn)
            return
        principal = conn.principal
        if principal is None and not isinstance(req, protocol.Auth):
            self._refuse(conn, req.id, Unauthorized(
                'authenticate first: the first request on TCP is {"cmd": "auth", "token": …} '
                "(colibri --token TOKEN, or COLIBRI_TOKEN)"
            ))  # fmt: skip
            return
        if principal is not None and not principal.is_owner:
            if principal.expires_at is not None and principal.expires_at <= rfc3339(
                self.board.clock.time()
            ):
                self._refuse(conn, req.id, Unauthorized(f"token {principal.token} has expired"))
                return
            try:
                principal.check(req)
            except Forbidden as exc:
                self._refuse(conn, req.id, exc)
                return
        if self.unavailable is not None and not isinstance(req, protocol.Ping):
            # (A token is not told what the store said: that is the daemon's owner's to read.)
            why = self.unavailable if principal is not None and principal.is_owner else (
                "the daemon's store is unavailable"
            )  # fmt: skip
            self.reply_error(conn, req.id, StorageUnavailable(
                f"{why}; the daemon retries every second and serves again once the store answers"
            ))  # fmt: skip
            return
        batch = self.board.batch
        batch.actor = conn.peer
        try:
            reply = self._handle(req, conn)
        except StorageUnavailable as exc:
            self._batch_error = exc
            self.reply_error(conn, req.id, exc)
            return
        except (Forbidden, Unauthorized, Throttled) as exc:
            if conn.remote is None:
                self.reply_error(conn, req.id, exc)
            else:
                self._refuse(conn, req.id, exc)
            return
        except ColibriError as exc:
            self.reply_error(conn, req.id, exc)
            return
        except Exception:
            log.exception(
                "internal error handling a request",
                extra={"event": "internal_error", "cmd": type(req).__name__},
            )
            if isinstance(req, protocol.READS):
                # A read wrote nothing: the other requests of the batch stand.
                self.reply_error(conn, req.id, Internal("internal error; nothing was changed"))
                return
            error = Internal("internal error; the batch it was part of was rolled back, retry it")
            self._batch_error = error
            self.reply_error(conn, req.id, error)
            return
        finally:
            batch.actor = None
        crashpoints.hit("before-commit")
        if reply is not None:
            reply.id = req.id
            self._reply(conn, reply)

    def _refuse(self, conn: Connection, request_id: Any, error: ColibriError) -> None:
        """A TCP peer asked what its token does not allow: one error line, then closed."""
        log.warning(
            "refused a TCP peer: %s",
            error.message,
            extra={
                "event": "remote_refused",
                "peer": conn.remote,
                "token": conn.principal.token if conn.principal else None,
                "code": error.code,
            },
        )
        self.reply_error(conn, request_id, error)
        conn.closing = True
        self.close_after_flush(conn)

    def lost(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self.anonymous.discard(conn)
        self._ledger_followers.discard(conn)
        if self.bus is not None:
            self.bus.forget(conn)
        self.board.disconnect(conn)
        self.schedule_flush()
