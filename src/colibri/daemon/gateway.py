"""The TCP listeners: TLS, the handshake's deadline, and the throttle on failed logins.

Each accepted socket is first looked at without reading (``MSG_PEEK``): a TLS client's first
byte is a handshake record (0x16); anything else is someone speaking plain text to the TLS
port, who is told so in one plain line and closed, rather than left with a TLS alert it cannot
read. Then the TLS handshake, bounded by ``server.handshake_timeout`` as the wait for that
first byte is; the connection it makes is a ``Connection`` like any other, anonymous until its
``auth`` (``Server.handle_line`` lets nothing else through, and the sweep drops one that has
not authenticated by the same deadline).

Failed logins are counted per address (an IPv6 peer by its /64, which one machine usually
owns whole). Past ``server.auth_failures`` within a minute, new connections from there are
closed as they are accepted until the minute is over, whatever token they would bring:
guessing goes no faster than the limit, and a flood costs the daemon neither a TLS handshake
(a millisecond of the loop each, which the other clients would wait out) nor a store lookup.
Without TLS (``--insecure-loopback``) they are told ``throttled`` in one line first.
"""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
import logging
import socket
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import msgspec

from colibri.core.errors import ColibriError, ConfigError, Throttled, TlsRequired
from colibri.core.replies import refusal
from colibri.endpoints import TcpAddress, parse_address, server_context

if TYPE_CHECKING:
    import ssl

    from colibri.config.settings import ServerSettings
    from colibri.daemon.connection import Connection

log = logging.getLogger(__name__)

#: The first byte of every TLS record that opens a handshake.
TLS_HANDSHAKE = 0x16
#: Addresses whose failures are remembered at once; the oldest is forgotten past it, so a
#: flood from many addresses cannot grow memory without end.
TRACKED_ADDRESSES = 65_536
#: TCP peers of one address still in their handshake; more are closed at once, so one host
#: opening sockets and saying nothing cannot take the daemon's file descriptors.
PENDING_PER_ADDRESS = 32
WINDOW = 60.0


