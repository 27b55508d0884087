"""The values Colibri keeps and sends: tasks, agents, ledger entries, costs.

Field names are a contract shared by socket replies, events and every ``--json`` output.
Timestamps are RFC 3339 UTC strings with millisecond precision.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated, Literal

import msgspec

from colibri.core.errors import BadRequest, shown

DEFAULT_TENANT = "default"
#: Longest request line the daemon accepts by default (server.max_line), in bytes, and the
#: least it may be set to.
DEFAULT_MAX_LINE = 1 << 20
MIN_LINE = 1024
#: Longest task text, in characters (a submission, a schedule's task).
MAX_TEXT = 256 * 1024
#: Most tokens (each way) and dollars one session may report. Sums over any number of
#: sessions are kept as floats, exact to 2**53 tokens, never overflowing.
MAX_TOKENS = 10**12
MAX_USD = 1_000_000.0
#: The largest budget a task may be given, in dollars.
MAX_BUDGET_USD = 1_000_000_000.0
#: Claims of one task are numbered from 1; far beyond any retry count, within SQLite's integer.
MAX_EPOCH = 2**62

#: The fewest characters of an id taken for a task (its start or its end) or a token (its
#: start), as git's: ``cancel 0`` must not name a family by accident.
SHORTEST_ID_PART = 4
#: Capability, label, workspace, agent and tenant names: short, printable, no path tricks.
NAME_PATTERN = r"^[a-z0-9][a-z0-9._:+-]{0,63}$"
_NAME_RE = re.compile(NAME_PATTERN)

Priority = Annotated[int, msgspec.Meta(ge=-1_000_000, le=1_000_000)]
Score = Annotated[float, msgspec.Meta(ge=0.0, le=1.0)]
Text = Annotated[str, msgspec.Meta(max_length=MAX_TEXT)]
ShortStr = Annotated[str, msgspec.Meta(max_length=200)]
Names = Annotated[list[str], msgspec.Meta(max_length=256)]
TaskId = Annotated[str, msgspec.Meta(max_length=64)]
Attempts = Annotated[int, msgspec.Meta(ge=1, le=100)]
Budget = Annotated[float, msgspec.Meta(gt=0, le=MAX_BUDGET_USD)]
#: The most tasks one task may wait for (``after``).
MAX_AFTER = 1000
After = Annotated[list[TaskId], msgspec.Meta(max_length=MAX_AFTER)]
#: What becomes of a task waiting for one that failed or was cancelled: cancelled with it
#: (``cancel``), released as if it were done (``run``), or kept waiting for a retry of it
#: (``wait``: ``colibri retry`` of the dependency puts the retry in its place).
IfDependencyFails = Literal["cancel", "run", "wait"]
#: A git ref as a task names its worktree's base, or a branch a session left: one word that
#: git could never take for an option (no leading ``-``), with no space or control character
#: (it is written into other sessions' task bodies, one header line each).
REF_PATTERN = r"^[^\s\x00-\x1f\x7f-][^\s\x00-\x1f\x7f]*\Z"
_REF_RE = re.compile(REF_PATTERN)
#: A task's base, checked by intake (``checked_names``), which says what is wrong in words.
GitRef = Annotated[str, msgspec.Meta(min_length=1, max_length=200)]
#: A branch a harness reports: checked as it is decoded.
BranchName = Annotated[str, msgspec.Meta(min_length=1, max_length=200, pattern=REF_PATTERN)]
#: A commit, as git names it in full (or a prefix of it).
CommitId = Annotated[str, msgspec.Meta(pattern=r"^[0-9a-f]{4,64}\Z")]
Count = Annotated[int, msgspec.Meta(ge=0, le=10**12)]


class TaskSpec(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """What asks for a task: a submission, a hand-off, a schedule's fire, a retry all carry
    this. Names are checked (and normalised) by intake, which refuses before it writes."""

    text: Text
    capabilities: Names = []
    workspace: ShortStr | None = None
    #: Pinned to this agent (``create-task``; a schedule's ``agent``).
    agent: ShortStr | None = None
    parent: TaskId | None = None
    priority: Priority = 0
    min_score: Score | None = None
    labels: Names = []
    tenant: ShortStr | None = None
    max_attempts: Attempts = 1
    #: Dollars this task and its descendants may spend (children inherit what remains).
    budget_usd: Budget | None = None
    #: The tasks this one waits for: it is dispatched once every one has ended done.
    after: After = []
    if_dependency_fails: IfDependencyFails = "cancel"
    #: In a workspace of worktrees: the branch or commit its worktree starts from.
    base: GitRef | None = None

    @classmethod
    def of(cls, task: Task) -> TaskSpec:
        """What submits ``task`` again: every field it was asked with."""
        return cls(**{name: getattr(task, name) for name in SPEC_FIELDS if name != "agent"},
                   agent=task.agent if task.pinned else None)  # fmt: skip


class Cost(msgspec.Struct, forbid_unknown_fields=True, omit_defaults=True):
    """What one session cost. Every field is optional; sums treat a missing one as 0."""

    tokens_in: Annotated[int, msgspec.Meta(ge=0)] = 0
    tokens_out: Annotated[int, msgspec.Meta(ge=0)] = 0
    usd: Annotated[float, msgspec.Meta(ge=0.0)] = 0.0
    model: str | None = None


class Change(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """What a session left in its own worktree: the branch it worked on, the commit it started
    from and the branch's head after it, and the size of the difference between the two.
    ``head`` equal to ``base`` (and no files): the session changed nothing."""

    branch: BranchName
    base: CommitId
    head: CommitId
    files: Count = 0
    insertions: Count = 0
    deletions: Count = 0
    #: Where its worktree was kept (a failed task's, for inspection); absent: removed.
    worktree: Annotated[str, msgspec.Meta(max_length=4096)] | None = None

    @property
    def changed(self) -> bool:
        return self.head != self.base or self.files > 0

    def describe(self) -> str:
        """``branch colibri/0f3a-fix-login at 9c1e2f4: 3 files, +40 -2`` or ``…: no change``."""
        line = f"branch {self.branch} at {self.head[:9]}"
        if not self.changed:
            return f"{line}: no change"
        plural = "" if self.files == 1 else "s"
        return f"{line}: {self.files} file{plural}, +{self.insertions} -{self.deletions}"


class Task(msgspec.Struct, kw_only=True, gc=False):
    """A task. ``gc=False``: it holds no cycles, and the collector need not scan many of them."""

    id: str
    text: str
    capabilities: list[str]
    workspace: str | None = None
    #: The pinned agent (``pinned`` true) or the agent that holds or last held the task.
    agent: str | None = None
    pinned: bool = False
    parent: str | None = None
    #: The parent's workspace when the task was handed on (lineage), else absent.
    sender: str | None = None
    priority: int = 0
    min_score: float | None = None
    state: str = "pending"
    outcome: str | None = None
    output: str | None = None
    error: str | None = None
    cost: Cost | None = None
    attempts: int = 0
    max_attempts: int = 1
    #: Numbers each claim; a report carrying an older epoch is refused.
    epoch: int = 0
    tenant: str = DEFAULT_TENANT
    labels: list[str] = []
    idempotency_key: str | None = None
    #: A retry waits until this instant (RFC 3339) before it may be dispatched again.
    not_before: str | None = None
    #: The schedule whose fire submitted this task.
    schedule: str | None = None
    #: Dollars this task and its descendants may spend; children inherit what remains.
    budget_usd: float | None = None
    #: While running: the question its session is waiting to have answered (``colibri ask``).
    question: str | None = None
    #: The tasks it waits for (whole ids): it is dispatched once every one has ended done.
    after: list[str] = []
    #: What becomes of it when one of them fails or is cancelled (``IfDependencyFails``).
    if_dependency_fails: str = "cancel"
    #: In a workspace of worktrees: the branch or commit its worktree starts from.
    base: str | None = None
    #: What its session left in its own worktree (its last session's, reported by its harness).
    change: Change | None = None
    created_at: str
    updated_at: str


class Agent(msgspec.Struct, kw_only=True):
    name: str
    capabilities: list[str]
    slots: int = 1
    ttl: float = 30.0
    workspace: str | None = None
    tenant: str = DEFAULT_TENANT
    online: bool = False
    running: list[str] = []
    last_seen: str | None = None
    #: Warm sessions waiting in its ready pool, as its last heartbeat said (a workspace's
    #: harness with ``warm``); 0 for others.
    ready: int = 0
    #: Its circuit breaker is open: sessions kept failing to become ready, so it gets no work
    #: for a while (``why`` says until when).
    breaker_open: bool = False


class HarnessStatus(msgspec.Struct, kw_only=True):
    """A workspace's harness as the daemon's supervisor sees it: one of ``status``'s
    ``harnesses``. ``describe`` is how every client says it, in one line."""

    workspace: str
    #: Its process, while one runs (or is being started); None meanwhile.
    pid: int | None = None
    #: How many times it was started again after it exited, since the daemon started.
    restarts: int = 0
    #: It exited ``crash_loop`` times within ``crash_window``: left alone until ``cool_down``.
    degraded: bool = False
    #: ``running`` (it holds its workspace's lock), ``starting`` (not yet, and it never
    #: exited), ``restarting`` (it exited; started again, or waiting out its backoff),
    #: ``degraded``. Empty from a daemon older than the field.
    state: str = ""
    #: Why it last exited, in its own words: the last line it wrote to its log (one line, cut
    #: short, made printable), or the signal that killed it. None: it never exited.
    last_failure: str | None = None
    #: When it last exited (RFC 3339 UTC).
    last_failure_at: str | None = None

    def describe(self) -> str:
        """``restarting, 3 restarts, last failure: …``, ``pid 4711, 0 restarts``,
        ``DEGRADED, 2 restarts, last failure: …``."""
        if self.degraded:
            state = "DEGRADED"
        elif self.state == "restarting":
            state = "restarting"
        else:
            state = f"pid {self.pid}" if self.pid else "starting"
        line = f"{state}, {self.restarts} restart{'' if self.restarts == 1 else 's'}"
        if self.last_failure:
            line += f", last failure: {self.last_failure}"
        return line

    def line(self) -> str:
        """``harness NAME: `` and ``describe``."""
        return f"harness {self.workspace}: {self.describe()}"


class LedgerEntry(msgspec.Struct, kw_only=True):
    seq: int = 0
    at: str
    #: The task that changed; absent on a schedule's row for a missed or skipped fire.
    task: str | None = None
    schedule: str | None = None
    tenant: str = DEFAULT_TENANT
    from_state: str | None = None
    to_state: str
    agent: str | None = None
    epoch: int = 0
    reason: str | None = None
    cost: Cost | None = None
    #: Who asked for the change: the uid and pid of the peer whose request made it. Absent
    #: when the daemon decided by itself (a dispatch pass, an expiry, a schedule's fire).
    uid: int | None = None
    pid: int | None = None


_last_stamp: tuple[int, str] = (-1, "")


def rfc3339(ts: float) -> str:
    """Seconds since the epoch → ``2026-11-30T06:19:45.123Z``."""
    global _last_stamp
    ms = round(ts * 1_000_000) // 1000  # as datetime rounds: to the microsecond, then cut
    if _last_stamp[0] == ms:  # many transitions share a millisecond: format it once
        return _last_stamp[1]
    text = datetime.fromtimestamp(ms / 1000, UTC).isoformat(timespec="milliseconds")
    text = text.replace("+00:00", "Z")
    _last_stamp = (ms, text)
    return text


def parse_rfc3339(text: str) -> float:
    return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()


#: The length of a whole task id (a UUID's text), and the characters of one: anything shorter
#: made of these may be the start of ids, as git and docker take them, or their end, as the
#: CLI's lines and the TUI show them (``short_id``: a UUIDv7 starts with its time, the same for
#: the tasks of one minute, and ends with random bits).
WHOLE_ID = 36
ID_CHARACTERS = "0123456789abcdef-"


def task_id_part(task_id: str) -> tuple[str, bool]:
    """How ``task_id``, as a user gave it, names a task: ``(part, True)`` when it may be the
    start or the end of ids, to be looked for; else ``(id, False)``, to be taken as it is — a
    whole id (in lower case), or text no id holds, for the caller's ``unknown_task``.

    :raises BadRequest: shorter than ``SHORTEST_ID_PART``.
    """
    part = task_id.lower()
    if not part or part.strip(ID_CHARACTERS):
        return task_id, False  # not part of any id: a pattern could not match either
    if len(part) >= WHOLE_ID:
        return part, False  # a whole id, in whatever case it was written
    if len(part) < SHORTEST_ID_PART:
        raise BadRequest(
            f"{task_id!r} is too short to name a task: give at least {SHORTEST_ID_PART} "
            "characters of its id, from its start or its end"
        )
    return part, True


def check_name(value: str, what: str) -> str:
    if not _NAME_RE.fullmatch(value):  # match() would let a trailing "\n" through
        # Quoted clipped, yet a name a few characters too long still whole, to be seen so.
        raise BadRequest(
            f"invalid {what} {shown(value, 80)}: use 1-64 characters a-z 0-9 . _ : + -, "
            "starting with a letter or digit"
        )
    return value


def normalize_names(values: list[str], what: str) -> list[str]:
    """Trim, lower-case and de-duplicate names, keeping first-seen order; refuse bad ones."""
    return list(dict.fromkeys(check_name(raw.strip().lower(), what) for raw in values))


def checked_names(spec: TaskSpec) -> tuple[list[str], list[str], str | None]:
    """What intake refuses of a spec before it writes, and the names it keeps: the text must
    say something; the tenant, the workspace and the pinned agent must be names, the base a
    ref; capabilities and labels are normalised (``normalize_names``). Returns (capabilities,
    labels, workspace).
    Intake and ``submit --from`` (which checks every line before it sends one) both ask here."""
    if not spec.text.strip():
        raise BadRequest("text is empty: say what the task is")
    if spec.tenant:
        check_name(spec.tenant, "tenant")
    if spec.agent is not None:
        check_name(spec.agent, "agent name")
    workspace = check_name(spec.workspace, "workspace") if spec.workspace else None
    if spec.base is not None and not _REF_RE.match(spec.base):
        raise BadRequest(
            f"base {shown(spec.base, 80)} is not a branch or commit name: give one without "
            "spaces or control characters, not starting with -"
        )
    capabilities = normalize_names(spec.capabilities, "capability")
    return capabilities, normalize_names(spec.labels, "label"), workspace


def request_fingerprint(
    req: TaskSpec,
    capabilities: list[str],
    labels: list[str],
    workspace: str | None,
    pin: str | None,
) -> str:
    """What a submission asks for, as the board reads it: the same key with another
    fingerprint is another request, refused rather than answered with the first task."""
    import hashlib  # (not at import: the CLI starts without it)

    asked = [req.text, capabilities, workspace, pin, req.parent, req.priority, req.min_score,
             labels, req.max_attempts, req.budget_usd]  # fmt: skip
    if req.after or req.base is not None:  # (keys taken before these fields keep their prints)
        asked += [req.after, req.if_dependency_fails, req.base]
    return hashlib.blake2b(msgspec.json.encode(asked), digest_size=16).hexdigest()


#: The fields of a ``TaskSpec`` (every one of them is a field of ``Task`` too).
SPEC_FIELDS: tuple[str, ...] = TaskSpec.__struct_fields__
