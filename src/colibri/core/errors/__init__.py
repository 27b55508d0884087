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
    ├── NoHive               no_hive             hive asked of a daemon on an SQLite board
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

from colibri.core.errors.base import (
    ColibriError,
    Elsewhere,
    NotFound,
    Unavailable,
    Unreached,
    shown,
)
from colibri.core.errors.local import (
    BadTaskBody,
    ConfigError,
    ConnectionClosed,
    CopyConflict,
    DaemonNotRunning,
    FileExists,
    LockHeld,
    NoSession,
    OsFailure,
    RootError,
    TlsFailed,
    UnexpectedReply,
    UnknownWorkspace,
    WorkspaceExists,
)
from colibri.core.errors.requests import (
    AmbiguousTask,
    AmbiguousToken,
    BadClaim,
    BadDuration,
    BadJson,
    BadRequest,
    BudgetExceeded,
    Busy,
    Forbidden,
    HandOffRefused,
    IdempotencyConflict,
    IllegalTransition,
    Internal,
    LeaseLost,
    LineTooLong,
    NoHive,
    NotOwner,
    NotRegistered,
    NotYourTask,
    ParentCancelled,
    QuotaExceeded,
    ScheduleExists,
    StaleClaim,
    Standby,
    StorageUnavailable,
    Throttled,
    TlsRequired,
    Unauthorized,
    UnknownCommand,
    UnknownParent,
    UnknownSchedule,
    UnknownTask,
    UnknownToken,
)

__all__ = [
    "AmbiguousTask",
    "AmbiguousToken",
    "BY_CODE",
    "BadClaim",
    "BadDuration",
    "BadJson",
    "BadRequest",
    "BadTaskBody",
    "BudgetExceeded",
    "Busy",
    "ColibriError",
    "ConfigError",
    "ConnectionClosed",
    "CopyConflict",
    "DaemonNotRunning",
    "Elsewhere",
    "FileExists",
    "Forbidden",
    "HandOffRefused",
    "IdempotencyConflict",
    "IllegalTransition",
    "Internal",
    "LeaseLost",
    "LineTooLong",
    "LockHeld",
    "NoSession",
    "NotFound",
    "NoHive",
    "NotOwner",
    "NotRegistered",
    "NotYourTask",
    "OsFailure",
    "ParentCancelled",
    "QuotaExceeded",
    "RootError",
    "ScheduleExists",
    "StaleClaim",
    "Standby",
    "StorageUnavailable",
    "Throttled",
    "TlsFailed",
    "TlsRequired",
    "Unauthorized",
    "Unavailable",
    "UnexpectedReply",
    "UnknownCommand",
    "UnknownParent",
    "UnknownSchedule",
    "UnknownTask",
    "UnknownToken",
    "UnknownWorkspace",
    "Unreached",
    "WorkspaceExists",
    "from_wire",
    "shown",
]


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


# Every class is named by the module callers import it from: ``colibri.core.errors.UnknownTask``
# in a traceback or a repr, wherever in the package it is written.
for _cls in (ColibriError, NotFound, Unavailable, Elsewhere, Unreached, *BY_CODE.values()):
    _cls.__module__ = __name__
del _cls
