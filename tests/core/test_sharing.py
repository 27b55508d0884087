"""Sharing a board's tenants out (``core.sharing.plan``): daemons each planning alone from the
same leases converge on a fair division, and keep it, whatever the order they plan in."""

from __future__ import annotations

import itertools
import random

import pytest

from colibri.core.sharing import Plan, plan


def settle(
    tenants: set[str],
    daemons: list[str],
    owners: dict[str, str],
    *,
    simultaneous: bool = False,
    handovers: dict[str, str] | None = None,
    seed: int = 0,
) -> tuple[dict[str, str], int]:
    """Rounds of every daemon planning and acting, until a round changes nothing: the owners
    then, and the rounds it took. ``simultaneous``: all plan from one view, then act in a random
    order (a tenant two daemons take goes to the first; gives always happen)."""
    owners = dict(owners)
    handovers = dict(handovers or {})
    pinned: dict[str, set[str]] = {d: set() for d in daemons}
    rng = random.Random(seed)
    for rounds in itertools.count(1):
        assert rounds < 100, f"no fair division after 100 rounds: {owners}"
        view = dict(owners)
        plans = {}
        order = daemons[:]
        rng.shuffle(order)
        for daemon in order:
            seen = view if simultaneous else owners
            plans[daemon] = plan(daemon, tenants, seen, set(daemons), handovers,
                                 frozenset(pinned[daemon]))  # fmt: skip
            if not simultaneous:
                _act(daemon, plans[daemon], owners, handovers, pinned)
        if simultaneous:
            for daemon in order:
                _act(daemon, plans[daemon], owners, handovers, pinned)
        if all(p == Plan() for p in plans.values()):
            return owners, rounds
    raise AssertionError("unreachable")


def _act(
    daemon: str,
    chosen: Plan,
    owners: dict[str, str],
    handovers: dict[str, str],
    pinned: dict[str, set[str]],
) -> None:
    for tenant in chosen.give:
        assert owners.get(tenant) == daemon, (daemon, chosen, owners)
        del owners[tenant]
        pinned[daemon].discard(tenant)
    for tenant in chosen.take:
        if tenant in owners:
            continue  # another took it first: a lease that is not free is not taken
        owners[tenant] = daemon
        if handovers.pop(tenant, None) == daemon:
            pinned[daemon].add(tenant)


def counts(owners: dict[str, str], daemons: list[str]) -> list[int]:
    return [sum(1 for o in owners.values() if o == d) for d in daemons]


@pytest.mark.parametrize("simultaneous", [False, True])
@pytest.mark.parametrize("n_daemons", [1, 2, 3, 5])
@pytest.mark.parametrize("n_tenants", [0, 1, 2, 3, 4, 6, 7, 13])
def test_daemons_starting_together_divide_the_tenants_fairly(
    n_tenants: int, n_daemons: int, simultaneous: bool
) -> None:
    tenants = {f"t{n:02d}" for n in range(n_tenants)}
    daemons = [f"d{n}" for n in range(n_daemons)]
    owners, _ = settle(tenants, daemons, {}, simultaneous=simultaneous, seed=n_tenants)
    assert set(owners) == tenants  # every tenant served
    shares = counts(owners, daemons)
    assert max(shares) - min(shares) <= 1, shares


@pytest.mark.parametrize("simultaneous", [False, True])
@pytest.mark.parametrize(("n_tenants", "n_daemons"), [(6, 3), (4, 3), (7, 4), (2, 3), (12, 5)])
def test_a_daemon_joining_gets_its_share_and_one_leaving_leaves_its_tenants_to_the_rest(
    n_tenants: int, n_daemons: int, simultaneous: bool
) -> None:
    tenants = {f"t{n:02d}" for n in range(n_tenants)}
    first = ["d0"]
    owners, _ = settle(tenants, first, {})
    assert counts(owners, first) == [n_tenants]
    daemons = [f"d{n}" for n in range(n_daemons)]
    owners, _ = settle(tenants, daemons, owners, simultaneous=simultaneous)
    shares = counts(owners, daemons)
    assert set(owners) == tenants and max(shares) - min(shares) <= 1, shares
    # d0 dies: its leases expire, and it is no longer among the live daemons.
    survivors = daemons[1:]
    left = {t: o for t, o in owners.items() if o != "d0"}
    moved = {t for t, o in owners.items() if o == "d0"}
    owners, _ = settle(tenants, survivors, left, simultaneous=simultaneous)
    shares = counts(owners, survivors)
    assert set(owners) == tenants and max(shares) - min(shares) <= 1, shares
    # Only the dead daemon's tenants moved, when the survivors were already fair.
    if max(counts(left, survivors)) - min(counts(left, survivors)) <= 1:
        assert {t for t in tenants if owners[t] != left.get(t, owners[t])} <= moved


def test_a_fair_division_is_kept_round_after_round() -> None:
    tenants = {f"t{n}" for n in range(7)}
    daemons = ["a", "b", "c"]
    owners, _ = settle(tenants, daemons, {})
    for daemon in daemons:
        assert plan(daemon, tenants, owners, set(daemons)) == Plan()


def test_tenants_served_by_daemons_that_do_not_share_are_left_to_them() -> None:
    tenants = {"acme", "beta", "gamma", "delta"}
    owners = {"acme": "pinned-daemon"}  # serves acme by --tenants: not a sharing daemon
    settled, _ = settle(tenants, ["a", "b"], owners)
    assert settled["acme"] == "pinned-daemon"
    assert sorted(counts(settled, ["a", "b"])) == [1, 2]
    assert plan("a", tenants, settled, {"a", "b"}) == Plan()


def test_a_tenant_handed_over_goes_to_that_daemon_and_stays_there() -> None:
    tenants = {f"t{n}" for n in range(4)}
    daemons = ["a", "b"]
    owners, _ = settle(tenants, daemons, {})
    moved = next(t for t, o in owners.items() if o == "a")
    # a gives it back; b takes it though b has its share already; b gives another back to
    # keep the division fair (never the one moved to it); a takes that.
    owners, _ = settle(tenants, daemons, owners, handovers={moved: "b"})
    assert owners[moved] == "b"
    assert counts(owners, daemons) == [2, 2]


def test_a_tenant_marked_for_a_daemon_that_is_gone_is_taken_as_any_free_one() -> None:
    tenants = {"t0", "t1"}
    owners, _ = settle(tenants, ["a"], {"t0": "a"}, handovers={"t1": "dead"})
    assert owners == {"t0": "a", "t1": "a"}


def test_a_free_tenant_marked_for_a_live_daemon_is_left_to_it() -> None:
    chosen = plan("a", {"t0", "t1"}, {}, {"a", "b"}, {"t0": "b"})
    assert "t0" not in chosen.take
    assert plan("b", {"t0", "t1"}, {}, {"a", "b"}, {"t0": "b"}) == Plan(take=("t0",))


def test_tenants_a_daemon_of_given_tenants_stands_by_for_are_never_taken_and_given_back() -> None:
    tenants = {"acme", "beta"}
    reserved = frozenset({"acme"})
    # Free, but its --tenants standby waits for it: not taken.
    assert plan("a", tenants, {}, {"a"}, reserved=reserved) == Plan(take=("beta",))
    # Held by a sharing daemon (taken before the standby came): given back at once.
    held = {"acme": "a", "beta": "a"}
    assert plan("a", tenants, held, {"a"}, reserved=reserved) == Plan(give=("acme",))
