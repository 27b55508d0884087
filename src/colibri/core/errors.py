"""Every error Colibri reports, each with a stable ``code``.

The codes are API: they appear as ``error.code`` on the socket and in ``--json`` output
(``{"ok": false, "error": {"code": …, "message": …}}``), and tests assert them. Messages say
what was wrong and, where it helps, what to do; input they quote back is quoted by ``shown``
(its repr, clipped), so a 10 KB name makes a line of a hundred characters, not of 10 KB.
Each code belongs to one class below, and each class is raised for its own code only: errors
of other libraries (``OSError``, ``ValueError`` …) are translated where they enter — by the
daemon's server (``internal``), by the client (``closed``, ``unexpected_reply``) and by the
CLI (``os_error``, ``internal``).
``from_wire`` turns an error reply back into its class, so a caller of ``colibri.client`` can
``except UnknownTask``.

    ColibriError                                      (abstract: never raised itself)
    ├── BadJson              bad_json            the line is not JSON (or not UTF-8)
    ├── BadRequest           bad_request         JSON, but not a valid request
    │   ├── UnknownCommand   unknown_command
    │   └── BadDuration      bad_duration        not a duration, or outside its range
    ├── LineTooLong          line_too_long       framing is lost: the connection closes
    ├── NotFound             (group)             nothing by that name; also a LookupError
    │   ├── UnknownTask      unknown_task
    │   ├── UnknownSchedule  unknown_schedule
    │   ├── UnknownParent    unknown_parent
    │   ├── UnknownToken     unknown_token
    │   └── UnknownWorkspace unknown_workspace   colibri.jsonc defines no such workspace
    ├── AmbiguousTask        ambiguous_task      part of an id that names more than one task
    ├── ScheduleExists       schedule_exists
    ├── IllegalTransition    illegal_transition  the state machine forbids it
    ├── StaleClaim           stale_claim         a report from an older claim (epoch)
    ├── NotYourTask          not_your_task       a report from an agent that does not hold it
    ├── BadClaim             bad_claim           a session's report without its claim's secret
    ├── NotRegistered        not_registered      an agent command before register-agent
    ├── ParentCancelled      parent_cancelled
    ├── HandOffRefused       handoff_refused     a child for a workspace not in send_to
    ├── BudgetExceeded       budget_exceeded     a hand-off asking more than its parent has left
    ├── QuotaExceeded        quota_exceeded      too many pending tasks, or children of one task
    ├── IdempotencyConflict  idempotency_conflict  a key reused with other fields
    ├── Forbidden            forbidden           peer uid not allowed; a token used outside its role
    ├── Unauthorized         unauthorized        no token, or an unknown, revoked or expired one
    ├── TlsRequired          tls_required        plain text on the TLS port
    ├── AmbiguousToken       ambiguous_token     a token id prefix that names more than one token
    ├── Unavailable          (group)             not taken now, nothing done: try again later
    │   ├── Busy             busy                too many connections
    │   ├── Throttled        throttled           too many failed logins from this address
    │   ├── StorageUnavailable storage_unavailable the store could not commit (disk full, read-only)
    │   │   └── LeaseLost    lease_lost          another daemon holds the PostgreSQL board now
    │   ├── Elsewhere        (group)             another daemon serves it (now); LeaseLost too
    │   │   ├── Standby      standby             this daemon stands by: another serves the board
    │   │   └── NotOwner     not_owner           another daemon serves this tenant (``address``)
    │   └── Unreached        (group)             no daemon heard the request, or it was cut off
    │       ├── DaemonNotRunning no_daemon
    │       └── ConnectionClosed closed          the daemon closed the connection, or it broke
    ├── Internal             internal            a bug: logged with its traceback
    │   (the codes below are not sent on the socket: start-up, the client, the CLI)
    ├── ConfigError          config_error        colibri.jsonc (or COLIBRI_HOST) is invalid
    ├── RootError            root_error          no root, or its .colibri is unsafe to use
    ├── LockHeld             lock_held           another live daemon or harness holds the lock
    ├── WorkspaceExists      workspace_exists    workspace add of a name that is defined
    ├── FileExists           file_exists         a file the CLI would write is there (tls init …)
    ├── CopyConflict         copy_conflict       store copy: a row clashes with the target board's
    ├── NoSession            no_session          attach-session: no tmux session runs the task
    ├── BadTaskBody          bad_task_body       a task file that is not a task body
    ├── TlsFailed            tls_failed          the daemon's certificate is not trusted, or no TLS
    ├── UnexpectedReply      unexpected_reply    a reply this client cannot read
    └── OsFailure            os_error            a file or system call failed (the CLI)

A *group* (``NotFound``, ``Unavailable`` and its ``Elsewhere`` and ``Unreached``) has no code:
it is what a caller catches, never what is raised or sent. ``LeaseLost`` is in two: a write the
store refused, and a board another daemon serves now.

Not in the tree: ``colibri.store.StoreConflict`` (a compare-and-set that lost, or a taken task
id or idempotency key) stays between the store and the daemon, which turns it into
``IllegalTransition`` or, as a bug, ``Internal``; so does ``colibri.store.BatchRefused`` (a
batch held back by the PostgreSQL store and refused as it was sent, lost whole), which the
daemon answers as ``Internal``, the batch rolled back. A driver's own errors (``sqlite3``) pass the
store only from a bug in a statement or from a read that met a storage fault; the daemon
answers them as ``Internal``.

**Transient refusals.** An error whose class has ``transient`` set says nothing about the
request itself: the daemon could not take it now (``busy``, ``storage_unavailable`` and
``lease_lost``, ``standby``, ``not_owner``, ``throttled``, ``internal`` — a batch rolled back,
"retry it"), or it was never heard (``no_daemon``, ``closed``). The same request, sent again
later (to the daemon serving its tenant by then), may be taken. Whoever must not lose a request
— a harness's report, a session's ``colibri out`` — keeps it and sends it again; the daemon
answers a report sent again after it was taken as taken, changing nothing. Every other error is
the request's own: sending it again as it is would be refused again.
"""

