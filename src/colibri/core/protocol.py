"""The wire protocol: newline-delimited JSON requests, typed, and how a line is decoded.

Each request is an object with ``cmd`` and an optional ``id`` that the reply echoes. Every
command is a Struct (those of agents and sessions in ``agent_protocol``, on the base and field
types of ``request_fields``), so validation (types, ranges, unknown fields) happens in one
decode call and its error names the offending field path. docs/PROTOCOL.md shows each with an
example.
"""

from __future__ import annotations

import functools
import typing
from typing import Annotated, Any, Literal, Union

import msgspec

from colibri.core import replies as r

# The requests of agents and sessions, and the parts of every request, are this module's too.
from colibri.core.agent_protocol import Answer as Answer
from colibri.core.agent_protocol import Ask as Ask
from colibri.core.agent_protocol import Fail as Fail
from colibri.core.agent_protocol import Heartbeat as Heartbeat
from colibri.core.agent_protocol import Held as Held
from colibri.core.agent_protocol import Out as Out
from colibri.core.agent_protocol import Ready as Ready
from colibri.core.agent_protocol import Reclaimed as Reclaimed
from colibri.core.agent_protocol import RegisterAgent as RegisterAgent
from colibri.core.agent_protocol import Requeue as Requeue
from colibri.core.errors import BadJson, BadRequest, UnexpectedReply, UnknownCommand
from colibri.core.model import (
    SPEC_FIELDS,
    After,
    Attempts,
    Budget,
    GitRef,
    IfDependencyFails,
    Names,
    Priority,
    Score,
    ShortStr,
    TaskId,
    TaskSpec,
    Text,
)
from colibri.core.request_fields import ERROR_MAX as ERROR_MAX
from colibri.core.request_fields import LEDGER_END as LEDGER_END
from colibri.core.request_fields import OUTPUT_MAX as OUTPUT_MAX
from colibri.core.request_fields import Claim, LedgerAfter, R, RequestId
from colibri.core.request_fields import ReportedCost as ReportedCost
from colibri.core.request_fields import Request as Request
from colibri.core.schedules import ScheduleSpec
from colibri.core.text import NUL_REFUSED as NUL_REFUSED
from colibri.core.text import holds_nul


class Ping(Request[r.Pong], tag="ping"):
    pass


class Status(Request[r.Status], tag="status"):
    pass


class TaskFields(Request[r.SubmitReply], kw_only=True):
    """A submission: the fields of a ``TaskSpec`` (flat on the wire; a test keeps the two
    alike), and what only a submission carries."""

    text: Text
    capabilities: Names = []
    workspace: ShortStr | None = None
    parent: TaskId | None = None
    priority: Priority = 0
    min_score: Score | None = None
    labels: Names = []
    tenant: ShortStr | None = None
    max_attempts: Attempts = 1
    budget_usd: Budget | None = None
    after: After = []
    if_dependency_fails: IfDependencyFails = "cancel"
    base: GitRef | None = None
    idempotency_key: ShortStr | None = None
    #: A hand-off from inside a session: the claim of ``parent``'s running session. Then the
    #: child must go to a workspace the parent's workspace may send to.
    claim: Claim | None = None

    def spec(self) -> TaskSpec:
        return TaskSpec(
            **{name: getattr(self, name) for name in SPEC_FIELDS if hasattr(self, name)}
        )


class IntakeTask(TaskFields, tag="intake-task"):
    """Submit a task for the best-fit agent."""


class Submit(TaskFields, tag="submit"):
    """Alias of intake-task."""


class CreateTask(TaskFields, tag="create-task", kw_only=True):
    """Submit a task pinned to one named agent."""

    agent: ShortStr


#: The most submissions one ``submit-all`` carries (a longer file is sent in parts by its
#: user, each part all or nothing).
MAX_SUBMIT_ALL = 10_000


class SubmitItem(TaskFields, tag="submit-item", kw_only=True):
    """One submission of a ``submit-all`` (no ``cmd`` needed): a submission's fields, and
    ``agent`` to pin it to that agent, as ``create-task`` does."""

    agent: ShortStr | None = None
    #: What the other submissions of the same ``submit-all`` call this one in their ``after``
    #: (a local name, unique among them; not kept).
    name: ShortStr | None = None


class SubmitAll(Request[r.SubmitAllReply], tag="submit-all"):
    """Several submissions in one transaction: every one is taken, or — refused with the first
    failing one's error, its ``index`` set — none is. A submission's ``after`` may name
    another of them by its ``name``: a graph of tasks, taken whole (no cycle)."""

    tasks: Annotated[list[SubmitItem], msgspec.Meta(min_length=1, max_length=MAX_SUBMIT_ALL)]


class Get(Request[r.TaskReply], tag="get"):
    task: TaskId


