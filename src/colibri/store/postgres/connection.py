"""A connection to a PostgreSQL board that gives up on a silent server.

Every connection the store and the leases make (``_connect``) is in autocommit mode, its
session set as the store relies on (``_SESSION``). A daemon's connections are bounded by its
lease: a wait gives up after ``silence`` seconds without a word from the server
(``_heard_within``), and at the daemon's lease deadline (``until``) — a server gone silent
costs the daemon's loop that long, then ``StorageUnavailable``, not the many minutes the
kernel would take to say so. psycopg is imported only inside the functions that connect.
"""

from __future__ import annotations

import functools
import math
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from colibri.core.errors import ConfigError, StorageUnavailable

if TYPE_CHECKING:
    import psycopg

    class HeedingConnection(psycopg.Connection[dict[str, Any]]):
        """What ``_heeding_class`` makes (psycopg is imported when a store connects, so the
        class itself is made then), as the type checker sees it."""

        silence: float | None
        went_silent: bool
        until: Callable[[], float | None] | None
        #: Its backend's pid, known without a round trip, for when it is no more.
        backend: int


#: The least silence (seconds) a daemon's connection waits out before it gives up, however
#: short its lease (a lease's own connection, half of it): a server under load may say
#: nothing that long, and giving up costs a new connection and the board read again.
LEAST_SILENCE = 2.0
#: The tenants a transaction sees and writes (row-level security), named for it alone.
_NAME_TENANTS = b"SELECT set_config('colibri.tenants', %s, true)"


def shown_location(dsn: str) -> str:
    """The connection string without its password, for status and messages."""
    from psycopg.conninfo import conninfo_to_dict

    try:
        parts = conninfo_to_dict(dsn)
    except Exception:  # a malformed string: say nothing of it
        return "postgresql://(unreadable connection string)"
    host = parts.get("host") or "localhost"
    port = f":{parts['port']}" if parts.get("port") else ""
    user = f"{parts['user']}@" if parts.get("user") else ""
    database = parts.get("dbname") or ""
    return f"postgresql://{user}{host}{port}/{database}"


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


#: psycopg's Wait (1 read, 2 write, 3 both) as poll's events.
_POLL_EVENTS = {1: 0x001, 2: 0x004, 3: 0x001 | 0x004}  # POLLIN, POLLOUT


class _Silent(Exception):
    """The server said nothing for as long as a connection's ``silence`` allows."""


class _PastDeadline(_Silent):
    """The server had not answered by the daemon's lease deadline: the daemon stops then, and
    its loop must be free to (a wait begun just before it would otherwise go on for up to
    the whole ``silence``, past the lease's expiry)."""


def _heard_within(
    gen: Any, pgconn: Any, silence: float, until: Callable[[], float | None] | None = None
) -> Any:
    """Drive one of psycopg's protocol generators on ``pgconn``'s socket as its own wait
    does, but give up once the socket has been neither readable nor writable for ``silence``
    seconds: a server gone silent (a network partition, a host frozen, a half-open connection)
    answers nothing, and the kernel says nothing of it for many minutes. A long answer that
    keeps coming (a big read) is not cut: every byte that arrives starts the silence again.
    ``until``: the monotonic time (asked anew at each turn: a renewal moves it) past which no
    wait goes on, silence or not — the daemon's lease deadline (``_PastDeadline``)."""
    import select

    fileno = pgconn.socket
    try:
        wanted = next(gen)
        poller = select.poll()  # no descriptor of its own, unlike an epoll selector
        poller.register(fileno, _POLL_EVENTS[wanted])
        heard = time.monotonic()
        while True:
            now = time.monotonic()
            left = heard + silence - now
            if left <= 0:
                raise _Silent
            deadline = until() if until is not None else None
            if deadline is not None:
                if deadline <= now:
                    raise _PastDeadline
                left = min(left, deadline - now)
            events = poller.poll(None if left == math.inf else left * 1000)
            if not events:
                continue
            heard = time.monotonic()
            mask = events[0][1]
            ready = (1 if mask & select.POLLIN else 0) | (2 if mask & select.POLLOUT else 0)
            if not ready:  # an error or a hang-up alone, as psycopg's own poll wait says it
                import psycopg

                pgconn.finish()  # (so that the store sees it broken, and connects again)
                raise psycopg.OperationalError("connection socket closed")
            now_wanted = gen.send(ready)
            if now_wanted != wanted:
                poller.modify(fileno, _POLL_EVENTS[now_wanted])
                wanted = now_wanted
    except StopIteration as done:
        return done.value