from __future__ import annotations


class ColibriError(Exception):
    """The root of the tree. Raise one of its subclasses, each of which has its own ``code``;
    ``error`` is the code of none of them."""

    code = "error"
    #: For a request of several items (``submit-all``): the one (from 0) the error is about.
    index: int | None = None
    #: Whether the request may be taken if sent again later, unchanged (the docstring above).
    transient = False
    #: A class callers catch, never raised: it has no code of its own (the docstring above).
    group = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_wire(self) -> dict[str, str | int | float]:
        wire: dict[str, str | int | float] = {"code": self.code, "message": self.message}
        if self.index is not None:
            wire["index"] = self.index
        return wire


class NotFound(ColibriError, LookupError):
    """(group) Nothing goes by the name the request gave: a task, schedule, parent, token or
    workspace. Also a ``LookupError``, as a missing key is."""

    group = True


class Unavailable(ColibriError):
    """(group) The request was not taken now, and nothing was done: the daemon is full or
    throttles the address, its store cannot commit, another daemon serves it, or no daemon
    heard it. The same request may be taken later (``transient``)."""

    group = True
    transient = True


class Elsewhere(Unavailable):
    """(group) Another daemon serves what was asked, now or once it takes over: a standby's
    refusal, a tenant another daemon holds, a write fenced off by a lease that passed on."""

    group = True


class Unreached(Unavailable):
    """(group) No daemon heard the request (none answers at the address), or the connection
    was cut off under it: whether it was taken, only asking again tells."""

    group = True


