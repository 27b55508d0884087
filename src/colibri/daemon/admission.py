"""Who gets a place among the connections and a share of the loop's time, and who is let go:
the socket group's members, the caps and shares of tokens and tenants, the turns of each
principal, and the connections that say nothing, stall or outlived their token."""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Callable, Hashable
from typing import TYPE_CHECKING

from colibri.config import Config
from colibri.core.errors import Busy, NotOwner
from colibri.core.model import rfc3339
from colibri.daemon.board import Board
from colibri.daemon.bus import Bus
from colibri.daemon.commit import GroupCommit
from colibri.daemon.gateway import Throttle
from colibri.daemon.mirrors import LedgerMirrors

if TYPE_CHECKING:
    from colibri.daemon.connection import Connection

#: The server's records keep the logger they are known by in the logs (the "logger" field).
log = logging.getLogger("colibri.daemon.server")

#: How long a peer's socket-group membership, once looked up, is taken as known.
MEMBERSHIP_TTL = 60.0
#: At the connection cap, a newcomer takes the place of an anonymous connection that has
#: said nothing for at least this long (the one silent longest).
EVICT_AFTER = 5.0
#: The time one principal's requests may take in one loop turn (its connections together);
#: past it they wait for the next turn, after everyone else's of this one.
TURN_TIME = 0.001
#: The most time a batch's requests may take, turn after turn, while it grows to match what
#: its commit costs (``batch_grows``): the wait it adds to a reply, at worst.
GROW_MAX = 0.02
#: The most turns a batch waits for before it commits, whatever they took (a bound that does
#: not depend on the clock).
GROW_TURNS = 64


def batch_grows(waiting: bool, work: float, last_commit: float, turns: int) -> bool:
    """Whether a batch should take the requests still waiting for their turn (``waiting``)
    before it commits: while its requests (``work`` seconds so far, over ``turns`` turns) have
    taken less time than the last commit did, at most ``GROW_MAX`` and ``GROW_TURNS``. A
    commit costs its round trips to the store whatever the batch holds: a store further away
    gets larger batches, not one commit per turn."""
    return waiting and work < min(last_commit, GROW_MAX) and turns < GROW_TURNS


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


class Admission(GroupCommit):
    """The server's door and its clock of turns; ``Server`` handles what comes in."""

    def __init__(self, config: Config, board: Board, mirror: LedgerMirrors) -> None:
        super().__init__(board, mirror)
        self.config = config
        #: Who may owe replies still to come (given by ``Server.attach``).
        self.bus: Bus | None = None
        self.owner_uid = os.getuid()
        self._membership: dict[tuple[int, int], tuple[float, bool]] = {}
        group = config.server.socket_group_name
        self.who_may = (
            f"only its owner (uid {self.owner_uid}) and members of group {group!r} may"
            if group is not None
            else f"only its owner (uid {self.owner_uid}) may"
        )
        #: Failed logins over TCP, per address (``gateway.py``).
        self.throttle = Throttle(config.server.auth_failures)
        #: Time each principal's requests took this loop turn (``may_serve``), and the
        #: connections waiting for the next turn, by principal, in the order they are served.
        self._spent: dict[Hashable, float] = {}
        self._waiting: dict[Hashable, deque[Connection]] = {}
        self._turn_scheduled = False

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

    def batch_grows(self) -> bool:
        """Whether to serve the connections waiting for their turn before the batch commits
        (the module's ``batch_grows``), counting the turn if so."""
        if self._batch_error is not None or self.unavailable is not None:
            return False
        grows = batch_grows(
            bool(self._waiting), self.batch_work, self.last_commit, self.batch_turns
        )
        self.batch_turns += grows
        return grows

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
