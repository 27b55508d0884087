"""Cron schedules across daylight-saving transitions, over two simulated years.

Each test iterates ``next_after`` from 2026-01-01 to 2028-01-01 (local time) and checks what
happens on every day, and in particular on the days the zone's UTC offset changes. The rules
(the ones of Vixie/Debian cron, as cronsim implements them):
- a fixed time that the spring-forward gap skips fires once, at the first valid instant after
  the gap;
- a fixed time that the fall-back hour repeats fires once, on its first occurrence;
- a job with a wildcard or step in the minute or hour field fires at each matching wall-clock
  minute as it passes in real time (so an hourly job keeps firing every real hour).

The transition days are found with zoneinfo, not hard-coded.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from functools import cache
from zoneinfo import ZoneInfo

import pytest

from colibri.core.model import TaskSpec
from colibri.core.schedules import Schedule, next_after, normalize_cron

FIRST_DAY = date(2026, 1, 1)
END_DAY = date(2028, 1, 1)  # exclusive
DAYS = (END_DAY - FIRST_DAY).days
DST_ZONES = ["Europe/Ljubljana", "America/New_York", "Australia/Lord_Howe"]


@dataclass(frozen=True)
class Transition:
    day: date  # the local calendar day it happens on
    at: float  # the first instant with the new offset
    before: timedelta
    after: timedelta

    @property
    def forward(self) -> bool:
        return self.after > self.before


def midnight(day: date, tz: ZoneInfo) -> float:
    return datetime.combine(day, time(), tz).timestamp()


@cache
def transitions(tz_name: str) -> tuple[Transition, ...]:
    """The offset changes in the two years: scan day by day, then bisect to the second."""
    tz = ZoneInfo(tz_name)
    found = []
    day = FIRST_DAY
    while day < END_DAY:
        lo, hi = midnight(day, tz), midnight(day + timedelta(days=1), tz)
        before = datetime.fromtimestamp(lo, tz).utcoffset()
        after = datetime.fromtimestamp(hi, tz).utcoffset()
        if before != after:
            assert before is not None and after is not None
            a, b = int(lo), int(hi)  # offset(a) == before, offset(b) == after
            while b - a > 1:
                mid = (a + b) // 2
                if datetime.fromtimestamp(mid, tz).utcoffset() == before:
                    a = mid
                else:
                    b = mid
            found.append(Transition(day, float(b), before, after))
        day += timedelta(days=1)
    return tuple(found)


def spring_days(tz_name: str) -> list[date]:
    return [t.day for t in transitions(tz_name) if t.forward]


def fall_days(tz_name: str) -> list[date]:
    return [t.day for t in transitions(tz_name) if not t.forward]


@cache
def fires(expr: str, tz_name: str) -> tuple[float, ...]:
    """Every fire time of ``expr`` in the two years, by iterating next_after."""
    tz = ZoneInfo(tz_name)
    schedule = Schedule(
        name="dst",
        kind="cron",
        cron=normalize_cron(expr),
        tz=tz_name,
        task=TaskSpec(text="x"),
    )
    t = midnight(FIRST_DAY, tz) - 1
    end = midnight(END_DAY, tz)
    out: list[float] = []
    while True:
        nxt = next_after(schedule, t)
        assert nxt is not None and nxt > t
        if nxt >= end:
            return tuple(out)
        out.append(nxt)
        t = nxt


def local(t: float, tz_name: str) -> datetime:
    return datetime.fromtimestamp(t, ZoneInfo(tz_name))


def per_day(times: tuple[float, ...], tz_name: str) -> Counter[date]:
    return Counter(local(t, tz_name).date() for t in times)


def exists(day: date, wall: time, tz: ZoneInfo) -> bool:
    """Whether the wall-clock time happens on that day (is not in a spring-forward gap)."""
    dt = datetime.combine(day, wall, tz)
    back = dt.astimezone(UTC).astimezone(tz)
    return back.replace(tzinfo=None) == dt.replace(tzinfo=None)


def strictly_increasing(times: tuple[float, ...]) -> bool:
    return all(b > a for a, b in zip(times, times[1:], strict=False))


# -- the transitions themselves -------------------------------------------------------------


@pytest.mark.parametrize("tz_name", DST_ZONES)
def test_two_springs_and_two_falls_are_found(tz_name: str) -> None:
    found = transitions(tz_name)
    assert [t.forward for t in sorted(found, key=lambda t: t.at)].count(True) == 2
    assert len(spring_days(tz_name)) == 2 and len(fall_days(tz_name)) == 2
    shift = {"Australia/Lord_Howe": timedelta(minutes=30)}.get(tz_name, timedelta(hours=1))
    assert all(abs(t.after - t.before) == shift for t in found)


def test_zones_without_dst_have_no_transitions() -> None:
    assert transitions("UTC") == ()
    assert transitions("Asia/Kolkata") == ()


# -- a fixed time: 02:30 every day ----------------------------------------------------------


@pytest.mark.parametrize("tz_name", DST_ZONES)
def test_fixed_time_fires_once_every_local_day(tz_name: str) -> None:
    tz = ZoneInfo(tz_name)
    times = fires("30 2 * * *", tz_name)
    assert len(times) == DAYS == 730
    assert strictly_increasing(times)
    counts = per_day(times, tz_name)
    assert len(counts) == DAYS and set(counts.values()) == {1}
    wall = time(2, 30)
    for t in times:
        day = local(t, tz_name).date()
        if exists(day, wall, tz):
            # The first occurrence (fold=0) when the wall time happens twice.
            assert t == datetime.combine(day, wall, tz).replace(fold=0).timestamp()
        else:
            # Skipped by the gap: the first valid instant after it, i.e. the transition.
            (gap,) = [x for x in transitions(tz_name) if x.day == day]
            assert gap.forward and t == gap.at


@pytest.mark.parametrize(("tz_name", "wall"), [("Europe/Ljubljana", 3), ("America/New_York", 3)])
def test_fixed_time_in_the_gap_fires_at_three(tz_name: str, wall: int) -> None:
    times = fires("30 2 * * *", tz_name)
    for day in spring_days(tz_name):
        (t,) = [t for t in times if local(t, tz_name).date() == day]
        assert local(t, tz_name).time() == time(wall, 0)


def test_fixed_time_in_the_repeated_hour_fires_once_with_the_summer_offset() -> None:
    # Ljubljana falls back at 03:00 CEST to 02:00 CET: 02:30 happens twice.
    times = fires("30 2 * * *", "Europe/Ljubljana")
    for day in fall_days("Europe/Ljubljana"):
        (t,) = [t for t in times if local(t, "Europe/Ljubljana").date() == day]
        dt = local(t, "Europe/Ljubljana")
        assert dt.time() == time(2, 30) and dt.fold == 0
        assert dt.utcoffset() == timedelta(hours=2)


def test_new_york_repeated_hour_fires_once() -> None:
    # New York repeats 01:00-02:00 (EDT, then EST): 01:30 fires once, at 01:30 EDT.
    times = fires("30 1 * * *", "America/New_York")
    assert len(times) == DAYS and set(per_day(times, "America/New_York").values()) == {1}
    for day in fall_days("America/New_York"):
        (t,) = [t for t in times if local(t, "America/New_York").date() == day]
        assert local(t, "America/New_York").utcoffset() == timedelta(hours=-4)


def test_lord_howe_half_hour_gap_and_repeat() -> None:
    """Lord Howe moves by 30 minutes: 02:00-02:30 is skipped, 01:30-02:00 repeats."""
    tz_name = "Australia/Lord_Howe"
    gap = fires("15 2 * * *", tz_name)
    assert len(gap) == DAYS and set(per_day(gap, tz_name).values()) == {1}
    for tr in transitions(tz_name):
        if tr.forward:
            (t,) = [t for t in gap if local(t, tz_name).date() == tr.day]
            assert t == tr.at and local(t, tz_name).time() == time(2, 30)
    repeat = fires("45 1 * * *", tz_name)
    assert len(repeat) == DAYS and set(per_day(repeat, tz_name).values()) == {1}
    for day in fall_days(tz_name):
        (t,) = [t for t in repeat if local(t, tz_name).date() == day]
        assert local(t, tz_name).utcoffset() == timedelta(hours=11)  # the summer offset


# -- hourly ---------------------------------------------------------------------------------


@pytest.mark.parametrize("tz_name", ["Europe/Ljubljana", "America/New_York"])
def test_hourly_fires_every_real_hour(tz_name: str) -> None:
    times = fires("0 * * * *", tz_name)
    assert len(times) == DAYS * 24
    assert all(b - a == 3600 for a, b in zip(times, times[1:], strict=False))
    counts = per_day(times, tz_name)
    springs, falls = spring_days(tz_name), fall_days(tz_name)
    for day in springs:
        assert counts[day] == 23
    for day in falls:
        assert counts[day] == 25
    assert {counts[d] for d in counts if d not in springs + falls} == {24}
    assert len(counts) == DAYS


def test_hourly_in_lord_howe_follows_the_wall_clock() -> None:
    """With a 30-minute shift, minute 0 of each local hour is 90 real minutes apart once.

    cronsim fires at each wall-clock minute 0 that passes: across the spring-forward gap
    (01:00 +10:30 to 03:00 +11) and across the repeated half hour (01:00 +11 to 02:00
    +10:30) the real gap is 5400 s, everywhere else 3600 s. So an hourly job is not
    "every real hour" in a zone whose offset moves by half an hour.
    """
    tz_name = "Australia/Lord_Howe"
    times = fires("0 * * * *", tz_name)
    assert all(local(t, tz_name).minute == 0 for t in times)
    gaps = Counter(b - a for a, b in zip(times, times[1:], strict=False))
    assert gaps == {3600.0: len(times) - 5, 5400.0: 4}
    for a, b in zip(times, times[1:], strict=False):
        if b - a == 5400:
            assert any(a < tr.at <= b for tr in transitions(tz_name))
    counts = per_day(times, tz_name)
    springs, falls = spring_days(tz_name), fall_days(tz_name)
    assert [counts[d] for d in springs] == [23, 23]  # no 02:00 that day
    assert [counts[d] for d in falls] == [24, 24]  # 01:30-02:00 repeats; no :00 in it
    assert {counts[d] for d in counts if d not in springs + falls} == {24}
    assert len(times) == DAYS * 24 - 2


# -- steps in a window around the transitions -----------------------------------------------

#: Fires of */20 1-3 on a transition day, per zone, as cronsim computes them.
#: Spring forward (gap G): the minutes of the wall-clock times the gap skips do not happen.
#:   Ljubljana/New York skip 02:00-03:00: 01:00 01:20 01:40 | 03:00 03:20 03:40 = 6.
#:   Lord Howe skips 02:00-02:30: 01:00 01:20 01:40 | 02:40 03:00 03:20 03:40 = 7.
#: Fall back: the repeated wall-clock times fire again, by elapsed time.
#:   Ljubljana repeats 02:00-03:00: 01:00-01:40 (3), 02:00-02:40 twice (6), 03:00-03:40 (3) = 12.
#:   New York repeats 01:00-02:00: 01:00-01:40 twice (6), 02:00-03:40 (6) = 12.
#:   Lord Howe repeats 01:30-02:00: 01:00 01:20 01:40 +11, 01:40 +10:30, 02:00-03:40 (6) = 10.
STEP_COUNTS = {
    "Europe/Ljubljana": (6, 12),
    "America/New_York": (6, 12),
    "Australia/Lord_Howe": (7, 10),
}


@pytest.mark.parametrize("tz_name", DST_ZONES)
def test_steps_in_a_window(tz_name: str) -> None:
    times = fires("*/20 1-3 * * *", tz_name)
    assert strictly_increasing(times)
    counts = per_day(times, tz_name)
    springs, falls = spring_days(tz_name), fall_days(tz_name)
    assert {counts[d] for d in counts if d not in springs + falls} == {9}
    assert len(counts) == DAYS
    spring_count, fall_count = STEP_COUNTS[tz_name]
    assert [counts[d] for d in springs] == [spring_count] * 2
    assert [counts[d] for d in falls] == [fall_count] * 2
    assert len(times) == (DAYS - 4) * 9 + 2 * spring_count + 2 * fall_count
    for t in times:
        dt = local(t, tz_name)
        assert dt.minute in (0, 20, 40) and dt.hour in (1, 2, 3)
    for day in falls:
        on_day = [t for t in times if local(t, tz_name).date() == day]
        walls = [local(t, tz_name).time() for t in on_day]
        # The repeated wall-clock times fire twice, one shift (1 h or 30 min) of real time apart.
        (fall,) = [tr for tr in transitions(tz_name) if tr.day == day]
        shift = (fall.before - fall.after).total_seconds()
        repeated = [w for w, n in Counter(walls).items() if n == 2]
        assert len(repeated) == fall_count - 9
        for w in repeated:
            a, b = [t for t in on_day if local(t, tz_name).time() == w]
            assert b - a == shift
    for day in springs:
        on_day = [t for t in times if local(t, tz_name).date() == day]
        tz = ZoneInfo(tz_name)
        assert all(exists(day, local(t, tz_name).time(), tz) for t in on_day)


def test_ljubljana_fall_back_window_in_detail() -> None:
    times = fires("*/20 1-3 * * *", "Europe/Ljubljana")
    (day,) = [d for d in fall_days("Europe/Ljubljana") if d.year == 2026]
    on_day = [local(t, "Europe/Ljubljana") for t in times]
    on_day = [dt for dt in on_day if dt.date() == day]
    assert [(dt.strftime("%H:%M"), dt.utcoffset()) for dt in on_day] == [
        ("01:00", timedelta(hours=2)),
        ("01:20", timedelta(hours=2)),
        ("01:40", timedelta(hours=2)),
        ("02:00", timedelta(hours=2)),
        ("02:20", timedelta(hours=2)),
        ("02:40", timedelta(hours=2)),
        ("02:00", timedelta(hours=1)),
        ("02:20", timedelta(hours=1)),
        ("02:40", timedelta(hours=1)),
        ("03:00", timedelta(hours=1)),
        ("03:20", timedelta(hours=1)),
        ("03:40", timedelta(hours=1)),
    ]


# -- zones without DST ----------------------------------------------------------------------


@pytest.mark.parametrize("tz_name", ["Asia/Kolkata", "UTC"])
def test_midnight_without_dst(tz_name: str) -> None:
    times = fires("0 0 * * *", tz_name)
    assert len(times) == DAYS
    assert all(b - a == 86400 for a, b in zip(times, times[1:], strict=False))
    counts = per_day(times, tz_name)
    assert len(counts) == DAYS and set(counts.values()) == {1}
    assert all(local(t, tz_name).time() == time(0, 0) for t in times)
    assert local(times[0], tz_name).date() == FIRST_DAY


@pytest.mark.parametrize("tz_name", DST_ZONES)
def test_midnight_with_dst(tz_name: str) -> None:
    # No transition in these zones happens at midnight: one fire at 00:00 every day.
    times = fires("0 0 * * *", tz_name)
    assert len(times) == DAYS
    assert all(local(t, tz_name).time() == time(0, 0) for t in times)
    assert set(per_day(times, tz_name).values()) == {1}
