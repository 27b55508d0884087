"""Durations as people write them in colibri.jsonc and on the command line: 90s, 15m, 1h30m, 1d."""

from __future__ import annotations

import math
import re

_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h|d|w)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}


def parse_duration(text: str | int | float) -> float:
    """Seconds in ``text``; a bare number is seconds. Raise ValueError saying what is accepted."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        if text < 0:
            raise ValueError(f"duration {text} is negative")
        if not math.isfinite(text):
            raise ValueError(f"duration {text} is not a finite number of seconds")
        return float(text)
    if not isinstance(text, str):
        raise ValueError(f"duration must be a string like '90s', got {text!r}")
    s = text.strip().lower().replace(" ", "")
    try:
        return parse_duration(float(s))
    except ValueError:
        pass
    pos, total = 0, 0.0
    for match in _PART.finditer(s):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT[match.group(2)]
        pos = match.end()
    if pos != len(s) or not s:
        raise ValueError(
            f"invalid duration {text!r}: write it like 90s, 15m, 1h30m or 1d (units ms s m h d w)"
        )
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
