"""Capacity: which agents can take work now, and how much.

An agent offers its free slots to the matcher's index of its tenant, unless it is offline,
disconnected, behind an open circuit breaker, or its workspace has spent its daily budget. The
supervised workspace harnesses of this host together run at most ``max_sessions`` sessions,
whatever their slots say — counting, after a restart, the sessions not yet claimed back.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field

from colibri.config import SchedulerSettings
from colibri.core import events
from colibri.core.matching import AgentIndex, AgentView, Shape
from colibri.core.model import Agent, Task, rfc3339
from colibri.daemon.board.audience import Audience
from colibri.daemon.board.batch import Batch, Peer
from colibri.daemon.budgets import DailyBudgets
from colibri.daemon.clock import Clock
from colibri.store import Store

log = logging.getLogger(__name__)

#: Sessions in a row that never become ready before an agent's circuit breaker opens.
BREAKER_AFTER = 3
#: How long an open breaker keeps work away (its tasks wait; none is dropped).
BREAKER_COOL_DOWN = 60.0


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
    #: Warm sessions in its ready pool, as its last heartbeat said (metrics).
    ready: int = 0

    def view(self) -> AgentView:
        return AgentView(
            self.name,
            self.capabilities,
            self.slots - len(self.holding),
            self.online and self.peer is not None,
            self.workspace,
        )

    def wire(self, now: float | None = None) -> Agent:
        """The agent as clients see it; ``now`` (the monotonic clock) says whether its breaker
        is open, and without it the breaker is reported closed."""
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
            ready=self.ready,
            breaker_open=now is not None and self.unhealthy_until > now,
        )


class Capacity:
    def __init__(
        self,
        store: Store,
        settings: SchedulerSettings,
        clock: Clock,
        batch: Batch,
        audience: Audience,
        tasks: dict[str, Task],
        supervised: frozenset[str],
        daily_budgets: dict[str, float],
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.batch = batch
        self.audience = audience
        self.tasks = tasks
        #: Agents that are this host's supervised workspace harnesses (max_sessions).
        self.supervised = supervised
        #: Dollars per UTC day each workspace may spend; past it, its agents get no work.
        self.budgets = DailyBudgets(daily_budgets)
        self.agents: dict[str, LiveAgent] = {}
        self.indexes: dict[str, AgentIndex] = {}
        #: Running tasks nobody has claimed back since start-up: task id → monotonic deadline.
        self.orphans: dict[str, float] = {}
        #: Sessions that never became ready, per workspace (or agent): shown in status.
        self.warnings: dict[str, int] = {}
        #: Circuit breakers opened since start-up, per workspace (or agent): metrics.
        self.breaker_trips: dict[str, int] = {}

    # -- the index ---------------------------------------------------------------------------

    def index(self, agent: LiveAgent) -> None:
        index = self.indexes.setdefault(agent.tenant, AgentIndex())
        healthy = agent.unhealthy_until <= self.clock.monotonic()
        funded = not self.budgets.over(agent.workspace)
        if agent.online and agent.peer is not None and healthy and funded:
            index.add(agent.name, agent.capabilities, self.free(agent), agent.workspace)
        else:
            index.remove(agent.name)

    def reindex(self) -> None:
        self.indexes.clear()
        for agent in self.agents.values():
            self.index(agent)

    def free(self, agent: LiveAgent) -> int:
        """Free slots; for a supervised workspace, no more than max_sessions leaves."""
        free = agent.slots - len(agent.holding)
        if agent.name in self.supervised:
            running = sum(len(a.holding) for n in self.supervised if (a := self.agents.get(n)))
            if self.orphans:  # after a restart: sessions still running, not yet claimed back
                running += sum(
                    1
                    for t in self.orphans
                    if (o := self.tasks.get(t)) and o.agent in self.supervised
                )
            free = min(free, self.settings.max_sessions - running)
        return max(free, 0)

    def refresh(self, agent: LiveAgent) -> None:
        """The agent's sessions changed: offer its free slots anew."""
        if agent.name in self.supervised:  # the host-wide cap moves for all of them
            self.refresh_supervised()
            return
        index = self.indexes.get(agent.tenant)  # (inline: every claim and report comes here)
        if index is not None and agent.name in index:
            index.set_free(agent.name, self.free(agent))
        self.batch.dispatch_wanted = True

    def refresh_supervised(self) -> None:
        for name in self.supervised:
            if (agent := self.agents.get(name)) is not None:
                index = self.indexes.get(agent.tenant)
                if index is not None and agent.name in index:
                    index.set_free(agent.name, self.free(agent))
        self.batch.dispatch_wanted = True

    def pick(self, shape: Shape) -> str | None:
        index = self.indexes.get(shape.tenant)
        return None if index is None else index.pick(shape)

    def has_free(self) -> bool:
        return any(i.has_free() for i in self.indexes.values())

    # -- sessions ending ---------------------------------------------------------------------

    def holder(self, task: Task) -> LiveAgent | None:
        """The live agent recorded on the task, if it is known."""
        return self.agents.get(task.agent) if task.agent else None

    def release(self, task: Task) -> None:
        """The task's session is gone: free its agent's slot (or, for a session not claimed
        back since a restart, the place it held under max_sessions)."""
        holder = self.holder(task)
        if holder is not None and task.id in holder.holding:
            holder.holding.discard(task.id)
            self.refresh(holder)
        self.drop_orphan(task.id)

    def drop_orphan(self, task_id: str) -> None:
        """The task is no longer waiting to be claimed back after a restart."""
        if self.orphans.pop(task_id, None) is None:
            return
        task = self.tasks.get(task_id)
        if task is not None and task.agent in self.supervised:
            self.refresh_supervised()  # it counted against max_sessions

    # -- the circuit breaker -----------------------------------------------------------------

    def not_ready(self, agent: LiveAgent, task_id: str, why: str) -> None:
        """A session of ``agent`` never became ready: warn; open the breaker after several."""
        where = agent.workspace or agent.name
        self.warnings[where] = self.warnings.get(where, 0) + 1
        self.audience.broadcast(events.SessionNotReady(workspace=where, task=task_id, reason=why))
        agent.requeues_in_row += 1
        if agent.requeues_in_row < BREAKER_AFTER:
            return
        agent.requeues_in_row = 0
        self.breaker_trips[where] = self.breaker_trips.get(where, 0) + 1
        agent.unhealthy_until = self.clock.monotonic() + BREAKER_COOL_DOWN
        self.index(agent)
        self.batch.wake_sweep()
        message = (
            f"{BREAKER_AFTER} sessions in a row never became ready; no work for "
            f"{BREAKER_COOL_DOWN:g}s (its tasks wait)"
        )
        log.warning(message, extra={"event": "breaker_open", "agent": agent.name})
        self.audience.broadcast(
            events.BreakerOpened(agent=agent.name, workspace=where, reason=message)
        )

    def close_breaker(self, agent: LiveAgent) -> None:
        """The breaker's cool-down is over: work may come again (subscribers are told)."""
        agent.unhealthy_until = 0.0
        self.index(agent)
        self.audience.broadcast(events.agent_changed(agent.wire(self.clock.monotonic())))
        self.batch.dispatch_wanted = True

    # -- daily budgets of workspaces ---------------------------------------------------------

    def today(self) -> str:
        return rfc3339(self.clock.time())[:10]

    def load_budgets(self) -> None:
        self.budgets.load(self.store, self.today())

    def spend(self, workspace: str | None, usd: float) -> None:
        if workspace is None or usd <= 0:
            return
        self.check_day()
        if self.budgets.spend(workspace, usd):
            budget = self.budgets.budgets[workspace]
            message = f"spent ${self.budgets.spent[workspace]:.4f} of its ${budget:g} for today"
            log.warning(message, extra={"event": "budget_spent", "workspace": workspace})
            self.audience.broadcast(
                events.BudgetChanged(workspace=workspace, paused=True, reason=message)
            )
            for agent in self.agents.values():
                if agent.workspace == workspace:
                    self.index(agent)

    def check_day(self) -> None:
        """At a new UTC day, spending starts again: reopen the workspaces that were over."""
        if not self.budgets or self.budgets.day == self.today():
            return
        reopened = self.budgets.start_day(self.store, self.today())
        for workspace in reopened:
            self.audience.broadcast(
                events.BudgetChanged(workspace=workspace, paused=False, reason="a new day")
            )
        for agent in self.agents.values():
            if agent.workspace in reopened:
                self.index(agent)
        self.batch.dispatch_wanted = True

    def next_midnight(self) -> float | None:
        """The monotonic instant the day's spending starts again, if any budget is set."""
        if not self.budgets:
            return None
        midnight = (self.clock.time() // 86400 + 1) * 86400
        return self.clock.monotonic() + (midnight - self.clock.time())
