"""``AsyncClient``: the asyncio twin of ``Client``, many requests in flight on one connection;
pushed events to a callback, or typed from ``events()``; ``relay`` for a proxy. asyncio is
imported inside it, never at the top: the blocking client (the CLI) needs none of it."""

from __future__ import annotations

import functools
import itertools
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from colibri.client.remote import CONNECT_TIMEOUT, Remote, closed_early, tls_failed
from colibri.client.takeover import Takeover, taken_over
from colibri.client.transport import (
    STREAM_LIMIT,
    decode,
    encode,
    error_of,
    is_refusal,
    no_daemon,
    raise_for,
    socket_path,
    strip_unset,
)
from colibri.core import events
from colibri.core.errors import ColibriError, ConnectionClosed, DaemonNotRunning, NotOwner
from colibri.core.events import AnyEvent
from colibri.core.model import Task
from colibri.core.protocol import (
    Family,
    Get,
    ListTasks,
    Request,
    ScheduleList,
    Submit,
    Wait,
    reply_to,
    wire_fields,
)
from colibri.core.request_fields import R
from colibri.core.schedules import Schedule
from colibri.trust import check_daemon

if TYPE_CHECKING:
    import asyncio

#: How long ``AsyncClient.close`` waits for the connection to end cleanly before cutting it.
CLOSE_WAIT = 2.0


EventHandler = Callable[[dict[str, Any]], Awaitable[None] | None]


