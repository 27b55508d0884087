"""Presence: agents registering, their heartbeats, and what happens when they go silent.

An agent that registers again says which sessions it still runs (with their claims' secrets):
those are adopted, those that ended meanwhile are closed, and those it held before and does not
name are lost. An agent silent past its TTL goes offline and its sessions are lost; so are the
sessions nobody claimed back within the TTL after the daemon restarted.
"""

from __future__ import annotations

import logging

from colibri.config import SchedulerSettings
from colibri.core import events, states
from colibri.core.claims import Claims
from colibri.core.errors import BadRequest, Forbidden, NotRegistered
from colibri.core.model import DEFAULT_TENANT, check_name, normalize_names, rfc3339
from colibri.core.protocol import Held, RegisterAgent
from colibri.core.states import State
from colibri.daemon.board.audience import Audience
from colibri.daemon.board.batch import Batch, Peer
from colibri.daemon.board.capacity import Capacity, LiveAgent
from colibri.daemon.board.known import KnownAgents
from colibri.daemon.board.transitions import Transitions
from colibri.daemon.clock import Clock
from colibri.store import Store, StoreConflict

log = logging.getLogger(__name__)


class Presence:
    def __init__(
        self,
        store: Store,
        settings: SchedulerSettings,
        clock: Clock,
        batch: Batch,
        audience: Audience,
        capacity: Capacity,
        transitions: Transitions,
        claims: Claims,
        known: KnownAgents,
    ) -> None:
        self.store = store
        self.settings = settings
        self.clock = clock
        self.batch = batch
        self.audience = audience
        self.capacity = capacity
        self.transitions = transitions
        self.claims = claims
        self.known = known
        self.agents = capacity.agents
        self.tasks = transitions.tasks

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
        try:
            # First, before memory changes: the name may be an agent's of a tenant another
            # daemon of a PostgreSQL board serves (names are the whole board's).
            self.store.upsert_agent(agent.wire(), rfc3339(now))
        except StoreConflict:
            raise Forbidden(
                f"agent name {name!r} is taken by another tenant of the board; give this agent "
                "another name"
            ) from None
        adopted: list[str] = []
        rejected: list[Held] = []
        for held in req.running:
            task = self.tasks.get(held.task)
            if not self.claims.valid(held.task, held.epoch, held.claim):
                rejected.append(held)  # never given to it: nothing to adopt, nothing to close
                continue
            if (
                task is not None
                and task.agent == name
                and task.epoch == held.epoch
                and task.state == State.RUNNING
            ):
                agent.holding.add(task.id)
                self.capacity.orphans.pop(
                    task.id, None
                )  # now held: the same place under max_sessions
                adopted.append(task.id)
            elif (
                task is not None
                and task.agent == name
                and task.epoch == held.epoch
                and task.state in states.OUTCOMES
            ):
                # Ended while the agent was away: the harness stops the session it rejects.
                self.transitions.close(task)
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
                if task is not None:
                    self.transitions.drop_session(
                        task, f"session lost: agent {name} registered again without it"
                    )
                previous.holding.discard(task_id)
        if previous is not None and previous.tenant != tenant:
            # Indexes are per tenant: left in the old one, it would still be picked for that
            # tenant's work (and, once its connection is gone, for work it cannot be sent).
            old_index = self.capacity.indexes.get(previous.tenant)
            if old_index is not None:
                old_index.remove(name)
        self.agents[name] = agent
        self.known.remember(name, tenant, capabilities, workspace)
        self.batch.wake_sweep()
        peer.agent_name = name
        self.capacity.index(agent)
        self.capacity.refresh(agent)  # the sessions it took back count against max_sessions
        if capabilities:
            self.store.ensure_skills(sorted(capabilities))
        if tenant != DEFAULT_TENANT:
            self.store.ensure_tenant(tenant, rfc3339(now))
        self.audience.broadcast(events.agent_changed(agent.wire(self.clock.monotonic())))
        self.batch.dispatch_wanted = True
        return agent, adopted, rejected

    def agent_of(self, peer: Peer, cmd: str) -> LiveAgent:
        agent = self.agents.get(peer.agent_name or "")
        if agent is None or agent.peer is not peer or not agent.online:
            raise NotRegistered(cmd)
        self.heartbeat(agent)  # any word from an agent shows it is alive
        return agent

    def heartbeat(self, agent: LiveAgent, ready: int | None = None) -> None:
        agent.last_seen = self.clock.monotonic()
        agent.last_seen_wall = self.clock.time()
        if ready is not None and ready != agent.ready:
            agent.ready = ready  # the ready pool grew or shrank: say so (the TUI shows it)
            self.audience.broadcast(events.agent_changed(agent.wire(self.clock.monotonic())))

    def disconnect(self, peer: Peer) -> None:
        """A connection closed: its agent stops getting work; its tasks wait out the TTL."""
        agent = self.agents.get(peer.agent_name or "")
        if agent is not None and agent.peer is peer:
            agent.peer = None
            self.capacity.index(agent)

    def restart_clocks(self, now: float) -> None:
        """Count every online agent as heard from at ``now``: after a time in which the daemon
        could not take their heartbeats (its store was down), none is expired for it."""
        for agent in self.agents.values():
            if agent.online:
                agent.last_seen = now

    def sweep(self, now: float) -> None:
        """At monotonic ``now``: expire silent agents, close breakers whose cool-down is over,
        and lose the sessions nobody claimed back after a restart."""
        for agent in list(self.agents.values()):
            if agent.online and now - agent.last_seen > agent.ttl:
                self._expire(agent)
            elif agent.unhealthy_until and agent.unhealthy_until <= now:
                self.capacity.close_breaker(agent)
        for task_id, deadline in list(self.capacity.orphans.items()):
            if now >= deadline:
                task = self.tasks.get(task_id)
                if task is not None:
                    self.transitions.drop_session(
                        task, "session lost: not claimed back after the daemon restarted"
                    )
                self.capacity.drop_orphan(task_id)  # released above, or not a session any more

    def forget_tenants(self, served: frozenset[str]) -> None:
        """Drop every agent of a tenant not in ``served`` (given back to another daemon of a
        PostgreSQL board): its row is that daemon's to write now, and it registers there."""
        for name, agent in list(self.agents.items()):
            if agent.tenant not in served:
                del self.agents[name]
        for tenant in set(self.capacity.indexes) - served:
            del self.capacity.indexes[tenant]

    def deadlines(self) -> list[float]:
        """When agents fall silent, breakers close and unclaimed sessions are lost."""
        found = [a.last_seen + a.ttl for a in self.agents.values() if a.online]
        found.extend(self.capacity.orphans.values())
        found.extend(a.unhealthy_until for a in self.agents.values() if a.unhealthy_until)
        return found

    def _expire(self, agent: LiveAgent) -> None:
        log.info("agent went offline", extra={"event": "agent_offline", "agent": agent.name})
        agent.online = False
        self.capacity.index(agent)
        peer = agent.peer
        agent.peer = None
        for task_id in sorted(agent.holding):
            task = self.tasks.get(task_id)
            if task is not None:
                self.transitions.drop_session(
                    task, f"session lost: agent {agent.name} silent for more than {agent.ttl:g}s"
                )
        agent.holding.clear()
        try:
            self.store.upsert_agent(agent.wire(), rfc3339(self.clock.time()))
        except StoreConflict:
            # Its name is another tenant's row now (a tenant of a PostgreSQL board moved on
            # to another daemon): that is the other daemon's to write. Refused alone — the
            # store's savepoint spares the batch — it must not fail the batch, and with it
            # other tenants' requests: the agent is not this board's any more.
            log.warning(
                "agent went offline; its row is another tenant's now, forgotten here",
                extra={"event": "agent_forgotten", "agent": agent.name},
            )
            del self.agents[agent.name]
            return
        self.audience.broadcast(events.agent_changed(agent.wire(self.clock.monotonic())))
        if peer is not None:
            reason = f"silent for more than {agent.ttl:g}s; register again"
            self.batch.emit(peer, events.Expired(reason=reason))
