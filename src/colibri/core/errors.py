"""Every error Colibri reports, each with a stable ``code``.

The codes are API: they appear as ``error.code`` on the socket and in ``--json`` output, and
tests assert them. Messages say what was wrong and, where it helps, what to do.

    ColibriError
    ├── BadJson              bad_json            the line is not JSON (or not UTF-8)
    ├── BadRequest           bad_request         JSON, but not a valid request
    │   └── UnknownCommand   unknown_command
    ├── LineTooLong          line_too_long       framing is lost: the connection closes
    ├── UnknownTask          unknown_task
    ├── UnknownSchedule      unknown_schedule
    ├── ScheduleExists       schedule_exists
    ├── UnknownParent        unknown_parent
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
    ├── Forbidden            forbidden           peer uid not allowed
    ├── Busy                 busy                too many connections
    ├── StorageUnavailable   storage_unavailable the store could not commit (disk full, read-only)
    ├── ConfigError          config_error
    ├── RootError            root_error
    ├── DaemonNotRunning     no_daemon
    └── Internal             internal            a bug: logged with its traceback

Not in the tree: ``colibri.store.StoreConflict`` (a compare-and-set that lost, or a taken task
id or idempotency key) stays between the store and the daemon, which turns it into
``IllegalTransition`` or, as a bug, ``Internal``. A driver's own errors (``sqlite3``) pass the
store only from a bug in a statement or from a read that met a storage fault; the daemon
answers them as ``Internal``.
"""

from __future__ import annotations


class ColibriError(Exception):
    code = "error"

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_wire(self) -> dict[str, str]:
        return {"code": self.code, "message": self.message}


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


class LineTooLong(ColibriError):
    code = "line_too_long"

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"request line longer than {limit} bytes; the connection will be closed "
            "(raise server.max_line in colibri.jsonc if you need longer requests)"
        )


class UnknownTask(ColibriError):
    code = "unknown_task"

    def __init__(self, task_id: str) -> None:
        super().__init__(f"no task with id {task_id} (list tasks with: colibri list)")


class UnknownSchedule(ColibriError):
    code = "unknown_schedule"

    def __init__(self, name: str) -> None:
        super().__init__(f"no schedule named {name!r} (list them with: colibri schedule list)")


class ScheduleExists(ColibriError):
    code = "schedule_exists"

    def __init__(self, name: str) -> None:
        super().__init__(f"a schedule named {name!r} exists; remove it first or add with replace")


class UnknownParent(ColibriError):
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
            f"idempotency key {key!r} names task {task_id}, submitted with other fields; "
            "send the same fields to get that task back, or use a new key for a new task"
        )


class Forbidden(ColibriError):
    code = "forbidden"


class Busy(ColibriError):
    code = "busy"


class StorageUnavailable(ColibriError):
    code = "storage_unavailable"


class ConfigError(ColibriError):
    code = "config_error"


class RootError(ColibriError):
    code = "root_error"


class DaemonNotRunning(ColibriError):
    code = "no_daemon"

    def __init__(self, root: str) -> None:
        super().__init__(f"no daemon is running for {root} (start one with: colibri run)")


class Internal(ColibriError):
    code = "internal"
