"""The board: open tasks and live agents in memory, every change written through the store.

All methods are synchronous and run on the daemon's loop thread. Each one writes into the
store's open transaction and records what must happen once that transaction commits: ledger
rows for the mirror, events for agents and subscribers, replies for ``wait``. The server
commits a whole batch of requests at once (group commit) and only then lets any of it out, so
nothing is acknowledged, assigned or announced before it is durable. If a commit fails, the
server rolls back and calls ``rebuild``: memory is reloaded from the store, the one truth.
"""

from __future__ import annotations

import hashlib
import heapq
import logging
import sys
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any, Protocol

import msgspec
import uuid6

from colibri.config import SchedulerSettings
from colibri.core import events, states
from colibri.core.claims import claim_secret, is_claim
from colibri.core.errors import (
    BadClaim,
    BadRequest,
    BudgetExceeded,
    Busy,
    HandOffRefused,
    IdempotencyConflict,
    IllegalTransition,
    NotRegistered,
    NotYourTask,
    ParentCancelled,
    QuotaExceeded,
    StaleClaim,
    UnknownParent,
    UnknownTask,
)
from colibri.core.matching import AgentIndex, AgentView, Shape, explain
from colibri.core.model import (
    DEFAULT_TENANT,
    Agent,
    Cost,
    LedgerEntry,
    Task,
    check_name,
    normalize_names,
    parse_rfc3339,
    rfc3339,
)
from colibri.core.pending import PendingTasks, sort_key
from colibri.core.protocol import REPLY_BUDGET, Held, RegisterAgent, TaskFields, task_size
from colibri.core.states import State
from colibri.daemon import crashpoints
from colibri.daemon.budgets import DailyBudgets
from colibri.daemon.clock import Clock
from colibri.store import Store, StoreConflict, TaskFilter

log = logging.getLogger(__name__)


def new_task_id() -> str:
    """Time-ordered (UUIDv7), so ids sort first-in first-out."""
    return str(uuid6.uuid7())


def _size(text: str) -> int:
    """Bytes of a task's text, UTF-8 (what it holds in memory is at least that)."""
    return len(text) if text.isascii() else len(text.encode())


def _fingerprint(
    req: TaskFields,
    capabilities: list[str],
    labels: list[str],
    workspace: str | None,
    pin: str | None,
) -> str:
    """What a submission asks for, as the board reads it: the same key with another
    fingerprint is another request, refused rather than answered with the first task."""
    asked = [req.text, capabilities, workspace, pin, req.parent, req.priority, req.min_score,
             labels, req.max_attempts, req.budget_usd]  # fmt: skip
    return hashlib.blake2b(msgspec.json.encode(asked), digest_size=16).hexdigest()


#: A gap between sweeps longer than this means the daemon was stalled (sweeps come every ≤1 s).
STALL = 3.0
#: Sessions in a row that never become ready before an agent's circuit breaker opens.
BREAKER_AFTER = 3
#: How long an open breaker keeps work away (its tasks wait; none is dropped).
BREAKER_COOL_DOWN = 60.0
#: Most distinct shapes and name lists kept for sharing between tasks.
SHARED_MAX = 10_000
#: Children read from the store at a time when a family is listed.
FAMILY_PAGE = 64
#: The longest wait before a retry, however many attempts doubled it.
MAX_RETRY_DELAY = 86_400.0
#: A question whose asker (``colibri ask``) went away is withdrawn after this long, unless it
#: asks again (as it does within moments when the daemon restarts under it).
ASK_GRACE = 10.0


class Peer(Protocol):
    """A connection the board can address events to (the server's connection object)."""

    #: The agent registered on this connection, if any.
    agent_name: str | None

    def send(self, message: dict[str, Any]) -> None: ...


