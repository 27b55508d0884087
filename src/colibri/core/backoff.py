"""Backoff: how long a retrying loop pauses before its next try. Pure: the caller sleeps.

Every loop that tries again — a task's retry, a schedule's fire that failed, a harness started
again or reconnecting, a report or a client's request sent again — pauses ``first`` seconds,
then twice as long each time, never more than ``longest``. No jitter: the pauses of one loop are
what its settings say, so a test can step a manual clock through them.
"""

from __future__ import annotations

#: Past this many doublings every pause is ``longest`` anyway (2**64 times any pause we use is
#: beyond any longest we allow); the exponent is capped so a huge try count stays a float.
_MOST_DOUBLINGS = 64


def delay(tries: int, first: float, longest: float) -> float:
    """The pause after the ``tries``-th failed try (1: the first): ``first`` doubled
    ``tries - 1`` times, at most ``longest``; none before any try has failed."""
    if tries < 1:
        return 0.0
    return min(longest, first * 2.0 ** min(tries - 1, _MOST_DOUBLINGS))


class Backoff:
    """The pauses of one retrying loop: ``next()`` gives the next one and counts the try;
    ``reset()`` after a success starts again from ``first``."""

    __slots__ = ("first", "longest", "tries")

    def __init__(self, first: float, longest: float) -> None:
        self.first = first
        self.longest = longest
        self.tries = 0

    def next(self) -> float:
        self.tries += 1
        return delay(self.tries, self.first, self.longest)

    def peek(self) -> float:
        """The pause ``next()`` would give, without counting a try."""
        return delay(self.tries + 1, self.first, self.longest)

    def reset(self) -> None:
        self.tries = 0
