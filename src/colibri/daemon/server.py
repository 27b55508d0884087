"""The socket server: framing, peer checks, and the group commit that gates every output.

Requests are handled as they arrive, each writing into the store's open transaction. Replies,
assignments and events are held back. One callback per loop iteration (``flush``) then runs a
dispatch pass, commits once, and only then writes everything out and appends the new ledger
rows to ``ledger.jsonl`` (the mirror is completed from the store at start-up if a crash comes
between the two). So an acknowledgement always follows the commit that made it durable, and
a burst of requests from many clients costs one fsync instead of one each.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Hashable
from typing import Any

import msgspec

from colibri.config import Config
from colibri.core import protocol
from colibri.core.errors import (
    Busy,
    ColibriError,
    Forbidden,
    Internal,
    LeaseLost,
    NotOwner,
    StorageUnavailable,
    Throttled,
    Unauthorized,
)
from colibri.core.events import LedgerAppended
from colibri.core.model import LedgerEntry, rfc3339
from colibri.daemon import crashpoints
from colibri.daemon.board import Board
from colibri.daemon.bus import Bus
from colibri.daemon.connection import Connection
from colibri.daemon.gateway import Throttle
from colibri.daemon.ledger import LedgerMirror
from colibri.store import BatchRefused

log = logging.getLogger(__name__)

_encoder = msgspec.json.Encoder()
#: How long a peer's socket-group membership, once looked up, is taken as known.
MEMBERSHIP_TTL = 60.0
#: At the connection cap, a newcomer takes the place of an anonymous connection that has
#: said nothing for at least this long (the one silent longest).
EVICT_AFTER = 5.0
#: The time one principal's requests may take in one loop turn (its connections together);
#: past it they wait for the next turn, after everyone else's of this one.
TURN_TIME = 0.001


def owner_reserve(max_connections: int) -> int:
    """The places of the Unix socket's ``max_connections`` that only the daemon's owner (and
    root) may take: an eighth, 1 at least and 8 at most, so that the members of a socket group
    can never fill the socket and lock the owner out."""
    return 0 if max_connections < 2 else min(8, max(1, max_connections // 8))


def in_group(uid: int, gid: int, group: int) -> bool:
    """Whether a peer (uid, with its process's gid) belongs to ``group``: by that gid, or as
    a listed member in the group database."""
    if gid == group:
        return True
    import grp
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name in grp.getgrgid(group).gr_mem
    except KeyError:
        return False


def _not_attached(req: protocol.Request, conn: Connection) -> dict[str, Any] | None:
    raise Internal("the server has no command handler")


class Server:
    def __init__(self, config: Config, board: Board, mirror: LedgerMirror) -> None:
        self.config = config
        self.board = board
        self.mirror = mirror
        # Given by ``attach`` (daemon/app.py wires the daemon): who answers requests, who
        # holds replies still to come, what is reloaded after a rollback.
        self._handle: Callable[[protocol.Request, Connection], dict[str, Any] | None] = (
            _not_attached
        )
        self.bus: Bus | None = None
        self._reload: Callable[[], None] = lambda: None
        self.owner_uid = os.getuid()
        self._membership: dict[tuple[int, int], tuple[float, bool]] = {}
        group = config.server.socket_group_name
        self.who_may = (
            f"only its owner (uid {self.owner_uid}) and members of group {group!r} may"
            if group is not None
            else f"only its owner (uid {self.owner_uid}) may"
        )
        self.loop = asyncio.get_running_loop()
        self.connections: set[Connection] = set()
        #: TCP peers past TLS that have not authenticated yet (``Connection.authenticated``).
        self.anonymous: set[Connection] = set()
        self.dirty: set[Connection] = set()
        self._replies: list[tuple[Connection, dict[str, Any]]] = []
        self._to_close: list[Connection] = []
        self._flush_scheduled = False
        self._batch_error: ColibriError | None = None
        self._ledger_followers: set[Connection] = set()
        self._seq = 0
        self.commits = 0
        #: Set at shutdown, after the last flush: the store is about to close.
        self.closed = False
        self.on_flushed: Callable[[], None] | None = None
        #: Told each committed batch's ledger rows and how long its commit took (metrics).
        self.on_committed: Callable[[list[LedgerEntry], float], None] | None = None
        #: Why the daemon must stop at once (memory and store can no longer be made to
        #: agree); set by ``fatal``, which also calls ``on_fatal``.
        self.fatal_error: str | None = None
        self.on_fatal: Callable[[], None] = lambda: None
        #: Why the board cannot be served now: a batch failed on the store and the board could
        #: not be reloaded from it (the store is unreachable). Until ``recover`` reloads it,
        #: every request but ``ping`` is answered ``storage_unavailable`` and nothing runs.
        self.unavailable: str | None = None
        #: The TCP addresses listened on, as bound (``gateway.py``).
        self.listening: list[str] = []
        #: Where Prometheus scrapes the metrics (``daemon/metrics.py``), if it may.
        self.metrics_url: str | None = None
        #: Failed logins over TCP, per address (``gateway.py``).
        self.throttle = Throttle(config.server.auth_failures)
        #: Time each principal's requests took this loop turn (``may_serve``), and the
        #: connections waiting for the next turn, by principal, in the order they are served.
        self._spent: dict[Hashable, float] = {}
        self._waiting: dict[Hashable, deque[Connection]] = {}
        self._turn_scheduled = False

    def attach(
        self,
        handle: Callable[[protocol.Request, Connection], dict[str, Any] | None],
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

    # -- requests ----------------------------------------------------------------------------

    def may_connect(self, uid: int, gid: int) -> bool:
        if uid == self.owner_uid:
            return True
        group = self.config.server.socket_group
        if uid < 0 or group is None:
            return False
        # The group database may be remote (LDAP, SSSD): ask it at most once a minute per
        # peer, not on every connection, so a slow lookup cannot keep stalling the loop.
        now = self.loop.time()
        known = self._membership.get((uid, gid))
        if known is None or known[0] < now:
            known = (now + MEMBERSHIP_TTL, in_group(uid, gid, group))
            self._membership[(uid, gid)] = known
        return known[1]

    def connection_for(self, remote: str, accepted: float) -> Connection:
        """A connection for a TCP peer at ``remote``, accepted at ``accepted`` (loop time)."""
        return Connection(self, remote, accepted)

    def admission(self, conn: Connection) -> str | None:
        """Why ``conn`` may not take a place among the connections, or None if it may. The Unix
        socket's peers have ``server.max_connections`` places; the TCP peers that have
        authenticated ``server.remote_connections`` of their own, one token and one tenant a
        share of those, so that no token can crowd out the owner or another tenant."""
        settings = self.config.server
        remote = conn.remote is not None
        if remote:
            self.check_share(conn, "connections")
        cap = settings.remote_connections if remote else settings.max_connections
        if not remote and (conn.peer or (-1, -1))[0] not in (self.owner_uid, 0):
            cap -= owner_reserve(cap)  # a socket group's members leave the owner room
        held = sum(1 for c in self.connections if (c.remote is not None) == remote)
        if held < cap or self.evict_idle(remote):
            return None
        if remote:
            return f"too many TCP connections ({held}, server.remote_connections); try again later"
        if cap < settings.max_connections:
            return (
                f"too many connections ({held} of server.max_connections "
                f"{settings.max_connections}, the last {settings.max_connections - cap} kept for "
                "the daemon's owner); try again later"
            )
        return "too many connections; try again later"

    def check_share(self, conn: Connection, kind: str) -> None:
        """Raise ``Busy`` if ``conn``'s token, or its tenant's tokens together, hold as many
        ``kind`` as ``server.token_<kind>`` or ``server.tenant_<kind>`` allow: ``connections``
        (``conn`` not yet among them), ``waits`` still to be answered or ledger ``follows``.
        The owner's connections have no share: they are never counted or refused."""
        principal = conn.principal
        if principal is None or principal.is_owner:
            return
        count: Callable[[Connection], int] = {
            "connections": lambda c: 1,
            "waits": self.board.audience.waiting,
            "follows": lambda c: int(c.follows_ledger),
        }[kind]
        token = tenant = 0
        for other in self.connections:
            theirs = other.principal
            if other.remote is None or theirs is None or theirs.tenant != principal.tenant:
                continue
            n = count(other)
            tenant += n
            if theirs.token == principal.token:
                token += n
        settings = self.config.server
        what = {"connections": "connections open", "waits": "waits unanswered",
                "follows": "ledger follows"}[kind]  # fmt: skip
        if tenant >= getattr(settings, f"tenant_{kind}"):
            whose, n, setting = f"tenant {principal.tenant}'s tokens", tenant, f"tenant_{kind}"
        elif token >= getattr(settings, f"token_{kind}"):
            whose, n, setting = f"token {principal.token}", token, f"token_{kind}"
        else:
            return
        raise Busy(
            f"{whose} {'have' if whose.endswith('s') else 'has'} {n} {what}, as many as "
            f"server.{setting} allows; end some first, or have the daemon's owner raise it"
        )

    def login_failed(self, remote: str) -> None:
        if self.throttle.failed(remote):
            log.warning(
                f"{remote}: {self.throttle.limit} failed logins within a minute; its new "
                "connections are refused (throttled) until the minute is over",
                extra={"event": "login_throttled", "peer": remote},
            )

    # -- turns -------------------------------------------------------------------------------

    @staticmethod
    def _principal_of(conn: Connection) -> Hashable:
        """Whose time a connection's requests take: a Unix peer's uid, a token's tenant (all
        its tokens together), an anonymous TCP peer's address."""
        if conn.remote is None:
            return ("uid", conn.peer[0] if conn.peer else -1)
        if conn.principal is None:
            return ("address", conn.remote)
        return ("tenant", conn.principal.tenant)

    def may_serve(self, conn: Connection) -> bool:
        """Whether ``conn``'s principal has time left in this loop turn (``TURN_TIME``).
        Reads run on the loop (pipelined requests are answered as if run in order), so
        a principal that pipelines expensive reads must leave the turn to the others: the
        owner's ping is answered within a turn whatever a tenant asks for."""
        return self._spent.get(self._principal_of(conn), 0.0) < TURN_TIME

    def wait_turn(self, conn: Connection) -> None:
        """``conn`` has lines left that must wait: it is resumed next turn, behind the
        connections of its principal that waited longer (round-robin)."""
        queue = self._waiting.setdefault(self._principal_of(conn), deque())
        queue.append(conn)
        self._next_turn_soon()

    def _next_turn_soon(self) -> None:
        if not self._turn_scheduled:
            self._turn_scheduled = True
            self.loop.call_soon(self._next_turn)

    def _next_turn(self) -> None:
        """A new loop turn: every principal has its time again, and the waiting connections
        are resumed, each principal's in turn; those a principal had no time left for go
        first at the next turn."""
        self._turn_scheduled = False
        self._spent.clear()
        waiting, self._waiting = self._waiting, {}
        for key, queue in waiting.items():
            while queue:
                conn = queue.popleft()
                conn.resume()
                if queue and self._spent.get(key, 0.0) >= TURN_TIME:
                    self._waiting.setdefault(key, deque()).extendleft(reversed(queue))
                    self._next_turn_soon()
                    break

    def handle_line(self, conn: Connection, line: bytes) -> None:
        started = time.perf_counter()
        try:
            self._handle_line(conn, line)
        finally:
            key = self._principal_of(conn)
            self._spent[key] = self._spent.get(key, 0.0) + time.perf_counter() - started
            self._next_turn_soon()

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
            self._reply(conn, {"id": req.id, "ok": True, **reply})

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

    def close_token(self, token_id: str) -> int:
        """Close every connection that authenticated with this token (it was revoked); how
        many there were."""
        closing = [
            c for c in self.connections if c.principal is not None and c.principal.token == token_id
        ]
        for conn in closing:
            conn.closing = True
            self.close_after_flush(conn)
        return len(closing)

    def close_unserved(self) -> int:
        """Close every connection of a tenant this daemon no longer serves — a token's, or one
        whose agent is that tenant's — once the batch is out: it connects again and is sent on
        (``not_owner``). How many there were."""
        tenancy, agents = self.board.tenancy, self.board.agents

        def unserved(conn: Connection) -> bool:
            principal = conn.principal
            if principal is not None and principal.tenant is not None:
                return not tenancy.serves(principal.tenant)
            agent = agents.get(conn.agent_name or "")
            return agent is not None and agent.peer is conn and not tenancy.serves(agent.tenant)

        audience = self.board.audience
        for task_id in audience.waited_for():
            if task_id not in self.board.tasks and self.board.store.get_task(task_id) is None:
                # Waited for here, its tenant given back: the wait is answered where it is
                # served now (the client asks there), never here.
                audience.refuse(task_id, NotOwner(
                    f"task {task_id}'s tenant is served by another daemon of the board now; "
                    "wait for it there"
                ).to_wire())  # fmt: skip
        closing = [c for c in self.connections if unserved(c)]
        for conn in closing:
            conn.closing = True
            self.close_after_flush(conn)
        if closing:
            log.info(
                f"closing {len(closing)} connection{'s' * (len(closing) > 1)} of tenants no "
                "longer served here",
                extra={"event": "connections_moved", "connections": len(closing)},
            )
        return len(closing)

    def _reply(self, conn: Connection, message: dict[str, Any]) -> None:
        self._replies.append((conn, message))
        self.schedule_flush()

    def fail_batch(self, error: ColibriError) -> None:
        """Work the daemon did by itself went wrong half-way: roll back the whole batch."""
        if self._batch_error is None:
            self._batch_error = error
        self.schedule_flush()

    def reply_error(self, conn: Connection, request_id: Any, error: ColibriError) -> None:
        self._reply(conn, {"id": request_id, "ok": False, "error": error.to_wire()})

    def close_after_flush(self, conn: Connection) -> None:
        self._to_close.append(conn)
        self.schedule_flush()

    def follow_ledger(self, conn: Connection, task: str | None) -> None:
        conn.follows_ledger = True
        conn.ledger_task = task
        self._ledger_followers.add(conn)

    def lost(self, conn: Connection) -> None:
        self.connections.discard(conn)
        self.anonymous.discard(conn)
        self._ledger_followers.discard(conn)
        if self.bus is not None:
            self.bus.forget(conn)
        self.board.disconnect(conn)
        self.schedule_flush()

    # -- group commit ------------------------------------------------------------------------

    def schedule_flush(self) -> None:
        if not self._flush_scheduled and not self.closed:
            self._flush_scheduled = True
            self.loop.call_soon(self.flush)

    def flush(self) -> None:
        """Dispatch, commit once, then let out replies, assignments and events, in order."""
        self._flush_scheduled = False
        if self.closed:
            return
        try:
            self._flush()
        except Exception as exc:
            # Half a flush may have let out some of a batch: memory, store and clients can no
            # longer be shown to agree. Stop, as a crash would, rather than serve on.
            log.exception("internal error in flush", extra={"event": "internal_error"})
            self.fatal(f"internal error while committing a batch ({exc!r})")

    def fatal(self, why: str) -> None:
        """Stop serving at once and make the daemon exit non-zero: what was acknowledged is in
        the store, what was not is rolled back; harnesses keep running, to be adopted."""
        if self.fatal_error is not None:
            return
        self.fatal_error = why
        log.critical(
            f"{why}; the daemon stops (exit 1). Nothing acknowledged is lost: start it again",
            extra={"event": "fatal", "error": why},
        )
        self.closed = True
        with contextlib.suppress(Exception):
            self.board.store.rollback()
        for conn in [*self.connections, *self.anonymous]:
            conn.closing = True
            if conn.transport is not None:
                conn.transport.abort()  # nothing held back may leave now
        self.on_fatal()

    def _flush(self) -> None:
        if self.unavailable is not None:
            self._flush_unavailable()
            return
        board = self.board
        placed = 0
        rows: list[LedgerEntry] = []
        if self._batch_error is None and board.dispatch_wanted:
            try:
                placed = board.dispatch()
            except StorageUnavailable as exc:
                self._batch_error = exc
            except Exception:
                log.exception("internal error in dispatch", extra={"event": "internal_error"})
                self._batch_error = Internal("internal error during dispatch; batch rolled back")
        commit_seconds = 0.0
        if self._batch_error is None:
            try:
                started = time.perf_counter()
                board.store.commit()
                commit_seconds = time.perf_counter() - started
                self.commits += 1
            except StorageUnavailable as exc:
                self._batch_error = exc
            except BatchRefused as exc:
                # A write the stored rows refused when the batch was sent (PostgreSQL sends
                # a batch's writes together): memory went where the store would not.
                log.error("a write of the batch was refused", extra={
                    "event": "internal_error", "error": str(exc)})  # fmt: skip
                self._batch_error = Internal(
                    "internal error: a write of the batch was refused by the store; the batch "
                    "was rolled back, retry it"
                )
        replies, self._replies = self._replies, []
        if self._batch_error is not None:
            self._fail_batch(replies, self._batch_error)
        else:
            rows, outbox = board.take_effects()
            if self.on_committed is not None:
                self.on_committed(rows, commit_seconds)
            if rows:
                crashpoints.hit("after-commit")
            if placed:
                crashpoints.hit("before-assign")
            for conn, message in replies:
                conn.queue(message)
            # After the replies: a new follower's ``ledger`` reply comes before the rows of its
            # own batch, so it can tell the rows its reply holds from those that are new.
            self._push_ledger(rows)
            for peer, effect in outbox:
                peer.send(effect)
        self._write_out()
        if rows:  # the store has them already: a crash here is repaired at start-up
            crashpoints.hit("before-mirror")
            if not self.mirror.broken:
                self.mirror.append(rows)
        if not self.closed and self.mirror.repair_due(time.monotonic()):
            # Here, after the commit (or the rollback), the store holds no uncommitted row the
            # catch-up could copy; and every sweep flushes, so the repair does not wait for
            # new rows.
            self._repair_mirror()
        self._close_the_closing()
        if board.dispatch_wanted and not board.paused and self._batch_error is None:
            self.schedule_flush()
        self._batch_error = None
        if self.on_flushed is not None:
            self.on_flushed()

    def _flush_unavailable(self) -> None:
        """While the store is away: only refusals go out; nothing is dispatched or committed."""
        replies, self._replies = self._replies, []
        self._batch_error = None
        for conn, message in replies:
            conn.queue(message)
        self._write_out()
        self._close_the_closing()

    def _write_out(self) -> None:
        for conn in self.dirty:
            conn.write_out()
        self.dirty.clear()

    def _close_the_closing(self) -> None:
        """Close the connections told their last line (``close_after_flush``), now written."""
        for conn in self._to_close:
            if conn.transport is not None:
                conn.transport.close()
        self._to_close.clear()

    def recover(self) -> bool:
        """Try to reload the board from a store that was away (``unavailable``); True once it
        serves again. Called by the sweep, every second at most."""
        if self.unavailable is None:
            return True
        try:
            self.board.store.rollback()  # and connect again, for a database server
            self.board.rebuild()
            self._reload()
        except StorageUnavailable as exc:
            self.unavailable = exc.message
            return False
        except Exception as exc:
            log.debug("rebuild failed", exc_info=True)
            self.fatal(f"the board could not be reloaded from the store ({exc!r})")
            return False
        self.unavailable = None
        self.board.restart_clocks()
        log.warning("the store answers again: serving", extra={"event": "storage_back"})
        self.schedule_flush()
        return True

    def _fail_batch(
        self, replies: list[tuple[Connection, dict[str, Any]]], error: ColibriError
    ) -> None:
        """The batch did not commit: nothing in it happened. Say so and reload from the store."""
        log.error("batch rolled back", extra={"event": "batch_failed", "error": error.message})
        if isinstance(error, LeaseLost):
            # Another daemon serves the board now: this one's memory is stale for good.
            self.fatal(error.message)
            return
        try:
            self.board.store.rollback()
            self.board.rebuild()
            self._reload()
        except StorageUnavailable as exc:
            # The store itself is away (a database server down): memory cannot be made to
            # agree with it now. Serve nothing but refusals, and reload once it is back.
            self.unavailable = exc.message
            log.error(
                "the store is unavailable; refusing every request until it is back",
                extra={"event": "storage_unavailable", "error": exc.message},
            )
        except Exception as exc:  # a recovery that fails must not leave a daemon answering nothing
            log.debug("rebuild failed", exc_info=True)
            self.fatal(f"the board could not be reloaded from the store after a failed batch "
                       f"({exc!r})")  # fmt: skip
            return
        wire = error.to_wire()
        for conn, message in replies:
            if message.get("ok"):
                message = {"id": message.get("id"), "ok": False, "error": wire}
            conn.queue(message)
        self.board.dispatch_wanted = False  # retried at the next tick, not in a hot loop

    def _repair_mirror(self) -> None:
        try:
            self.mirror.open(self.board.store)
        except StorageUnavailable:
            pass  # the store away: the repair waits for it, as the board does
        except OSError as exc:  # from the catch-up's writes: open itself marks it broken
            log.error(
                "ledger mirror still failing",
                extra={"event": "ledger_mirror_failed", "error": str(exc)},
            )

    def _push_ledger(self, rows: list[LedgerEntry]) -> None:
        for conn in self._ledger_followers:
            principal = conn.principal
            for row in rows:
                if (conn.ledger_task is None or conn.ledger_task == row.task) and (
                    principal is None or principal.sees(row.tenant)
                ):
                    conn.queue(LedgerAppended(entry=row))

    # -- housekeeping ------------------------------------------------------------------------

    def close_stalled(self) -> None:
        """Close connections stuck on a partial line (slow clients that hold a slot), and
        anonymous ones silent for ``server.idle_timeout``."""
        now = self.loop.time()
        cutoff = now - self.config.server.line_timeout
        idle_cutoff = now - self.config.server.idle_timeout
        auth_cutoff = now - self.config.server.handshake_timeout
        expired = rfc3339(self.board.clock.time())
        for conn in [*self.connections, *self.anonymous]:
            principal = conn.principal
            if conn.remote is not None and not conn.closing and (
                (principal is None and conn.opened < auth_cutoff)
                or (principal is not None and principal.expires_at is not None
                    and principal.expires_at <= expired)
            ):  # fmt: skip
                why = "did not authenticate in time" if principal is None else "its token expired"
                log.info(
                    f"closed a TCP connection: {why}",
                    extra={"event": "remote_closed", "peer": conn.remote},
                )
                conn.closing = True
                if conn.transport is not None:
                    conn.transport.close()
                continue
            stalled = conn.partial_since is not None and conn.partial_since < cutoff
            idle = conn.last_active < idle_cutoff and self._evictable(conn)
            if (stalled or idle) and conn.transport:
                if idle:
                    log.info(
                        "closed an idle connection",
                        extra={"event": "connection_idle", "pid": (conn.peer or (0, 0))[1]},
                    )
                conn.closing = True
                conn.transport.close()

        for address, count in self.throttle.take_refused().items():
            log.warning(
                f"{address}: {count} connections refused as throttled",
                extra={"event": "login_throttled_refused", "peer": address, "count": count},
            )

    def _evictable(self, conn: Connection) -> bool:
        """Anonymous and owed nothing: not an agent, a subscriber or a ledger follower, and
        with no reply still to come (``wait``, ``ask``, a chained ``send``)."""
        return (
            conn.agent_name is None
            and not conn.subscriber
            and not conn.follows_ledger
            and not conn.closing
            and not conn._out  # a reply waits to be written
            and not (conn.transport is not None and conn.transport.get_write_buffer_size())
            and not self.board.owes(conn)
            and not (self.bus is not None and self.bus.owes(conn))
        )

    def evict_idle(self, remote: bool) -> bool:
        """Make room for a new connection at the cap of its kind (``remote``: TCP, else the
        Unix socket): close the anonymous connection of that kind that has been silent longest,
        if one has been for EVICT_AFTER. Agents, subscribers and those waiting for a reply are
        never evicted, so peers that connect and say nothing cannot lock anyone out."""
        cutoff = self.loop.time() - EVICT_AFTER
        idle = [
            c
            for c in self.connections
            if (c.remote is not None) == remote and c.last_active <= cutoff and self._evictable(c)
        ]
        if not idle:
            return False
        victim = min(idle, key=lambda c: c.last_active)
        log.info("evicted an idle connection for a new one", extra={"event": "connection_evicted"})
        victim.closing = True
        self.connections.discard(victim)
        if victim.transport is not None:
            victim.transport.close()
        return True

    def close_all(self) -> None:
        for conn in [*self.connections, *self.anonymous]:
            if conn.transport is not None:
                conn.transport.close()
