"""One connection to the daemon: who is at the other end, framing, and output.

On the Unix socket the kernel says who the peer is (its uid, checked against the owner and
``server.socket_group``); it acts as the owner. A TCP connection (``remote``: the peer's
address; TLS already done by ``gateway.py``) is nobody until its ``auth``.

Lines are split off as they arrive and handed to the server one at a time (at most
``LINES_PER_TURN`` per connection per loop turn, and no more once the connection's principal has
had its time of the turn: ``Server.may_serve``, so one peer's flood does not hold up the
others); a line longer than ``server.max_line`` loses the framing and closes the connection.
Output is encoded when it is queued and written only at the server's flush, after the commit.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, Protocol, cast

import msgspec

from colibri import host
from colibri.core import events, replies
from colibri.core.access import OWNER, Principal
from colibri.core.errors import Busy, ColibriError, Forbidden, LineTooLong, Throttled

if TYPE_CHECKING:
    from colibri.config import Config
    from colibri.daemon.board.batch import Message

log = logging.getLogger(__name__)

_encoder = msgspec.json.Encoder()
#: A subscriber whose unread output passes this is dropped rather than buffered without end.
SUBSCRIBER_BUFFER_LIMIT = 8 * 1024 * 1024
#: Lines of one connection handled per loop iteration; the rest wait for the next one.
LINES_PER_TURN = 64
#: The longest line a TCP peer may send before it has authenticated (an ``auth`` is ~120).
AUTH_LINE_LIMIT = 4096
#: TCP peers past TLS but not yet authenticated, in all and from one address: kept apart from
#: ``server.max_connections``, so that they can never take the place of anyone who did.
ANONYMOUS_LIMIT = 64
ANONYMOUS_PER_ADDRESS = 8


class Throttling(Protocol):
    def blocked(self, address: str) -> float | None:
        """Seconds until ``address`` may try again, or None if it may now."""


class ConnectionHost(Protocol):
    """What a connection asks of the server that accepted it (``Server`` is one): its loop and
    settings, who may connect and be served, whose turn it is, the order of what is sent
    (``seq``), and that a connection came, is to close, or went. Named here, so that this
    module needs nothing of the server's, which builds connections."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...
    @property
    def config(self) -> Config: ...
    @property
    def throttle(self) -> Throttling: ...
    @property
    def who_may(self) -> str: ...
    @property
    def anonymous(self) -> set[Connection]: ...
    @property
    def connections(self) -> set[Connection]: ...
    @property
    def dirty(self) -> set[Connection]: ...
    def may_connect(self, uid: int, gid: int) -> bool: ...
    def admission(self, conn: Connection) -> str | None: ...
    def may_serve(self, conn: Connection) -> bool: ...
    def wait_turn(self, conn: Connection) -> None: ...
    def handle_line(self, conn: Connection, line: bytes) -> None: ...
    def reply_error(self, conn: Connection, request_id: Any, error: ColibriError) -> None: ...
    def close_after_flush(self, conn: Connection) -> None: ...
    def lost(self, conn: Connection) -> None: ...
    def next_seq(self) -> int: ...


