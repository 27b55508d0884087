"""How many examples a property test tries. The README's run takes a fifth of each test's
whole run (at least 50), to keep the suite quick; ``COLIBRI_TEST_EXAMPLES=all`` takes them all,
and ``.ci/run`` does so for every test marked ``properties``, in the pass of the long ones."""

from __future__ import annotations

import os

ALL_EXAMPLES = os.environ.get("COLIBRI_TEST_EXAMPLES") == "all"


def examples(full: int) -> int:
    """The examples to try of a property test whose whole run is ``full`` examples (its test
    is marked ``properties``)."""
    return full if ALL_EXAMPLES else max(50, full // 5)
