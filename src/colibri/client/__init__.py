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

The package: ``blocking`` (``Client``), ``async_client`` (``AsyncClient``), ``remote``
(``Remote``: a daemon over TCP), ``takeover`` (a takeover waited out, and what may be sent
again), ``transport`` (the lines on the socket, a root's socket and its daemon's pid).
"""

from colibri.client.async_client import CLOSE_WAIT, AsyncClient, EventHandler
from colibri.client.blocking import Client
from colibri.client.remote import CONNECT_TIMEOUT, MAX_HOPS, Remote
from colibri.client.takeover import (
    DEFAULT_LEASE_TTL,
    READS,
    REFUSED_WRITES,
    SUBMITS,
    TAKEOVER_FIRST_PAUSE,
    TAKEOVER_LONGEST_PAUSE,
    Takeover,
    may_send_again,
    takeover_patience,
)
from colibri.client.transport import STARTING_PATIENCE, STREAM_LIMIT, daemon_pid, socket_path

__all__ = [
    "CLOSE_WAIT",
    "CONNECT_TIMEOUT",
    "DEFAULT_LEASE_TTL",
    "MAX_HOPS",
    "READS",
    "REFUSED_WRITES",
    "STARTING_PATIENCE",
    "STREAM_LIMIT",
    "SUBMITS",
    "TAKEOVER_FIRST_PAUSE",
    "TAKEOVER_LONGEST_PAUSE",
    "AsyncClient",
    "Client",
    "EventHandler",
    "Remote",
    "Takeover",
    "daemon_pid",
    "may_send_again",
    "socket_path",
    "takeover_patience",
]
