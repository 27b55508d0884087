"""Durations as people write them: 90s, 15m, 1h30m, 1d, and bare numbers of seconds."""

from __future__ import annotations

import math

import pytest

from colibri.core.durations import MAX_DURATION, format_duration, parse_duration
from colibri.core.errors import BadDuration


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("90s", 90.0),
        ("15m", 900.0),
        ("1h", 3600.0),
        ("1h30m", 5400.0),
        ("1d", 86400.0),
        ("1w", 604800.0),
        ("250ms", 0.25),
        ("1m30s", 90.0),
        ("1d2h3m4s", 93784.0),
        ("1.5h", 5400.0),
        ("0.5s", 0.5),
        ("0s", 0.0),
        # Spaces and case are forgiven.
        (" 90S ", 90.0),
        ("1h 30m", 5400.0),
        ("1H30M", 5400.0),
        # A bare number, as a string, is seconds.
        ("90", 90.0),
        ("1.5", 1.5),
        ("0", 0.0),
    ],
)
def test_parse_duration_text(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds)


@pytest.mark.parametrize(("number", "seconds"), [(0, 0.0), (90, 90.0), (2.5, 2.5), (0.0, 0.0)])
def test_parse_duration_bare_numbers_are_seconds(number: float, seconds: float) -> None:
    result = parse_duration(number)
    assert result == seconds
    assert isinstance(result, float)


@pytest.mark.parametrize(
    "text",
    [
        "",
        " ",
        "h",
        "s90",
        "5x",
        "1h30",
        "90 seconds",
        "1..5s",
        "-5",
        "-5s",
        "abc",
        "1h-30m",
        "nan",
        "inf",
    ],
)
def test_parse_duration_refuses_bad_text_and_says_what_is_accepted(text: str) -> None:
    with pytest.raises(BadDuration) as caught:
        parse_duration(text)
    message = str(caught.value)
    assert repr(text) in message
    for example in ("90s", "15m", "1h30m", "1d"):
        assert example in message


@pytest.mark.parametrize("number", [-1, -0.5, -math.inf])
def test_parse_duration_refuses_negative_numbers(number: float) -> None:
    with pytest.raises(BadDuration, match="negative"):
        parse_duration(number)


@pytest.mark.parametrize("number", [math.nan, math.inf])
def test_parse_duration_refuses_numbers_that_are_not_finite(number: float) -> None:
    with pytest.raises(BadDuration, match="finite"):
        parse_duration(number)


@pytest.mark.parametrize("value", [True, False, None, [1], {"s": 1}])
def test_parse_duration_refuses_other_types(value: object) -> None:
    with pytest.raises(BadDuration, match="90s"):
        parse_duration(value)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("seconds", "text"),
    [
        (0, "0ms"),
        (0.25, "250ms"),
        (1, "1s"),
        (59, "59s"),
        (60, "1m"),
        (90, "1m30s"),
        (900, "15m"),
        (3600, "1h"),
        (5400, "1h30m"),
        (86400, "1d"),
        (93784, "1d2h3m4s"),
        (7 * 86400, "7d"),
        (59.6, "1m"),
    ],
)
def test_format_duration(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text


@pytest.mark.parametrize("seconds", [0.25, 1, 59, 90, 900, 3600, 5400, 86400, 93784, 1_000_000])
def test_format_then_parse_round_trips(seconds: float) -> None:
    assert parse_duration(format_duration(seconds)) == pytest.approx(seconds)


# -- ranges ------------------------------------------------------------------------------------


def test_the_default_range_is_zero_to_ten_years() -> None:
    assert MAX_DURATION == 3650 * 86400
    assert parse_duration("3650d") == MAX_DURATION
    assert parse_duration(MAX_DURATION) == MAX_DURATION
    assert parse_duration("0s") == 0.0
    for text in ("3650d1ms", "100000000d", MAX_DURATION + 0.001, "521w3d1s"):
        with pytest.raises(BadDuration, match="must be at most 3650d"):
            parse_duration(text)


@pytest.mark.parametrize(
    ("low", "high", "below", "above", "says"),
    [
        (0.01, 86400.0, "9ms", "1d1ms", "from 10ms to 1d"),
        (0.1, 86400.0, "99.9ms", "86400.001", "from 100ms to 1d"),
        (1.0, 365 * 86400.0, "999ms", "365d1s", "from 1s to 365d"),
        (0.001, 86400.0, "0.9ms", "24h0.001s", "from 1ms to 1d"),
    ],
)
def test_bounds_are_inclusive_and_said_in_the_notation(
    low: float, high: float, below: str, above: str, says: str
) -> None:
    assert parse_duration(format_duration(low), low=low, high=high) == pytest.approx(low)
    assert parse_duration(format_duration(high), low=low, high=high) == high
    assert parse_duration(low, low=low, high=high) == low
    for text in (below, above):
        with pytest.raises(BadDuration) as caught:
            parse_duration(text, low=low, high=high)
        assert str(caught.value) == f"duration {text!r} must be {says}"


@pytest.mark.parametrize(
    "value",
    ["1e400", "9" * 400, "9" * 400 + "d", "99999999999999999999d", 10**400, 1e308, "1e308"],
)
def test_absurdly_long_durations_are_out_of_range_not_a_crash(value: str | int | float) -> None:
    with pytest.raises(BadDuration, match="must be at most 3650d") as caught:
        parse_duration(value)
    assert len(str(caught.value)) < 120  # the value is clipped, not printed whole


@pytest.mark.parametrize("value", ["1e400s", "nan", "-inf", "infinity", math.nan, -0.001])
def test_not_a_duration_at_all_is_still_said_so(value: str | float) -> None:
    with pytest.raises(BadDuration) as caught:
        parse_duration(value, low=1.0, high=2.0)
    assert "must be from" not in str(caught.value)


def test_minus_zero_is_zero() -> None:
    assert str(parse_duration("-0")) == "0.0" and str(parse_duration(-0.0)) == "0.0"


def test_the_bounds_are_keywords() -> None:
    assert parse_duration("1s", low=1.0, high=1.0) == 1.0
    with pytest.raises(TypeError):
        parse_duration("1s", 0.0)  # type: ignore[call-arg]  # a bound given by position, on purpose