class AsyncClient:
    """An asyncio client: many requests in flight; pushed events go to ``on_event``, or,
    without one, to ``events()``, typed."""

    def __init__(self, path: Path | str | Remote, on_event: EventHandler | None = None) -> None:
        #: A Unix socket's path, or a daemon over TCP (connected to and authenticated with).
        self.target = path
        self.path = str(path)
        #: The root it was made for (``for_root``), None when given a socket or a daemon over TCP.
        self.root: Path | None = None
        self.on_event = on_event
        self._ids = itertools.count(1)
        self._fresh()

    def _fresh(self) -> None:
        """The state of one connection, as before it is made."""
        import asyncio  # here, not at the top: the blocking client (the CLI) needs none of it

        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._reader_task: asyncio.Task[None] | None = None
        self._writer: asyncio.StreamWriter | None = None
        #: The error line the daemon sent for the whole connection (busy, line_too_long …).
        self._refusal: dict[str, Any] | None = None
        self.closed = asyncio.Event()
        #: Events for ``events()`` (when there is no ``on_event``); None once the connection ends.
        self._events: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        #: Over TCP: who the daemon took us for (the ``auth`` reply: role, tenant, agent).
        self.principal: dict[str, Any] | None = None

    @classmethod
    def for_root(cls, root: Path | str, on_event: EventHandler | None = None) -> AsyncClient:
        """Not connected yet: ``await connect()``, or ``async with``."""
        client = cls(socket_path(Path(root)), on_event)
        client.root = Path(root)
        return client

    async def __aenter__(self) -> AsyncClient:
        return await self.connect()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    async def connect(self) -> AsyncClient:
        """Connected (and, over TCP, authenticated); a daemon that serves other tenants than
        the token's says where its tenant is served (``not_owner``), and the client goes
        there."""
        if isinstance(self.target, Remote):
            import asyncio

            takeover, hops = Takeover(), 0
            while True:
                try:
                    return await self._open()
                except NotOwner as refusal:
                    self._fresh()  # (that connection was closed by _open)
                    onward = self.target.toward(refusal, hops)
                    if onward is not None:
                        self.target, hops = onward, hops + 1
                        continue
                    await asyncio.sleep(takeover.next_pause(refusal, taken_over(refusal)))
                    hops = 0
        return await self._open()

    async def _open(self) -> AsyncClient:
        import asyncio

        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=STREAM_LIMIT, loop=loop)
        protocol = _keeping_last_words()(reader, loop=loop)
        if isinstance(self.target, Remote):
            transport = await self._connect_tcp(self.target, protocol)
        else:
            try:
                transport, _ = await loop.create_unix_connection(lambda: protocol, self.path)
            except (FileNotFoundError, ConnectionRefusedError):
                raise no_daemon(self.root, self.path) from None
            try:
                check_daemon(transport.get_extra_info("socket"), self.path)  # before a byte
            except BaseException:
                transport.abort()
                raise
        self._writer = asyncio.StreamWriter(transport, protocol, reader, loop)
        self._reader_task = asyncio.create_task(self._read(reader), name="client-reader")
        if isinstance(self.target, Remote):
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT):  # a peer that says nothing
                    self.principal = await self.call("auth", token=self.target.token)
            except TimeoutError:
                await self.close()
                raise DaemonNotRunning.at(
                    str(self.path), f"no answer to auth within {CONNECT_TIMEOUT:g}s"
                ) from None
            except BaseException:
                await self.close()
                raise
        return self

    async def _connect_tcp(
        self, remote: Remote, protocol: asyncio.BaseProtocol
    ) -> asyncio.Transport:
        import asyncio
        import ssl

        loop = asyncio.get_running_loop()
        context = remote.context()
        failures = []
        for address in remote.addresses:
            try:
                async with asyncio.timeout(CONNECT_TIMEOUT):
                    transport, _ = await loop.create_connection(
                        lambda: protocol, address.host, address.port, ssl=context,
                        server_hostname=address.host if context is not None else None,
                    )  # fmt: skip
            except ssl.SSLError as exc:
                if not closed_early(exc):
                    raise tls_failed(address, exc) from None
                # Turned away for now: like an address that does not answer, tried again later.
                failures.append(f"{address}: {tls_failed(address, exc).message}")
                continue
            except TimeoutError:
                failures.append(
                    f"{address}: no connection within {CONNECT_TIMEOUT:g}s"
                    if context is None
                    else f"{address}: no connection and TLS handshake within "
                    f"{CONNECT_TIMEOUT:g}s: the daemon or the network is slow; try again"
                )
                continue
            except OSError as exc:
                failures.append(f"{address}: {exc.strerror or exc}")
                continue
            self.path = str(address)
            return transport
        raise DaemonNotRunning.at(str(remote), "; ".join(failures))

    async def relay(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send one request object as it is (a new ``id`` replaces its own) and return the
        reply object as it came, ``ok`` or not — for a proxy that passes replies on."""
        return await self._exchange(message)

    async def _exchange(self, message: dict[str, Any]) -> dict[str, Any]:
        """Send ``message`` under a new id; its reply, ``ok`` or not."""
        if self._writer is None or self.closed.is_set():
            raise self._connection_error("not connected to the daemon")
        import asyncio

        request_id = next(self._ids)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[request_id] = future
        try:
            self._writer.write(encode({**message, "id": request_id}) + b"\n")
            return await future
        finally:
            # A call given up (cancelled: its caller went away) keeps nothing here; a reply
            # that still comes for it finds no one waiting and is dropped by ``_read``.
            self._pending.pop(request_id, None)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        import asyncio

        try:
            while (line := await reader.readline()).endswith(b"\n"):
                message = decode(line)
                if is_refusal(message):
                    # The daemon closes the connection next; the calls still waiting fail with
                    # this error then.
                    self._refusal = message
                    continue
                if "event" in message:
                    if self.on_event is not None:
                        result = self.on_event(message)
                        if result is not None:
                            await result
                    else:
                        self._events.put_nowait(message)
                    continue
                future = self._pending.pop(message.get("id"), None)  # type: ignore[arg-type]
                if future is not None and not future.done():
                    future.set_result(message)
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            self.closed.set()
            self._events.put_nowait(None)
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(self._connection_error("the daemon closed the connection"))
            self._pending.clear()

    async def call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        return raise_for(await self._exchange({"cmd": cmd, **strip_unset(fields)}))

    # -- typed, as ``Client``'s ---------------------------------------------------------------

    async def request(self, req: Request[R]) -> R:
        """As ``Client.request``; other requests on the connection go on meanwhile."""
        cmd, fields = wire_fields(req)
        return reply_to(req, await self.call(cmd, **fields))

    async def submit(self, text: str, **fields: Any) -> Task:
        return (await self.request(Submit(text=text, **fields))).task

    async def get(self, task_id: str) -> Task:
        return (await self.request(Get(task=task_id))).task

    async def wait(self, task_id: str) -> Task:
        """As ``Client.wait``; other requests on the connection go on meanwhile."""
        return (await self.request(Wait(task=task_id))).task

    async def family(self, task_id: str) -> list[Task]:
        return (await self.request(Family(task=task_id))).tasks

    async def all_tasks(self, page: int = 10_000) -> list[Task]:
        """Every task the connection may see, ``list`` page after page (a board's first load:
        the TUI's, the web view's)."""
        tasks: list[Task] = []
        after = None
        while True:
            listed = await self.request(ListTasks(limit=page, after=after))
            tasks += listed.tasks
            after = listed.next
            if after is None:
                return tasks

    async def schedules(self) -> list[Schedule]:
        """The schedules; none for a token that may not list them."""
        try:
            return (await self.request(ScheduleList())).schedules
        except ColibriError:
            return []

    async def events(self) -> AsyncIterator[AnyEvent]:
        """Pushed events, each as its class of ``colibri.core.events``, until the connection
        ends (after ``subscribe``, or as an agent; only without ``on_event``)."""
        while (message := await self._events.get()) is not None:
            yield events.convert(message)

    def _connection_error(self, otherwise: str) -> ColibriError:
        """The daemon's refusal of this connection, or ``closed`` if it gave none."""
        if self._refusal is None:
            return ConnectionClosed(otherwise)
        return error_of(self._refusal)

    async def close(self) -> None:
        import asyncio

        if self._writer is not None:
            writer = self._writer
            writer.close()
            closed = False
            try:
                # Over TLS the close waits for the daemon's close_notify; a daemon that never
                # sends it (gone, stopped) would keep the socket until asyncio's own 30 s.
                async with asyncio.timeout(CLOSE_WAIT):
                    await writer.wait_closed()
                closed = True
            except (ConnectionError, OSError, TimeoutError):
                pass
            finally:
                if not closed:
                    # Timed out, refused, or cancelled while waiting (a loop being shut down):
                    # the socket goes now, not left for the garbage collector to find open.
                    writer.transport.abort()
        if self._reader_task is not None:
            self._reader_task.cancel()
            try:
                await self._reader_task
            except asyncio.CancelledError:
                pass


@functools.cache
def _keeping_last_words() -> type[asyncio.StreamReaderProtocol]:
    """The stream protocol of ``AsyncClient`` (built on first use: the CLI never imports
    asyncio).

    A write into a connection the daemon has closed (EPIPE, as when it stops reading at a line
    longer than ``server.max_line``) makes asyncio drop the connection at once, with what the
    daemon wrote before closing still unread in the kernel: its refusal would be lost. The
    socket is still open while ``connection_lost`` runs, so that is read first, and the stream
    ends as after any close.
    """
    import asyncio

    class KeepingLastWords(asyncio.StreamReaderProtocol):
        def __init__(self, reader: asyncio.StreamReader, loop: asyncio.AbstractEventLoop) -> None:
            super().__init__(reader, loop=loop)
            self._reader = reader
            self._sock: tuple[int, int, int] | None = None  # fd, device, inode

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            sock = transport.get_extra_info("socket")
            # Only a plain Unix socket: under TLS the raw bytes are not the daemon's words.
            if sock is not None and sock.family == socket.AF_UNIX:
                self._sock = _identity(sock.fileno())
            super().connection_made(transport)

        def connection_lost(self, exc: Exception | None) -> None:
            # (A loop that has already closed the fd, or reused its number, is left alone.)
            if (
                exc is not None
                and self._sock is not None
                and _identity(self._sock[0]) == self._sock
            ):
                if left := _unread(self._sock[0]):
                    self._reader.feed_data(left)
                    exc = None
            super().connection_lost(exc)

    return KeepingLastWords


def _identity(fd: int) -> tuple[int, int, int] | None:
    try:
        stat = os.fstat(fd)
    except OSError:
        return None
    return fd, stat.st_dev, stat.st_ino


def _unread(fd: int) -> bytes:
    """What is left to read on the socket ``fd`` now, without waiting."""
    try:
        spare = socket.fromfd(fd, socket.AF_UNIX, socket.SOCK_STREAM)  # a dup: ours to close
    except OSError:
        return b""
    chunks = []
    with spare:
        spare.setblocking(False)
        while True:
            try:
                chunk = spare.recv(65536)
            except OSError:  # nothing more for now, or the reset that follows the last byte
                break
            if not chunk:
                break
            chunks.append(chunk)
    return b"".join(chunks)