def shown(value: object, width: int = 60) -> str:
    """``value`` as a message quotes it: its repr, so never more than one line, and clipped."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"


class BadJson(ColibriError):
    code = "bad_json"


class BadRequest(ColibriError):
    code = "bad_request"


class UnknownCommand(BadRequest):
    code = "unknown_command"


class BadDuration(BadRequest):
    """A duration that is not one (``90s``, ``15m``, ``1h30m``, ``1d`` or seconds), or is
    outside the range of what it sets; raised by ``core.durations.parse_duration``."""

    code = "bad_duration"


class LineTooLong(ColibriError):
    code = "line_too_long"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"request line longer than {limit} bytes; the connection will be closed "
            "(raise server.max_line in colibri.jsonc if you need longer requests)"
        )


class UnknownTask(NotFound):
    code = "unknown_task"

    def __init__(self, task_id: str) -> None:
        super().__init__(f"no task with id {task_id} (list tasks with: colibri list)")


class AmbiguousTask(ColibriError):
    code = "ambiguous_task"

    def __init__(self, part: str, count: int, examples: list[str]) -> None:
        shown = ", ".join(examples) + (", …" if count > len(examples) else "")
        super().__init__(
            f"{part} starts or ends the ids of {count} tasks ({shown}); give more of the id"
        )


class UnknownSchedule(NotFound):
    code = "unknown_schedule"

    def __init__(self, name: str) -> None:
        super().__init__(f"no schedule named {shown(name)} (list them with: colibri schedule list)")


class ScheduleExists(ColibriError):
    code = "schedule_exists"

    def __init__(self, name: str) -> None:
        super().__init__(
            f"a schedule named {shown(name)} exists; remove it first or add with replace"
        )


class UnknownParent(NotFound):
    code = "unknown_parent"

    def __init__(self, task_id: str) -> None:
        super().__init__(f"parent task {task_id} does not exist")


class IllegalTransition(ColibriError):
    code = "illegal_transition"

    def __init__(self, task_id: str, current: str, wanted: str) -> None:
        super().__init__(f"task {task_id} is {current}; it cannot become {wanted}")


class StaleClaim(ColibriError):
    code = "stale_claim"

    def __init__(self, task_id: str, epoch: int, current: int) -> None:
        super().__init__(
            f"report for task {task_id} carries epoch {epoch} but the current claim is "
            f"epoch {current}; it was refused"
        )


class NotYourTask(ColibriError):
    code = "not_your_task"

    def __init__(self, task_id: str, agent: str) -> None:
        super().__init__(f"task {task_id} is not assigned to agent {agent!r}")


class BadClaim(ColibriError):
    code = "bad_claim"

    def __init__(self, task_id: str, what: str) -> None:
        super().__init__(
            f"{what} for task {task_id} does not carry the claim of the session running it "
            "(COLIBRI_CLAIM, set in that session's environment and task file); refused"
        )


class NotRegistered(ColibriError):
    code = "not_registered"

    def __init__(self, cmd: str) -> None:
        super().__init__(
            f"{cmd} needs a registered agent on this connection: send register-agent first"
        )


class ParentCancelled(ColibriError):
    code = "parent_cancelled"

    def __init__(self, parent: str) -> None:
        super().__init__(f"parent task {parent} is cancelled; no new children can be added")


class HandOffRefused(ColibriError):
    code = "handoff_refused"

    def __init__(self, sender: str, target: str | None, allowed: list[str]) -> None:
        targets = ", ".join(allowed) if allowed else "none"
        if target is None:
            super().__init__(
                f"a hand-off from workspace {sender!r} names the workspace it goes to "
                f"(colibri submit --to WORKSPACE); its send_to allows: {targets}"
            )
            return
        super().__init__(
            f"workspace {sender!r} may not hand work to {target!r}; its send_to allows: {targets}"
        )


class BudgetExceeded(ColibriError):
    code = "budget_exceeded"

    def __init__(self, parent: str, asked: float, left: float) -> None:
        super().__init__(
            f"task {parent} has ${left:.4f} of its budget left; a child may not have ${asked:.4f}"
        )


class QuotaExceeded(ColibriError):
    code = "quota_exceeded"


class IdempotencyConflict(ColibriError):
    code = "idempotency_conflict"

    def __init__(self, key: str, task_id: str) -> None:
        super().__init__(
            f"idempotency key {shown(key)} names task {task_id}, submitted with other fields; "
            "send the same fields to get that task back, or use a new key for a new task"
        )


class Forbidden(ColibriError):
    code = "forbidden"


class Unauthorized(ColibriError):
    """The connection did not prove who it is: no ``auth``, or a token the daemon does not
    take. The message never holds the token: it may be someone's real secret."""

    code = "unauthorized"


class Throttled(Unavailable):
    code = "throttled"


class TlsRequired(ColibriError):
    code = "tls_required"


class UnknownToken(NotFound):
    code = "unknown_token"

    def __init__(self, token_id: str) -> None:
        super().__init__(f"no token with id {token_id} (list them with: colibri token list)")


class AmbiguousToken(ColibriError):
    code = "ambiguous_token"

    def __init__(self, prefix: str, ids: list[str]) -> None:
        named = ", ".join(ids[:3]) + (", …" if len(ids) > 3 else "")
        super().__init__(
            f"id prefix {prefix} names {len(ids)} tokens ({named}); give more of the id"
        )


class Busy(Unavailable):
    code = "busy"


class StorageUnavailable(Unavailable):
    code = "storage_unavailable"


class LeaseLost(StorageUnavailable, Elsewhere):
    """A write of a daemon whose lease on a PostgreSQL board has passed to another (it was
    stopped or cut off past its lease): refused by the fence, nothing of it written."""

    code = "lease_lost"


class Standby(Elsewhere):
    """The daemon of this root stands by on a PostgreSQL board another daemon serves: ask that
    one (the message says where), or wait for this one to take over."""

    code = "standby"


class NotOwner(Elsewhere):
    """This daemon serves other tenants of a PostgreSQL board: the tenant asked for
    (``tenant``) is another daemon's, at ``address`` (None when none serves it now); ``ttl``
    is the answering daemon's lease ttl in seconds, which bounds how long a takeover of the
    tenant takes. The one error whose wire form carries fields beside code and message;
    ``colibri.client`` follows it, and waits out a takeover by it."""

    code = "not_owner"

    def __init__(
        self,
        message: str,
        address: str | None = None,
        *,
        tenant: str | None = None,
        ttl: float | None = None,
    ) -> None:
        super().__init__(message)
        self.address = address
        self.tenant = tenant
        self.ttl = ttl

    def to_wire(self) -> dict[str, str | int | float]:
        wire = super().to_wire()
        if self.address is not None:
            wire["address"] = self.address
        if self.tenant is not None:
            wire["tenant"] = self.tenant
        if self.ttl is not None:
            wire["ttl"] = self.ttl
        return wire


