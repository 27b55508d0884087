"""The daemon's replies, typed: one struct per request (``Request[R]`` names its ``R``).

On the wire a reply is one JSON object: the request's ``id``, ``"ok": true`` and the reply's
fields — or ``"ok": false`` and an ``error`` (``ErrorReply``). The daemon builds these structs
and encodes them; a client decodes a line into the struct its request names
(``Client.request``), so the CLI, the TUI, the MCP server and the harness read fields, not
dict keys. A field some replies leave out is ``UNSET`` (absent from the JSON) where it is not
said; a client ignores fields it does not know, so a newer daemon may add some.
"""

from __future__ import annotations

from typing import Any, Literal

import msgspec
from msgspec import UNSET, UnsetType

from colibri.core.errors import ColibriError
from colibri.core.model import Agent, HarnessStatus, LedgerEntry, Task
from colibri.core.request_fields import RequestId
from colibri.core.schedules import Schedule
from colibri.core.tokens import Token


class Reply(msgspec.Struct, kw_only=True):
    """What every reply carries first: the request's ``id`` (set by the server) and ``ok``."""

    id: RequestId = None
    ok: Literal[True] = True


class ErrorReply(msgspec.Struct, kw_only=True):
    """A refusal: ``error`` holds a stable ``code``, a one-line ``message`` and what the error's
    class adds (``ColibriError.to_wire``)."""

    id: RequestId = None
    ok: Literal[False] = False
    error: dict[str, Any]


def refusal(request_id: RequestId, error: ColibriError) -> ErrorReply:
    return ErrorReply(id=request_id, error=error.to_wire())


def fields(reply: Reply) -> dict[str, Any]:
    """The reply's fields as plain values, without ``id`` and ``ok`` (what ``--json`` prints
    of a reply), those left unset out."""
    plain: dict[str, Any] = msgspec.to_builtins(reply)
    del plain["id"], plain["ok"]
    return plain


class Empty(Reply, kw_only=True):
    """``heartbeat``, ``ready``, ``consumed``: nothing more than done."""


class TaskReply(Reply, kw_only=True):
    """A request about one task that answers with the task as it is now: ``get``, ``retry``,
    ``wait``, ``answer``, ``schedule-run`` and the reports ``out``, ``fail``, ``reclaimed``,
    ``requeue``."""

    task: Task


class Submitted(msgspec.Struct, kw_only=True):
    """One submission taken: the task, whether this request made it (False: its idempotency
    key's task, made before), and why it will wait, when nothing can take it now."""

    task: Task
    created: bool
    waits: str | UnsetType = UNSET


class SubmitReply(Reply, kw_only=True):
    """``submit``, ``intake-task``, ``create-task``: as ``Submitted``."""

    task: Task
    created: bool
    waits: str | UnsetType = UNSET


class SubmitAllReply(Reply, kw_only=True):
    tasks: list[Submitted]


class Pong(Reply, kw_only=True):
    pong: bool = True
    #: The daemon's line limit, so that a client can cut a long report to fit.
    max_line: int


class Status(Reply, kw_only=True):
    """To the owner, the board's counts; to a token, who it is (``you``) and no counts (they
    are every tenant's)."""

    daemon: dict[str, Any]
    paused: bool
    you: dict[str, Any] | UnsetType = UNSET
    tasks: dict[str, int] | UnsetType = UNSET
    outcomes: dict[str, int] | UnsetType = UNSET
    #: Where the ledger stands: each tenant's highest seq, as a cursor (``acme:5,default:9``).
    ledger_at: str | UnsetType = UNSET
    warnings: dict[str, int] | UnsetType = UNSET
    waiting: int | UnsetType = UNSET
    retrying: int | UnsetType = UNSET
    #: Pending tasks waiting for others (``after``) to end.
    blocked: int | UnsetType = UNSET
    agents: dict[str, int] | UnsetType = UNSET
    slots: dict[str, int] | UnsetType = UNSET
    harnesses: list[HarnessStatus] | UnsetType = UNSET


