"""Dispatch: claim pending tasks for agents with free slots, best fit first.

A claim is a transition to ``running`` with a new epoch; the ``assign`` that tells the agent,
with the claim's secret, leaves only once the batch has committed.
"""

from __future__ import annotations

from colibri.core import events
from colibri.core.claims import Claims
from colibri.core.states import State
from colibri.daemon.board.audience import Audience
from colibri.daemon.board.batch import Batch
from colibri.daemon.board.capacity import Capacity
from colibri.daemon.board.queue import Queue
from colibri.daemon.board.transitions import Transitions


class Dispatcher:
    def __init__(
        self,
        batch: Batch,
        audience: Audience,
        queue: Queue,
        capacity: Capacity,
        transitions: Transitions,
        claims: Claims,
    ) -> None:
        self.batch = batch
        self.audience = audience
        self.queue = queue
        self.capacity = capacity
        self.transitions = transitions
        self.claims = claims
        self.paused = False

    def dispatch(self) -> int:
        """Claim what can be claimed now; return how many tasks were placed."""
        batch, capacity = self.batch, self.capacity
        batch.dispatch_wanted = False
        if self.paused or not capacity.has_free():
            return 0
        placed = 0
        tasks, agents = self.transitions.tasks, capacity.agents
        for task_id, agent_name in self.queue.pending.placements(capacity.pick):
            task = tasks[task_id]
            agent = agents[agent_name]
            reason = "assigned"
            if task.capabilities and not task.pinned:
                missing = set(task.capabilities) - agent.capabilities
                if missing:  # a partial fit: the row says what the agent lacks
                    reason = f"assigned; missing: {', '.join(sorted(missing))}"
            claimed = self.transitions.move(
                task,
                State.RUNNING,
                reason,
                agent=agent_name,
                epoch=task.epoch + 1,
                attempts=task.attempts + 1,
                not_before=None,
            )
            agent.holding.add(task_id)
            capacity.refresh(agent)
            assert agent.peer is not None
            batch.emit(
                agent.peer, events.assign(claimed, self.claims.secret(task_id, claimed.epoch))
            )
            batch.placed.append((task_id, claimed.epoch, agent.peer))
            placed += 1
            if not capacity.has_free():
                break
        batch.dispatch_wanted = False
        return placed

    def tell_unconfirmed(self) -> tuple[int, int]:
        """After a rebuild: the claims of failed batches that the store has after all (their
        commit's answer was lost, the commit was not) are sent to their agents, still on the
        connection they were made for — otherwise nobody would ever run them. A claim whose
        agent has left that connection meanwhile was never sent to anyone (a failed batch lets
        nothing out), so its session never started: its task goes back to the queue, no
        attempt spent, rather than be lost when the agent registers again without it. How
        many were told, and how many requeued."""
        told = requeued = 0
        unconfirmed, self.batch.unconfirmed = self.batch.unconfirmed, []
        for task_id, epoch, peer in unconfirmed:
            task = self.transitions.tasks.get(task_id)
            if task is None or task.state != State.RUNNING or task.epoch != epoch:
                continue  # not committed (or changed since by a later batch that committed)
            agent = self.capacity.agents.get(task.agent or "")
            if agent is None or agent.peer is not peer or not agent.online or peer.closing:
                self.transitions.requeue(
                    task,
                    "its claim was never sent (the agent's connection closed while the "
                    "commit's answer was lost)",
                )
                requeued += 1
                continue
            self.batch.emit(peer, events.assign(task, self.claims.secret(task_id, epoch)))
            # Part of this batch now: should it fail too, the claim is kept for the next try.
            self.batch.placed.append((task_id, epoch, peer))
            told += 1
        return told, requeued

    def toggle(self, paused: bool | None) -> bool:
        """Pause or resume dispatch (``None``: the other way round); return whether paused."""
        self.paused = (not self.paused) if paused is None else paused
        self.batch.dispatch_wanted = not self.paused
        self.audience.broadcast(events.swarm_toggled(self.paused))
        return self.paused
