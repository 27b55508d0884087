"""The requests of agents and their sessions: a harness registers, heartbeats and reports; a
session reports by itself, asks (and is answered), says it is ready. ``core/protocol.py`` lists
them with the others."""

from __future__ import annotations

from typing import Annotated

import msgspec

from colibri.core import replies as r
from colibri.core.model import Change, Names, ShortStr, TaskId
from colibri.core.request_fields import (
    ERROR_MAX,
    OUTPUT_MAX,
    Claim,
    Epoch,
    ReportedCost,
    Request,
)


class Held(msgspec.Struct, forbid_unknown_fields=True):
    """A session a reconnecting harness still runs; ``claim`` proves it was given it."""

    task: TaskId
    epoch: Epoch
    claim: Claim | None = None


class RegisterAgent(Request[r.Registered], tag="register-agent"):
    name: ShortStr
    capabilities: Names = []
    slots: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 1
    ttl: Annotated[float, msgspec.Meta(ge=0.05, le=86_400)] | None = None
    workspace: ShortStr | None = None
    tenant: ShortStr | None = None
    running: list[Held] = []


class Heartbeat(Request[r.Empty], tag="heartbeat"):
    #: Warm sessions waiting in the agent's ready pool (for metrics); absent: unchanged.
    ready: Annotated[int, msgspec.Meta(ge=0, le=10_000)] | None = None


class Out(Request[r.TaskReply], tag="out"):
    task: TaskId
    epoch: Epoch
    output: Annotated[str, msgspec.Meta(max_length=OUTPUT_MAX)] = ""
    cost: ReportedCost | None = None
    #: What the session left in its own worktree (a workspace of worktrees; by its harness).
    change: Change | None = None
    #: The session is already gone (a one-shot command): close the task at once.
    session_ended: bool = True
    #: Sent on a connection with no agent: by the session itself (``colibri out`` inside it),
    #: or by a stopping harness that has left. It counts as the holding agent's report, and
    #: must carry the claim's secret.
    from_session: bool = False
    claim: Claim | None = None


class Fail(Request[r.TaskReply], tag="fail"):
    task: TaskId
    epoch: Epoch
    error: Annotated[str, msgspec.Meta(max_length=ERROR_MAX)] = ""
    change: Change | None = None
    session_ended: bool = True
    from_session: bool = False
    claim: Claim | None = None


class Reclaimed(Request[r.TaskReply], tag="reclaimed"):
    """The task's session is over (the harness stopped it, or it reported by itself); its slot
    is free again."""

    task: TaskId
    epoch: Epoch
    change: Change | None = None


class Ask(Request[r.Answered], tag="ask"):
    """Sent by a session (``colibri ask``): the reply comes when someone answers."""

    task: TaskId
    epoch: Epoch
    question: Annotated[str, msgspec.Meta(min_length=1, max_length=64 * 1024)]
    claim: Claim | None = None


class Answer(Request[r.TaskReply], tag="answer"):
    task: TaskId
    text: Annotated[str, msgspec.Meta(max_length=1024 * 1024)]


class Ready(Request[r.Empty], tag="ready"):
    """Sent by a session (``colibri ready``): it is ready to be given its task."""

    task: TaskId
    epoch: Epoch
    claim: Claim | None = None


class Requeue(Request[r.TaskReply], tag="requeue"):
    """Sent by a harness: the session never became ready; the task waits again (no attempt
    is spent) and a warning is counted."""

    task: TaskId
    epoch: Epoch
    reason: Annotated[str, msgspec.Meta(max_length=2000)] = ""