class Internal(ColibriError):
    code = "internal"
    transient = True


class ConfigError(ColibriError):
    code = "config_error"


class RootError(ColibriError):
    code = "root_error"


class LockHeld(ColibriError):
    """Another live process holds a process lock (``locks.hold_lock``): a daemon its root's,
    a harness its workspace's. ``holder`` is the pid it wrote there."""

    code = "lock_held"

    def __init__(self, holder: str, message: str) -> None:
        super().__init__(message)
        self.holder = holder


class UnknownWorkspace(NotFound):
    code = "unknown_workspace"

    def __init__(self, name: str, known: list[str]) -> None:
        listed = ", ".join(known) or "none"
        super().__init__(f"colibri.jsonc defines no workspace {shown(name)} (workspaces: {listed})")


class WorkspaceExists(ColibriError):
    code = "workspace_exists"

    def __init__(self, name: str, file: str) -> None:
        super().__init__(f"workspace {name!r} exists already in {file}")


class FileExists(ColibriError):
    """A file a command would write is there already: refused without ``--force``, and a link
    or anything else that is not a regular file even with it."""

    code = "file_exists"


class CopyConflict(ColibriError):
    """``colibri store copy``: a row of the board being copied clashes with one of the target
    board (a task id, an idempotency key in the tenant, a schedule's or an agent's name);
    nothing was copied."""

    code = "copy_conflict"


class NoSession(ColibriError):
    """``attach-session``: the task is not running, or not in a tmux session of this host."""

    code = "no_session"


class BadTaskBody(ColibriError):
    """Text that is not a task body (``core.lineage.parse_body``): a session's task file that
    was overwritten or cut, or a message without a task header."""

    code = "bad_task_body"


class DaemonNotRunning(Unreached):
    code = "no_daemon"

    def __init__(self, root: str) -> None:
        super().__init__(f"no daemon is running for {root} (start one with: colibri run)")

    @classmethod
    def at(cls, addresses: str, why: str) -> DaemonNotRunning:
        made = cls.__new__(cls)
        ColibriError.__init__(made, f"no daemon answers at {addresses}: {why}")
        return made


class TlsFailed(ColibriError):
    """The TLS handshake with the daemon failed: its certificate is not trusted (wrong
    ``--tls-ca``), is not for the host name connected to, or the peer does not speak TLS."""

    code = "tls_failed"


class ConnectionClosed(Unreached):
    """The daemon closed the connection without saying why (a restart, a crash), or the
    connection broke; a request in flight may or may not have been taken."""

    code = "closed"


class UnexpectedReply(ColibriError):
    """A reply the client cannot read: not a JSON object, or an error code this version does
    not know (a daemon of another version of Colibri)."""

    code = "unexpected_reply"


class OsFailure(ColibriError):
    """An operating-system call of the CLI failed: a file it could not read, a socket it may
    not use. The message is the system's, with the path."""

    code = "os_error"


def _listed(cls: type[ColibriError]) -> dict[str, type[ColibriError]]:
    found: dict[str, type[ColibriError]] = {}
    for sub in cls.__subclasses__():
        if not vars(sub).get("group"):
            found[sub.code] = sub
        found.update(_listed(sub))
    return found


#: Every class of the tree by its code.
BY_CODE: dict[str, type[ColibriError]] = _listed(ColibriError)


def from_wire(error: object) -> ColibriError:
    """The error an ``error`` object of a reply stands for, as its own class (``UnknownTask``
    for ``unknown_task`` …), carrying the daemon's message; ``UnexpectedReply`` for an object
    that is not one, or a code that is not listed here."""
    if not isinstance(error, dict):
        return UnexpectedReply(
            f"the daemon answered with an error that says nothing: {shown(error)}"
        )
    code, message = error.get("code"), error.get("message")
    if not isinstance(message, str):
        message = f"(no message) {shown(error)}"
    cls = BY_CODE.get(code) if isinstance(code, str) else None
    if cls is None:
        return UnexpectedReply(
            f"the daemon answered with the unknown error code {shown(code)}: {message}"
        )
    made = cls.__new__(cls)
    ColibriError.__init__(
        made, message
    )  # each class's own __init__ builds a message; this one came made
    if isinstance(made, NotOwner):
        address, tenant, ttl = error.get("address"), error.get("tenant"), error.get("ttl")
        made.address = address if isinstance(address, str) else None
        made.tenant = tenant if isinstance(tenant, str) else None
        made.ttl = None
        if isinstance(ttl, (int, float)) and not isinstance(ttl, bool) and 0 < ttl <= 3600:
            made.ttl = float(ttl)
    index = error.get("index")
    if isinstance(index, int) and not isinstance(index, bool):
        made.index = index
    return made