@functools.cache
def _heeding_class() -> type[HeedingConnection]:
    """psycopg's connection, whose waits give up on a silent server (``silence``): the daemon's
    store runs its statements on the daemon's loop, which must not hang on one."""
    import psycopg

    class Heeding(psycopg.Connection[dict[str, Any]]):
        #: Seconds of silence after which a wait gives up and closes the connection (the
        #: exchange is left half-way); None waits as psycopg does.
        silence: float | None = None
        #: Whether it was closed so: its server may be silent still, and connecting to it
        #: again could take as long (``PostgresStore._reset`` leaves that to ``reachable``).
        went_silent = False
        #: The monotonic time past which no wait goes on (None: none): the daemon's lease
        #: deadline, for the connections its loop waits on (``PostgresStore.heed_deadline``).
        until: Callable[[], float | None] | None = None

        def wait(self, gen: Any, interval: float = 0.1, timeout: float | None = None) -> Any:
            if timeout is not None:  # psycopg's own bounded waits (notifies) keep their bound
                return super().wait(gen, interval, timeout)
            if self.silence is None and (self.until is None or self.until() is None):
                return super().wait(gen, interval)
            silence = math.inf if self.silence is None else self.silence
            try:
                return _heard_within(gen, self.pgconn, silence, self.until)
            except _Silent as exc:
                self.went_silent = True
                self.pgconn.finish()
                said = (
                    "PostgreSQL had not answered by this daemon's lease deadline"
                    if isinstance(exc, _PastDeadline)
                    else f"PostgreSQL said nothing for {self.silence:g} s"
                )
                raise psycopg.OperationalError(f"{said}; the connection was closed") from None

    return cast("type[HeedingConnection]", Heeding)  # its instances are given ``backend``


#: What every connection sets for itself, whatever the server, database or role make the
#: default (``ALTER DATABASE/ROLE … SET``, ``PGOPTIONS``): the store relies on each.
#: ``read committed``: every statement sees what committed before it — the migrations read
#: the schema after taking their lock, a batch numbers its ledger rows from its tenant's head
#: as it moves it (in a snapshot taken at the fence, two batches would take one ``seq``).
#: Writes allowed; no statement, lock or idle transaction cut short but by the store's own
#: bounds (a batch sets ``lock_timeout`` and ``idle_in_transaction_session_timeout`` for
#: itself), nor an idle connection (a lease's, between renewals); row-level security applied,
#: never skipped; dates as psycopg reads them (ISO: other styles it cannot parse) and in UTC.
#: ``search_path`` is the one setting taken from the connection: it names the board's schema.
_SESSION = {
    "default_transaction_isolation": "read committed",
    "default_transaction_read_only": "off",
    "statement_timeout": "0",
    "lock_timeout": "0",
    "idle_in_transaction_session_timeout": "0",
    "row_security": "on",
    "DateStyle": "ISO, YMD",
    "TimeZone": "UTC",
}
#: PostgreSQL 14 and later end a session idle this long (0: never).
_SESSION_14 = {"idle_session_timeout": "0"}


def _session(server_version: int, durability: str) -> tuple[bytes, list[str]]:
    """The statement that sets ``_SESSION`` (and ``synchronous_commit`` by ``durability``:
    ``full`` sets it on, whatever the default) in one round trip, and its parameters."""
    settings = {**_SESSION, **(_SESSION_14 if server_version >= 140000 else {})}
    settings["synchronous_commit"] = "off" if durability == "relaxed" else "on"
    calls = ", ".join("set_config(%s, %s, false)" for _ in settings)
    return f"SELECT {calls}".encode(), [part for pair in settings.items() for part in pair]


def _set_session(conn: HeedingConnection, durability: str) -> None:
    """Run ``_session``'s statement. A default ``statement_timeout`` of a few milliseconds (a
    role's or a database's) can cancel that very statement on a busy server before it has
    lifted the timeout; it is tried again, as it is cheap and changes nothing if cancelled."""
    import psycopg

    statement = _session(conn.info.server_version, durability)
    for attempt in range(_SESSION_TRIES):
        try:
            conn.execute(*statement)
            return
        except psycopg.errors.QueryCanceled:
            if attempt == _SESSION_TRIES - 1:
                raise


#: How often a cancelled ``_session`` statement is sent before the connecting gives up.
_SESSION_TRIES = 5


def _connect(
    dsn: str,
    silence: float | None = None,
    durability: str = "full",
    until: Callable[[], float | None] | None = None,
) -> HeedingConnection:
    """A connection in autocommit mode, its session set as the store relies on (``_SESSION``);
    with ``silence``, its waits and its connecting give up after that long without a word
    from the server (connecting: 2 s at least, libpq's least ``connect_timeout``), and with
    ``until`` at that time too (``Heeding.until``)."""
    import psycopg  # not installed: the CLI says what to install (colibri.extras)
    from psycopg.rows import dict_row

    try:
        conn = _heeding_class().connect(
            dsn,
            autocommit=True,
            row_factory=dict_row,
            connect_timeout=10 if silence is None else max(2, math.ceil(silence)),
        )
    except psycopg.Error as exc:
        raise StorageUnavailable(
            f"cannot reach the PostgreSQL board at {shown_location(dsn)}: {_first_line(exc)}"
        ) from None
    conn.silence = silence
    conn.until = until
    conn.backend = conn.info.backend_pid
    try:
        _set_session(conn, durability)
    except psycopg.OperationalError as exc:
        conn.close()
        raise StorageUnavailable(
            f"the PostgreSQL board at {shown_location(dsn)} broke off as it was being "
            f"connected to ({_first_line(exc)})"
        ) from None
    except psycopg.Error as exc:
        conn.close()
        raise ConfigError(
            f"the connection to the PostgreSQL board at {shown_location(dsn)} refused the "
            f"settings the store needs ({_first_line(exc)}); connect to PostgreSQL itself, "
            "not through a proxy that forbids SET"
        ) from None
    return conn
