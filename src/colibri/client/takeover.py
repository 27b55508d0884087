"""A takeover waited out (``Takeover``), and which requests may be sent again after one
(``may_send_again``): what a client of several daemons of a PostgreSQL hive does when the
daemon serving its tenant is lost."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from colibri.core.backoff import Backoff
from colibri.core.errors import ColibriError, ConnectionClosed, Elsewhere, NotOwner

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
#: Writes sent again only after a refusal that says nothing was done (``Elsewhere``: the daemon
#: does not serve their tenant now, or its lease passed on and the fence refused the batch), never
#: after a cut connection: done twice, the second would be refused (a cancel of a task that
#: has ended, a retry of one that is pending again, an answer to a question answered).
REFUSED_WRITES = frozenset({"cancel", "retry", "answer"})


def takeover_patience(ttl: float) -> float:
    """How long a takeover of a lease of ``ttl`` seconds may take: the lease, renewed every
    third of its ttl, runs out within a ttl of its daemon's death; a standby or a sharing
    daemon sees it within a third more, takes it and builds the board; two seconds of slack."""
    return 2 * ttl + 2.0


def may_send_again(cmd: str, fields: dict[str, Any], error: ColibriError) -> bool:
    """Whether ``cmd`` may be sent again after ``error``, on a connection to the daemon that
    serves now: a read always; a submit with its idempotency key; a cancel, retry or answer only
    when refused before anything was done (``Elsewhere``). The connection cut under it
    (``closed``) may have let it through."""
    if not isinstance(error, (ConnectionClosed, Elsewhere)):
        return False
    if cmd in READS:
        return True
    if cmd in SUBMITS:
        return fields.get("idempotency_key") is not None
    return cmd in REFUSED_WRITES and isinstance(error, Elsewhere)


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
        self.pauses = Backoff(TAKEOVER_FIRST_PAUSE, TAKEOVER_LONGEST_PAUSE)
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
        if now + self.pauses.peek() > self.give_up:
            error.message += f" (still so after waiting {self.bound:g} s for a takeover)"
            raise error
        return self.pauses.next()


def taken_over(error: ColibriError) -> str:
    """What a takeover is waited for after ``error``, as a message says it."""
    tenant = getattr(error, "tenant", None)
    if tenant:
        return f"tenant {tenant!r}"
    return "the tenant" if isinstance(error, NotOwner) else "the board"
