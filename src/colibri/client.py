"""A small client for the daemon's socket, shared by the CLI, the agent harness and your code.

    from colibri import Client
    with Client.for_root("/srv/build") as board:
        task = board.submit("upgrade zfs", capabilities=["freebsd", "zfs"])
        print(board.wait(task.id).output)

On another machine, give the daemon's TCP address, a token and the CA that signed its
certificate (``colibri tls init`` makes a test one):

    from colibri import Client, Remote
    remote = Remote.parse("tcp://board.example:7433", token=TOKEN, ca="ca.pem")
    with Client.remote(remote) as board:
        ...

``submit``, ``get``, ``wait`` and ``family`` give ``Task``s; ``call`` sends any command and
returns the reply object. Each raises the error the daemon answered, as its class of
``colibri.core.errors`` (``UnknownTask`` for ``unknown_task`` …: ``errors.from_wire``); every
one is a ``ColibriError`` with the daemon's ``code`` and ``message``. ``AsyncClient`` is the
asyncio twin; it also delivers pushed events to a callback.

A connection the daemon refuses (``busy``, ``forbidden``) or closes after a request line it
could not take (``line_too_long``) gets one error line without an id, then is closed: the
waiting calls raise that error. A connection that ends without one raises ``ConnectionClosed``
(``closed``); no call raises a bare ``OSError`` for a connection the daemon closed. No daemon
at the socket is ``DaemonNotRunning`` (``no_daemon``), and a folder given to ``for_root`` that is
no root a ``RootError`` (``root_error``), as the CLI says it; a line that is not a JSON object is
``UnexpectedReply``.

Given several daemons of a PostgreSQL hive, ``Client.remote`` waits out a takeover (the daemon
serving the tenant killed, its lease not yet taken) and sends a request lost to one again where
that is safe (``may_send_again``): a submit by an idempotency key of its own.
"""

from __future__ import annotations

import functools
import itertools
import os
import select
import socket
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from colibri.core import events
from colibri.core.errors import (
    ColibriError,
    ConfigError,
    ConnectionClosed,
    DaemonNotRunning,
    NotOwner,
    RootError,
    TlsFailed,
    UnexpectedReply,
    from_wire,
)
from colibri.core.events import AnyEvent
from colibri.core.model import Task
from colibri.endpoints import TcpAddress, parse_connect
from colibri.layout import RootLayout
from colibri.trust import check_daemon

#: How long a client waits for its root's daemon while it starts (``daemon_pid`` says one runs).
STARTING_PATIENCE = 15.0

if TYPE_CHECKING:
    import asyncio
    import ssl

_encode = msgspec.json.Encoder().encode
_decoder = msgspec.json.Decoder(dict[str, Any])
STREAM_LIMIT = 64 * 1024 * 1024
#: How long one TCP address is given to accept and finish the TLS handshake.
CONNECT_TIMEOUT = 10.0
#: How long ``AsyncClient.close`` waits for the connection to end cleanly before cutting it.
CLOSE_WAIT = 2.0
#: How many ``not_owner`` answers a client follows before it gives up (daemons whose view of
#: who serves what is a moment behind may point at each other while a lease changes hands).
MAX_HOPS = 3
#: A takeover waited out (``Client.remote``): the first pause between two tries of the
#: addresses, and the longest (each one doubles).
TAKEOVER_FIRST_PAUSE = 0.1
TAKEOVER_LONGEST_PAUSE = 1.0
#: The lease ttl a takeover is bounded by when no daemon has said its own (``not_owner``'s
#: ``ttl``): a PostgreSQL board's default (``store.lease_ttl``).
DEFAULT_LEASE_TTL = 10.0
#: Requests that change nothing: sent again after the connection was cut under them.
READS = frozenset({
    "ping", "status", "get", "list", "family", "why", "cost", "agents", "skills", "ledger",
    "schedule-list", "schedule-get",
})  # fmt: skip
#: Requests that make a task: sent again only with their ``idempotency_key`` (``Client.call``
#: gives one of its own to those sent without), so that a second send returns the first task.
SUBMITS = frozenset({"submit", "intake-task", "create-task"})
#: Writes sent again only after a refusal that says nothing was done (``NOTHING_DONE``), never
#: after a cut connection: done twice, the second would be refused (a cancel of a task that
#: has ended, a retry of one that is pending again, an answer to a question answered).
REFUSED_WRITES = frozenset({"cancel", "retry", "answer"})
#: Refusals of a request that did nothing: the daemon does not serve its tenant (now), or its
#: lease passed to another daemon and the batch was refused by the fence.
NOTHING_DONE = frozenset({"not_owner", "standby", "lease_lost"})


