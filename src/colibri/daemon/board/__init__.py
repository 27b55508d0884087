"""The board: open tasks and live agents in memory, every change written through the store.

All of it is synchronous and runs on the daemon's loop thread. A change writes into the store's
open transaction and records in the ``Batch`` what must happen once that transaction commits:
ledger rows for the mirror, events for agents and subscribers, replies for ``wait``. The server
commits a whole batch of requests at once (group commit) and only then lets any of it out, so
nothing is acknowledged, assigned or announced before it is durable. If a commit fails, the
server rolls back and calls ``rebuild``: memory is reloaded from the store, the one truth.

Each concept has its module; ``Board`` only wires them and is the face the daemon's commands,
schedules and tests use:

    batch        the batch in progress: actor, ledger rows, outbox, answered waits
    audience     subscribers (events and bus messages) and ``wait`` requests
    transitions  the one writer of task rows: move, close, end a session
    queue        pending tasks by shape and priority; retries waiting out their backoff
    dependencies tasks that wait for others (after), released or cancelled as those close
    capacity     agents' free slots, max_sessions, the circuit breaker, daily budgets
    dispatch     claiming pending tasks for free slots; pause and resume
    intake       submit (quotas, hand-offs, budgets, idempotency), retry, cancel a family
    presence     agents registering, heartbeats, silence, sessions never claimed back
    reports      out, fail, reclaimed, requeue, ready, ask and answer
    views        get, list, wait, why, status, agents, family
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from colibri.config import SchedulerSettings
from colibri.core import states
from colibri.core.access import Tenancy
from colibri.core.claims import Claims
from colibri.core.errors import NotOwner
from colibri.core.model import Task
from colibri.core.replies import refusal
from colibri.core.states import State
from colibri.daemon.board.audience import Audience, Subscription
from colibri.daemon.board.batch import Batch, Effects, Peer
from colibri.daemon.board.capacity import BREAKER_AFTER, BREAKER_COOL_DOWN, Capacity, LiveAgent
from colibri.daemon.board.dependencies import Dependencies
from colibri.daemon.board.dispatch import Dispatcher
from colibri.daemon.board.ids import continue_after, new_task_id
from colibri.daemon.board.intake import Intake
from colibri.daemon.board.known import KnownAgents
from colibri.daemon.board.presence import Presence
from colibri.daemon.board.queue import Queue
from colibri.daemon.board.reports import ASK_GRACE, Reports
from colibri.daemon.board.transitions import MAX_RETRY_DELAY, Transitions
from colibri.daemon.board.views import Views
from colibri.daemon.clock import Clock
from colibri.store import Store, TaskFilter

__all__ = [
    "ASK_GRACE",
    "Audience",
    "BREAKER_AFTER",
    "BREAKER_COOL_DOWN",
    "MAX_RETRY_DELAY",
    "Batch",
    "Board",
    "LiveAgent",
    "Peer",
    "Subscription",
    "new_task_id",
]

log = logging.getLogger(__name__)

#: A gap between sweeps longer than this means the daemon was stalled (sweeps come every ≤1 s).
STALL = 3.0


class Board:
    def __init__(
        self,
        store: Store,
        settings: SchedulerSettings,
        clock: Clock,
        send_to: dict[str, list[str]] | None = None,
        daily_budgets: dict[str, float] | None = None,
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        #: The tenants this board holds: every one, or those the daemon's leases name.
        self.tenancy = Tenancy()
        self.batch = batch = Batch()
        self.audience = audience = Audience(batch)
        claims = Claims(store.claim_key())
        send_to = send_to or {}
        #: Tasks not yet closed: pending, running, and ended ones whose session is still around.
        self.tasks: dict[str, Task] = {}
        self.queue = queue = Queue(settings, clock, batch)
        self.capacity = capacity = Capacity(
            store, settings, clock, batch, audience, self.tasks, frozenset(send_to),
            daily_budgets or {},
        )  # fmt: skip
        self.dependencies = dependencies = Dependencies(
            store, clock, batch, audience, queue, self.tasks
        )
        self.transitions = transitions = Transitions(
            store, settings, clock, batch, audience, capacity, queue, self.tasks, dependencies
        )
        self.dispatcher = dispatcher = Dispatcher(
            batch, audience, queue, capacity, transitions, claims
        )
        self.intake = intake = Intake(
            store, settings, clock, batch, queue, capacity, transitions, claims, send_to
        )
        dependencies.cancel_one = intake.cancel_one
        self.known = known = KnownAgents(send_to)
        self.presence = presence = Presence(
            store, settings, clock, batch, audience, capacity, transitions, claims, known
        )
        self.reports = reports = Reports(
            store, clock, batch, audience, queue, capacity, transitions, presence, claims
        )
        self.views = views = Views(
            store, clock, audience, queue, capacity, transitions, dispatcher, known, dependencies
        )
        self.agents = capacity.agents
        self._last_sweep = clock.monotonic()

        # The board's face: each operation is the bound method of the part it belongs to.
        self.submit = intake.submit
        self.submit_all = intake.submit_all
        self.retry = intake.retry
        self.cancel = intake.cancel
        self.dispatch = dispatcher.dispatch
        self.toggle = dispatcher.toggle
        self.register = presence.register
        self.agent_of = presence.agent_of
        self.heartbeat = presence.heartbeat
        self.reporter = reports.reporter
        self.out = reports.out
        self.fail = reports.fail
        self.reclaimed = reports.reclaimed
        self.requeue = reports.requeue
        self.session_ready = reports.session_ready
        self.ask = reports.ask
        self.answer = reports.answer
        self.get = views.get
        self.open_task = self.tasks.get
        self.list_tasks = views.list_tasks
        self.wait = views.wait
        self.why = views.why
        self.waits_because = views.waits_because
        self.status = views.status
        self.agent_list = views.agent_list
        self.family = views.family
        self.subscribe = audience.subscribe
        self.broadcast = audience.broadcast
        self.claim_of = claims.secret
        self.claimed = claims.valid

    @property
    def paused(self) -> bool:
        return self.dispatcher.paused

    @property
    def dispatch_wanted(self) -> bool:
        return self.batch.dispatch_wanted

    @dispatch_wanted.setter
    def dispatch_wanted(self, wanted: bool) -> None:
        self.batch.dispatch_wanted = wanted

    # -- recovery ----------------------------------------------------------------------------

    def rebuild(self) -> None:
        """Reload memory from the store: at start-up, and after a failed commit."""
        capacity = self.capacity
        self.known.load(self.store.agents())
        self.audience.restore(self.batch.drop())
        self.queue.clear()
        for agent in self.agents.values():
            agent.holding.clear()
        self.transitions.load(
            self.store.open_tasks(), self.store.count_by_state(), self.store.count_by_outcome()
        )
        waiting = self.dependencies.load(self.tasks.values())
        newest = self.store.list_tasks(TaskFilter(newest=True, limit=1))
        if newest:
            continue_after(newest[0].id)
        # After the reads that fail when the store is away: the budgets' own failure is only
        # logged (they derive from the ledger), and would be logged at every retry.
        capacity.load_budgets()
        deadline = self.clock.monotonic() + self.settings.agent_ttl
        for task in self.tasks.values():
            if task.state == State.PENDING:
                if task.id not in waiting:
                    self.queue.enqueue(task)
                continue
            holder = capacity.holder(task)
            if holder is not None and holder.online:
                holder.holding.add(task.id)
            elif task.id not in capacity.orphans:
                capacity.orphans[task.id] = deadline
        capacity.orphans = {t: d for t, d in capacity.orphans.items() if t in self.tasks}
        self.reports.load()
        capacity.reindex()
        for task_id in self.audience.waited_for():
            # A wait put back with a failed batch whose task ended after all (the commit's
            # answer was lost, not the commit): answer it now, or it waits for ever.
            waited = self.tasks.get(task_id) or self.store.get_task(task_id)
            if waited is not None and waited.state in states.ENDED:
                self.audience.answer(waited)
        told, requeued = self.dispatcher.tell_unconfirmed()
        if told or requeued:
            log.warning(
                f"{told + requeued} claims committed after all (their commit's answer was "
                f"lost): {told} told to their agents now, {requeued} requeued (their agents "
                "had left the connection they were made for)",
                extra={"event": "claims_confirmed", "tasks": told, "requeued": requeued},
            )
        self.batch.dispatch_wanted = True

    def forget_unserved(self) -> None:
        """Drop from memory what is of tenants this daemon no longer serves (given back to
        another daemon of a PostgreSQL board): their agents, their agent indexes, questions
        of their tasks (an asker still waiting is answered ``not_owner``). Their tasks,
        schedules and known agents went with the rebuild, their waits and connections with
        ``Server.close_unserved`` (which finds their agents' connections by the agents, so
        comes first)."""
        served = self.tenancy.served
        if served is None:
            return
        self.presence.forget_tenants(served)
        reports = self.reports
        reports.unasked = {t: d for t, d in reports.unasked.items() if t in self.tasks}
        for task_id in [t for t in reports.askers if t not in self.tasks]:
            # A session asking on this daemon's own socket (a token's connection is closed):
            # its question is answered where its tenant is served now, never here.
            peer, request_id = reports.askers.pop(task_id)
            refused = NotOwner(
                f"task {task_id}'s tenant is served by another daemon of the board now; ask there"
            )
            self.batch.emit(peer, refusal(request_id, refused))

    # -- effects and connections -------------------------------------------------------------

    def take_effects(self) -> Effects:
        """As a batch commits: hand over what it lets out once committed; start a new batch."""
        return self.batch.take()

    def owes(self, peer: Peer) -> bool:
        """Whether a reply to ``peer`` is still to come (a ``wait`` or an ``ask``)."""
        return self.reports.owes(peer) or self.audience.waits(peer)

    def disconnect(self, peer: Peer) -> None:
        """A connection closed: its agent stops getting work; its tasks wait out the TTL."""
        self.audience.forget(peer)
        self.reports.forget(peer)
        self.presence.disconnect(peer)

    def set_wake(self, wake: Callable[[], None]) -> None:
        """``wake()`` is called when a new deadline may be earlier than the sweep's next."""
        self.batch.wake_sweep = wake

    # -- time --------------------------------------------------------------------------------

    def restart_clocks(self) -> None:
        """The agents' silence so far does not count (the daemon refused their heartbeats)."""
        self.presence.restart_clocks(self.clock.monotonic())

    def sweep(self) -> None:
        """Expire silent agents, fail sessions nobody claimed back, release due retries."""
        now = self.clock.monotonic()
        stalled = now - self._last_sweep > STALL
        self._last_sweep = now
        if stalled:
            # The daemon itself was stopped or starved (SIGSTOP, a loop stall): the agents'
            # heartbeats of that time are still unread. Read them before judging anyone.
            log.warning("sweep after a stall; expiry waits one pass", extra={"event": "stalled"})
            self.batch.wake_sweep()
            return
        self.capacity.check_day()
        self.presence.sweep(now)
        for task_id in self.queue.due(now):
            task = self.tasks.get(task_id)
            if task is not None and task.state == State.PENDING:
                self.queue.make_dispatchable(task)
        self.reports.sweep(now)

    def next_deadline(self) -> float | None:
        """The monotonic instant at which ``sweep`` next has something to do."""
        candidates = self.presence.deadlines()
        midnight = self.capacity.next_midnight()
        if midnight is not None:  # the day's spending starts again at midnight UTC
            candidates.append(midnight)
        candidates.extend(self.reports.unasked.values())
        due = self.queue.next_due()
        if due is not None:
            candidates.append(due)
        return min(candidates, default=None)
