"""Session reports: what a session (or its harness) says about the task it runs.

``out`` and ``fail`` end a session's task, ``reclaimed`` says its session is gone, ``requeue``
that it never became ready; ``ready``, ``ask`` and ``answer`` pass between a session and its
operator. ``reporter`` is the one check of who may send any of them: the agent that holds the
task's current claim — or the session itself, when it shows that claim's secret — and, over
TCP, only with that agent's own token. A report sent again (its reply lost in a restart) is
taken once.
"""

from __future__ import annotations

import logging
from typing import Any

import msgspec

from colibri.core import events
from colibri.core.access import Principal
from colibri.core.claims import Claims
from colibri.core.errors import (
    BadClaim,
    BadRequest,
    Busy,
    IllegalTransition,
    NotYourTask,
    StaleClaim,
    UnknownTask,
)
from colibri.core.model import Change, Cost, Task
from colibri.core.replies import Answered
from colibri.core.states import State
from colibri.daemon.board.audience import Audience
from colibri.daemon.board.batch import Batch, Peer
from colibri.daemon.board.capacity import Capacity, LiveAgent
from colibri.daemon.board.presence import Presence
from colibri.daemon.board.queue import Queue
from colibri.daemon.board.transitions import Transitions
from colibri.daemon.clock import Clock
from colibri.store import Store

log = logging.getLogger(__name__)

#: What a report ends its task with: its outcome, and its output or error.
Report = tuple[State, str]


def failure(error: str) -> Report:
    """What a ``fail`` report ends its task with (a session that says nothing: why not)."""
    return State.FAILED, error or "session failed"


#: A question whose asker (``colibri ask``) went away is withdrawn after this long, unless it
#: asks again (as it does within moments when the daemon restarts under it).
ASK_GRACE = 10.0


