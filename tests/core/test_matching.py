"""Best-fit matching: the task-board rule, workspace affinity, pinning, min_score, explain."""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from colibri.core.matching import AgentIndex, AgentView, Shape, explain, pick_agent, score
from tests.properties import examples


def caps(*names: str) -> frozenset[str]:
    return frozenset(names)


def agent(
    name: str,
    *capabilities: str,
    free: int = 1,
    online: bool = True,
    workspace: str | None = None,
) -> AgentView:
    return AgentView(name, caps(*capabilities), free, online, workspace)


def index_of(agents: Iterable[AgentView]) -> AgentIndex:
    """An index holding the online agents, as the board keeps it."""
    index = AgentIndex()
    for a in agents:
        if a.online:
            index.add(a.name, a.capabilities, a.free, a.workspace)
    return index


def both(shape: Shape, agents: list[AgentView]) -> str | None:
    """The reference pick, after checking the index agrees with it."""
    expected = pick_agent(shape, agents)
    assert index_of(agents).pick(shape) == expected
    return expected


# --- the task-board rule ------------------------------------------------------------------------


def test_score_is_the_share_of_required_capabilities() -> None:
    assert score(caps("freebsd", "zfs"), caps("freebsd", "zfs", "linux")) == 1.0
    assert score(caps("freebsd", "zfs"), caps("freebsd")) == 0.5
    assert score(caps("freebsd", "zfs"), caps("linux")) == 0.0
    assert score(caps(), caps("linux")) == 1.0
    assert score(caps(), caps()) == 1.0


def test_higher_score_wins_freebsd_zfs_beats_freebsd_only() -> None:
    agents = [agent("a-bsd", "freebsd"), agent("b-bsd-zfs", "freebsd", "zfs")]
    assert both(Shape(caps("freebsd", "zfs")), agents) == "b-bsd-zfs"


def test_ties_go_to_the_name_that_sorts_first() -> None:
    agents = [agent("zeta", "freebsd"), agent("alpha", "freebsd"), agent("mid", "freebsd")]
    assert both(Shape(caps("freebsd")), agents) == "alpha"
    # A partial tie too: both have one of two.
    partial = [agent("y", "freebsd"), agent("x", "zfs")]
    assert both(Shape(caps("freebsd", "zfs")), partial) == "x"


def test_task_with_no_capabilities_matches_any_agent() -> None:
    agents = [agent("linux-1", "linux"), agent("bare")]
    assert both(Shape(caps()), agents) == "bare"
    assert both(Shape(caps()), [agent("linux-1", "linux")]) == "linux-1"


def test_offline_agents_are_skipped() -> None:
    agents = [agent("a", "freebsd", "zfs", online=False), agent("b", "freebsd")]
    assert both(Shape(caps("freebsd", "zfs")), agents) == "b"
    assert both(Shape(caps("freebsd")), [agent("a", "freebsd", online=False)]) is None


def test_agents_without_a_free_slot_are_skipped() -> None:
    agents = [agent("a", "freebsd", "zfs", free=0), agent("b", "freebsd", free=2)]
    assert both(Shape(caps("freebsd", "zfs")), agents) == "b"
    assert both(Shape(caps()), [agent("a", free=0)]) is None


def test_agents_with_no_capability_in_common_are_skipped() -> None:
    agents = [agent("a", "linux"), agent("b", "python")]
    assert both(Shape(caps("freebsd")), agents) is None
    assert both(Shape(caps("freebsd")), [*agents, agent("c", "freebsd", "linux")]) == "c"


# --- what Colibri adds: workspace, pinning, min_score -------------------------------------------


def test_workspace_affinity_keeps_a_task_to_that_workspaces_agents() -> None:
    agents = [
        agent("a", "freebsd", "zfs"),
        agent("b", "freebsd", workspace="build"),
        agent("c", "freebsd", "zfs", workspace="docs"),
    ]
    # "a" and "c" score higher, but only "b" is in the workspace.
    assert both(Shape(caps("freebsd", "zfs"), workspace="build"), agents) == "b"
    assert both(Shape(caps(), workspace="docs"), agents) == "c"
    assert both(Shape(caps("freebsd"), workspace="nowhere"), agents) is None
    # Without a workspace every agent is a candidate.
    assert both(Shape(caps("freebsd", "zfs")), agents) == "a"