class ListTasks(Request[r.TaskPage], tag="list"):
    state: ShortStr | None = None
    outcome: Literal["done", "failed", "cancelled"] | None = None
    agent: ShortStr | None = None
    workspace: ShortStr | None = None
    parent: TaskId | None = None
    tenant: ShortStr | None = None
    #: Return tasks whose id sorts after this one (the previous page's ``next``, oldest first).
    after: TaskId | None = None
    #: Return tasks whose id sorts before this one (the previous page's ``next``, newest first).
    before: TaskId | None = None
    #: The newest tasks first (the greatest ids) instead of the oldest.
    newest: bool = False
    #: Also say how many tasks match beyond this page (``remaining``): one more query.
    count: bool = False
    limit: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 100


class Cancel(Request[r.Cancelled], tag="cancel"):
    task: TaskId
    reason: ShortStr | None = None


class Family(Request[r.Family], tag="family"):
    """The task's whole family: its top ancestor and every descendant."""

    task: TaskId


class CostTotals(Request[r.CostTotals], tag="cost"):
    by: Literal["agent", "workspace", "tenant", "day"] = "agent"
    #: RFC 3339 instant or a date; absent means since the beginning.
    since: ShortStr | None = None


class Retry(Request[r.TaskReply], tag="retry"):
    task: TaskId


class Why(Request[r.Why], tag="why"):
    task: TaskId


class Wait(Request[r.TaskReply], tag="wait"):
    """Reply once the task has ended (done, failed, cancelled or closed)."""

    task: TaskId


class ToggleSwarm(Request[r.Paused], tag="toggle-swarm"):
    #: true pauses dispatch, false resumes it, absent flips it.
    paused: bool | None = None


class Hive(Request[r.Hive], tag="hive"):
    """The daemons of the PostgreSQL board (the owner's; ``no_hive`` on SQLite)."""


class Agents(Request[r.Agents], tag="agents"):
    pass


class Skills(Request[r.Skills], tag="skills"):
    pass


class DescribeSkill(Request[r.SkillDescribed], tag="describe-skill"):
    name: ShortStr
    description: Annotated[str, msgspec.Meta(max_length=2000)]


class Ledger(Request[r.LedgerPage], tag="ledger"):
    #: Where the page starts: the ``next`` of the last page (``acme:5,default:120``), "" the
    #: start, ``end`` now (``colibri.core.cursor``).
    after: LedgerAfter = ""
    task: TaskId | None = None
    limit: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 1000
    #: Keep the connection open and push each new row as a ``ledger`` event.
    follow: bool = False


class Subscribe(Request[r.Subscribed], tag="subscribe"):
    #: Higher gets events first, and chained messages first.
    priority: Annotated[int, msgspec.Meta(ge=-1_000_000, le=1_000_000)] = 0
    #: Receive the messages sent to this workspace (absent: to every workspace).
    workspace: ShortStr | None = None
    #: How ``send`` replies name this subscriber when it consumes a message.
    name: ShortStr | None = None
    #: False: the board's events only, none of the bus's messages (a watcher that shows the
    #: board takes no part in the bus: it is not a listener ``send`` counts, nor a link of a
    #: chain).
    messages: bool = True


class Send(Request[r.Delivered], tag="send"):
    """A message (no task) to a workspace's subscribers; chained if it carries a task header."""

    to: ShortStr
    text: Text


class Consumed(Request[r.Empty], tag="consumed"):
    """A subscriber's answer to a chained message: consumed stops the chain."""

    message: Annotated[int, msgspec.Meta(ge=1, le=2**63 - 1)]
    consumed: bool = True


class Auth(Request[r.Authenticated], tag="auth"):
    """The first request on a TCP connection: the token it acts with."""

    token: Annotated[str, msgspec.Meta(max_length=200)]


class TokenCreate(Request[r.TokenCreated], tag="token-create"):
    tenant: ShortStr
    role: Literal["agent", "operator"]
    agent: ShortStr | None = None
    capabilities: Names = []
    workspace: ShortStr | None = None
    #: Seconds from now until it expires (None: never).
    expires_in: Annotated[float, msgspec.Meta(gt=0, le=3650 * 86400)] | None = None


class TokenList(Request[r.Tokens], tag="token-list"):
    pass


class TokenRevoke(Request[r.TokenRevoked], tag="token-revoke"):
    #: The token's public id (not ``id``: that is the request's own).
    token: ShortStr


class ScheduleAdd(Request[r.ScheduleAdded], tag="schedule-add"):
    name: ShortStr
    schedule: ScheduleSpec
    #: Overwrite a schedule of the same name (its counters start again).
    replace: bool = False


class ScheduleList(Request[r.Schedules], tag="schedule-list"):
    pass


class ScheduleGet(Request[r.ScheduleShown], tag="schedule-get"):
    name: ShortStr
    #: How many upcoming fire times to list.
    next: Annotated[int, msgspec.Meta(ge=0, le=1000)] = 10
    #: How many recent fire records (fired, skipped, missed) to include.
    fires: Annotated[int, msgspec.Meta(ge=0, le=1000)] = 0