class TaskPage(Reply, kw_only=True):
    """``list``: a page of tasks, where the next starts (None: the last page), and, asked
    for (``count``), how many match beyond it."""

    tasks: list[Task]
    next: str | None
    remaining: int | UnsetType = UNSET


class Cancelled(Reply, kw_only=True):
    cancelled: list[str]


class CostTotals(Reply, kw_only=True):
    by: str
    since: str | None
    totals: list[dict[str, Any]]


class Family(Reply, kw_only=True):
    root: str
    tasks: list[Task]
    complete: bool


class AgentFit(msgspec.Struct, kw_only=True):
    """One agent, as ``why`` judges it for the task."""

    agent: str
    score: float
    missing: list[str]
    eligible: bool
    reasons: list[str]


class Why(Reply, kw_only=True):
    task: Task
    summary: str
    required: list[str]
    min_score: float
    agents: list[AgentFit]
    harnesses: list[HarnessStatus] = []


class Paused(Reply, kw_only=True):
    paused: bool


class HiveDaemon(msgspec.Struct, kw_only=True):
    """A daemon of a PostgreSQL board, as its last beat left it (``colibri hive list``'s row):
    ``role`` serving (a live lease: ``leases``, their newest ``lease_epoch``, the least time
    left of them), sharing (sharing tenants out, none yet), standby, or gone (silent past its
    ttl); ``tenants`` those it serves (``*``: the whole board); ``this``: the one answering."""

    id: str
    role: Literal["serving", "sharing", "standby", "gone"]
    address: str | None
    host: str
    pid: int
    root: str | None
    ttl: float
    started_at: str
    beat_ago_s: float
    sharing: bool
    agents: int
    leases: list[str]
    lease_epoch: int | None
    lease_left_s: float | None
    tenants: list[str]
    this: bool = False


class Hive(Reply, kw_only=True):
    daemons: list[HiveDaemon]


class Agents(Reply, kw_only=True):
    agents: list[Agent]


class Skill(msgspec.Struct, kw_only=True):
    name: str
    description: str
    agents: int | UnsetType = UNSET


class Skills(Reply, kw_only=True):
    skills: list[Skill]


class SkillDescribed(Reply, kw_only=True):
    skill: Skill


class LedgerPage(Reply, kw_only=True):
    """``ledger``: rows beyond ``after``; ``next`` is where the next page starts (a cursor:
    ``colibri.core.cursor``), ``more`` whether rows may follow."""

    entries: list[LedgerEntry]
    next: str
    more: bool


class Rejected(msgspec.Struct, kw_only=True):
    task: str
    epoch: int


class Registered(Reply, kw_only=True):
    """``register-agent``: the agent as the daemon knows it, the sessions it adopted back and
    those it refused, how often to heartbeat, and the line limit."""

    agent: Agent
    adopted: list[str]
    rejected: list[Rejected]
    heartbeat: float
    max_line: int


class Answered(Reply, kw_only=True):
    """``ask``, once the question is answered."""

    answer: str


class Subscribed(Reply, kw_only=True):
    subscribed: bool = True


class Delivered(Reply, kw_only=True):
    """``send``, once the message is consumed or nobody is left to take it."""

    message: int
    delivered: list[str]
    consumed_by: str | None


class ScheduleAdded(Reply, kw_only=True):
    schedule: Schedule
    next: list[str]


class Schedules(Reply, kw_only=True):
    schedules: list[Schedule]


class ScheduleShown(Reply, kw_only=True):
    schedule: Schedule
    next: list[str]
    fires: list[dict[str, Any]] | UnsetType = UNSET


class ScheduleReply(Reply, kw_only=True):
    """``schedule-rm``, ``schedule-pause``, ``schedule-resume``: the schedule as it is now."""

    schedule: Schedule


class Authenticated(Reply, kw_only=True):
    role: str
    tenant: str | None
    agent: str | None | UnsetType = UNSET


class TokenCreated(Reply, kw_only=True):
    token: Token
    #: The secret, shown this once.
    secret: str


class Tokens(Reply, kw_only=True):
    tokens: list[Token]


class TokenRevoked(Reply, kw_only=True):
    token: Token
    #: How many of its connections were closed.
    closed: int