def takeover_patience(ttl: float) -> float:
    """How long a takeover of a lease of ``ttl`` seconds may take: the lease, renewed every
    third of its ttl, runs out within a ttl of its daemon's death; a standby or a sharing
    daemon sees it within a third more, takes it and builds the board; two seconds of slack."""
    return 2 * ttl + 2.0


def may_send_again(cmd: str, fields: dict[str, Any], error: ColibriError) -> bool:
    """Whether ``cmd`` may be sent again after ``error``, on a connection to the daemon that
    serves now: a read always; a submit with its idempotency key; a cancel, retry or answer only
    when refused before anything was done (``NOTHING_DONE``). The connection cut under it
    (``closed``) may have let it through."""
    if error.code != "closed" and error.code not in NOTHING_DONE:
        return False
    if cmd in READS:
        return True
    if cmd in SUBMITS:
        return fields.get("idempotency_key") is not None
    return cmd in REFUSED_WRITES and error.code in NOTHING_DONE


class Takeover:
    """One wait for a daemon to take over what a lost one served: tries spaced by growing
    pauses, bounded by ``takeover_patience`` of the ttl the first refusal said (or
    ``patience``: 0 waits not at all); ``on_wait`` is told once, when the wait starts."""

    def __init__(
        self, patience: float | None = None, on_wait: Callable[[str], object] | None = None
    ) -> None:
        self.patience = patience
        self.on_wait = on_wait
        self.give_up: float | None = None
        self.bound = 0.0
        self.pause = TAKEOVER_FIRST_PAUSE
        #: The lease ttl a daemon said (its ``not_owner`` refusal), kept for a wait begun on an
        #: error that says none: the address it sent us to, the lost daemon's, refusing.
        self.ttl: float | None = None

    def heard(self, error: ColibriError) -> None:
        """Keep the lease ttl ``error`` says, if it says one."""
        self.ttl = getattr(error, "ttl", None) or self.ttl

    def wait(self, error: ColibriError, what: str) -> None:
        """Sleep before the next try, or raise ``error`` once the wait is over."""
        import time

        time.sleep(self.next_pause(error, what))

    def next_pause(self, error: ColibriError, what: str) -> float:
        """How long to wait before the next try; ``error`` raised once the wait is over."""
        import time

        now = time.monotonic()
        if self.give_up is None:
            self.heard(error)
            ttl = self.ttl or DEFAULT_LEASE_TTL
            bound = takeover_patience(ttl) if self.patience is None else self.patience
            if bound <= 0:
                raise error
            self.give_up, self.bound = now + bound, bound
            if self.on_wait is not None:
                self.on_wait(f"waiting for a daemon to take over {what} (up to {bound:g} s)")
        if now + self.pause > self.give_up:
            error.message += f" (still so after waiting {self.bound:g} s for a takeover)"
            raise error
        pause, self.pause = self.pause, min(self.pause * 2, TAKEOVER_LONGEST_PAUSE)
        return pause


def _taken_over(error: ColibriError) -> str:
    """What a takeover is waited for after ``error``, as a message says it."""
    tenant = getattr(error, "tenant", None)
    if tenant:
        return f"tenant {tenant!r}"
    return "the tenant" if error.code == "not_owner" else "the board"