class ScheduleRun(Request[r.TaskReply], tag="schedule-run"):
    name: ShortStr


class ScheduleRemove(Request[r.ScheduleReply], tag="schedule-rm"):
    name: ShortStr


class SchedulePause(Request[r.ScheduleReply], tag="schedule-pause"):
    name: ShortStr


class ScheduleResume(Request[r.ScheduleReply], tag="schedule-resume"):
    name: ShortStr


REQUESTS: tuple[type[Request[Any]], ...] = (
    Ping, Status, IntakeTask, Submit, CreateTask, SubmitAll, Get, ListTasks, Cancel, Retry, Why,
    Wait, Family, CostTotals,
    ToggleSwarm, Agents, Skills, DescribeSkill, Ledger, RegisterAgent, Heartbeat, Out, Fail,
    Reclaimed, Ready, Requeue, Ask, Answer,
    Subscribe, Send, Consumed, ScheduleAdd, ScheduleList, ScheduleGet, ScheduleRun, ScheduleRemove,
    SchedulePause, ScheduleResume, Auth, TokenCreate, TokenList, TokenRevoke, Hive,
)  # fmt: skip
#: Requests that change nothing stored: one that fails never rolls back the batch it is in.
READS: tuple[type[Request[Any]], ...] = (
    Ping, Status, Get, ListTasks, Family, CostTotals, Why, Wait, Agents, Skills, Ledger,
    ScheduleList, ScheduleGet, TokenList, Hive,
)  # fmt: skip


def _reply_of(request: type[Request[Any]]) -> type[r.Reply]:
    for klass in request.__mro__:
        for base in getattr(klass, "__orig_bases__", ()):
            if typing.get_origin(base) is Request:
                (reply,) = typing.get_args(base)
                return reply  # type: ignore[no-any-return]
    raise TypeError(f"{request.__name__} names no reply")


#: The reply struct each request is answered with (its ``Request[R]``).
REPLY_OF: dict[type[Request[Any]], type[r.Reply]] = {cls: _reply_of(cls) for cls in REQUESTS}
AnyRequest = Union[REQUESTS]  # type: ignore[valid-type]  # noqa: UP007
COMMANDS = sorted(str(cls.__struct_config__.tag) for cls in REQUESTS)


@functools.cache
def _decoder() -> msgspec.json.Decoder[Request[Any]]:
    # Made at the first request read, not at import: building it reads every request's
    # fields, which a client (every command of the CLI) never needs.
    return msgspec.json.Decoder(AnyRequest)


_KNOWN = ", ".join(COMMANDS)


def decode_request(line: bytes) -> Request[Any]:
    """Parse one request line; raise BadJson, UnknownCommand or BadRequest saying why."""
    try:
        request = _decoder().decode(line)
    except msgspec.ValidationError as exc:
        message = str(exc)
        if message.endswith("at `$.cmd`") and message.startswith("Invalid value"):
            raise UnknownCommand(f"{message}; known commands: {_KNOWN}") from None
        if message == "Object missing required field `cmd`":
            raise BadRequest(f'{message}: every request needs a "cmd"') from None
        raise BadRequest(message) from None
    except msgspec.DecodeError as exc:
        raise BadJson(f"not valid JSON: {exc}") from None
    except RecursionError:
        raise BadJson("not valid JSON: nested too deeply") from None
    if holds_nul(line):
        raise BadRequest(NUL_REFUSED)
    return request


def request_id(line: bytes) -> RequestId:
    """The ``id`` of a line that failed validation, so its error reply can still echo it."""
    try:
        obj = msgspec.json.decode(line)
    except (msgspec.DecodeError, RecursionError):
        return None
    if isinstance(obj, dict):
        rid = obj.get("id")
        if rid is None or isinstance(rid, (str, int)) and not isinstance(rid, bool):
            return rid
    return None


encode = msgspec.json.Encoder().encode


def wire_fields(req: Request[Any]) -> tuple[str, dict[str, Any]]:
    """A request as a client sends it: its ``cmd``, and its fields but ``id`` and those left at
    their defaults (the daemon applies the same ones)."""
    fields: dict[str, Any] = msgspec.to_builtins(req)
    fields.pop("id", None)
    if isinstance(req, SubmitAll):  # its items are submissions, not requests: no cmd of theirs
        for item in fields["tasks"]:
            del item["cmd"]
    return fields.pop("cmd"), fields


def reply_to(req: Request[R], reply: dict[str, Any]) -> R:
    """The reply (a plain object, ``ok``) as the struct ``req`` names; ``UnexpectedReply`` if
    it is not one (a daemon of another version that lacks a field this client needs)."""
    kind = REPLY_OF[type(req)]
    try:
        return msgspec.convert(reply, kind)  # type: ignore[return-value]
    except msgspec.ValidationError as exc:
        raise UnexpectedReply(
            f"the daemon's reply to {type(req).__struct_config__.tag} is not what this client "
            f"reads ({exc}); are the daemon and this client of one version?"
        ) from None