@dataclass(slots=True, eq=False)
class LiveAgent:
    name: str
    capabilities: frozenset[str]
    slots: int
    ttl: float
    workspace: str | None
    tenant: str
    peer: Peer | None
    last_seen: float  # monotonic
    last_seen_wall: float
    online: bool = True
    holding: set[str] = field(default_factory=set)
    #: Sessions in a row that never became ready, and until when (monotonic) the circuit
    #: breaker keeps work away from this agent.
    requeues_in_row: int = 0
    unhealthy_until: float = 0.0

    def view(self) -> AgentView:
        return AgentView(
            self.name,
            self.capabilities,
            self.slots - len(self.holding),
            self.online and self.peer is not None,
            self.workspace,
        )

    def wire(self) -> Agent:
        return Agent(
            name=self.name,
            capabilities=sorted(self.capabilities),
            slots=self.slots,
            ttl=self.ttl,
            workspace=self.workspace,
            tenant=self.tenant,
            online=self.online,
            running=sorted(self.holding),
            last_seen=rfc3339(self.last_seen_wall),
        )


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
        self._claim_key = store.claim_key()
        #: Lineage edges of the configured workspaces: who may hand work to whom.
        self.send_to = send_to or {}
        #: Dollars per UTC day each workspace may spend; past it, its agents get no work.
        self.budgets = DailyBudgets(daily_budgets or {})
        #: Agents that are this host's supervised workspace harnesses: together they run at
        #: most ``settings.max_sessions`` sessions, whatever their slots say.
        self.supervised: frozenset[str] = frozenset(self.send_to)
        self.paused = False
        #: Tasks not yet closed: pending, running, and ended ones whose session is still around.
        self.tasks: dict[str, Task] = {}
        self.pending = PendingTasks()
        self.agents: dict[str, LiveAgent] = {}
        self.indexes: dict[str, AgentIndex] = {}
        #: Retries waiting out their backoff: (monotonic due, task id).
        self._delayed: list[tuple[float, str]] = []
        #: Running tasks nobody has claimed back since start-up: task id → monotonic deadline.
        self._orphans: dict[str, float] = {}
        self._waiters: dict[str, list[tuple[Peer, Any]]] = {}
        #: Sessions waiting for an answer: task id → the asking connection and request id.
        self._askers: dict[str, tuple[Peer, Any]] = {}
        #: Questions whose asker is gone: task id → monotonic instant they are withdrawn.
        self._unasked: dict[str, float] = {}
        self._subscribers: list[Peer] = []
        self._priority: dict[int, int] = {}
        # Side effects of the current batch, let out by the server after commit.
        self.ledger_rows: list[LedgerEntry] = []
        #: (uid, pid) of the peer whose request is being handled; None for the daemon's own work.
        self.actor: tuple[int, int] | None = None
        self.outbox: list[tuple[Peer, dict[str, Any]]] = []
        #: ``wait`` requests answered in this batch, restored if the batch does not commit.
        self._answered: list[tuple[str, Peer, Any]] = []
        self.dispatch_wanted = False
        self._shapes: dict[tuple[Any, ...], Shape] = {}
        #: Pending tasks per tenant, for the max_pending quota.
        self._pending_by_tenant: dict[str, int] = {}
        #: Bytes of task text the open tasks of each tenant hold (max_pending_mib).
        self._open_text: dict[str, int] = {}
        self._last_sweep = clock.monotonic()
        #: Sessions that never became ready, per workspace (or agent): shown in status.
        self.warnings: dict[str, int] = {}
        self._name_lists: dict[tuple[str, ...], list[str]] = {}
        #: Called when a new deadline may be earlier than the sweep's next wake.
        self.on_deadline: Callable[[], None] = lambda: None

    # -- recovery ----------------------------------------------------------------------------

    def rebuild(self) -> None:
        """Reload memory from the store: at start-up, and after a failed commit."""
        self.budgets.load(self.store, self._day())
        now_mono = self.clock.monotonic()
        self.tasks.clear()
        self.pending = PendingTasks()
        self._delayed.clear()
        self.ledger_rows.clear()
        self.outbox.clear()
        for task_id, peer, request_id in self._answered:
            self._waiters.setdefault(task_id, []).append((peer, request_id))
        self._answered.clear()
        for agent in self.agents.values():
            agent.holding.clear()
        self._pending_by_tenant = {}
        self._open_text = {}
        for task in self.store.open_tasks():
            self.tasks[task.id] = task
            self._open_text[task.tenant] = self._open_text.get(task.tenant, 0) + _size(task.text)
            if task.state == State.PENDING:
                self._pending_by_tenant[task.tenant] = (
                    self._pending_by_tenant.get(task.tenant, 0) + 1
                )
            if task.state == State.PENDING:
                self._enqueue(task)
            else:
                holder = self.agents.get(task.agent or "")
                if holder is not None and holder.online:
                    holder.holding.add(task.id)
                elif task.id not in self._orphans:
                    self._orphans[task.id] = now_mono + self.settings.agent_ttl
        self._orphans = {t: d for t, d in self._orphans.items() if t in self.tasks}
        for task in self.tasks.values():  # their askers ask again, or the question goes
            if task.question is not None and task.id not in self._askers:
                self._unasked.setdefault(task.id, now_mono + ASK_GRACE)
        self.indexes.clear()
        for agent in self.agents.values():
            self._index(agent)
        self.dispatch_wanted = True

    # -- side effects ------------------------------------------------------------------------

    def take_effects(self) -> tuple[list[LedgerEntry], list[tuple[Peer, dict[str, Any]]]]:
        """After a commit: hand over the batch's ledger rows and messages; start a new batch."""
        rows, outbox = self.ledger_rows, self.outbox
        self.ledger_rows, self.outbox, self._answered = [], [], []
        return rows, outbox

    def _emit(self, peer: Peer, message: dict[str, Any]) -> None:
        self.outbox.append((peer, message))

    def _announce(self, task: Task, from_state: str | None, reason: str | None) -> None:
        if self._subscribers:
            event = events.task_changed(task, from_state, reason)
            for peer in self._subscribers:
                self._emit(peer, event)
        if task.state in states.ENDED:
            for peer, request_id in self._waiters.pop(task.id, ()):
                self._answered.append((task.id, peer, request_id))
                self._emit(peer, {"id": request_id, "ok": True, "task": task})

    def broadcast(self, message: dict[str, Any]) -> None:
        """Send an event to every subscriber (after the batch commits)."""
        for peer in self._subscribers:
            self._emit(peer, message)

    def subscribe(self, peer: Peer, priority: int = 0) -> None:
        """Events go to subscribers from the highest priority down."""
        if peer in self._subscribers:  # a second subscribe must not double every event
            self._subscribers.remove(peer)
        self._priority[id(peer)] = priority
        self._subscribers.append(peer)
        self._subscribers.sort(key=lambda p: -self._priority.get(id(p), 0))

    def owes(self, peer: Peer) -> bool:
        """Whether a reply to ``peer`` is still to come (a ``wait`` or an ``ask``)."""
        return any(p is peer for p, _ in self._askers.values()) or any(
            p is peer for waiting in self._waiters.values() for p, _ in waiting
        )

    def forget_peer(self, peer: Peer) -> None:
        if peer in self._subscribers:
            self._subscribers.remove(peer)
        self._priority.pop(id(peer), None)
        for task_id in [t for t, (p, _) in self._askers.items() if p is peer]:
            del self._askers[task_id]  # it asks again when it reconnects, or the question goes
            self._unasked[task_id] = self.clock.monotonic() + ASK_GRACE
            self.on_deadline()
        for task_id in [t for t, ws in self._waiters.items() if any(p is peer for p, _ in ws)]:
            rest = [(p, r) for p, r in self._waiters[task_id] if p is not peer]
            if rest:
                self._waiters[task_id] = rest
            else:
                del self._waiters[task_id]

    # -- transitions -------------------------------------------------------------------------

    def _entry(
        self, task: Task, from_state: str | None, reason: str | None, cost: Cost | None = None
    ) -> LedgerEntry:
        return LedgerEntry(
            at=task.updated_at,
            task=task.id,
            tenant=task.tenant,
            from_state=from_state,
            to_state=task.state,
            schedule=task.schedule if from_state is None else None,
            agent=task.agent,
            epoch=task.epoch,
            reason=reason,
            cost=cost,
            uid=None if self.actor is None else self.actor[0],
            pid=None if self.actor is None else self.actor[1],
        )

    def _move(
        self,
        task: Task,
        to: State,
        reason: str | None = None,
        *,
        close: bool = False,
        **changes: Any,
    ) -> Task:
        """Apply one legal transition: store row + ledger row, memory, events.

        ``close``: go on to ``closed`` at once (the session is already gone) — two transitions
        and two ledger rows, but the task row is written once.
        """
        states.check(task.id, State(task.state), to)
        if to in states.OUTCOMES:
            changes["outcome"] = to.value
        if to != State.RUNNING:
            changes["question"] = None  # a question dies with its session
        new = msgspec.structs.replace(
            task, state=to.value, updated_at=rfc3339(self.clock.time()), **changes
        )
        entries = [self._entry(new, task.state, reason, changes.get("cost"))]
        final = new
        if close:
            states.check(task.id, to, State.CLOSED)
            self._release(task)
            final = msgspec.structs.replace(new, state=State.CLOSED.value)
            entries.append(self._entry(final, new.state, None))
        try:
            self.store.update_task(final, task.state, task.epoch, *entries)
        except StoreConflict:
            raise IllegalTransition(task.id, task.state, to.value) from None
        self.ledger_rows.extend(entries)
        if task.state == State.PENDING:
            self._pending_by_tenant[task.tenant] -= 1
        if final.state == State.PENDING:
            self._pending_by_tenant[task.tenant] = self._pending_by_tenant.get(task.tenant, 0) + 1
        if final.state == State.CLOSED:
            self.tasks.pop(task.id, None)
            self._open_text[task.tenant] -= _size(task.text)
        else:
            self.tasks[task.id] = final
        self._announce(new, task.state, reason)
        if close:
            self._announce(final, new.state, None)
        return final

    def _release(self, task: Task) -> None:
        """The task's session is gone: free its agent's slot (or, for a session not claimed
        back since a restart, the place it held under max_sessions)."""
        holder = self.agents.get(task.agent or "") if task.agent else None
        if holder is not None and task.id in holder.holding:
            holder.holding.discard(task.id)
            self._refresh(holder)
        self._drop_orphan(task.id)

    def _drop_orphan(self, task_id: str) -> None:
        """The task is no longer waiting to be claimed back after a restart."""
        if self._orphans.pop(task_id, None) is None:
            return
        task = self.tasks.get(task_id)
        if task is not None and task.agent in self.supervised:
            self._refresh_supervised()  # it counted against max_sessions

    def _close(self, task: Task) -> Task:
        self._release(task)
        return self._move(task, State.CLOSED)

    # -- intake ------------------------------------------------------------------------------

    def submit(
        self,
        req: TaskFields,
        pin: str | None = None,
        *,
        schedule: str | None = None,
        task_id: str | None = None,
        reason: str = "submitted",
    ) -> tuple[Task, bool]:
        """Write a new pending task durably (on commit); return it and whether it is new."""
        text = req.text  # kept byte for byte: it is the session's input
        if not text.strip():
            raise BadRequest("text is empty: say what the task is")
        tenant = check_name(req.tenant, "tenant") if req.tenant else DEFAULT_TENANT
        capabilities = self._shared(normalize_names(req.capabilities, "capability"))
        labels = self._shared(normalize_names(req.labels, "label"))
        workspace = check_name(req.workspace, "workspace") if req.workspace else None
        if pin is not None:
            check_name(pin, "agent name")
        fingerprint = None
        if req.idempotency_key is not None:
            # Before the quotas: a retry of a submission that did commit gets its task back.
            fingerprint = _fingerprint(req, capabilities, labels, workspace, pin)
            existing = self.store.find_idempotent(tenant, req.idempotency_key)
            if existing is not None:
                stored = self.store.fingerprint(existing.id)
                if stored is not None and stored != fingerprint:
                    raise IdempotencyConflict(req.idempotency_key, existing.id)
                return self.tasks.get(existing.id, existing), False
        if self._pending_by_tenant.get(tenant, 0) >= self.settings.max_pending:
            raise QuotaExceeded(
                f"tenant {tenant} has {self.settings.max_pending} pending tasks, its quota; "
                "wait for some to be taken (or raise scheduler.max_pending)"
            )
        size = _size(text)
        if self._open_text.get(tenant, 0) + size > self.settings.max_pending_bytes:
            raise QuotaExceeded(
                f"tenant {tenant}'s open tasks hold {self._open_text.get(tenant, 0)} bytes of "
                f"text; this one's {size} would pass its quota of "
                f"{self.settings.max_pending_mib:g} MiB (scheduler.max_pending_mib)"
            )
        sender: str | None = None
        budget = req.budget_usd
        if req.claim is not None and req.parent is None:
            raise BadRequest("a hand-off's claim is its parent's: give parent too")
        if req.parent is not None:
            parent = self.tasks.get(req.parent) or self.store.get_task(req.parent)
            if parent is None:
                raise UnknownParent(req.parent)
            if req.claim is not None and (
                parent.state != State.RUNNING
                or not self.claimed(parent.id, parent.epoch, req.claim)
            ):
                raise BadClaim(parent.id, "a hand-off")
            if self.store.count_children(parent.id) >= self.settings.max_children:
                raise QuotaExceeded(
                    f"task {parent.id} has {self.settings.max_children} children, the most one "
                    "task may have (scheduler.max_children)"
                )
            ancestor: Task | None = parent
            seen: set[str] = set()
            while ancestor is not None and ancestor.id not in seen:
                if ancestor.outcome == State.CANCELLED:  # a cancelled family takes no children
                    raise ParentCancelled(ancestor.id)
                seen.add(ancestor.id)
                if len(seen) > self.settings.max_depth:  # also bounds this walk
                    raise QuotaExceeded(
                        f"a child of task {parent.id} would have more than "
                        f"{self.settings.max_depth} ancestors, the most a task may have "
                        "(scheduler.max_depth)"
                    )
                up = ancestor.parent
                ancestor = (self.tasks.get(up) or self.store.get_task(up)) if up else None
            sender = parent.workspace
            if sender is not None and sender in self.send_to:
                allowed = self.send_to[sender]
                if req.claim is not None:
                    # From inside the parent's session: only along its send_to edges, which
                    # form no cycle, so a chain of hand-offs is as long as the graph at most.
                    if workspace not in allowed:
                        raise HandOffRefused(sender, workspace, allowed)
                elif workspace is not None and workspace != sender and workspace not in allowed:
                    raise HandOffRefused(sender, workspace, allowed)
            if parent.budget_usd is not None:
                left = self._budget_left(parent)
                if budget is None:
                    budget = left  # a child inherits what remains
                if budget > left or left <= 0:
                    raise BudgetExceeded(parent.id, budget, left)
        now = rfc3339(self.clock.time())
        task = Task(
            id=task_id or new_task_id(),
            text=text,
            capabilities=capabilities,
            workspace=workspace,
            agent=pin,
            pinned=pin is not None,
            parent=req.parent,
            sender=sender,
            priority=req.priority,
            min_score=req.min_score,
            tenant=tenant,
            labels=labels,
            idempotency_key=req.idempotency_key,
            max_attempts=req.max_attempts,
            budget_usd=budget,
            schedule=schedule,
            created_at=now,
            updated_at=now,
        )
        if tenant != DEFAULT_TENANT:
            self.store.ensure_tenant(tenant, now)
        entry = self.store.insert_task(task, self._entry(task, None, reason), fingerprint)
        self.ledger_rows.append(entry)
        self.tasks[task.id] = task
        self._pending_by_tenant[tenant] = self._pending_by_tenant.get(tenant, 0) + 1
        self._open_text[tenant] = self._open_text.get(tenant, 0) + size
        self._announce(task, None, reason)
        self._enqueue(task)
        return task, True

    def _shape(self, task: Task) -> Shape:
        """The task's shape; equal shapes are one shared object (100,000 tasks, a few shapes)."""
        min_score = task.min_score if task.min_score is not None else self.settings.min_score
        pin = task.agent if task.pinned else None
        key = (tuple(task.capabilities), task.workspace, pin, min_score, task.tenant)
        shape = self._shapes.get(key)
        if shape is None:
            if len(self._shapes) >= SHARED_MAX:
                self._shapes.clear()  # sharing saves memory; it is never needed for correctness
            shape = Shape(frozenset(task.capabilities), task.workspace, pin, min_score, task.tenant)
            self._shapes[key] = shape
        return shape

    def _shared(self, names: list[str]) -> list[str]:
        """One list object per distinct list of names, shared by every task that has it."""
        key = tuple(names)
        shared = self._name_lists.get(key)
        if shared is None:
            if len(self._name_lists) >= SHARED_MAX:
                self._name_lists.clear()
            shared = self._name_lists[key] = [sys.intern(n) for n in names]
        return shared

    def _enqueue(self, task: Task) -> None:
        if task.not_before is not None:
            wait = parse_rfc3339(task.not_before) - self.clock.time()
            if wait > 0:
                heapq.heappush(self._delayed, (self.clock.monotonic() + wait, task.id))
                self.on_deadline()
                return
        self._make_dispatchable(task)

    def _make_dispatchable(self, task: Task) -> None:
        created = parse_rfc3339(task.created_at) if self.settings.ageing else 0.0
        self.pending.add(
            task.id,
            self._shape(task),
            sort_key(task.priority, created, task.id, self.settings.ageing),
        )
        self.dispatch_wanted = True

    # -- dispatch ----------------------------------------------------------------------------

    def _index(self, agent: LiveAgent) -> None:
        index = self.indexes.setdefault(agent.tenant, AgentIndex())
        healthy = agent.unhealthy_until <= self.clock.monotonic()
        funded = not self.budgets.over(agent.workspace)
        if agent.online and agent.peer is not None and healthy and funded:
            index.add(agent.name, agent.capabilities, self._free(agent), agent.workspace)
        else:
            index.remove(agent.name)

    def _free(self, agent: LiveAgent) -> int:
        """Free slots; for a supervised workspace, no more than max_sessions leaves."""
        free = agent.slots - len(agent.holding)
        if agent.name in self.supervised:
            running = sum(len(a.holding) for n in self.supervised if (a := self.agents.get(n)))
            if self._orphans:  # after a restart: sessions still running, not yet claimed back
                running += sum(
                    1
                    for t in self._orphans
                    if (o := self.tasks.get(t)) and o.agent in self.supervised
                )
            free = min(free, self.settings.max_sessions - running)
        return max(free, 0)

    def _refresh(self, agent: LiveAgent) -> None:
        """The agent's sessions changed: offer its free slots anew."""
        if agent.name in self.supervised:  # the host-wide cap moves for all of them
            self._refresh_supervised()
            return
        index = self.indexes.get(agent.tenant)  # (inline: every claim and report comes here)
        if index is not None and agent.name in index:
            index.set_free(agent.name, self._free(agent))
        self.dispatch_wanted = True

    def _refresh_supervised(self) -> None:
        for name in self.supervised:
            if (agent := self.agents.get(name)) is not None:
                self._set_free(agent)
        self.dispatch_wanted = True

    def _set_free(self, agent: LiveAgent) -> None:
        index = self.indexes.get(agent.tenant)
        if index is not None and agent.name in index:
            index.set_free(agent.name, self._free(agent))

    def _pick(self, shape: Shape) -> str | None:
        index = self.indexes.get(shape.tenant)
        return None if index is None else index.pick(shape)

    def dispatch(self) -> int:
        """Claim pending tasks for agents with free slots, best fit first; return how many."""
        self.dispatch_wanted = False
        if self.paused or not any(i.has_free() for i in self.indexes.values()):
            return 0
        placed = 0
        for task_id, agent_name in self.pending.placements(self._pick):
            task = self.tasks[task_id]
            agent = self.agents[agent_name]
            claimed = self._move(
                task,
                State.RUNNING,
                "assigned",
                agent=agent_name,
                epoch=task.epoch + 1,
                attempts=task.attempts + 1,
                not_before=None,
            )
            agent.holding.add(task_id)
            self._refresh(agent)
            assert agent.peer is not None
            self._emit(agent.peer, events.assign(claimed, self.claim_of(task_id, claimed.epoch)))
            placed += 1
            if not any(i.has_free() for i in self.indexes.values()):
                break
        self.dispatch_wanted = False
        return placed

    def toggle(self, paused: bool | None) -> bool:
        self.paused = (not self.paused) if paused is None else paused
        self.dispatch_wanted = not self.paused
        for peer in self._subscribers:
            self._emit(peer, events.swarm_toggled(self.paused))
        return self.paused

    # -- reads -------------------------------------------------------------------------------

    def get(self, task_id: str) -> Task:
        task = self.tasks.get(task_id) or self.store.get_task(task_id)
        if task is None:
            raise UnknownTask(task_id)
        return task

    def list_tasks(self, query: TaskFilter) -> list[Task]:
        if query.state is not None and query.state not in State.__members__.values():
            raise BadRequest(
                f"unknown state {query.state!r}; states: {', '.join(s.value for s in State)}"
            )
        return self.store.list_tasks(query)

    def wait(self, peer: Peer, request_id: Any, task_id: str) -> Task | None:
        task = self.get(task_id)
        if task.state in states.ENDED:
            return task
        self._waiters.setdefault(task_id, []).append((peer, request_id))
        return None

    def why(self, task_id: str) -> dict[str, Any]:
        task = self.get(task_id)
        shape = self._shape(task)
        rows = explain(shape, (a.view() for a in self.agents.values() if a.tenant == task.tenant))
        for row in rows:  # "offline" to the matcher; say why, for one still within its TTL
            live = self.agents[row.agent]
            if self.budgets.over(live.workspace):
                row.eligible = False
                row.reasons.append(f"workspace {live.workspace} spent its budget for today")
            if live.unhealthy_until > self.clock.monotonic():
                row.eligible = False
                row.reasons.append("unhealthy: sessions never became ready (circuit breaker)")
            if live.online and live.peer is None:
                row.reasons = [
                    f"disconnected (offline unless it reconnects within {live.ttl:g}s)"
                    if r == "offline"
                    else r
                    for r in row.reasons
                ]
        if task.state != State.PENDING:
            summary = f"task is {task.state}" + (
                f" on agent {task.agent}" if task.agent and task.state == State.RUNNING else ""
            )
        elif self.paused:
            summary = "dispatch is paused (resume with: colibri resume)"
        elif task.id not in self.pending:
            summary = f"waiting to retry after {task.not_before}"
        elif any(r.eligible for r in rows):
            summary = "an eligible agent exists; the task will be assigned on the next pass"
        elif not rows:
            summary = "no agents are registered"
        else:
            summary = "no agent can take it now: see the reasons per agent"
        return {
            "task": task,
            "summary": summary,
            "required": sorted(shape.capabilities),
            "min_score": shape.min_score,
            "agents": [
                {
                    "agent": r.agent,
                    "score": round(r.score, 4),
                    "missing": r.missing,
                    "eligible": r.eligible,
                    "reasons": r.reasons,
                }
                for r in rows
            ],
        }

    def status(self) -> dict[str, Any]:
        counts = self.store.count_by_state()
        online = sum(1 for a in self.agents.values() if a.online)
        return {
            "paused": self.paused,
            "tasks": {s.value: counts.get(s.value, 0) for s in State},
            "ledger_seq": self.store.max_ledger_seq(),
            "warnings": dict(sorted(self.warnings.items())),
            "waiting": len(self.pending),
            "retrying": len(self._delayed),
            "agents": {"online": online, "known": len(self.agents)},
            "slots": {
                "total": sum(a.slots for a in self.agents.values() if a.online),
                "busy": sum(len(a.holding) for a in self.agents.values() if a.online),
            },
        }

    def agent_list(self) -> list[Agent]:
        live = {a.name: a.wire() for a in self.agents.values()}
        for stored in self.store.agents():
            live.setdefault(stored.name, stored)
        return [live[name] for name in sorted(live)]

    # -- cancel and retry --------------------------------------------------------------------

    def cancel(self, task_id: str, reason: str | None) -> list[Task]:
        """Cancel a task and every open descendant, a ledger row each; return those cancelled."""
        root = self.get(task_id)
        why = reason or "cancelled"
        changed: list[Task] = []
        for task in self.store.open_family(root.id):
            task = self.tasks.get(task.id, task)
            if task.state in (State.PENDING, State.RUNNING):
                changed.append(
                    self._cancel_one(
                        task, why if task.id == root.id else f"{why} (family of {root.id})"
                    )
                )
                if task.id != root.id:
                    crashpoints.hit("mid-cancel")
        if not changed and root.state in states.ENDED:
            raise IllegalTransition(root.id, root.state, State.CANCELLED.value)
        return changed

    def _cancel_one(self, task: Task, reason: str) -> Task:
        self.pending.discard(task.id)
        self._drop_orphan(task.id)
        holder = self.agents.get(task.agent or "") if task.state == State.RUNNING else None
        if (
            holder is not None
            and holder.online
            and holder.peer is not None
            and task.id in holder.holding
        ):
            # The session closes the task when it has stopped (reclaimed).
            cancelled = self._move(task, State.CANCELLED, reason)
            self._emit(holder.peer, events.cancel(cancelled, reason))
            return cancelled
        return self._move(task, State.CANCELLED, reason, close=True)

    def _budget_left(self, task: Task) -> float:
        """A task's budget less what it spent and what its children hold of it."""
        assert task.budget_usd is not None
        spent = task.cost.usd if task.cost is not None else 0.0
        return task.budget_usd - spent - sum(map(self._held_budget, self.store.children(task.id)))

    def _held_budget(self, task: Task) -> float:
        """What a child holds of its parent's budget: all of its own while it is open; once it
        has ended, what it spent and what its own children still hold — so a child retried
        after it failed is not counted twice."""
        budget = task.budget_usd or 0.0
        current = self.tasks.get(task.id, task)
        if current.state in states.OPEN:
            return budget
        spent = current.cost.usd if current.cost is not None else 0.0
        below = sum(map(self._held_budget, self.store.children(task.id)))
        return min(budget, spent + below)

    # -- daily budgets of workspaces -----------------------------------------------------

    def _day(self) -> str:
        return rfc3339(self.clock.time())[:10]

    def _spend(self, workspace: str | None, usd: float) -> None:
        if workspace is None or usd <= 0:
            return
        if self.budgets and self.budgets.day != self._day():
            self._new_budget_day()
        if self.budgets.spend(workspace, usd):
            budget = self.budgets.budgets[workspace]
            message = f"spent ${self.budgets.spent[workspace]:.4f} of its ${budget:g} for today"
            log.warning(message, extra={"event": "budget_spent", "workspace": workspace})
            self.broadcast({"event": "budget", "workspace": workspace, "paused": True,
                            "reason": message})  # fmt: skip
            for agent in self.agents.values():
                if agent.workspace == workspace:
                    self._index(agent)

    def _new_budget_day(self) -> None:
        reopened = self.budgets.start_day(self.store, self._day())
        for workspace in reopened:
            self.broadcast({"event": "budget", "workspace": workspace, "paused": False,
                            "reason": "a new day"})  # fmt: skip
        for agent in self.agents.values():
            if agent.workspace in reopened:
                self._index(agent)
        self.dispatch_wanted = True

    def family(self, task_id: str, budget: int = REPLY_BUDGET) -> tuple[str, list[Task], bool]:
        """The task's whole family: its top ancestor's id, and every member, parents first —
        as many as fit ``budget`` bytes of reply (read page by page, so a family of ten
        thousand long tasks is never in memory at once); and whether that is all of it."""
        top = self.get(task_id)
        seen = {top.id}
        while top.parent is not None:
            parent = self.tasks.get(top.parent) or self.store.get_task(top.parent)
            if parent is None or parent.id in seen:
                break
            seen.add(parent.id)
            top = parent
        top = self.tasks.get(top.id, top)
        members, used, queue = [top], task_size(top), deque([top.id])
        while queue:
            parent_id, after = queue.popleft(), None
            while True:
                page = self.store.list_tasks(
                    TaskFilter(parent=parent_id, after=after, limit=FAMILY_PAGE)
                )
                for child in page:
                    used += task_size(child)
                    if used > budget:
                        return top.id, members, False
                    members.append(self.tasks.get(child.id, child))
                    queue.append(child.id)
                if len(page) < FAMILY_PAGE:
                    break
                after = page[-1].id
        return top.id, members, True

    def retry(self, task_id: str) -> Task:
        """Submit an ended task again as a new task with every field of the original (not its
        idempotency key); a child's budget is what the parent has left, at most its own."""
        old = self.get(task_id)
        if old.state not in states.ENDED:
            raise IllegalTransition(old.id, old.state, "retried (only ended tasks can be retried)")
        budget = old.budget_usd
        parent = self.get(old.parent) if old.parent is not None else None
        if budget is not None and parent is not None and parent.budget_usd is not None:
            budget = min(budget, self._budget_left(parent))
            if budget <= 0:
                raise BudgetExceeded(parent.id, old.budget_usd or 0.0, budget)
        fields = TaskFields(
            text=old.text,
            capabilities=old.capabilities,
            workspace=old.workspace,
            parent=old.parent,
            priority=old.priority,
            min_score=old.min_score,
            labels=old.labels,
            tenant=old.tenant,
            max_attempts=old.max_attempts,
            budget_usd=budget,
        )
        task, _ = self.submit(fields, old.agent if old.pinned else None)
        return task

    # -- agents ------------------------------------------------------------------------------

    def register(self, req: RegisterAgent, peer: Peer) -> tuple[LiveAgent, list[str], list[Held]]:
        name = check_name(req.name, "agent name")
        capabilities = frozenset(normalize_names(req.capabilities, "capability"))
        tenant = check_name(req.tenant, "tenant") if req.tenant else DEFAULT_TENANT
        workspace = check_name(req.workspace, "workspace") if req.workspace else None
        previous = self.agents.get(name)
        if (
            previous is not None
            and previous.peer is not None
            and previous.peer is not peer
            and previous.online
        ):
            raise BadRequest(f"agent {name!r} is already connected; give this one another --name")
        now, now_mono = self.clock.time(), self.clock.monotonic()
        agent = LiveAgent(
            name,
            capabilities,
            req.slots,
            req.ttl or self.settings.agent_ttl,
            workspace,
            tenant,
            peer,
            now_mono,
            now,
        )
        adopted: list[str] = []
        rejected: list[Held] = []
        for held in req.running:
            task = self.tasks.get(held.task)
            if not self.claimed(held.task, held.epoch, held.claim):
                rejected.append(held)  # never given to it: nothing to adopt, nothing to close
                continue
            if (
                task is not None
                and task.agent == name
                and task.epoch == held.epoch
                and task.state == State.RUNNING
            ):
                agent.holding.add(task.id)
                self._orphans.pop(task.id, None)  # now held: the same place under max_sessions
                adopted.append(task.id)
            elif (
                task is not None
                and task.agent == name
                and task.epoch == held.epoch
                and task.state in states.OUTCOMES
            ):
                # Ended while the agent was away: the harness stops the session it rejects.
                self._close(task)
                rejected.append(held)
            else:
                rejected.append(held)
        if previous is not None:
            # Sessions the agent held before and did not report now (or reported without
            # their claim) are gone. Each is released through ``previous`` (still the
            # registered agent here), so its slot, and the host-wide max_sessions it counted
            # against, are freed. (Those that ended while it was away are closed already.)
            for task_id in sorted(previous.holding - agent.holding):
                task = self.tasks.get(task_id)
                if task is not None and task.state == State.RUNNING:
                    self._lose(task, f"session lost: agent {name} registered again without it")
                elif task is not None and task.state in states.OUTCOMES:
                    self._close(task)
                previous.holding.discard(task_id)
        if previous is not None and previous.tenant != tenant:
            # Indexes are per tenant: left in the old one, it would still be picked for that
            # tenant's work (and, once its connection is gone, for work it cannot be sent).
            old_index = self.indexes.get(previous.tenant)
            if old_index is not None:
                old_index.remove(name)
        self.agents[name] = agent
        self.on_deadline()
        peer.agent_name = name
        self._index(agent)
        self._refresh(agent)  # the sessions it took back count against max_sessions
        self.store.upsert_agent(agent.wire(), rfc3339(now))
        if capabilities:
            self.store.ensure_skills(sorted(capabilities))
        if tenant != DEFAULT_TENANT:
            self.store.ensure_tenant(tenant, rfc3339(now))
        for sub in self._subscribers:
            self._emit(sub, events.agent_changed(agent.wire()))
        self.dispatch_wanted = True
        return agent, adopted, rejected

    def agent_of(self, peer: Peer, cmd: str) -> LiveAgent:
        agent = self.agents.get(peer.agent_name or "")
        if agent is None or agent.peer is not peer or not agent.online:
            raise NotRegistered(cmd)
        self.heartbeat(agent)  # any word from an agent shows it is alive
        return agent

    def reporter(
        self,
        peer: Peer,
        cmd: str,
        task_id: str,
        from_session: bool,
        epoch: int = 0,
        claim: str | None = None,
    ) -> LiveAgent:
        """Who reports on a task: the agent of this connection, or — for a report sent by the
        session itself — the agent that holds the task, once the report has shown the secret
        of the claim it reports on (the epoch still has to be the current one)."""
        if not from_session:
            return self.agent_of(peer, cmd)
        task = self.tasks.get(task_id)
        holder = self.agents.get(task.agent or "") if task is not None else None
        if task is None or holder is None or task_id not in holder.holding:
            stored = task or self.store.get_task(task_id)
            if stored is None:
                raise UnknownTask(task_id)
            if (
                task_id in self._orphans
                and (holder is None or not holder.online)
                and self.claimed(task_id, epoch, claim)
            ):
                # The daemon restarted; the session talks to it before its harness is back.
                raise Busy(
                    f"task {task_id}'s harness has not reconnected since the daemon restarted; "
                    "try again in a moment"
                )
            raise IllegalTransition(task_id, stored.state, "reported (no session holds it)")
        if not self.claimed(task_id, epoch, claim):
            log.warning(
                "report without its claim refused",
                extra={"event": "bad_claim", "task": task_id, "cmd": cmd},
            )
            raise BadClaim(task_id, cmd)
        return holder

    def claim_of(self, task_id: str, epoch: int) -> str:
        """The secret of one claim (``core.claims``)."""
        return claim_secret(self._claim_key, task_id, epoch)

    def claimed(self, task_id: str, epoch: int, claim: str | None) -> bool:
        return is_claim(self._claim_key, task_id, epoch, claim)

    def heartbeat(self, agent: LiveAgent) -> None:
        agent.last_seen = self.clock.monotonic()
        agent.last_seen_wall = self.clock.time()

    def _held(self, agent: LiveAgent, task_id: str, epoch: int) -> Task:
        task = self.tasks.get(task_id)
        if task is None:
            stored = self.store.get_task(task_id)
            if stored is None:
                raise UnknownTask(task_id)
            log.warning(
                "late report refused",
                extra={"event": "late_report", "task": task_id, "agent": agent.name},
            )
            if stored.epoch != epoch:
                raise StaleClaim(task_id, epoch, stored.epoch)
            raise IllegalTransition(task_id, stored.state, "reported (it has already ended)")
        if task.epoch != epoch:
            log.warning(
                "stale report refused",
                extra={"event": "stale_claim", "task": task_id, "agent": agent.name},
            )
            raise StaleClaim(task_id, epoch, task.epoch)
        if task.agent != agent.name or task_id not in agent.holding:
            raise NotYourTask(task_id, agent.name)
        return task

    def out(
        self,
        agent: LiveAgent,
        task_id: str,
        epoch: int,
        output: str,
        cost: Cost | None,
        session_ended: bool = True,
    ) -> Task:
        task = self._held(agent, task_id, epoch)
        if task.state == State.DONE and task.output == output:
            # The same report again: sent once more after its reply was lost (a restart).
            return self._close(task) if session_ended else task
        if task.state != State.RUNNING:
            raise IllegalTransition(task_id, task.state, State.DONE.value)
        agent.requeues_in_row = 0
        if cost is not None:
            self._spend(task.workspace or agent.workspace, cost.usd)
        return self._move(
            task, State.DONE, "out", close=session_ended, output=output, error=None, cost=cost
        )

    def fail(
        self, agent: LiveAgent, task_id: str, epoch: int, error: str, session_ended: bool = True
    ) -> Task:
        task = self._held(agent, task_id, epoch)
        if task.state == State.FAILED and task.error == (error or "session failed"):
            return self._close(task) if session_ended else task  # the same report again
        if task.state != State.RUNNING:
            raise IllegalTransition(task_id, task.state, State.FAILED.value)
        agent.requeues_in_row = 0
        ended = self._end_session(task, error or "session failed")
        return self._close(ended) if session_ended and ended.state != State.PENDING else ended

    def ask(
        self,
        peer: Peer,
        request_id: Any,
        task_id: str,
        epoch: int,
        question: str,
        claim: str | None,
    ) -> None:
        """A session asks its operator a question; the reply waits for ``answer``."""
        holder = self.reporter(peer, "ask", task_id, True, epoch, claim)
        task = self._held(holder, task_id, epoch)
        if task.state != State.RUNNING:
            raise IllegalTransition(task_id, task.state, "waiting for an answer")
        waiting = msgspec.structs.replace(task, question=question)
        self.store.set_question(task_id, question)
        self.tasks[task_id] = waiting
        self._askers[task_id] = (peer, request_id)
        self._unasked.pop(task_id, None)
        self.broadcast({"event": "question", "task": task_id, "question": question})
        if holder.peer is not None:  # the harness pauses the session's clocks meanwhile
            self._emit(holder.peer, {"event": "asking", "task": task_id})

    def answer(self, task_id: str, text: str) -> Task:
        task = self.tasks.get(task_id)
        if task is None or task.question is None:
            state = (task or self.get(task_id)).state
            raise BadRequest(f"task {task_id} is {state} and not waiting for an answer")
        answered = msgspec.structs.replace(task, question=None)
        self.store.set_question(task_id, None)
        self.tasks[task_id] = answered
        self._unasked.pop(task_id, None)
        asker = self._askers.pop(task_id, None)
        if asker is not None:
            self._emit(asker[0], {"id": asker[1], "ok": True, "answer": text})
        self.broadcast({"event": "answered", "task": task_id})
        holder = self.agents.get(task.agent or "")
        if holder is not None and holder.peer is not None:
            self._emit(holder.peer, {"event": "answered", "task": task_id})
        return answered

    def session_ready(self, peer: Peer, task_id: str, epoch: int, claim: str | None) -> None:
        """A session says it is ready: tell the harness that holds its task to type it in."""
        holder = self.reporter(peer, "ready", task_id, True, epoch, claim)
        task = self._held(holder, task_id, epoch)
        if holder.peer is not None:
            self._emit(holder.peer, {"event": "ready", "task": task.id, "epoch": task.epoch})

    def requeue(self, agent: LiveAgent, task_id: str, epoch: int, reason: str) -> Task:
        """The session never became ready: back to pending, no attempt spent, a warning."""
        task = self._held(agent, task_id, epoch)
        if task.state != State.RUNNING:
            raise IllegalTransition(task_id, task.state, State.PENDING.value)
        self._release(task)
        why = reason or "session not ready"
        waiting = self._move(task, State.PENDING, f"requeued: {why}", attempts=task.attempts - 1)
        where = agent.workspace or agent.name
        self.warnings[where] = self.warnings.get(where, 0) + 1
        self.broadcast({"event": "warning", "workspace": where, "task": task_id, "reason": why})
        agent.requeues_in_row += 1
        if agent.requeues_in_row >= BREAKER_AFTER:
            agent.requeues_in_row = 0
            agent.unhealthy_until = self.clock.monotonic() + BREAKER_COOL_DOWN
            self._index(agent)
            self.on_deadline()
            message = (
                f"{BREAKER_AFTER} sessions in a row never became ready; no work for "
                f"{BREAKER_COOL_DOWN:g}s (its tasks wait)"
            )
            log.warning(message, extra={"event": "breaker_open", "agent": agent.name})
            self.broadcast({"event": "unhealthy", "agent": agent.name, "workspace": where,
                            "reason": message})  # fmt: skip
        self._enqueue(waiting)
        return waiting

    def reclaimed(self, agent: LiveAgent, task_id: str, epoch: int) -> Task:
        task = self._held(agent, task_id, epoch)
        if task.state == State.RUNNING:
            ended = self._end_session(task, "session ended without out")
            if ended.state == State.PENDING:
                return ended
            return self._close(ended)
        return self._close(task)

    def _end_session(self, task: Task, error: str) -> Task:
        """A running task's session is gone without out: retry if attempts remain, else fail."""
        if task.attempts < task.max_attempts:
            delay = min(self.settings.retry_backoff * 2 ** (task.attempts - 1), MAX_RETRY_DELAY)
            self._release(task)
            retry = self._move(
                task,
                State.PENDING,
                f"retry {task.attempts + 1}/{task.max_attempts} in {delay:g}s after: {error}",
                error=error,
                not_before=rfc3339(self.clock.time() + delay),
            )
            self._enqueue(retry)
            return retry
        reason = (
            error
            if task.max_attempts == 1
            else f"max_attempts ({task.max_attempts}) reached: {error}"
        )
        return self._move(task, State.FAILED, reason, error=error)

    def disconnect(self, peer: Peer) -> None:
        """A connection closed: its agent stops getting work; its tasks wait out the TTL."""
        self.forget_peer(peer)
        agent = self.agents.get(peer.agent_name or "")
        if agent is not None and agent.peer is peer:
            agent.peer = None
            self._index(agent)

    # -- time --------------------------------------------------------------------------------

    def sweep(self) -> None:
        """Expire silent agents, fail sessions nobody claimed back, release due retries."""
        now = self.clock.monotonic()
        stalled = now - self._last_sweep > STALL
        self._last_sweep = now
        if stalled:
            # The daemon itself was stopped or starved (SIGSTOP, a loop stall): the agents'
            # heartbeats of that time are still unread. Read them before judging anyone.
            log.warning("sweep after a stall; expiry waits one pass", extra={"event": "stalled"})
            self.on_deadline()
            return
        if self.budgets and self.budgets.day != self._day():
            self._new_budget_day()
        for agent in list(self.agents.values()):
            if agent.online and now - agent.last_seen > agent.ttl:
                self._expire(agent)
            elif agent.unhealthy_until and agent.unhealthy_until <= now:
                agent.unhealthy_until = 0.0  # the breaker closes: work may come again
                self._index(agent)
                self.dispatch_wanted = True
        for task_id, deadline in list(self._orphans.items()):
            if now >= deadline:
                task = self.tasks.get(task_id)
                if task is not None and task.state == State.RUNNING:
                    self._lose(task, "session lost: not claimed back after the daemon restarted")
                elif task is not None and task.state in states.OUTCOMES:
                    self._close(task)
                self._drop_orphan(task_id)  # released above, or not a session any more
        while self._delayed and self._delayed[0][0] <= now:
            _, task_id = heapq.heappop(self._delayed)
            task = self.tasks.get(task_id)
            if task is not None and task.state == State.PENDING:
                self._make_dispatchable(task)
        for task_id in [t for t, due in self._unasked.items() if due <= now]:
            self._withdraw_question(task_id)

    def _withdraw_question(self, task_id: str) -> None:
        """Nobody waits for the answer any more: clear the question, and let the session's
        clock (max_runtime) run again."""
        del self._unasked[task_id]
        task = self.tasks.get(task_id)
        if task is None or task.question is None or task_id in self._askers:
            return
        self.store.set_question(task_id, None)
        self.tasks[task_id] = msgspec.structs.replace(task, question=None)
        log.info(
            "question withdrawn: its asker is gone",
            extra={"event": "question_withdrawn", "task": task_id},
        )
        self.broadcast({"event": "question_withdrawn", "task": task_id})
        holder = self.agents.get(task.agent or "")
        if holder is not None and holder.peer is not None:
            self._emit(holder.peer, {"event": "question_withdrawn", "task": task_id})

    def next_deadline(self) -> float | None:
        """The monotonic instant at which ``sweep`` next has something to do."""
        candidates = [a.last_seen + a.ttl for a in self.agents.values() if a.online]
        candidates.extend(self._orphans.values())
        if self.budgets:  # the day's spending starts again at midnight UTC
            midnight = (self.clock.time() // 86400 + 1) * 86400
            candidates.append(self.clock.monotonic() + (midnight - self.clock.time()))
        candidates.extend(a.unhealthy_until for a in self.agents.values() if a.unhealthy_until)
        candidates.extend(self._unasked.values())
        if self._delayed:
            candidates.append(self._delayed[0][0])
        return min(candidates, default=None)

    def _expire(self, agent: LiveAgent) -> None:
        log.info("agent went offline", extra={"event": "agent_offline", "agent": agent.name})
        agent.online = False
        self._index(agent)
        peer = agent.peer
        agent.peer = None
        for task_id in sorted(agent.holding):
            task = self.tasks.get(task_id)
            if task is None:
                continue
            if task.state == State.RUNNING:
                self._lose(
                    task, f"session lost: agent {agent.name} silent for more than {agent.ttl:g}s"
                )
            elif task.state in states.OUTCOMES:
                self._close(task)
        agent.holding.clear()
        self.store.upsert_agent(agent.wire(), rfc3339(self.clock.time()))
        for sub in self._subscribers:
            self._emit(sub, events.agent_changed(agent.wire()))
        if peer is not None:
            self._emit(
                peer,
                {
                    "event": "expired",
                    "reason": f"silent for more than {agent.ttl:g}s; register again",
                },
            )

    def _lose(self, task: Task, reason: str) -> None:
        ended = self._end_session(task, reason)
        if ended.state == State.FAILED:
            self._close(ended)

    def known_agents(self) -> Iterable[LiveAgent]:
        return self.agents.values()