@dataclass(frozen=True, slots=True)
class Remote:
    """A daemon over TCP: its addresses (tried in turn), the token to act with, and the CA
    that signed its certificate (None: the system's trust store)."""

    addresses: tuple[TcpAddress, ...]
    token: str = field(repr=False)  # a secret: never in a repr, a log line or a traceback
    ca: str | None = None
    #: Plain TCP, without TLS: only to a loopback daemon run with ``--insecure-loopback``.
    insecure_loopback: bool = False

    @classmethod
    def parse(
        cls, connect: str, *, token: str, ca: str | None = None, insecure_loopback: bool = False
    ) -> Remote:
        addresses = tuple(parse_connect(connect))
        if insecure_loopback:
            exposed = [str(a) for a in addresses if not a.loopback]
            if exposed:
                raise ConfigError(
                    f"--insecure-loopback is for loopback addresses only, not {', '.join(exposed)}"
                )
        return cls(addresses, token, ca, insecure_loopback)

    def __str__(self) -> str:
        return ",".join(str(a) for a in self.addresses)

    def context(self) -> ssl.SSLContext | None:
        if self.insecure_loopback:
            return None
        from colibri.endpoints import client_context

        return client_context(self.ca)

    def past(self, address: str) -> Remote:
        """The same daemons, those after ``address`` (one that was just lost) tried first and
        it last: the next one given is where a board taken over is served from."""
        lost = [a for a in self.addresses if str(a) == address]
        if not lost:
            return self
        at = self.addresses.index(lost[0])
        order = (*self.addresses[at + 1 :], *self.addresses[:at], lost[0])
        return Remote(order, self.token, self.ca, self.insecure_loopback)

    def toward(self, refusal: NotOwner, hops: int) -> Remote | None:
        """Where to go at once after ``not_owner``: the address it names, then these again.
        None when it names none, or the hops are used up (the daemon named does not answer,
        or two daemons each point at the other): a takeover, to be waited out (``Takeover``).
        The refusal itself when its address is not one this remote may reach."""
        if refusal.address is None or hops >= MAX_HOPS:
            return None
        try:
            (owner,) = parse_connect(refusal.address)
        except (ConfigError, ValueError):
            raise refusal from None
        if self.insecure_loopback and not owner.loopback:
            raise refusal  # plain text goes to loopback only, whoever says otherwise
        if owner.unspecified:
            raise refusal  # a daemon listening on every interface: no host to go to
        rest = tuple(a for a in self.addresses if a != owner)
        return Remote((owner, *rest), self.token, self.ca, self.insecure_loopback)


def _closed_early(exc: BaseException) -> bool:
    """Whether the daemon closed the connection before the TLS handshake was done (it turns
    away a throttled address so, and peers past its limit of handshakes)."""
    import ssl

    return isinstance(exc, (ssl.SSLEOFError, ssl.SSLZeroReturnError, ConnectionResetError)) or (
        isinstance(exc, ssl.SSLError) and "EOF" in str(exc)
    )


def _handshake_timed_out(seconds: float | None) -> str:
    return (
        f"connected, but the TLS handshake was not done within {seconds or CONNECT_TIMEOUT:g}s: "
        "the daemon or the network is slow (not a certificate problem); try again"
    )


def _tls_failed(address: TcpAddress, exc: Exception) -> TlsFailed:
    if _closed_early(exc):
        return TlsFailed(
            f"the daemon at {address} closed the connection before TLS was set up: it refuses "
            "this address for now (too many failed logins: wait a minute and check the token), "
            "or too many peers are connecting"
        )
    return TlsFailed(
        f"TLS with {address} failed: {getattr(exc, 'verify_message', None) or exc}; check "
        "--tls-ca (the CA that signed the daemon's certificate) and that the host name is one "
        "the certificate names"
    )


def socket_path(root: Path) -> Path:
    return RootLayout(root).socket


def _is_refusal(message: dict[str, Any]) -> bool:
    """An error line without an id: about the connection (the daemon closes it next), not about
    one request."""
    return message.get("id") is None and message.get("ok") is False and "event" not in message


def _decode(line: bytes) -> dict[str, Any]:
    try:
        return _decoder.decode(line)
    except msgspec.DecodeError as exc:  # not the daemon's: a reply is always a JSON object
        raise UnexpectedReply(f"the daemon's reply is not a JSON object ({exc})") from None


