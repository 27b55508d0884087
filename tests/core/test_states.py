"""The task state machine, edge by edge, as DESIGN.md draws it."""

from __future__ import annotations

import itertools

import pytest

from colibri.core.errors import ColibriError, IllegalTransition
from colibri.core.states import ENDED, OPEN, OUTCOMES, TRANSITIONS, State, check, is_legal

P, R, D, F, X, C = (
    State.PENDING,
    State.RUNNING,
    State.DONE,
    State.FAILED,
    State.CANCELLED,
    State.CLOSED,
)

#   pending → running → done → closed
#      │         ├→ failed → closed
#      └─────────┴→ cancelled → closed
DRAWN = {
    (P, R),
    (R, D),
    (D, C),
    (R, F),
    (F, C),
    (P, X),
    (R, X),
    (X, C),
}
#: The one documented edge beyond the drawing: a requeue when attempts are left.
REQUEUE = (R, P)
LEGAL = DRAWN | {REQUEUE}
ALL_PAIRS = list(itertools.product(State, State))


def test_the_states_are_exactly_the_six_of_the_design() -> None:
    assert {s.value for s in State} == {
        "pending",
        "running",
        "done",
        "failed",
        "cancelled",
        "closed",
    }
    assert set(TRANSITIONS) == set(State)


def test_the_table_is_the_drawing_plus_requeue() -> None:
    table = {(a, b) for a, targets in TRANSITIONS.items() for b in targets}
    assert table == LEGAL


@pytest.mark.parametrize(("current", "wanted"), sorted(LEGAL), ids=lambda s: str(s))
def test_legal_edges_are_accepted(current: State, wanted: State) -> None:
    assert is_legal(current, wanted)
    check("t1", current, wanted)  # does not raise


def test_running_can_be_requeued_to_pending() -> None:
    assert is_legal(State.RUNNING, State.PENDING)
    check("t1", State.RUNNING, State.PENDING)


ILLEGAL = sorted(pair for pair in ALL_PAIRS if pair not in LEGAL)


@pytest.mark.parametrize(("current", "wanted"), ILLEGAL, ids=lambda s: str(s))
def test_illegal_edges_raise_illegal_transition(current: State, wanted: State) -> None:
    assert not is_legal(current, wanted)
    with pytest.raises(IllegalTransition) as caught:
        check("t-42", current, wanted)
    err = caught.value
    assert isinstance(err, ColibriError)
    assert err.code == "illegal_transition"
    assert err.to_wire()["code"] == "illegal_transition"
    assert "t-42" in err.message
    assert current.value in err.message and wanted.value in err.message


def test_no_state_may_stay_where_it_is() -> None:
    for state in State:
        assert not is_legal(state, state)


def test_closed_is_absorbing() -> None:
    assert TRANSITIONS[State.CLOSED] == frozenset()
    for wanted in State:
        with pytest.raises(IllegalTransition):
            check("t1", State.CLOSED, wanted)


def test_outcomes_lead_only_to_closed() -> None:
    for outcome in (D, F, X):
        assert TRANSITIONS[outcome] == frozenset({C})


def test_every_state_reaches_closed() -> None:
    for start in State:
        seen = {start}
        frontier = [start]
        while frontier:
            for nxt in TRANSITIONS[frontier.pop()]:
                if nxt not in seen:
                    seen.add(nxt)
                    frontier.append(nxt)
        assert State.CLOSED in seen


def test_named_groups() -> None:
    assert OUTCOMES == {D, F, X}
    assert OPEN == {P, R}
    assert ENDED == {D, F, X, C}
    # An ended task never goes back to an open state.
    for ended, opened in itertools.product(ENDED, OPEN):
        assert not is_legal(ended, opened)