def test_workspace_agent_still_needs_a_capability_in_common() -> None:
    agents = [agent("a", "linux", workspace="build")]
    assert both(Shape(caps("freebsd"), workspace="build"), agents) is None


def test_pinning_picks_only_the_named_agent() -> None:
    agents = [agent("a", "freebsd", "zfs"), agent("b")]
    # Pinned: capabilities, workspace and min_score no longer decide.
    shape = Shape(caps("freebsd", "zfs"), workspace="elsewhere", pin="b", min_score=1.0)
    assert both(shape, agents) == "b"


def test_pinned_agent_must_be_online_with_a_free_slot() -> None:
    assert both(Shape(caps(), pin="b"), [agent("a"), agent("b", free=0)]) is None
    assert both(Shape(caps(), pin="b"), [agent("a"), agent("b", online=False)]) is None
    assert both(Shape(caps(), pin="ghost"), [agent("a")]) is None


def test_min_score_one_requires_every_capability() -> None:
    agents = [agent("a", "freebsd"), agent("b", "zfs")]
    assert both(Shape(caps("freebsd", "zfs"), min_score=1.0), agents) is None
    full = [*agents, agent("c", "freebsd", "zfs")]
    assert both(Shape(caps("freebsd", "zfs"), min_score=1.0), full) == "c"


def test_partial_scores_below_min_score_are_refused() -> None:
    agents = [agent("a", "x", "y"), agent("b", "x")]
    required = caps("x", "y", "z")
    # Best partial is 2/3.
    assert both(Shape(required, min_score=0.5), agents) == "a"
    assert both(Shape(required, min_score=2 / 3), agents) == "a"
    assert both(Shape(required, min_score=0.7), agents) is None
    # Only "b" (1/3) in reach when "a" is busy.
    busy = [agent("a", "x", "y", free=0), agent("b", "x")]
    assert both(Shape(required, min_score=0.5), busy) is None
    assert both(Shape(required, min_score=0.3), busy) == "b"


def test_min_score_does_not_refuse_a_task_with_no_capabilities() -> None:
    assert both(Shape(caps(), min_score=1.0), [agent("a", "linux")]) == "a"


# --- the index keeps up with changes --------------------------------------------------------------


def test_index_follows_free_slots_and_removal() -> None:
    index = AgentIndex()
    index.add("a", caps("freebsd", "zfs"), 1, None)
    index.add("b", caps("freebsd"), 1, "build")
    shape = Shape(caps("freebsd", "zfs"))
    assert "a" in index and "ghost" not in index
    assert index.pick(shape) == "a"
    index.set_free("a", 0)
    assert index.free("a") == 0
    assert index.pick(shape) == "b"
    index.set_free("a", 2)
    assert index.pick(shape) == "a"
    index.remove("a")
    assert "a" not in index
    assert index.free("a") == 0
    assert index.pick(shape) == "b"
    index.remove("b")
    index.remove("b")  # removing twice is harmless
    assert index.pick(shape) is None
    assert not index.has_free()


def test_index_add_replaces_an_agent_that_re_registers() -> None:
    index = AgentIndex()
    index.add("a", caps("freebsd"), 1, "build")
    index.add("a", caps("linux"), 1, None)
    assert index.pick(Shape(caps("freebsd"))) is None
    assert index.pick(Shape(caps(), workspace="build")) is None
    assert index.pick(Shape(caps("linux"))) == "a"


# --- explain (colibri why) ----------------------------------------------------------------------


def reasons_of(shape: Shape, agents: list[AgentView]) -> dict[str, list[str]]:
    return {row.agent: row.reasons for row in explain(shape, agents)}


