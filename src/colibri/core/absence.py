"""How long something has been missing without a break: a harness's daemon, whose absence for
``supervisor.orphan_after`` means it is gone for good (a daemon restarted, or a standby taking
over, adopts the harness instead, and the wait starts over)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class Absence:
    #: Seconds missing, without a break, after which it is gone for good.
    after: float
    #: Since when it has been missing (on the caller's monotonic clock); None while present.
    since: float | None = None

    def gone(self, present: bool, now: float) -> bool:
        """Note whether it is there at ``now``; True once it has been missing ``after`` seconds
        without being seen in between."""
        if present:
            self.since = None
            return False
        if self.since is None:
            self.since = now
        return now - self.since >= self.after
