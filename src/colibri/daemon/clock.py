"""Time, passed in: wall time for timestamps, a monotonic clock for TTLs and timeouts."""

from __future__ import annotations

import time as _time
from typing import Protocol


class Clock(Protocol):
    def time(self) -> float:
        """Seconds since the epoch (wall clock): for timestamps people read."""

    def monotonic(self) -> float:
        """Seconds that only go forward: for TTLs, deadlines and backoffs."""


class SystemClock:
    def time(self) -> float:
        return _time.time()

    def monotonic(self) -> float:
        return _time.monotonic()
