"""Best-fit matching of tasks to agents.

The rule, kept exactly from the task-board design: score = |required ∩ agent capabilities| /
|required|; the highest score wins; ties go to the agent name that sorts first. A task with no
required capabilities matches any agent. Offline agents, agents with no free slot and agents
with no capability in common are skipped. On top of it: workspace affinity (only that
workspace's agents), pinning (only the named agent), and ``min_score`` (1.0 = every capability
required).

``AgentIndex`` answers a pick in a few set operations instead of a scan of every agent: it keeps,
for each capability and each workspace, the set of agents that have a free slot right now.
``pick_agent`` is the plain definition, used by ``explain`` and by the tests as the reference.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field

_EMPTY: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class Shape:
    """What decides where a task may go. Tasks of one shape are placed alike."""

    capabilities: frozenset[str]
    workspace: str | None = None
    pin: str | None = None
    min_score: float = 0.0
    tenant: str = "default"


@dataclass(slots=True)
class AgentView:
    name: str
    capabilities: frozenset[str]
    free: int
    online: bool = True
    workspace: str | None = None


def score(required: frozenset[str], capabilities: frozenset[str]) -> float:
    if not required:
        return 1.0
    return len(required & capabilities) / len(required)


def pick_agent(shape: Shape, agents: Iterable[AgentView]) -> str | None:
    """The definition of best fit, by a scan of every agent."""
    best: tuple[float, str] | None = None
    for agent in agents:
        if not agent.online or agent.free <= 0:
            continue
        if shape.pin is not None:
            if agent.name != shape.pin:
                continue
        elif shape.workspace is not None and agent.workspace != shape.workspace:
            continue
        s = 1.0 if shape.pin is not None else score(shape.capabilities, agent.capabilities)
        if shape.pin is None and (s == 0.0 or s < shape.min_score):
            continue
        if best is None or s > best[0] or (s == best[0] and agent.name < best[1]):
            best = (s, agent.name)
    return None if best is None else best[1]


@dataclass(slots=True)
class Consideration:
    """One agent as ``colibri why`` shows it."""

    agent: str
    score: float
    missing: list[str]
    eligible: bool
    reasons: list[str] = field(default_factory=list)


def explain(shape: Shape, agents: Iterable[AgentView]) -> list[Consideration]:
    """Every agent, its score, what it lacks and why it was or was not eligible; best first."""
    rows: list[Consideration] = []
    for agent in agents:
        s = score(shape.capabilities, agent.capabilities)
        reasons: list[str] = []
        if not agent.online:
            reasons.append("offline")
        if agent.free <= 0:
            reasons.append("no free slot")
        if shape.pin is not None and agent.name != shape.pin:
            reasons.append(f"task is pinned to {shape.pin}")
        if shape.pin is None:
            if shape.workspace is not None and agent.workspace != shape.workspace:
                reasons.append(f"not in workspace {shape.workspace}")
            if shape.capabilities and s == 0.0:
                reasons.append("no capability in common")
            elif s < shape.min_score:
                reasons.append(f"score {s:.2f} below min_score {shape.min_score:.2f}")
        missing = sorted(shape.capabilities - agent.capabilities)
        rows.append(Consideration(agent.name, s, missing, not reasons, reasons))
    rows.sort(key=lambda r: (not r.eligible, -r.score, r.agent))
    return rows


class AgentIndex:
    """The agents that can take work now, indexed by capability and workspace."""

    def __init__(self) -> None:
        self._caps: dict[str, frozenset[str]] = {}
        self._workspace: dict[str, str | None] = {}
        self._free: dict[str, int] = {}
        self._available: set[str] = set()
        self._by_cap: dict[str, set[str]] = {}
        self._by_workspace: dict[str, set[str]] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._caps

    def add(
        self, name: str, capabilities: frozenset[str], free: int, workspace: str | None
    ) -> None:
        """Add an online agent (or replace it, after a re-register)."""
        self.remove(name)
        self._caps[name] = capabilities
        self._workspace[name] = workspace
        self._free[name] = 0
        self.set_free(name, free)

    def remove(self, name: str) -> None:
        """Take an agent out: it went offline or unregistered."""
        if name not in self._caps:
            return
        self.set_free(name, 0)
        del self._caps[name], self._workspace[name], self._free[name]

    def free(self, name: str) -> int:
        return self._free.get(name, 0)

    def has_free(self) -> bool:
        return bool(self._available)

    def set_free(self, name: str, free: int) -> None:
        was = self._free[name] > 0
        self._free[name] = free
        now = free > 0
        if was == now:
            return
        workspace = self._workspace[name]
        if now:
            self._available.add(name)
            for cap in self._caps[name]:
                self._by_cap.setdefault(cap, set()).add(name)
            if workspace is not None:
                self._by_workspace.setdefault(workspace, set()).add(name)
        else:
            self._available.discard(name)
            for cap in self._caps[name]:
                holders = self._by_cap[cap]
                holders.discard(name)
                if not holders:
                    del self._by_cap[cap]
            if workspace is not None:
                members = self._by_workspace[workspace]
                members.discard(name)
                if not members:
                    del self._by_workspace[workspace]

    def pick(self, shape: Shape) -> str | None:
        """Same answer as ``pick_agent`` over the indexed agents, in a few set operations."""
        if shape.pin is not None:
            return shape.pin if shape.pin in self._available else None
        pool: set[str] | None = None
        if shape.workspace is not None:
            pool = self._by_workspace.get(shape.workspace)
            if not pool:
                return None
        required = shape.capabilities
        if not required:
            return min(pool if pool is not None else self._available, default=None)
        holders = sorted((self._by_cap.get(cap, _EMPTY) for cap in required), key=len)
        if not holders[-1]:
            return None
        complete = set(holders[0]).intersection(*holders[1:])
        if pool is not None:
            complete &= pool
        if complete:
            return min(complete)
        counts = Counter[str]()
        for group in holders:
            counts.update(group)
        best_count = 0
        best_name: str | None = None
        for name, count in counts.items():
            if pool is not None and name not in pool:
                continue
            if count > best_count or (
                count == best_count and best_name is not None and name < best_name
            ):
                best_count, best_name = count, name
        if best_name is None or best_count / len(required) < shape.min_score:
            return None
        return best_name
