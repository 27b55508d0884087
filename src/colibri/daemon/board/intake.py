"""Intake: new tasks (submitted, handed off, fired, retried) and cancelling a family.

Intake refuses before it writes anything: names, quotas (pending tasks and their text per
tenant, children per task, depth of a family), hand-off edges and budgets. A submission with an
idempotency key that was already taken gets its task back, unless it asks for something else.
Several submissions taken together (``submit_all``) are all checked, each against what those
before it will hold, before any is written: all of them are taken, or none.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from colibri.config import SchedulerSettings
from colibri.core import events, states
from colibri.core.claims import Claims
from colibri.core.errors import (
    BadClaim,
    BadRequest,
    BudgetExceeded,
    ColibriError,
    HandOffRefused,
    IdempotencyConflict,
    IllegalTransition,
    ParentCancelled,
    QuotaExceeded,
    UnknownParent,
)
from colibri.core.model import (
    DEFAULT_TENANT,
    Task,
    TaskSpec,
    checked_names,
    request_fingerprint,
    rfc3339,
)
from colibri.core.plans import plan_order
from colibri.core.states import State
from colibri.daemon import crashpoints
from colibri.daemon.board.batch import Batch
from colibri.daemon.board.capacity import Capacity
from colibri.daemon.board.ids import new_task_id
from colibri.daemon.board.queue import Queue
from colibri.daemon.board.transitions import Transitions, text_bytes
from colibri.daemon.clock import Clock
from colibri.store import Store


@dataclass
class Tally:
    """What the submissions admitted together so far will hold once written (``submit_all``):
    pending tasks and bytes of text per tenant, children and budget per parent, and the
    idempotency keys they take (tenant, key → the task and its fingerprint)."""

    pending: Counter[str] = field(default_factory=Counter)
    text: Counter[str] = field(default_factory=Counter)
    children: Counter[str] = field(default_factory=Counter)
    budget: defaultdict[str, float] = field(default_factory=lambda: defaultdict(float))
    keys: dict[tuple[str, str], tuple[Task, str]] = field(default_factory=dict)
    #: The tasks admitted so far that others of them may wait for: id → depth of waits, tenant.
    planned: dict[str, tuple[int, str]] = field(default_factory=dict)


class Intake:
    def __init__(
        self,
        store: Store,
        settings: SchedulerSettings,
        clock: Clock,
        batch: Batch,
        queue: Queue,
        capacity: Capacity,
        transitions: Transitions,
        claims: Claims,
        send_to: dict[str, list[str]],
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.batch = batch
        self.queue = queue
        self.capacity = capacity
        self.transitions = transitions
        self.claims = claims
        #: Lineage edges of the configured workspaces: who may hand work to whom.
        self.send_to = send_to
        self.tasks = transitions.tasks
        self.dependencies = transitions.dependencies

        self.get = transitions.get

    def submit(
        self,
        req: TaskSpec,
        *,
        idempotency_key: str | None = None,
        claim: str | None = None,
        schedule: str | None = None,
        task_id: str | None = None,
        reason: str = "submitted",
    ) -> tuple[Task, bool]:
        """Write a new pending task durably (on commit); return it and whether it is new."""
        admitted = self._admit(
            req, Tally(), idempotency_key=idempotency_key, claim=claim, schedule=schedule,
            task_id=task_id,
        )  # fmt: skip
        return self._enter(admitted, reason)

    def submit_all(
        self,
        submissions: Sequence[tuple[TaskSpec, str | None]],
        names: Sequence[str | None] | None = None,
        *,
        schedule: str | None = None,
        task_ids: list[str] | None = None,
        reason: str = "submitted",
    ) -> list[tuple[Task, bool]]:
        """Several submissions (a spec and its idempotency key each), all or none: each is
        checked as if those before it had been written — their pending tasks and text count
        against the quotas, their budgets against their parent's, their keys as taken — and
        only once every one has passed is any written. A refusal is the first failing
        submission's, its ``index`` set.

        ``names``: each submission's local name, or None. A submission's ``after`` may hold
        the names of others: they are admitted first (the graph's order; a cycle is refused
        whole) and their ids take their names' places. Returned in the submissions' order.
        ``schedule``, ``task_ids`` (one per submission) and ``reason``: as ``submit``'s."""
        named = names or [None] * len(submissions)
        order = plan_order([spec.after for spec, _ in submissions], named)
        tally = Tally()
        ids: dict[str, str] = {}
        admitted: dict[int, tuple[Task, bool, str | None]] = {}
        for index in order:
            spec, key = submissions[index]
            try:
                if any(a in ids for a in spec.after):
                    after = list(dict.fromkeys(ids.get(a, a) for a in spec.after))
                    spec = msgspec.structs.replace(spec, after=after)
                one = admitted[index] = self._admit(
                    spec, tally, idempotency_key=key, schedule=schedule,
                    task_id=task_ids[index] if task_ids else None,
                )  # fmt: skip
            except ColibriError as exc:
                exc.index = index
                raise
            name = named[index]
            if name is not None:
                ids[name] = one[0].id
        entered = {i: self._enter(admitted[i], reason) for i in order}
        return [entered[i] for i in range(len(submissions))]

    def _enter(self, admitted: tuple[Task, bool, str | None], reason: str) -> tuple[Task, bool]:
        task, created, fingerprint = admitted
        if created:
            if task.tenant != DEFAULT_TENANT:
                self.store.ensure_tenant(task.tenant, task.created_at)
            self.transitions.insert(task, reason, fingerprint)
        return task, created

    def _admit(
        self,
        req: TaskSpec,
        tally: Tally,
        *,
        idempotency_key: str | None = None,
        claim: str | None = None,
        schedule: str | None = None,
        task_id: str | None = None,
    ) -> tuple[Task, bool, str | None]:
        """Every check of a submission, none of its writes: the task to write (or the one its
        idempotency key already names), whether it is new, and its fingerprint. ``tally``
        holds what the submissions admitted with it hold, and is told what this one will."""
        pin = req.agent
        text = req.text  # kept byte for byte: it is the session's input
        names, label_names, workspace = checked_names(req)
        tenant = req.tenant or DEFAULT_TENANT
        if req.parent is not None:
            # A child is of its parent's tenant: a hand-off never carries work across tenants.
            above = self.tasks.get(req.parent) or self.store.get_task(req.parent)
            if above is not None:
                if req.tenant and above.tenant != tenant:
                    raise BadRequest(
                        f"task {req.parent} is of tenant {above.tenant}; its children are too "
                        "(leave --tenant out)"
                    )
                tenant = above.tenant
        capabilities = self.queue.shared(names)
        labels = self.queue.shared(label_names)
        fingerprint = None
        if idempotency_key is not None:
            # Before the quotas: a retry of a submission that did commit gets its task back.
            fingerprint = request_fingerprint(req, capabilities, labels, workspace, pin)
            taken = tally.keys.get((tenant, idempotency_key))
            if taken is not None:  # by a submission admitted with this one
                if taken[1] != fingerprint:
                    raise IdempotencyConflict(idempotency_key, taken[0].id)
                return taken[0], False, None
            existing = self.store.find_idempotent(tenant, idempotency_key)
            if existing is not None:
                stored = self.store.fingerprint(existing.id)
                if stored is not None and stored != fingerprint:
                    raise IdempotencyConflict(idempotency_key, existing.id)
                return self.tasks.get(existing.id, existing), False, None
        pending = self.transitions.pending_by_tenant.get(tenant, 0) + tally.pending[tenant]
        if pending >= self.settings.max_pending:
            raise QuotaExceeded(
                f"tenant {tenant} has {self.settings.max_pending} pending tasks, its quota; "
                "wait for some to be taken (or raise scheduler.max_pending)"
            )
        size = text_bytes(text)
        held = self.transitions.open_text.get(tenant, 0) + tally.text[tenant]
        if held + size > self.settings.max_pending_bytes:
            raise QuotaExceeded(
                f"tenant {tenant}'s open tasks hold {held} bytes of "
                f"text; this one's {size} would pass its quota of "
                f"{self.settings.max_pending_mib:g} MiB (scheduler.max_pending_mib)"
            )
        sender: str | None = None
        budget = req.budget_usd
        if claim is not None and req.parent is None:
            raise BadRequest("a hand-off's claim is its parent's: give parent too")
        if req.parent is not None:
            parent = self.tasks.get(req.parent) or self.store.get_task(req.parent)
            if parent is None:
                raise UnknownParent(req.parent)
            if claim is not None and (
                parent.state != State.RUNNING
                or not self.claims.valid(parent.id, parent.epoch, claim)
            ):
                raise BadClaim(parent.id, "a hand-off")
            children = self.store.count_children(parent.id) + tally.children[parent.id]
            if children >= self.settings.max_children:
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
                if claim is not None:
                    # From inside the parent's session: only along its send_to edges, which
                    # form no cycle, so a chain of hand-offs is as long as the graph at most.
                    if workspace not in allowed:
                        raise HandOffRefused(sender, workspace, allowed)
                elif workspace is not None and workspace != sender and workspace not in allowed:
                    raise HandOffRefused(sender, workspace, allowed)
            if parent.budget_usd is not None:
                left = self.budget_left(parent) - tally.budget[parent.id]
                if budget is None:
                    budget = left  # a child inherits what remains
                if budget > left or left <= 0:
                    raise BudgetExceeded(parent.id, budget, left)
        after: list[str] = []
        if req.after:
            after = list(dict.fromkeys(req.after))
            depth = self.dependencies.check(
                tenant, after, req.if_dependency_fails, self.settings.max_depth, tally.planned
            )
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
            idempotency_key=idempotency_key,
            max_attempts=req.max_attempts,
            budget_usd=budget,
            schedule=schedule,
            after=after,
            if_dependency_fails=req.if_dependency_fails,
            base=req.base,
            created_at=now,
            updated_at=now,
        )
        tally.planned[task.id] = (depth if after else 0, tenant)
        tally.pending[tenant] += 1
        tally.text[tenant] += size
        if task.parent is not None:
            tally.children[task.parent] += 1
            tally.budget[task.parent] += budget or 0.0  # an open child holds all of its own
        if idempotency_key is not None and fingerprint is not None:
            tally.keys[(tenant, idempotency_key)] = (task, fingerprint)
        return task, True, fingerprint

    def cancel(self, task_id: str, reason: str | None) -> list[Task]:
        """Cancel a task and every open descendant, a ledger row each; return those cancelled,
        with the tasks that waited for them and were cancelled for it (``if_dependency_fails``)."""
        root = self.get(task_id)
        why = reason or "cancelled"
        followed: list[Task] = []
        self.dependencies.cancelled = followed
        try:
            changed = self._cancel_family(root, why)
        finally:
            self.dependencies.cancelled = None
        changed += followed
        if not changed and root.state in states.ENDED:
            raise IllegalTransition(root.id, root.state, State.CANCELLED.value)
        return changed

    def _cancel_family(self, root: Task, why: str) -> list[Task]:
        changed: list[Task] = []
        for member in self.store.open_family(root.id):
            # As it is now: a member that waited for another may have been cancelled with it.
            task = self.tasks.get(member.id)
            if task is not None and task.state in (State.PENDING, State.RUNNING):
                changed.append(
                    self.cancel_one(
                        task, why if task.id == root.id else f"{why} (family of {root.id})"
                    )
                )
                if task.id != root.id:
                    crashpoints.hit("mid-cancel")
        return changed

    def cancel_one(self, task: Task, reason: str) -> Task:
        self.queue.pending.discard(task.id)
        self.capacity.drop_orphan(task.id)
        holder = self.capacity.holder(task) if task.state == State.RUNNING else None
        if (
            holder is not None
            and holder.online
            and holder.peer is not None
            and task.id in holder.holding
        ):
            # The session closes the task when it has stopped (reclaimed).
            cancelled = self.transitions.move(task, State.CANCELLED, reason)
            self.batch.emit(holder.peer, events.cancel(cancelled, reason))
            return cancelled
        return self.transitions.move(task, State.CANCELLED, reason, close=True)

    def budget_left(self, task: Task) -> float:
        """A task's budget less what it spent and what its children hold of it."""
        assert task.budget_usd is not None
        spent = task.cost.usd if task.cost is not None else 0.0
        return task.budget_usd - spent - sum(map(self.held_budget, self.store.children(task.id)))

    def held_budget(self, task: Task) -> float:
        """What a child holds of its parent's budget: all of its own while it is open; once it
        has ended, what it spent and what its own children still hold — so a child retried
        after it failed is not counted twice."""
        budget = task.budget_usd or 0.0
        current = self.tasks.get(task.id, task)
        if current.state in states.OPEN:
            return budget
        spent = current.cost.usd if current.cost is not None else 0.0
        below = sum(map(self.held_budget, self.store.children(task.id)))
        return min(budget, spent + below)

    def retry(self, task_id: str) -> Task:
        """Submit an ended task again as a new task with every field of the original (not its
        idempotency key); a child's budget is what the parent has left, at most its own."""
        old = self.get(task_id)
        if old.state not in states.ENDED:
            raise IllegalTransition(old.id, old.state, "retried (only ended tasks can be retried)")
        budget = old.budget_usd
        parent = self.get(old.parent) if old.parent is not None else None
        if budget is not None and parent is not None and parent.budget_usd is not None:
            budget = min(budget, self.budget_left(parent))
            if budget <= 0:
                raise BudgetExceeded(parent.id, old.budget_usd or 0.0, budget)
        task, _ = self.submit(msgspec.structs.replace(TaskSpec.of(old), budget_usd=budget))
        self.dependencies.replace(old, task)
        return task
