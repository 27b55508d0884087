"""The one backoff every retrying loop uses: pauses from ``first``, doubled, up to ``longest``."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from colibri.core.backoff import Backoff, delay
from tests.properties import examples


def test_pauses_double_from_the_first_up_to_the_longest_and_start_again_after_a_reset() -> None:
    backoff = Backoff(0.1, 1.0)
    assert backoff.peek() == 0.1
    assert [backoff.next() for _ in range(6)] == [0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    backoff.reset()
    assert backoff.next() == 0.1
    assert delay(0, 0.1, 1.0) == 0.0  # nothing has failed yet


@pytest.mark.properties
@settings(max_examples=examples(500))
@given(
    tries=st.integers(min_value=-5, max_value=10**9),
    first=st.floats(min_value=0.001, max_value=3600),
    longest=st.floats(min_value=0.001, max_value=30 * 86400),
)
def test_a_pause_is_a_finite_float_within_its_bounds_at_any_try_count(
    tries: int, first: float, longest: float
) -> None:
    # A task retried a billion times, or a harness that failed as often: never an overflow.
    pause = delay(tries, first, longest)
    assert isinstance(pause, float)
    if tries < 1:
        assert pause == 0.0
    else:
        assert min(first, longest) <= pause <= longest
        assert delay(tries + 1, first, longest) >= pause
