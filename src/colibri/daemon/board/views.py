"""Read-side views of the board: what ``get``, ``list``, ``why``, ``status``, ``agents`` and
``family`` answer. Nothing here changes the board; ``wait`` only registers who waits.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from colibri.core import cursor, replies, states
from colibri.core.errors import BadRequest, shown
from colibri.core.matching import explain
from colibri.core.model import Agent, Task
from colibri.core.sizes import REPLY_BUDGET, task_size
from colibri.core.states import State
from colibri.daemon.board.audience import Audience
from colibri.daemon.board.batch import Peer
from colibri.daemon.board.capacity import Capacity
from colibri.daemon.board.dependencies import Dependencies
from colibri.daemon.board.dispatch import Dispatcher
from colibri.daemon.board.known import KnownAgents
from colibri.daemon.board.queue import Queue
from colibri.daemon.board.transitions import Transitions
from colibri.daemon.clock import Clock
from colibri.store import Store, TaskFilter

#: Children read from the store at a time when a family is listed.
FAMILY_PAGE = 64


class Views:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        audience: Audience,
        queue: Queue,
        capacity: Capacity,
        transitions: Transitions,
        dispatcher: Dispatcher,
        known: KnownAgents,
        dependencies: Dependencies,
    ) -> None:
        self.store = store
        self.clock = clock
        self.audience = audience
        self.queue = queue
        self.capacity = capacity
        self.transitions = transitions
        self.dispatcher = dispatcher
        self.known = known
        self.dependencies = dependencies
        self.agents = capacity.agents
        self.tasks = transitions.tasks
        self.get = transitions.get

    def list_tasks(self, query: TaskFilter) -> list[Task]:
        if query.state is not None and query.state not in State.__members__.values():
            raise BadRequest(
                f"unknown state {shown(query.state)}; states: {', '.join(s.value for s in State)}"
            )
        return self.store.list_tasks(query)

    def wait(self, peer: Peer, request_id: Any, task_id: str) -> Task | None:
        task = self.get(task_id)
        if task.state in states.ENDED:
            return task
        self.audience.wait_for(peer, request_id, task_id)
        return None

    def why(self, task_id: str) -> replies.Why:
        task = self.get(task_id)
        shape = self.queue.shape(task)
        rows = explain(shape, (a.view() for a in self.agents.values() if a.tenant == task.tenant))
        for row in rows:  # "offline" to the matcher; say why, for one still within its TTL
            live = self.agents[row.agent]
            if self.capacity.budgets.over(live.workspace):
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
        if task.state == State.RUNNING:
            summary = f"its session runs on agent {task.agent}"
        elif task.state != State.PENDING:
            summary = f"it ended {task.outcome or task.state}; nothing waits"
            if task.change is not None:
                summary += f"; its session left {task.change.describe()}"
        elif task.id in self.dependencies.waiting:
            summary = self.dependencies.describe(task) or "it waits for other tasks"
        elif self.dispatcher.paused:
            summary = "dispatch is paused (resume with: colibri resume)"
        elif task.id not in self.queue.pending:
            summary = f"waiting to retry after {task.not_before}"
        elif any(r.eligible for r in rows):
            summary = "an eligible agent exists; the task will be assigned on the next pass"
        elif not rows:
            summary = "no agents are registered"
        else:
            summary = "no agent can take it now: see the reasons per agent"
        return replies.Why(
            task=task,
            summary=summary,
            required=sorted(shape.capabilities),
            min_score=shape.min_score,
            agents=[
                replies.AgentFit(
                    agent=r.agent,
                    score=round(r.score, 4),
                    missing=r.missing,
                    eligible=r.eligible,
                    reasons=r.reasons,
                )
                for r in rows
            ],
        )

    def waits_because(self, task: Task) -> str | None:
        """Why a task just submitted will wait — dispatch paused, or no agent this board has
        known could take it — or None: said to the submitter, so that nothing is accepted in
        silence. Cheap (no agent is scanned): it runs for every submission."""
        if task.state != State.PENDING:
            return None
        if task.id in self.dependencies.waiting:
            return self.dependencies.describe(task)
        if self.dispatcher.paused:
            return "dispatch is paused (resume with: colibri resume)"
        return self.known.unplaceable(self.queue.shape(task))

    def status(self) -> dict[str, Any]:
        counts, outcomes = self.transitions.by_state, self.transitions.by_outcome
        # Every agent ``agents`` lists, those only the store remembers (registered before
        # the daemon restarted) included: the two commands agree on how many there are.
        known = self.agent_list()
        return {
            "paused": self.dispatcher.paused,
            "tasks": {s.value: counts.get(s.value, 0) for s in State},
            "outcomes": {o: outcomes.get(o, 0) for o in ("done", "failed", "cancelled")},
            "ledger_at": cursor.render(self.store.ledger_heads()),
            "warnings": dict(sorted(self.capacity.warnings.items())),
            "waiting": len(self.queue.pending),
            "retrying": len(self.queue.delayed),
            "blocked": len(self.dependencies.waiting),
            "agents": {"online": sum(a.online for a in known), "known": len(known)},
            "slots": {
                "total": sum(a.slots for a in self.agents.values() if a.online),
                "busy": sum(len(a.holding) for a in self.agents.values() if a.online),
            },
        }

    def agent_list(self) -> list[Agent]:
        now = self.clock.monotonic()
        live = {a.name: a.wire(now) for a in self.agents.values()}
        for stored in self.store.agents():
            live.setdefault(stored.name, stored)
        return [live[name] for name in sorted(live)]

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
