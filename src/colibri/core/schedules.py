"""Schedule math: when a schedule fires next, and what a due check at ``now`` should do.

Pure: every function takes the instant it reasons about (seconds since the epoch, UTC).

Three kinds:
- *cron*: standard five-field cron (``core/cron.py``: lists, ranges, steps, month and weekday
  names, the ``@hourly @daily @weekly @monthly @yearly`` macros; when both day-of-month and
  day-of-week are restricted, either one matching fires) in an IANA time zone. Evaluation is
  cronsim's, which follows Vixie/Debian cron across DST: a fixed time that the spring-forward
  gap skips fires once, at the first valid instant after the gap; a fixed time that the
  fall-back hour repeats fires once, on its first occurrence; jobs with a wildcard or step in
  the minute or hour field keep firing at every local time that exists (an hourly job fires
  every real hour where the shift is a whole hour; in Australia/Lord_Howe, whose shift is 30
  minutes, at each local hour).
- *interval*: every fixed duration, anchored to nominal times (anchor + n·every), so a late
  fire never makes the next one drift.
- *once*: a single instant; finished after it fires.

Catch-up after downtime (``plan``): ``one`` fires once for all missed times, ``all`` fires each
(at most ``catch_up_max``), ``none`` fires only a time that is not late; ``grace`` skips any
missed time older than it. Every time not fired is returned as *missed*, to be recorded.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache
from typing import TYPE_CHECKING, Annotated, Literal

import msgspec

# Cron expressions are checked in core/cron.py; a schedule's callers find them here too.
from colibri.core.cron import MACROS as MACROS
from colibri.core.cron import normalize_cron as normalize_cron
from colibri.core.errors import BadDuration, BadRequest, shown
from colibri.core.model import TaskSpec
from colibri.core.model import parse_rfc3339 as instant
from colibri.core.plans import Step, Steps, checked_steps

#: A due time processed within this many seconds of its wake time is on time, not missed.
ON_TIME = 60.0
#: Most due times examined in one check; beyond it the rest are counted, not listed.
SCAN_LIMIT = 10_000
#: No fire time after this (9999-12-01T00:00:00Z): past it a schedule has no next fire. The
#: calendar ends at 9999-12-31, and jitter and lateness are added to a fire time.
LAST_FIRE = 253_399_622_400.0
#: Ranges of a schedule's durations, in seconds.
EVERY_RANGE = (1.0, 3650 * 86400.0)
JITTER_MAX = 86400.0
GRACE_MAX = 3650 * 86400.0

Kind = Literal["cron", "interval", "once"]
CatchUp = Literal["one", "all", "none"]
Overlap = Literal["skip", "allow", "replace"]


class ScheduleSpec(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """A schedule as a person writes it: in colibri.jsonc, or sent by ``schedule add``."""

    cron: str | None = None
    tz: str | None = None
    #: Interval: a duration such as "15m", or seconds.
    every: str | float | None = None
    #: Once: ISO 8601 with an offset, or a local time in ``tz``.
    at: str | None = None
    catch_up: CatchUp = "one"
    catch_up_max: Annotated[int, msgspec.Meta(ge=1, le=10_000)] = 100
    grace: str | float | None = None
    overlap: Overlap = "skip"
    jitter: str | float | None = None
    paused: bool = False
    task: TaskSpec
    #: Steps each fire submits after ``task``: a pipeline (``core.plans``).
    then: Steps = []


class Schedule(msgspec.Struct, kw_only=True):
    name: str
    kind: Kind
    cron: str | None = None
    tz: str | None = None
    every: float | None = None
    #: Interval anchor, or the instant of a ``once`` schedule (RFC 3339).
    at: str | None = None
    catch_up: CatchUp = "one"
    catch_up_max: int = 100
    grace: float | None = None
    overlap: Overlap = "skip"
    jitter: float = 0.0
    task: TaskSpec
    then: list[Step] = []
    paused: bool = False
    finished: bool = False
    next_fire_at: str | None = None
    last_fire_at: str | None = None
    last_task: str | None = None
    #: Every task of the last fire of a pipeline (``then``), the first first; while any of
    #: them is open, the fire is (``overlap``).
    last_fire_tasks: list[str] = []
    fires: int = 0
    skipped: int = 0
    missed: int = 0
    #: Fires that intake refused (a quota, a name no longer valid): recorded, no task.
    refused: int = 0
    source: Literal["cli", "config"] = "cli"
    created_at: str = ""
    updated_at: str = ""


if TYPE_CHECKING:
    from zoneinfo import ZoneInfo


@lru_cache(maxsize=1024)
def zone(name: str) -> ZoneInfo:
    # (zoneinfo and hashlib are loaded when first needed: every command of the CLI that talks
    # to the daemon loads this module, through the protocol's schedule requests)
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    # OSError: a folder of the zone database ("Europe"), or a name too long for a file name
    except (ZoneInfoNotFoundError, ValueError, OSError):
        raise BadRequest(
            f"unknown time zone {shown(name)}: use an IANA name such as Europe/Ljubljana or UTC"
        ) from None


def next_after(schedule: Schedule, after: float) -> float | None:
    """The first nominal fire time strictly after ``after``; None when there is none (also
    when it would come after ``LAST_FIRE``)."""
    nxt = _next_after(schedule, after)
    return nxt if nxt is not None and nxt <= LAST_FIRE else None


def _next_after(schedule: Schedule, after: float) -> float | None:
    if after >= LAST_FIRE:
        return None
    if schedule.kind == "cron":
        from cronsim import CronSim

        assert schedule.cron is not None
        tz = zone(schedule.tz or "UTC")
        times = CronSim(schedule.cron, datetime.fromtimestamp(after, tz))
        try:
            # cronsim drops the fold of a fixed time inside a repeated (fall-back) hour, so it
            # can answer an instant before ``after``: step on until it is strictly later.
            nxt = next(times).timestamp()
            while nxt <= after:
                nxt = next(times).timestamp()
        except OverflowError:  # the next match is past the end of the calendar
            return None
        return nxt
    if schedule.kind == "interval":
        assert schedule.every and schedule.at
        anchor = instant(schedule.at)
        steps = math.floor((after - anchor) / schedule.every) + 1
        return anchor + max(steps, 1) * schedule.every
    assert schedule.at is not None
    at = instant(schedule.at)
    return at if at > after else None


def latest_due(schedule: Schedule, now: float) -> float | None:
    """The last nominal fire time at or before ``now`` (None if there is none)."""
    if schedule.kind == "cron":
        from cronsim import CronSim

        assert schedule.cron is not None
        start = datetime.fromtimestamp(now + 1, zone(schedule.tz or "UTC"))
        times = CronSim(schedule.cron, start, reverse=True)
        latest = next(times).timestamp()
        while latest > now:
            latest = next(times).timestamp()
        return latest
    assert schedule.at is not None
    if schedule.kind == "interval":
        assert schedule.every
        anchor = instant(schedule.at)
        steps = math.floor((now - anchor) / schedule.every)
        return anchor + steps * schedule.every if steps >= 1 else None
    at = instant(schedule.at)
    return at if at <= now else None


def upcoming(schedule: Schedule, after: float, count: int) -> list[float]:
    """The next ``count`` nominal fire times after ``after``."""
    times: list[float] = []
    cursor = after
    while len(times) < count:
        nxt = next_after(schedule, cursor)
        if nxt is None:
            break
        times.append(nxt)
        cursor = nxt
    return times


def jitter_offset(name: str, nominal: float, jitter: float) -> float:
    """A delay in [0, jitter) fixed by (name, nominal), so a restart does not move it."""
    if jitter <= 0:
        return 0.0
    import hashlib

    digest = hashlib.blake2b(f"{name}@{nominal}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") / 2**64 * jitter


def wake_at(schedule: Schedule, nominal: float, following: float | None = None) -> float:
    """When the fire of ``nominal`` is due: the nominal time plus its jitter, the jitter held
    below the gap to the next nominal time (``following``, computed if not given), so fires
    stay in order and a jitter longer than the interval never makes one late."""
    if schedule.jitter <= 0:
        return nominal
    if following is None:
        following = next_after(schedule, nominal)
    spread = schedule.jitter if following is None else min(schedule.jitter, following - nominal)
    return nominal + jitter_offset(schedule.name, nominal, spread)


@dataclass(slots=True)
class Plan:
    """What a due check decided: nominal times to fire, times missed, and the next one."""

    fire: list[float] = field(default_factory=list)
    missed: list[float] = field(default_factory=list)
    #: Missed times beyond SCAN_LIMIT, counted but not listed.
    missed_uncounted: bool = False
    next_fire_at: float | None = None


def plan(schedule: Schedule, now: float) -> Plan:
    """Decide what firing ``schedule`` at ``now`` means, from its stored ``next_fire_at``."""
    result = Plan()
    if schedule.next_fire_at is None or schedule.finished:
        return result
    # A time is due once its wake time (nominal + jitter) has come, and late by how long ago
    # that was: so a jitter never turns a fire into a miss.
    first = instant(schedule.next_fire_at)
    following = next_after(schedule, first)
    if wake_at(schedule, first, following) > now:
        result.next_fire_at = first
        return result
    due = [first]
    wakes = {first: wake_at(schedule, first, following)}
    while len(due) < SCAN_LIMIT:
        nxt, following = following, None
        if nxt is None:
            break
        following = next_after(schedule, nxt)
        wake = wake_at(schedule, nxt, following)
        if wake > now:
            break
        due.append(nxt)
        wakes[nxt] = wake
    else:
        # Too many to list: the rest are counted as missed, but the latest due time is
        # still the one a policy may fire.
        result.missed_uncounted = True
        latest = latest_due(schedule, now)
        if latest is not None and latest > due[-1]:
            due.append(latest)
            wakes[latest] = latest
    last = due[-1]
    result.next_fire_at = next_after(schedule, last)
    fresh = [t for t in due if schedule.grace is None or now - wakes[t] <= schedule.grace]
    if schedule.catch_up == "all":
        result.fire = fresh[-schedule.catch_up_max :]
    elif schedule.catch_up == "one":
        result.fire = fresh[-1:]
    else:
        result.fire = [last] if now - wakes[last] <= ON_TIME and last in fresh else []
    chosen = set(result.fire)
    result.missed = [t for t in due if t not in chosen]
    return result


def _seconds(value: str | float | None, what: str, low: float, high: float) -> float | None:
    from colibri.core.durations import parse_duration

    if value is None:
        return None
    try:
        return parse_duration(value, low=low, high=high)
    except BadDuration as exc:
        raise BadDuration(f"{what}: {exc.message}") from None


def build(
    name: str, spec: ScheduleSpec, *, now: float, default_tz: str, source: str = "cli"
) -> Schedule:
    """Check a definition and turn it into a schedule with its first ``next_fire_at``."""
    from colibri.core.model import check_name, normalize_names, rfc3339

    check_name(name, "schedule name")
    kinds = [k for k in ("cron", "every", "at") if getattr(spec, k) is not None]
    if len(kinds) != 1:
        raise BadRequest(
            f"schedule {name!r} needs exactly one of cron, every or at (got "
            f"{', '.join(kinds) or 'none'})"
        )
    if not spec.task.text.strip():
        raise BadRequest(f"schedule {name!r}: task text is empty")
    if spec.task.parent is not None:
        raise BadRequest(f"schedule {name!r}: a schedule's task has no parent (fires are tasks "
                         "of their own; a session hands work on with colibri submit)")  # fmt: skip
    task = spec.task
    task = msgspec.structs.replace(
        task,
        capabilities=normalize_names(task.capabilities, "capability"),
        labels=normalize_names(task.labels, "label"),
        workspace=check_name(task.workspace, "workspace") if task.workspace else None,
        agent=check_name(task.agent, "agent name") if task.agent else None,
        tenant=check_name(task.tenant, "tenant") if task.tenant else None,
    )
    tz_name = spec.tz or default_tz
    tz = zone(tz_name)
    grace = _seconds(spec.grace, "grace", 0.0, GRACE_MAX)
    jitter = _seconds(spec.jitter, "jitter", 0.0, JITTER_MAX) or 0.0
    stamp = rfc3339(now)
    schedule = Schedule(
        name=name,
        kind="cron",
        tz=tz_name,
        catch_up=spec.catch_up,
        catch_up_max=spec.catch_up_max,
        grace=grace,
        overlap=spec.overlap,
        jitter=jitter,
        task=task,
        then=checked_steps(name, task, spec.then),
        paused=spec.paused,
        source=source,  # type: ignore[arg-type]
        created_at=stamp,
        updated_at=stamp,
    )
    if spec.cron is not None:
        schedule.cron = normalize_cron(spec.cron)
    elif spec.every is not None:
        every = _seconds(spec.every, f"schedule {name!r}: every", *EVERY_RANGE)
        assert every is not None
        if jitter >= every:
            raise BadRequest(
                f"schedule {name!r}: jitter {shown(spec.jitter)} must be shorter than every "
                f"{shown(spec.every)} (a fire is spread within its interval)"
            )
        schedule.kind, schedule.every, schedule.at = "interval", every, stamp
    else:
        assert spec.at is not None
        try:
            when = datetime.fromisoformat(spec.at.strip().replace("Z", "+00:00"))
        except ValueError:
            raise BadRequest(
                f"schedule {name!r}: at {shown(spec.at)} is not a time; write it like "
                "2026-12-24T18:00:00+01:00 or 2026-12-24 18:00 (local to tz)"
            ) from None
        if when.tzinfo is None:
            when = when.replace(tzinfo=tz)
        try:
            at = when.timestamp()
        except (OverflowError, ValueError):
            at = math.inf  # local 9999-12-31 east of UTC, say: past the end of the calendar
        if at <= now:
            raise BadRequest(f"schedule {name!r}: at {spec.at} is in the past; give a future time")
        if at > LAST_FIRE:
            raise BadRequest(
                f"schedule {name!r}: at {spec.at} is too far ahead; give a time before "
                "9999-12-01T00:00:00Z"
            )
        schedule.kind, schedule.at = "once", rfc3339(at)
    first = next_after(schedule, now)
    schedule.next_fire_at = None if first is None else rfc3339(first)
    return schedule