def _connect_unix(path: str, root: Path | None, timeout: float | None) -> socket.socket:
    """Connected to the daemon's socket; while the root's daemon is starting (its lock taken,
    its socket not made yet: recovering its board), waited for, up to ``STARTING_PATIENCE``
    seconds, so that ``colibri run &`` followed by a command just works."""
    give_up: float | None = None
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(path)
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
        else:
            try:
                check_daemon(sock, path)  # before a byte is sent
            except BaseException:
                sock.close()
                raise
            return sock
        import time

        now = time.monotonic()
        if give_up is None:
            give_up = now + min(STARTING_PATIENCE, timeout or STARTING_PATIENCE)
        if root is None or now >= give_up or daemon_pid(root) is None:
            raise _no_daemon(root, path) from None
        time.sleep(0.05)


def _no_daemon(root: Path | None, path: str) -> ColibriError:
    """Nothing answers on the socket at ``path``: ``no_daemon``, or, for a ``root`` that is not
    a Colibri root at all, ``root_error`` saying so as the CLI does (no daemon could run there)."""
    if root is None:
        return DaemonNotRunning(str(Path(path).parent.parent))
    from colibri.config.roots import check_state_entry, not_a_root

    try:
        if not check_state_entry(root):
            return not_a_root(root)
    except RootError as exc:  # its .colibri is a file or a symlink: said as the CLI says it
        return exc
    return DaemonNotRunning(str(root))


