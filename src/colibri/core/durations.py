"""Durations as people write them in colibri.jsonc and on the command line: 90s, 15m, 1h30m, 1d."""

from __future__ import annotations

import math
import re

from colibri.core.errors import BadDuration, shown

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}

DAY = 86400.0
#: The longest duration anything accepts unless it says otherwise: ten years. Beyond it a
#: duration is a typo, and adding it to a timestamp overflows the calendar (year 275817 …).
MAX_DURATION = 3650 * DAY


def parse_duration(
    text: str | int | float, *, low: float = 0.0, high: float = MAX_DURATION
) -> float:
    """Seconds in ``text``, from ``low`` to ``high``; a bare number is seconds.

    Raise BadDuration saying what is accepted: the notation, or the range in that notation.
    """
    seconds = _seconds(text)
    if not low <= seconds <= high:
        allowed = f"from {format_duration(low)} to" if low > 0 else "at most"
        raise BadDuration(f"duration {shown(text)} must be {allowed} {format_duration(high)}")
    return seconds


def _seconds(text: str | int | float) -> float:
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text < 0:
            raise BadDuration(f"duration {shown(text)} is negative")
        try:
            seconds = float(text)
        except OverflowError:  # an int too large for a float is simply too long
            return math.inf
        if not math.isfinite(seconds):
            raise BadDuration(f"duration {shown(text)} is not a finite number of seconds")
        return seconds + 0.0  # -0.0 becomes 0.0
    if not isinstance(text, str):
        raise BadDuration(f"duration must be a string like '90s', got {shown(text)}")
    s = text.strip().lower().replace(" ", "")
    try:
        bare = float(s)
    except ValueError:
        pass
    else:
        if bare >= 0 and not s.lstrip("+").startswith("inf"):
            # Digits beyond a float's range make inf here: too long, as the range will say.
            return bare + 0.0
        # "-5", "nan" and "inf" are not durations: the notation's message below says so.
    pos, total = 0, 0.0
    for match in _PART.finditer(s):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT[match.group(2)]
        pos = match.end()
    if pos != len(s) or not s:
        raise BadDuration(
            f"invalid duration {shown(text)}: write it like 90s, 15m, 1h30m or 1d "
            "(units ms s m h d w)"
        )
    # Enough digits make this infinite ("9" * 400 + "d"): parse_duration's range refuses it.
    return total


def format_duration(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.0f}ms"
    parts = []
    rest = int(round(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= size:
            parts.append(f"{rest // size}{unit}")
            rest %= size
    return "".join(parts) or "0s"
