"""Time, passed in: wall time for timestamps, a monotonic clock for TTLs and timeouts."""

from __future__ import annotations

import time as _time
from collections.abc import Callable
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


class BoardClock:
    """A PostgreSQL board's clock, for the daemon serving it: this host's wall clock moved by
    how far the board's server's runs from it (``offset``, measured at each renewal of the
    lease), so that what follows the wall clock on a board served by daemons in turn — its
    schedules — follows one clock, the server's, as the lease does."""

    def __init__(self, offset: Callable[[], float]) -> None:
        self._offset = offset

    def time(self) -> float:
        return _time.time() + self._offset()

    def monotonic(self) -> float:
        return _time.monotonic()
