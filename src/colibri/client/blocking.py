"""The blocking ``Client``: one request at a time, or ``events()`` after a subscribe; on
several daemons (``Client.remote``) it waits out a takeover and sends a lost request again
where that is safe."""

from __future__ import annotations

import itertools
import select
import socket
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from colibri.client.remote import CONNECT_TIMEOUT, Remote, handshake_timed_out, tls_failed
from colibri.client.takeover import SUBMITS, Takeover, may_send_again, taken_over
from colibri.client.transport import (
    connect_unix,
    connection_closed,
    decode,
    encode,
    error_of,
    is_refusal,
    raise_for,
    socket_path,
    strip_unset,
)
from colibri.core import events
from colibri.core.errors import (
    ColibriError,
    ConnectionClosed,
    DaemonNotRunning,
    NotOwner,
    UnexpectedReply,
)
from colibri.core.events import AnyEvent
from colibri.core.model import Task
from colibri.core.protocol import Family, Get, Request, Submit, Wait, reply_to, wire_fields
from colibri.core.request_fields import R


class Client:
    """A blocking client: one request at a time, or ``events()`` after a subscribe."""

    #: How to reach the daemons again (``Client.remote`` of several addresses, with
    #: ``resend``): the remote, the timeout, and how a takeover is waited out.
    _again: tuple[Remote, float | None, float | None, Callable[[str], object] | None] | None
    _again = None

    def __init__(
        self, path: Path | str, *, root: Path | None = None, timeout: float | None = None
    ) -> None:
        self.path = str(path)
        self._open(connect_unix(self.path, root, timeout))

    def _open(self, sock: socket.socket) -> None:
        self._ids = itertools.count(1)
        self._sock = sock
        self._file = sock.makefile("rb")
        # Over TLS the first look for a refusal is skipped: the session tickets a server sends
        # after the handshake make the socket readable with no line to read. A refusal still
        # arrives, as the answer to ``auth``.
        self._used = hasattr(sock, "pending")

    @classmethod
    def for_root(cls, root: Path | str, timeout: float | None = None) -> Client:
        root = Path(root)
        return cls(socket_path(root), root=root, timeout=timeout)

    @classmethod
    def remote(
        cls,
        remote: Remote,
        timeout: float | None = None,
        *,
        patience: float | None = None,
        on_wait: Callable[[str], object] | None = None,
        resend: bool = True,
    ) -> Client:
        """Connected to the first of ``remote``'s addresses that answers, and authenticated
        with its token (``unauthorized``, ``forbidden``, ``throttled`` if the daemon says no);
        a daemon that serves other tenants than the token's says where its tenant is served
        (``not_owner``), and the client goes there.

        A takeover is waited out: the daemon named does not answer (killed, its lease not run
        out yet), no daemon serves the tenant for the moment, or — given several addresses —
        none answers (a standby listens on none until it serves). The addresses are tried again
        with growing pauses, for ``takeover_patience`` of the lease ttl the daemons said
        (``patience`` seconds instead: 0 waits not at all); ``on_wait`` is told once, when the
        wait starts. With ``resend``, a request cut off or refused by such a loss is sent again
        on a connection to the daemon serving now, when that is safe (``may_send_again``)."""
        client = cls._reaching(remote, timeout, Takeover(patience, on_wait))
        if resend and len(remote.addresses) > 1:
            client._again = (remote, timeout, patience, on_wait)
        return client

    @classmethod
    def _reaching(cls, remote: Remote, timeout: float | None, takeover: Takeover) -> Client:
        given, hops = remote, 0
        while True:
            try:
                return cls._remote(remote, timeout)
            except NotOwner as refusal:
                takeover.heard(refusal)
                onward = remote.toward(refusal, hops)
                if onward is not None:
                    remote, hops = onward, hops + 1
                    continue
                takeover.wait(refusal, taken_over(refusal))
                hops = 0
            except (DaemonNotRunning, ConnectionClosed) as lost:
                if len(given.addresses) < 2:
                    raise
                takeover.wait(lost, taken_over(lost))

    @classmethod
    def _remote(cls, remote: Remote, timeout: float | None) -> Client:
        context = remote.context()
        failures = []
        for address in remote.addresses:
            try:
                sock = socket.create_connection(
                    (address.host, address.port), timeout=min(timeout or CONNECT_TIMEOUT,
                                                              CONNECT_TIMEOUT)
                )  # fmt: skip
            except OSError as exc:
                failures.append(f"{address}: {exc.strerror or exc}")
                continue
            if context is not None:
                try:
                    sock = context.wrap_socket(sock, server_hostname=address.host)
                except TimeoutError:
                    # Slow, not refused: no certificate was looked at yet. Like an address
                    # that does not answer, the next is tried.
                    sock.close()
                    failures.append(f"{address}: {handshake_timed_out(sock.gettimeout())}")
                    continue
                except OSError as exc:  # ssl.SSLError and its kin are OSErrors
                    sock.close()
                    raise tls_failed(address, exc) from None
            # A peer that took the connection and says nothing must not hold the client for
            # ever: the answer to auth is waited for CONNECT_TIMEOUT at most.
            sock.settimeout(CONNECT_TIMEOUT if timeout is None else min(timeout, CONNECT_TIMEOUT))
            client = cls.__new__(cls)
            client.path = str(address)
            client._open(sock)
            try:
                client.call("auth", token=remote.token)
            except TimeoutError:
                client.close()
                raise DaemonNotRunning.at(
                    str(address), f"no answer to auth within {CONNECT_TIMEOUT:g}s"
                ) from None
            except BaseException:
                client.close()
                raise
            sock.settimeout(timeout)
            return client
        raise DaemonNotRunning.at(str(remote), "; ".join(failures))

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._file.close()
        self._sock.close()

    def send(self, cmd: str, **fields: Any) -> int:
        request_id = next(self._ids)
        self._sock.sendall(encode({"cmd": cmd, "id": request_id, **strip_unset(fields)}) + b"\n")
        return request_id

    def read(self) -> dict[str, Any]:
        try:
            line = self._file.readline()
        except TimeoutError:
            raise
        except OSError:
            # Linux reports a close with our bytes still unread as a reset, once everything
            # the daemon wrote before it has been read: there is nothing more to come. (Over
            # TLS an abrupt close is an ``ssl.SSLError``, an OSError too.)
            raise connection_closed() from None
        if not line.endswith(b"\n"):
            raise connection_closed(" in the middle of a reply" if line else "")
        return decode(line)

    def call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        """Send ``cmd`` and return the daemon's reply (its error raised). On a client of
        several daemons (``Client.remote``), a request lost to a takeover is sent again where
        it is served now when that is safe (``may_send_again``); a submit without an
        ``idempotency_key`` is given one of its own first, kept across the sends."""
        if self._again is None:
            return self._call(cmd, fields)
        if cmd in SUBMITS and fields.get("idempotency_key") is None:
            import secrets

            fields["idempotency_key"] = f"submit-{secrets.token_hex(16)}"
        takeover: Takeover | None = None
        while True:
            try:
                return self._call(cmd, fields)
            except ColibriError as error:
                if not may_send_again(cmd, fields, error):
                    raise
                remote, timeout, patience, on_wait = self._again
                if isinstance(error, ConnectionClosed):
                    remote = remote.past(self.path)  # the one just lost tried last
                if takeover is None:
                    # The first loss: connected again at once. Where the daemons' refusals
                    # say a takeover is under way (of which tenant, its lease's ttl), it is
                    # waited out from there.
                    takeover = Takeover(patience, on_wait)
                else:
                    takeover.wait(error, taken_over(error))
                self.close()
                again = Client._reaching(remote, timeout, takeover)
                self.path, self._sock, self._file = again.path, again._sock, again._file
                self._ids, self._used = again._ids, again._used

    def _call(self, cmd: str, fields: dict[str, Any]) -> dict[str, Any]:
        if not self._used:
            self._used = True
            # The daemon refuses a connection (busy, forbidden) as soon as it accepts it. A
            # refusal already here is read before anything is sent into the closing socket, so
            # it does not depend on what the kernel does with bytes sent to a closed peer.
            if select.select([self._sock], [], [], 0)[0]:
                raise self._ending("")
        try:
            request_id = self.send(cmd, **fields)
        except TimeoutError:
            raise
        except OSError:
            # Refused or cut off before the request went out. What the daemon wrote before it
            # closed is still there to read (Linux keeps it, and reports the reset after it).
            raise self._ending(" before the request was sent") from None
        while True:
            reply = self.read()
            if is_refusal(reply):
                raise error_of(reply)
            if reply.get("id") == request_id and "event" not in reply:
                return raise_for(reply)

    def _ending(self, why: str) -> ColibriError:
        """The error that ends a connection the daemon is closing: its refusal, read from what
        is left, or ``closed`` when it closed without one."""
        try:
            while True:
                message = self.read()
                if is_refusal(message):
                    return error_of(message)
        except (ConnectionClosed, UnexpectedReply):
            return connection_closed(why)

    def events(self) -> Iterator[dict[str, Any]]:
        """Pushed events as plain objects (after ``subscribe``, or as an agent)."""
        while True:
            message = self.read()
            if "event" in message:
                yield message

    # -- typed: the values the daemon sends, as the classes both sides share ----------------

    def request(self, req: Request[R]) -> R:
        """Send a request of ``colibri.core.protocol``; its reply, as the struct it names
        (``colibri.core.replies``), as ``call`` sends and retries it."""
        cmd, fields = wire_fields(req)
        return reply_to(req, self.call(cmd, **fields))

    def submit(self, text: str, **fields: Any) -> Task:
        """Submit a task (``fields``: those of ``TaskSpec`` — ``after=[id, …]`` to run it once
        those have ended done —, ``idempotency_key``); the task."""
        return self.request(Submit(text=text, **fields)).task

    def get(self, task_id: str) -> Task:
        return self.request(Get(task=task_id)).task

    def wait(self, task_id: str) -> Task:
        """The task once it has ended: ``done``, ``failed`` or ``cancelled`` (a retry does not
        end the wait). Blocks as long as it takes, or the client's ``timeout``."""
        return self.request(Wait(task=task_id)).task

    def family(self, task_id: str) -> list[Task]:
        """The whole family of ``task_id`` (any member of it), from its top ancestor down,
        parents before their children; cut at about 8 MiB (list the rest by ``parent``)."""
        return self.request(Family(task=task_id)).tasks

    def typed_events(self) -> Iterator[AnyEvent]:
        """Pushed events, each as its class of ``colibri.core.events``."""
        for message in self.events():
            yield events.convert(message)