class Connection(asyncio.Protocol):
    def __init__(
        self, server: ConnectionHost, remote: str | None = None, accepted: float | None = None
    ) -> None:
        self.server = server
        #: A TCP peer's address; None on the Unix socket.
        self.remote = remote
        #: Who it acts as: the owner on the Unix socket; over TCP, None until ``auth``.
        self.principal: Principal | None = None
        self.transport: asyncio.Transport | None = None
        self.agent_name: str | None = None
        self.subscriber = False
        self.follows_ledger = False
        self.ledger_task: str | None = None
        self.closing = False
        self._buf = bytearray()
        self._out = bytearray()
        self.partial_since: float | None = None
        #: When it last sent anything (the loop's clock): anonymous connections silent for
        #: ``server.idle_timeout`` are closed, and may be evicted at the connection cap.
        self.last_active = server.loop.time()
        #: When it was accepted (before its TLS handshake): a TCP peer that has not
        #: authenticated ``server.handshake_timeout`` after it is dropped.
        self.opened = accepted if accepted is not None else self.last_active
        #: (uid, pid) of the process at the other end; every ledger row it causes names them.
        self.peer: tuple[int, int] | None = None
        self._deferred = False  # lines left for a later loop iteration (``Server.wait_turn``)
        self._write_paused = False

    # -- asyncio.Protocol --------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        if self.remote is not None:
            wait = self.server.throttle.blocked(self.remote)
            if wait is not None:
                self._refuse(
                    Throttled(
                        f"too many failed logins from {self.remote}; try again in {wait:.0f}s"
                    )
                )
                return
            anonymous = self.server.anonymous
            from_there = sum(1 for c in anonymous if c.remote == self.remote)
            if len(anonymous) >= ANONYMOUS_LIMIT or from_there >= ANONYMOUS_PER_ADDRESS:
                self._refuse(Busy("too many connections waiting to authenticate; try again later"))
                return
            anonymous.add(self)
            return
        sock = transport.get_extra_info("socket")
        try:
            uid, gid, pid = host.peer_credentials(sock)
        except OSError as exc:
            self.peer = (-1, -1)
            self._refuse(Forbidden(f"the daemon cannot tell who is connecting: {exc}; refused"))
            return  # fail closed
        self.peer = (uid, pid)
        if not self.server.may_connect(uid, gid):
            self._refuse(Forbidden(f"uid {uid} may not use this daemon; {self.server.who_may}"))
            return
        self.principal = OWNER
        self._admit()

    def _admit(self) -> bool:
        """Take a place among the connections (a TCP peer: once it has authenticated)."""
        try:
            refusal = self.server.admission(self)
        except Busy as exc:
            refusal = exc.message
        if refusal is not None:
            self._refuse(Busy(refusal))
            return False
        self.server.connections.add(self)
        return True

    def authenticated(self, principal: Principal) -> bool:
        """A TCP peer has shown its token: it leaves the anonymous ones for a place of its own
        (False: there was none, and it was told ``busy``)."""
        self.server.anonymous.discard(self)
        self.principal = principal
        return self._admit()

    def _refuse(self, error: ColibriError) -> None:
        assert self.transport is not None
        self.transport.write(_encoder.encode(replies.refusal(None, error)) + b"\n")
        self.closing = True
        self.transport.close()

    def data_received(self, data: bytes) -> None:
        if self.closing:
            return
        self.last_active = self.server.loop.time()
        self._buf += data
        self._handle_lines()

    def _handle_lines(self) -> None:
        buf = self._buf
        start = 0
        handled = 0
        limit = self._line_limit()
        while not self.closing:
            nl = buf.find(b"\n", start)
            if nl < 0:
                break
            if handled == LINES_PER_TURN or not self.server.may_serve(self):
                # A peer that pipelines (or floods) gets a turn's worth, and all the connections
                # of one principal together a turn's time; the rest waits for the next loop
                # iteration, so the other connections' lines are not stuck behind it.
                del buf[:start]
                self.partial_since = None  # whole lines wait: the daemon is the slow one
                self._defer()
                return
            line = bytes(buf[start:nl])
            start = nl + 1
            if len(line) > limit:
                self._too_long(limit)
                return
            if line.endswith(b"\r"):
                line = line[:-1]
            if line.strip():
                self.server.handle_line(self, line)
                handled += 1
                limit = self._line_limit()  # the line may have been the peer's ``auth``
                self.last_active = self.server.loop.time()  # a long pipeline is not idle
        if start:
            del buf[:start]
            # The unfinished tail, if any, is a new line: its clock starts now. (A peer that
            # keeps sending whole lines is never "stalled", however long it goes on.)
            self.partial_since = None
        if len(buf) > limit:
            self._too_long(limit)
            return
        if not buf:
            self.partial_since = None
        elif self.partial_since is None:
            self.partial_since = self.server.loop.time()

    def _line_limit(self) -> int:
        # Before its ``auth`` a TCP peer is nobody: it may not make the daemon hold a megabyte.
        return self.server.config.server.max_line if self.principal else AUTH_LINE_LIMIT

    def _defer(self) -> None:
        if self._deferred or self.transport is None:
            return
        self._deferred = True
        self.transport.pause_reading()
        self.server.wait_turn(self)

    def resume(self) -> None:
        """Its turn has come again (``Server.wait_turn``): go on with the lines it holds."""
        self._deferred = False
        if self.closing:
            return
        try:
            self._handle_lines()
        except Exception:  # never leave a connection paused for good: close it
            log.exception("internal error reading a connection", extra={"event": "internal_error"})
            self.closing = True
            if self.transport is not None:
                self.transport.close()
            return
        if not self._deferred and not self._write_paused and self.transport is not None:
            self.transport.resume_reading()

    def _too_long(self, limit: int) -> None:
        self._buf.clear()
        self.server.reply_error(self, None, LineTooLong(limit))
        self.closing = True
        self.server.close_after_flush(self)

    def eof_received(self) -> bool | None:
        return None  # a half line before EOF is ignored; the transport closes

    def connection_lost(self, exc: Exception | None) -> None:
        self.closing = True
        self.server.lost(self)

    def pause_writing(self) -> None:
        self._write_paused = True
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        self._write_paused = False
        if self.transport is not None and not self.closing and not self._deferred:
            self.transport.resume_reading()

    # -- output ------------------------------------------------------------------------------

    def queue(self, message: Message) -> None:
        """Encode now (the values may change later in the batch); written at flush. An event
        takes the next ``seq`` (one event object may go to many connections, each its own)."""
        if isinstance(message, events.Event):
            message.seq = self.server.next_seq()
        self._out += _encoder.encode(message)
        self._out += b"\n"
        self.server.dirty.add(self)

    send = queue  # the board's Peer protocol

    def write_out(self) -> None:
        if not self._out or self.transport is None or self.transport.is_closing():
            self._out.clear()
            return
        self.transport.write(bytes(self._out))
        self._out.clear()
        self.last_active = self.server.loop.time()
        watched = self.subscriber or self.follows_ledger
        if watched and self.transport.get_write_buffer_size() > SUBSCRIBER_BUFFER_LIMIT:
            dropped = events.dropped("subscriber too slow: more than 8 MiB unread")
            dropped.seq = self.server.next_seq()
            self.transport.write(_encoder.encode(dropped) + b"\n")
            self.closing = True
            self.transport.close()
