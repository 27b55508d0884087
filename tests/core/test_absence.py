"""``Absence``: gone for good only after a wait without a break."""

from __future__ import annotations

from colibri.core.absence import Absence


def test_gone_only_after_missing_the_whole_wait() -> None:
    absence = Absence(after=60.0)
    assert not absence.gone(True, 0.0)
    assert not absence.gone(False, 10.0)  # the wait starts when it is first missed
    assert not absence.gone(False, 69.9)
    assert absence.gone(False, 70.0)


def test_seen_again_the_wait_starts_over() -> None:
    """A daemon restarted after a crash (or a standby taking over) adopts the harness: its
    wait starts again from the next time no daemon is there."""
    absence = Absence(after=60.0)
    assert not absence.gone(False, 0.0)
    assert not absence.gone(True, 59.0)
    assert not absence.gone(False, 100.0)
    assert not absence.gone(False, 159.0)
    assert absence.gone(False, 160.0)