class Reports:
    def __init__(
        self,
        store: Store,
        clock: Clock,
        batch: Batch,
        audience: Audience,
        queue: Queue,
        capacity: Capacity,
        transitions: Transitions,
        presence: Presence,
        claims: Claims,
    ) -> None:
        self.store = store
        self.clock = clock
        self.batch = batch
        self.audience = audience
        self.queue = queue
        self.capacity = capacity
        self.transitions = transitions
        self.presence = presence
        self.claims = claims
        self.agents = capacity.agents
        self.tasks = transitions.tasks
        #: Sessions waiting for an answer: task id → the asking connection and request id.
        self.askers: dict[str, tuple[Peer, Any]] = {}
        #: Questions whose asker is gone: task id → monotonic instant they are withdrawn.
        self.unasked: dict[str, float] = {}

    def load(self) -> None:
        """After a reload: questions nobody is asking now are withdrawn unless asked again."""
        now = self.clock.monotonic()
        for task in self.tasks.values():  # their askers ask again, or the question goes
            if task.question is not None and task.id not in self.askers:
                self.unasked.setdefault(task.id, now + ASK_GRACE)

    def owes(self, peer: Peer) -> bool:
        """Whether the answer to a question ``peer`` asked is still to come."""
        return any(p is peer for p, _ in self.askers.values())

    def forget(self, peer: Peer) -> None:
        for task_id in [t for t, (p, _) in self.askers.items() if p is peer]:
            del self.askers[task_id]  # it asks again when it reconnects, or the question goes
            self.unasked[task_id] = self.clock.monotonic() + ASK_GRACE
            self.batch.wake_sweep()

    def reporter(
        self,
        peer: Peer,
        principal: Principal,
        cmd: str,
        task_id: str,
        epoch: int,
        *,
        from_session: bool = False,
        claim: str | None = None,
        same: Report | None = None,
    ) -> LiveAgent:
        """Who reports ``cmd`` on a task, or why nobody here may: the one check every report
        (``out``, ``fail``, ``reclaimed``, ``requeue``, ``ready``, ``ask`` and a session's
        hand-off) goes through, before it changes anything.

        - A token's tenant must see the task: another tenant's is ``unknown_task``, as one that
          does not exist, so no refusal below can tell it is there.
        - The reporter is the agent registered on this connection or — for a report sent by
          the session itself (``from_session``) — the agent that holds the task, once the
          report has shown the secret of the claim it reports on.
        - An agent token speaks for its own agent only: another agent of its tenant that has
          learnt the claim's secret is ``not_your_task``.
        - The task must be held by that agent, at ``epoch`` (``_held``), or — ``same``, an
          ``out`` or ``fail`` sent again after its reply was lost — already ended by this very
          report under that claim."""
        if not principal.is_owner:
            principal.visible(task_id, self.transitions.get(task_id).tenant)
        if from_session:
            agent = self._claim_holder(cmd, task_id, epoch, claim)
        else:
            agent = self.presence.agent_of(peer, cmd)
        if principal.kind == "agent" and agent.name != principal.agent:
            raise NotYourTask(task_id, principal.agent or "")
        self._held(agent, task_id, epoch, same)
        return agent

    def _claim_holder(self, cmd: str, task_id: str, epoch: int, claim: str | None) -> LiveAgent:
        """The agent holding the task whose claim ``claim`` is the secret of (the epoch still
        has to be the current one)."""
        task = self.tasks.get(task_id)
        holder = self.capacity.holder(task) if task is not None else None
        if task is None or holder is None or task_id not in holder.holding:
            stored = task or self.store.get_task(task_id)
            if stored is None:
                raise UnknownTask(task_id)
            if (
                task_id in self.capacity.orphans
                and (holder is None or not holder.online)
                and self.claims.valid(task_id, epoch, claim)
            ):
                # The daemon restarted; the session talks to it before its harness is back.
                raise Busy(
                    f"task {task_id}'s harness has not reconnected since the daemon restarted; "
                    "try again in a moment"
                )
            raise IllegalTransition(task_id, stored.state, "reported (no session holds it)")
        if not self.claims.valid(task_id, epoch, claim):
            log.warning(
                "report without its claim refused",
                extra={"event": "bad_claim", "task": task_id, "cmd": cmd},
            )
            raise BadClaim(task_id, cmd)
        return holder

    def _held(self, agent: LiveAgent, task_id: str, epoch: int, same: Report | None = None) -> Task:
        """The task ``agent`` reports on under claim ``epoch``, as it is now. ``same``: the
        report's outcome; the task it already ended (the report sent again, its reply lost) is
        returned as it is, and the caller changes nothing."""
        task = self.tasks.get(task_id)
        if task is None:
            stored = self.store.get_task(task_id)
            if stored is None:
                raise UnknownTask(task_id)
            if same is not None and _ended_by(stored, epoch, same):
                return stored
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
        change: Change | None = None,
    ) -> Task:
        task = self._held(agent, task_id, epoch, (State.DONE, output))
        if task.state == State.CLOSED:
            return task  # the same report again, taken before: nothing changes
        if task.state == State.DONE and task.output == output:
            # The same report again: sent once more after its reply was lost (a restart).
            return self.transitions.close(task, change) if session_ended else task
        if task.state != State.RUNNING:
            raise IllegalTransition(task_id, task.state, State.DONE.value)
        agent.requeues_in_row = 0
        if cost is not None:
            self.capacity.spend(task.workspace or agent.workspace, cost.usd)
        kept = {} if change is None else {"change": change}
        reason = "out" if change is None else f"out; {change.describe()}"
        return self.transitions.move(
            task, State.DONE, reason, close=session_ended, output=output, error=None, cost=cost,
            **kept,
        )  # fmt: skip

    def fail(
        self,
        agent: LiveAgent,
        task_id: str,
        epoch: int,
        error: str,
        session_ended: bool = True,
        change: Change | None = None,
    ) -> Task:
        report = failure(error)
        task = self._held(agent, task_id, epoch, report)
        if task.state == State.CLOSED:
            return task  # the same report again, taken before: nothing changes
        if task.state == State.FAILED and task.error == report[1]:
            # The same report again
            return self.transitions.close(task, change) if session_ended else task
        if task.state != State.RUNNING:
            raise IllegalTransition(task_id, task.state, State.FAILED.value)
        agent.requeues_in_row = 0
        ended = self.transitions.end_session(task, report[1], change)
        return (
            self.transitions.close(ended)
            if session_ended and ended.state != State.PENDING
            else ended
        )

    def ask(
        self,
        holder: LiveAgent,
        peer: Peer,
        request_id: Any,
        task_id: str,
        epoch: int,
        question: str,
    ) -> None:
        """A session asks its operator a question (``holder``: as ``reporter`` found it); the
        reply waits for ``answer``."""
        task = self._held(holder, task_id, epoch)
        if task.state != State.RUNNING:
            raise IllegalTransition(task_id, task.state, "waiting for an answer")
        if task_id in self.askers:
            # Its asker is still connected and waiting: taking this one's place would leave it
            # waiting for ever. (An asker gone — a restart, a dropped connection — is not here,
            # and its session asking again takes the question back.)
            raise BadRequest(
                f"task {task_id} has a question waiting for its answer already, asked on another "
                "connection: one question at a time; ask again once it is answered"
            )
        waiting = msgspec.structs.replace(task, question=question)
        self.store.set_question(task_id, question)
        self.tasks[task_id] = waiting
        self.askers[task_id] = (peer, request_id)
        self.unasked.pop(task_id, None)
        self.audience.broadcast(events.QuestionAsked(task=task_id, question=question))
        if holder.peer is not None:  # the harness pauses the session's clocks meanwhile
            self.batch.emit(holder.peer, events.AskingStarted(task=task_id))

    def answer(self, task_id: str, text: str) -> Task:
        task = self.tasks.get(task_id)
        if task is None or task.question is None:
            state = (task or self.transitions.get(task_id)).state
            raise BadRequest(f"task {task_id} is {state} and not waiting for an answer")
        answered = msgspec.structs.replace(task, question=None)
        self.store.set_question(task_id, None)
        self.tasks[task_id] = answered
        self.unasked.pop(task_id, None)
        asker = self.askers.pop(task_id, None)
        if asker is not None:
            self.batch.emit(asker[0], Answered(id=asker[1], answer=text))
        self.audience.broadcast(events.Answered(task=task_id))
        holder = self.capacity.holder(task)
        if holder is not None and holder.peer is not None:
            self.batch.emit(holder.peer, events.Answered(task=task_id))
        return answered

    def session_ready(self, holder: LiveAgent, task_id: str, epoch: int) -> None:
        """A session says it is ready: tell the harness that holds its task (``holder``, as
        ``reporter`` found it) to type it in."""
        task = self._held(holder, task_id, epoch)
        if holder.peer is not None:
            self.batch.emit(holder.peer, events.SessionReady(task=task.id, epoch=task.epoch))

    def requeue(self, agent: LiveAgent, task_id: str, epoch: int, reason: str) -> Task:
        """The session never became ready: back to pending, no attempt spent, a warning."""
        task = self._held(agent, task_id, epoch)
        if task.state != State.RUNNING:
            raise IllegalTransition(task_id, task.state, State.PENDING.value)
        why = reason or "session not ready"
        waiting = self.transitions.requeue(task, why)
        self.capacity.not_ready(agent, task_id, why)
        return waiting

    def reclaimed(
        self, agent: LiveAgent, task_id: str, epoch: int, change: Change | None = None
    ) -> Task:
        """The session is over; ``change``: what it left in its worktree (its harness says)."""
        task = self._held(agent, task_id, epoch)
        if task.state == State.RUNNING:
            ended = self.transitions.end_session(task, "session ended without out", change)
            if ended.state == State.PENDING:
                return ended
            return self.transitions.close(ended)
        return self.transitions.close(task, change)

    def sweep(self, now: float) -> None:
        for task_id in [t for t, due in self.unasked.items() if due <= now]:
            self._withdraw_question(task_id)

    def _withdraw_question(self, task_id: str) -> None:
        """Nobody waits for the answer any more: clear the question, and let the session's
        clock (max_runtime) run again."""
        del self.unasked[task_id]
        task = self.tasks.get(task_id)
        if task is None or task.question is None or task_id in self.askers:
            return
        self.store.set_question(task_id, None)
        self.tasks[task_id] = msgspec.structs.replace(task, question=None)
        log.info(
            "question withdrawn: its asker is gone",
            extra={"event": "question_withdrawn", "task": task_id},
        )
        self.audience.broadcast(events.QuestionWithdrawn(task=task_id))
        holder = self.capacity.holder(task)
        if holder is not None and holder.peer is not None:
            self.batch.emit(holder.peer, events.QuestionWithdrawn(task=task_id))


def _ended_by(task: Task, epoch: int, report: Report) -> bool:
    """Whether ``task``, closed, was ended by this very report under claim ``epoch``: the same
    outcome with the same output (``out``) or error (``fail``)."""
    outcome, text = report
    if task.state != State.CLOSED or task.epoch != epoch or task.outcome != outcome.value:
        return False
    return (task.output if outcome == State.DONE else task.error) == text
