"""A batch grows while its commit costs more than its requests: the rule the group commit asks
before it commits while connections wait for their turn (``admission.batch_grows``). Its
effect on throughput is measured in bench/ (docs/PERFORMANCE.md), never timed here."""

from __future__ import annotations

import pytest

from colibri.daemon.admission import GROW_MAX, GROW_TURNS, batch_grows


@pytest.mark.parametrize(
    ("waiting", "work", "last_commit", "turns", "grows"),
    [
        (True, 0.001, 0.008, 1, True),  # a far store: 1 ms of requests against 8 ms of commit
        (True, 0.009, 0.008, 9, False),  # it has grown to its commit's cost
        (False, 0.001, 0.008, 1, False),  # nobody waits: commit now
        (True, 0.001, 0.0002, 1, False),  # a near store: commits as before, a turn at a time
        (True, GROW_MAX, 10.0, 20, False),  # a commit that hung once grows no batch past this
        (True, 0.0, 10.0, GROW_TURNS, False),  # turns that took no time end too
        (True, 0.0, 0.0, 0, False),  # no commit yet
    ],
)
def test_a_batch_grows_only_while_its_commit_costs_more(
    waiting: bool, work: float, last_commit: float, turns: int, grows: bool
) -> None:
    assert batch_grows(waiting, work, last_commit, turns) is grows
