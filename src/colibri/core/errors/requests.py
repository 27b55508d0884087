"""The errors a daemon answers a request with: each sent on the socket by its code."""

from __future__ import annotations

from colibri.core.errors.base import ColibriError, Elsewhere, NotFound, Unavailable, shown


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


class NoHive(ColibriError):
    """``hive`` asked of a daemon on an SQLite board: one daemon serves it, there is no hive."""

    code = "no_hive"


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