def test_explain_says_offline_and_no_free_slot() -> None:
    agents = [agent("off", "freebsd", online=False), agent("busy", "freebsd", free=0)]
    assert reasons_of(Shape(caps("freebsd")), agents) == {
        "off": ["offline"],
        "busy": ["no free slot"],
    }


def test_explain_says_not_in_workspace() -> None:
    reasons = reasons_of(Shape(caps("freebsd"), workspace="build"), [agent("a", "freebsd")])
    assert reasons == {"a": ["not in workspace build"]}


def test_explain_says_no_capability_in_common() -> None:
    rows = explain(Shape(caps("freebsd", "zfs")), [agent("a", "linux")])
    assert [(r.agent, r.score, r.missing, r.eligible, r.reasons) for r in rows] == [
        ("a", 0.0, ["freebsd", "zfs"], False, ["no capability in common"])
    ]


def test_explain_says_below_min_score() -> None:
    rows = explain(Shape(caps("freebsd", "zfs"), min_score=1.0), [agent("a", "freebsd")])
    assert rows[0].reasons == ["score 0.50 below min_score 1.00"]
    assert rows[0].missing == ["zfs"]
    assert rows[0].score == 0.5
    assert not rows[0].eligible


def test_explain_says_pinned_elsewhere() -> None:
    reasons = reasons_of(Shape(caps("freebsd"), pin="b"), [agent("a", "freebsd"), agent("b")])
    assert reasons == {"a": ["task is pinned to b"], "b": []}


def test_explain_lists_every_reason_that_applies() -> None:
    lone = agent("a", "linux", free=0, online=False)
    reasons = reasons_of(Shape(caps("freebsd"), workspace="build"), [lone])
    assert reasons == {
        "a": ["offline", "no free slot", "not in workspace build", "no capability in common"]
    }


def test_explain_orders_eligible_first_then_best_score_then_name() -> None:
    agents = [
        agent("d", "freebsd", "zfs", online=False),
        agent("c", "freebsd"),
        agent("b", "freebsd", "zfs"),
        agent("a", "freebsd"),
        agent("e", "linux"),
    ]
    rows = explain(Shape(caps("freebsd", "zfs")), agents)
    assert [(r.agent, r.eligible) for r in rows] == [
        ("b", True),
        ("a", True),
        ("c", True),
        ("d", False),
        ("e", False),
    ]
    # The first eligible row is the agent the pick chooses.
    assert rows[0].agent == pick_agent(Shape(caps("freebsd", "zfs")), agents)


# --- property: the index equals the reference, and picks a best score ---------------------------

ALPHABET = ("a", "b", "c", "d")
NAMES = ("n0", "n1", "n2", "n3", "n4", "n5")
WORKSPACES = (None, "w1", "w2")
PINS = (None, *NAMES, "ghost")
MIN_SCORES = (0.0, 0.25, 1 / 3, 0.5, 2 / 3, 0.75, 1.0)
OPS = ("set_free", "remove", "add")
FREE = 3  # free slots 0-2
# Every value below is drawn as one integer and split into digits: one draw per agent, shape
# or operation keeps a few thousand examples fast, and shrinking towards 0 still means fewer
# capabilities, no workspace, no pin.
MASKS = 2 ** len(ALPHABET)


def digits(n: int, *radices: int) -> list[int]:
    out = []
    for radix in radices:
        n, d = divmod(n, radix)
        out.append(d)
    return out


def capabilities_of(mask: int) -> frozenset[str]:
    """A subset of the alphabet from a bit mask."""
    return frozenset(cap for bit, cap in enumerate(ALPHABET) if mask >> bit & 1)


AGENT_RADICES = (MASKS, FREE, 2, len(WORKSPACES))
SHAPE_RADICES = (MASKS, len(WORKSPACES), len(PINS), len(MIN_SCORES))
OP_RADICES = (len(OPS), len(NAMES), FREE)


def size(radices: tuple[int, ...]) -> int:
    return math.prod(radices)