def daemon_pid(root: Path) -> int | None:
    """The pid of the live daemon holding ``root``'s daemon lock, or None. The pid it wrote is
    read, never the lock taken: taking it, even for a moment, could make a daemon starting at
    that moment believe another one runs. A pid is believed only from a process that had
    started when the file was written: a daemon that crashed leaves its pid behind, and the
    system may give that pid to another process since; and, where the system says who holds
    a lock (``host.flock_holders``), only from the process that holds this one: a number in a
    file is not a daemon, and ``colibri stop`` signals what this returns."""
    from colibri import host

    try:
        fd = os.open(RootLayout(root).daemon_lock, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        text = os.read(fd, 32).decode(errors="replace").strip()
    except OSError:
        return None
    finally:
        os.close(fd)
    if not (text.isascii() and text.isdigit()) or not host.alive(pid := int(text)):
        return None
    started = host.started_at(pid)
    # (A second of slack: the portable clock of a start is whole seconds.)
    if started is None or started > info.st_mtime + 1.0:
        return None
    holders = host.flock_holders(info.st_dev, info.st_ino)
    return pid if holders is None or pid in holders else None


def _closed(why: str = "") -> ConnectionClosed:
    return ConnectionClosed(f"the daemon closed the connection{why}")


def _error_of(reply: dict[str, Any]) -> ColibriError:
    return from_wire(reply.get("error"))


def _raise_for(reply: dict[str, Any]) -> dict[str, Any]:
    if reply.get("ok"):
        return reply
    raise _error_of(reply)


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
        self._open(_connect_unix(self.path, root, timeout))

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
                takeover.wait(refusal, _taken_over(refusal))
                hops = 0
            except (DaemonNotRunning, ConnectionClosed) as lost:
                if len(given.addresses) < 2:
                    raise
                takeover.wait(lost, _taken_over(lost))

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
                    failures.append(f"{address}: {_handshake_timed_out(sock.gettimeout())}")
                    continue
                except OSError as exc:  # ssl.SSLError and its kin are OSErrors
                    sock.close()
                    raise _tls_failed(address, exc) from None
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
        self._sock.sendall(_encode({"cmd": cmd, "id": request_id, **_strip(fields)}) + b"\n")
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
            raise _closed() from None
        if not line.endswith(b"\n"):
            raise _closed(" in the middle of a reply" if line else "")
        return _decode(line)

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
                if error.code == "closed":
                    remote = remote.past(self.path)  # the one just lost tried last
                if takeover is None:
                    # The first loss: connected again at once. Where the daemons' refusals
                    # say a takeover is under way (of which tenant, its lease's ttl), it is
                    # waited out from there.
                    takeover = Takeover(patience, on_wait)
                else:
                    takeover.wait(error, _taken_over(error))
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
            if _is_refusal(reply):
                raise _error_of(reply)
            if reply.get("id") == request_id and "event" not in reply:
                return _raise_for(reply)

    def _ending(self, why: str) -> ColibriError:
        """The error that ends a connection the daemon is closing: its refusal, read from what
        is left, or ``closed`` when it closed without one."""
        try:
            while True:
                message = self.read()
                if _is_refusal(message):
                    return _error_of(message)
        except (ConnectionClosed, UnexpectedReply):
            return _closed(why)

    def events(self) -> Iterator[dict[str, Any]]:
        """Pushed events as plain objects (after ``subscribe``, or as an agent)."""
        while True:
            message = self.read()
            if "event" in message:
                yield message

    # -- typed: the values the daemon sends, as the classes both sides share ----------------

    def submit(self, text: str, **fields: Any) -> Task:
        """Submit a task (``fields``: those of ``TaskSpec``, ``idempotency_key``); the task."""
        return _task(self.call("submit", text=text, **fields))

    def get(self, task_id: str) -> Task:
        return _task(self.call("get", task=task_id))

    def wait(self, task_id: str) -> Task:
        """The task once it has ended: ``done``, ``failed`` or ``cancelled`` (a retry does not
        end the wait). Blocks as long as it takes, or the client's ``timeout``."""
        return _task(self.call("wait", task=task_id))

    def family(self, task_id: str) -> list[Task]:
        """The whole family of ``task_id`` (any member of it), from its top ancestor down,
        parents before their children; cut at about 8 MiB (list the rest by ``parent``)."""
        return _tasks(self.call("family", task=task_id))

    def typed_events(self) -> Iterator[AnyEvent]:
        """Pushed events, each as its class of ``colibri.core.events``."""
        for message in self.events():
            yield events.convert(message)


def _task(reply: dict[str, Any]) -> Task:
    return msgspec.convert(reply["task"], Task)


def _tasks(reply: dict[str, Any]) -> list[Task]:
    return msgspec.convert(reply["tasks"], list[Task])


def _strip(fields: dict[str, Any]) -> dict[str, Any]:
    """Leave out unset options so the daemon applies its defaults."""
    return {k: v for k, v in fields.items() if v is not None}


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
                    await asyncio.sleep(takeover.next_pause(refusal, _taken_over(refusal)))
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
                raise _no_daemon(self.root, self.path) from None
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
                if not _closed_early(exc):
                    raise _tls_failed(address, exc) from None
                # Turned away for now: like an address that does not answer, tried again later.
                failures.append(f"{address}: {_tls_failed(address, exc).message}")
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
            self._writer.write(_encode({**message, "id": request_id}) + b"\n")
            return await future
        finally:
            # A call given up (cancelled: its caller went away) keeps nothing here; a reply
            # that still comes for it finds no one waiting and is dropped by ``_read``.
            self._pending.pop(request_id, None)

    async def _read(self, reader: asyncio.StreamReader) -> None:
        import asyncio

        try:
            while (line := await reader.readline()).endswith(b"\n"):
                message = _decode(line)
                if _is_refusal(message):
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
        return _raise_for(await self._exchange({"cmd": cmd, **_strip(fields)}))

    # -- typed, as ``Client``'s ---------------------------------------------------------------

    async def submit(self, text: str, **fields: Any) -> Task:
        return _task(await self.call("submit", text=text, **fields))

    async def get(self, task_id: str) -> Task:
        return _task(await self.call("get", task=task_id))

    async def wait(self, task_id: str) -> Task:
        """As ``Client.wait``; other requests on the connection go on meanwhile."""
        return _task(await self.call("wait", task=task_id))

    async def family(self, task_id: str) -> list[Task]:
        return _tasks(await self.call("family", task=task_id))

    async def events(self) -> AsyncIterator[AnyEvent]:
        """Pushed events, each as its class of ``colibri.core.events``, until the connection
        ends (after ``subscribe``, or as an agent; only without ``on_event``)."""
        while (message := await self._events.get()) is not None:
            yield events.convert(message)

    def _connection_error(self, otherwise: str) -> ColibriError:
        """The daemon's refusal of this connection, or ``closed`` if it gave none."""
        if self._refusal is None:
            return ConnectionClosed(otherwise)
        return _error_of(self._refusal)

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
