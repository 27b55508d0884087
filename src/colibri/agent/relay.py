"""The relay: how the sessions of an agent on another machine reach its daemon.

A session talks to the daemon through ``COLIBRI_ROOT``'s socket, as on the daemon's host. For an
agent on another machine that root is the harness's own state folder, and the socket there is
this relay (0600, in a 0700 folder): it takes each request line of a session, sends it on over
TLS with the agent's token — which sessions never see — and passes the reply back under the
session's own id. So ``colibri out``, ``ask``, ``ready``, hand-offs (``submit`` inside a
session) and ``wait`` work unchanged, and each report still proves itself with its claim.

Each session's connection to the relay gets a TLS connection of its own, made at its first
request: a session that asks for what the token does not allow gets the daemon's refusal, and
the connection closed for it is its own — never the harness's (the one the agent's tasks come
on), nor another session's with a ``wait`` or an ``ask`` in flight. It is closed as soon as the
session's connection ends, whatever was still waiting for a reply: the daemon forgets those
waits and questions at once, not when the task ends. A session's requests are passed on as they
come and each reply is passed back when it arrives, as the daemon itself answers pipelined
requests. A request that finds no daemon is answered ``no_daemon`` or ``closed``, which a
session's own commands wait out (``cli.context.wait_out_busy``).

Only what a session may send is passed on; the agent's own requests (register, heartbeat …),
and those whose replies never end (``subscribe``, a ledger that follows), are refused here.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from pathlib import Path
from typing import Any

import msgspec

from colibri.client import STREAM_LIMIT, AsyncClient, Remote
from colibri.core.access import ALLOWED
from colibri.core.errors import BadJson, BadRequest, Busy, ColibriError, Forbidden
from colibri.core.replies import ErrorReply, refusal

log = logging.getLogger(__name__)

#: The harness's own requests: a session has no business sending them.
_HARNESS = {"auth", "register-agent", "heartbeat", "reclaimed", "requeue"}
#: Requests of one session passed on and not answered yet, at most; past it a request is
#: refused ``busy``.
IN_FLIGHT = 64
PASSED = frozenset(str(c.__struct_config__.tag) for c in ALLOWED["agent"]) - _HARNESS
_decode = msgspec.json.Decoder(dict[str, Any]).decode
_encode = msgspec.json.Encoder().encode


class Relay:
    def __init__(self, remote: Remote, path: Path) -> None:
        self.remote = remote
        self.path = path

    async def serve(self) -> None:
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()  # a killed predecessor's (the harness lock says none runs)
        old = os.umask(0o177)
        try:
            server = await asyncio.start_unix_server(
                self._session, path=str(self.path), limit=STREAM_LIMIT
            )
        finally:
            os.umask(old)
        try:
            async with server:
                await server.serve_forever()
        finally:
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()

    async def _session(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        upstream = _Upstream(self.remote)
        answering: set[asyncio.Task[None]] = set()
        try:
            async with asyncio.TaskGroup() as group:
                # Each request is passed on as it comes, while the next line is read: a session
                # that goes away with a ``wait`` or an ``ask`` in flight is seen to go at once.
                try:
                    while (line := await reader.readline()).endswith(b"\n"):
                        if not line.strip():
                            continue
                        if len(answering) >= IN_FLIGHT:
                            # Refused, not left unread: a session that goes is still seen to go.
                            busy = Busy(f"more than {IN_FLIGHT} requests of this session "
                                        "are waiting for a reply; wait for one")  # fmt: skip
                            writer.write(_encode(_refused(line, busy)) + b"\n")
                            await writer.drain()
                        else:
                            task = group.create_task(self._answer(line, upstream, writer))
                            answering.add(task)
                            task.add_done_callback(answering.discard)
                except (ConnectionError, ValueError):  # ValueError: a line past STREAM_LIMIT
                    pass
                # The session is gone (or cut off): no reply is owed to it any more.
                for task in answering:
                    task.cancel()
        finally:
            # Its connection to the daemon goes with it, and with that whatever the daemon
            # held for it (waits, a question's asker).
            await upstream.close()
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    async def _answer(self, line: bytes, upstream: _Upstream, writer: asyncio.StreamWriter) -> None:
        reply = await self._pass_on(line, upstream)
        with contextlib.suppress(ConnectionError):
            writer.write(_encode(reply) + b"\n")
            await writer.drain()

    async def _pass_on(self, line: bytes, upstream: _Upstream) -> dict[str, Any] | ErrorReply:
        request_id: Any = None
        try:
            try:
                message = _decode(line)
            except msgspec.DecodeError as exc:
                raise BadJson(f"not valid JSON: {exc}") from None
            request_id = message.pop("id", None)
            cmd = message.get("cmd")
            if not isinstance(cmd, str):
                raise BadRequest('every request needs a "cmd"')
            if cmd not in PASSED or (cmd == "ledger" and message.get("follow")):
                raise Forbidden(
                    f"{cmd}: not available inside a session of an agent on another machine"
                )
            reply = await (await upstream.connection()).relay(message)
        except ColibriError as exc:
            return refusal(request_id, exc)
        except OSError as exc:  # the daemon is away: as a session would see it locally
            return {
                "id": request_id, "ok": False,
                "error": {"code": "no_daemon", "message": f"the daemon is unreachable: {exc}"},
            }  # fmt: skip
        reply["id"] = request_id
        return reply


class _Upstream:
    """One session's connection to the daemon: made at its first request, again after a loss."""

    def __init__(self, remote: Remote) -> None:
        self.remote = remote
        self.client: AsyncClient | None = None
        # Requests of one session are passed on side by side: one of them connects.
        self._connecting = asyncio.Lock()

    async def connection(self) -> AsyncClient:
        async with self._connecting:
            if self.client is None or self.client.closed.is_set():
                if self.client is not None:  # lost: a daemon that took over is further on
                    self.remote = self.remote.past(self.client.path)
                await self.close()
                client = AsyncClient(self.remote)
                await client.connect()
                self.client = client
            return self.client

    async def close(self) -> None:
        if self.client is not None:
            await self.client.close()
            self.client = None


def _refused(line: bytes, error: ColibriError) -> ErrorReply:
    """``error`` as the answer to the request ``line``, under its own id if it has one."""
    try:
        request_id = _decode(line).get("id")
    except msgspec.DecodeError:
        request_id = None
    return refusal(request_id, error)