@st.composite
def fleets(draw: st.DrawFn) -> list[AgentView]:
    """Up to six agents; names are dealt in a random order, unrelated to list order."""
    specs = draw(st.lists(st.integers(0, size(AGENT_RADICES) - 1), max_size=len(NAMES)))
    names = draw(st.sampled_from(NAME_ORDERS))
    fleet = []
    for name, spec in zip(names, specs, strict=False):
        mask, free, online, ws = digits(spec, *AGENT_RADICES)
        fleet.append(AgentView(name, capabilities_of(mask), free, bool(online), WORKSPACES[ws]))
    return fleet


NAME_ORDERS = list(itertools.permutations(NAMES))


def shape_of(n: int) -> Shape:
    mask, ws, pin, min_score = digits(n, *SHAPE_RADICES)
    return Shape(capabilities_of(mask), WORKSPACES[ws], PINS[pin], MIN_SCORES[min_score])


def op_of(n: int) -> tuple[str, str, int]:
    op, name, free = digits(n, *OP_RADICES)
    return OPS[op], NAMES[name], free


shapes = st.integers(0, size(SHAPE_RADICES) - 1).map(shape_of)
# Churn: (operation, agent name, free slots) applied to the index and to the reference fleet.
churn = st.lists(st.integers(0, size(OP_RADICES) - 1).map(op_of), max_size=8)


def eligible_scores(shape: Shape, agents: list[AgentView]) -> list[float]:
    """Scores of every agent the rule allows, straight from the design's wording."""
    result = []
    for a in agents:
        if not a.online or a.free <= 0:
            continue
        if shape.pin is not None:
            if a.name == shape.pin:
                result.append(1.0)
            continue
        if shape.workspace is not None and a.workspace != shape.workspace:
            continue
        s = score(shape.capabilities, a.capabilities)
        if s > 0.0 and s >= shape.min_score:
            result.append(s)
    return result


def check_pick(shape: Shape, agents: list[AgentView], index: AgentIndex) -> None:
    expected = pick_agent(shape, agents)
    assert index.pick(shape) == expected
    scores = eligible_scores(shape, agents)
    if expected is None:
        assert scores == []
        return
    chosen = next(a for a in agents if a.name == expected)
    best = max(scores)
    chosen_score = 1.0 if shape.pin is not None else score(shape.capabilities, chosen.capabilities)
    assert chosen_score == best
    # Ties go to the first name among the best.
    tied = [
        a.name
        for a in agents
        if a.online
        and a.free > 0
        and (shape.pin is None or a.name == shape.pin)
        and (shape.pin is not None or shape.workspace in (None, a.workspace))
        and (shape.pin is not None or score(shape.capabilities, a.capabilities) == best)
    ]
    assert expected == min(tied)
    # explain agrees: its first row is the chosen agent, and it is eligible.
    first = explain(shape, agents)[0]
    assert (first.agent, first.eligible) == (expected, True)


@pytest.mark.properties
@settings(max_examples=examples(2500), deadline=None)
@given(agents=fleets(), shape_list=st.lists(shapes, min_size=1, max_size=3), ops=churn)
def test_index_pick_equals_reference_pick(
    agents: list[AgentView], shape_list: list[Shape], ops: list[tuple[str, str, int]]
) -> None:
    index = index_of(agents)
    for shape in shape_list:
        check_pick(shape, agents, index)

    by_name = {a.name: a for a in agents}
    for op, name, free in ops:
        current = by_name.get(name)
        if op == "add":
            # (Re-)register: online with these slots; keep its capabilities if known.
            capabilities = current.capabilities if current else frozenset({"a"})
            workspace = current.workspace if current else None
            by_name[name] = AgentView(name, capabilities, free, True, workspace)
            index.add(name, capabilities, free, workspace)
        elif current is None or not current.online:
            continue
        elif op == "set_free":
            current.free = free
            index.set_free(name, free)
        else:
            current.online = False
            index.remove(name)
        fleet = list(by_name.values())
        for shape in shape_list:
            check_pick(shape, fleet, index)
