"""The lines on the socket, and the way to a root's own daemon: encoding a request, reading a
reply or a refusal, an error reply raised as its class; the Unix socket connected to (a daemon
that is starting waited for), and the pid in its root's ``daemon.lock``."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import Any

import msgspec

from colibri.core.errors import (
    ColibriError,
    ConnectionClosed,
    DaemonNotRunning,
    RootError,
    UnexpectedReply,
    from_wire,
)
from colibri.layout import RootLayout
from colibri.trust import check_daemon

#: How long a client waits for its root's daemon while it starts (``daemon_pid`` says one runs).
STARTING_PATIENCE = 15.0

encode = msgspec.json.Encoder().encode
_decoder = msgspec.json.Decoder(dict[str, Any])
STREAM_LIMIT = 64 * 1024 * 1024


def socket_path(root: Path) -> Path:
    return RootLayout(root).socket


def is_refusal(message: dict[str, Any]) -> bool:
    """An error line without an id: about the connection (the daemon closes it next), not about
    one request."""
    return message.get("id") is None and message.get("ok") is False and "event" not in message


def decode(line: bytes) -> dict[str, Any]:
    try:
        return _decoder.decode(line)
    except msgspec.DecodeError as exc:  # not the daemon's: a reply is always a JSON object
        raise UnexpectedReply(f"the daemon's reply is not a JSON object ({exc})") from None


def connect_unix(path: str, root: Path | None, timeout: float | None) -> socket.socket:
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
            raise no_daemon(root, path) from None
        time.sleep(0.05)


def no_daemon(root: Path | None, path: str) -> ColibriError:
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


def connection_closed(why: str = "") -> ConnectionClosed:
    return ConnectionClosed(f"the daemon closed the connection{why}")


def error_of(reply: dict[str, Any]) -> ColibriError:
    return from_wire(reply.get("error"))


def raise_for(reply: dict[str, Any]) -> dict[str, Any]:
    if reply.get("ok"):
        return reply
    raise error_of(reply)


def strip_unset(fields: dict[str, Any]) -> dict[str, Any]:
    """Leave out unset options so the daemon applies its defaults."""
    return {k: v for k, v in fields.items() if v is not None}