class Throttle:
    """Failed logins per address over the last ``window`` seconds."""

    def __init__(
        self, limit: int, window: float = WINDOW, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.limit = limit
        self.window = window
        self.clock = clock
        self._failures: OrderedDict[str, deque[float]] = OrderedDict()
        #: Refusals since the last summary line, by address.
        self.refused: dict[str, int] = {}

    @staticmethod
    def key(address: str) -> str:
        try:
            ip = ipaddress.ip_address(address)
        except ValueError:
            return address
        if isinstance(ip, ipaddress.IPv6Address):
            if ip.ipv4_mapped is not None:
                return str(ip.ipv4_mapped)
            return str(ipaddress.ip_network(f"{ip}/64", strict=False))
        return str(ip)

    def _recent(self, key: str, now: float) -> deque[float] | None:
        times = self._failures.get(key)
        if times is None:
            return None
        while times and times[0] <= now - self.window:
            times.popleft()
        if not times:
            del self._failures[key]
            return None
        return times

    def failed(self, address: str) -> bool:
        """Count a failed login; True if it made the address throttled (only the failure that
        reached the limit: the ones after it are summed up by ``take_refused``)."""
        now, key = self.clock(), self.key(address)
        times = self._recent(key, now)
        if times is None:
            times = self._failures[key] = deque()
            if len(self._failures) > TRACKED_ADDRESSES:
                self._failures.popitem(last=False)
        self._failures.move_to_end(key)
        already = len(times) >= self.limit
        times.append(now)
        if len(times) > self.limit:  # bounded: what is past the limit is not needed
            times.popleft()
        return not already and len(times) == self.limit

    def blocked(self, address: str) -> float | None:
        """Seconds until ``address`` may try again, or None if it may now."""
        now, key = self.clock(), self.key(address)
        times = self._recent(key, now)
        if times is None or len(times) < self.limit:
            return None
        self.refused[key] = self.refused.get(key, 0) + 1
        return max(0.0, times[0] + self.window - now)

    def take_refused(self) -> dict[str, int]:
        refused, self.refused = self.refused, {}
        return refused


class GatewayHost(Protocol):
    """What the gateway asks of the server it admits peers to (``Server`` is one): its loop,
    who is throttled, and a connection for a peer that got through."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...
    @property
    def throttle(self) -> Throttle: ...
    def connection_for(self, remote: str, accepted: float) -> Connection: ...


class Gateway:
    def __init__(self, server: GatewayHost, settings: ServerSettings) -> None:
        self.server = server
        self.settings = settings
        self.context: ssl.SSLContext | None = None
        if settings.tls_cert is not None and settings.tls_key is not None:
            self.context = server_context(settings.tls_cert, settings.tls_key)
        self._sockets: list[socket.socket] = []
        #: Peers accepted and not yet a connection (before or in their handshake), by address.
        self._pending: dict[str, int] = {}
        self._pending_total = 0
        self._turned_away = 0
        self._tasks: set[asyncio.Task[None]] = set()
        #: The addresses listened on, as bound (a port 0 replaced by the one given).
        self.bound: list[TcpAddress] = []

    def start(self) -> None:
        for text in self.settings.listen:
            address = parse_address(text, listening=True)
            family = socket.AF_INET6 if ":" in address.host else socket.AF_INET
            try:
                sock = socket.create_server(
                    (address.host, address.port), family=family, backlog=1024, reuse_port=False
                )
            except OSError as exc:
                self.close()
                raise ConfigError(
                    f"cannot listen on {address}: {exc.strerror or exc}; pick another address "
                    "or port (--listen)"
                ) from None
            sock.setblocking(False)
            self._sockets.append(sock)
            port = sock.getsockname()[1]
            self.bound.append(TcpAddress(address.host, port))
            self._spawn(self._accept(sock))

    def _spawn(self, work: object) -> None:
        task = asyncio.ensure_future(work)  # type: ignore[call-overload]
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self) -> None:
        for task in list(self._tasks):
            task.cancel()
        for sock in self._sockets:
            sock.close()
        self._sockets.clear()

    async def _accept(self, listener: socket.socket) -> None:
        loop = self.server.loop
        while True:
            try:
                sock, peer = await loop.sock_accept(listener)
            except OSError as exc:  # EMFILE and the like: wait, do not spin
                log.warning("accept failed: %s", exc, extra={"event": "accept_failed"})
                await asyncio.sleep(0.1)
                continue
            address = str(peer[0])
            key = Throttle.key(address)
            wait = self.server.throttle.blocked(address)
            if wait is not None:
                if self.context is None:
                    error = Throttled(
                        f"too many failed logins from {address}; try again in {wait:.0f}s"
                    )
                    _send_line(sock, error)
                sock.close()
                continue
            if (
                self._pending.get(key, 0) >= PENDING_PER_ADDRESS
                or self._pending_total >= self.settings.remote_connections
            ):
                sock.close()
                self._turned_away += 1
                if self._turned_away in (1, 10, 100) or self._turned_away % 1000 == 0:
                    log.warning(
                        f"{address}: too many TCP peers still in their handshake; closed "
                        f"({self._turned_away} so far)",
                        extra={"event": "handshakes_full", "peer": address},
                    )
                continue
            self._pending[key] = self._pending.get(key, 0) + 1
            self._pending_total += 1
            sock.setblocking(False)
            self._spawn(self._admit(sock, address, key))

    async def _admit(self, sock: socket.socket, peer: str, key: str) -> None:
        try:
            await self._handshake(sock, peer)
        finally:
            self._pending_total -= 1
            left = self._pending.pop(key, 1) - 1
            if left:
                self._pending[key] = left

    async def _handshake(self, sock: socket.socket, peer: str) -> None:
        loop = self.server.loop
        timeout = self.settings.handshake_timeout
        started = loop.time()
        try:
            if self.context is not None:
                first = await asyncio.wait_for(_peek(loop, sock), timeout)
                if not first:
                    sock.close()
                    return
                if first[0] != TLS_HANDSHAKE:
                    self._plain_text(sock, peer)
                    return
            left = max(0.1, timeout - (loop.time() - started))
            await loop.connect_accepted_socket(
                lambda: self.server.connection_for(peer, started),
                sock,
                ssl=self.context,
                ssl_handshake_timeout=left if self.context is not None else None,
            )
        except (TimeoutError, OSError) as exc:  # ssl.SSLError is an OSError
            log.info(
                "dropped a TCP peer before its TLS handshake was done: %s",
                type(exc).__name__ if isinstance(exc, TimeoutError) else exc,
                extra={"event": "handshake_failed", "peer": peer},
            )
            sock.close()

    def _plain_text(self, sock: socket.socket, peer: str) -> None:
        error = TlsRequired(
            "this port speaks TLS: connect with a TLS client (colibri --connect tcp://… "
            "--tls-ca CA.pem), not plain text"
        )
        # Not counted as a failed login: a health check or a stray nc must not get an address
        # (and everyone behind it) throttled.
        log.warning(
            "plain text on the TLS port refused",
            extra={"event": "tls_required", "peer": peer},
        )
        _send_line(sock, error)
        sock.close()


def _send_line(sock: socket.socket, error: ColibriError) -> None:
    """One refusal line, in plain text, as far as the socket takes it without waiting."""
    line = msgspec.json.encode(refusal(None, error)) + b"\n"
    with contextlib.suppress(OSError):
        sock.send(line)


async def _peek(loop: asyncio.AbstractEventLoop, sock: socket.socket) -> bytes:
    """The first byte waiting on ``sock``, left there to read; b"" at end of stream."""
    while True:
        try:
            return sock.recv(1, socket.MSG_PEEK)
        except (BlockingIOError, InterruptedError):
            pass
        readable: asyncio.Future[None] = loop.create_future()
        loop.add_reader(sock.fileno(), _settle, readable)
        try:
            await readable
        finally:
            loop.remove_reader(sock.fileno())


def _settle(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
