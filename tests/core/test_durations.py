"""Durations as people write them: 90s, 15m, 1h30m, 1d, and bare numbers of seconds."""

from __future__ import annotations

import math

import pytest

from colibri.core.durations import format_duration, parse_duration


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
    with pytest.raises(ValueError) as caught:
        parse_duration(text)
    message = str(caught.value)
    assert repr(text) in message
    for example in ("90s", "15m", "1h30m", "1d"):
        assert example in message


@pytest.mark.parametrize("number", [-1, -0.5, -math.inf])
def test_parse_duration_refuses_negative_numbers(number: float) -> None:
    with pytest.raises(ValueError, match="negative"):
        parse_duration(number)


@pytest.mark.parametrize("number", [math.nan, math.inf])
def test_parse_duration_refuses_numbers_that_are_not_finite(number: float) -> None:
    with pytest.raises(ValueError, match="finite"):
        parse_duration(number)


@pytest.mark.parametrize("value", [True, False, None, [1], {"s": 1}])
def test_parse_duration_refuses_other_types(value: object) -> None:
    with pytest.raises(ValueError, match="90s"):
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
