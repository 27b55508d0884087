"""How daemons that share a PostgreSQL board's tenants out among themselves (``run --share``)
divide them: a pure function of what every one of them reads from the board's leases, so that
each, planning alone, does its part of one division.

A tenant is *free* while no live lease holds it. Every sharing daemon serves between the floor
and the ceiling of (tenants shared) / (sharing daemons): one below the floor takes free tenants
up to it; one at the floor or above takes them up to the ceiling only while no other is below
the floor; one above the ceiling gives tenants back, and so does the most loaded (by count,
then id) while another is below the floor and it is above. Tenants a daemon serves by
``--tenants`` are not shared, nor those a live daemon started with them stands by for (a
sharing daemon holding one gives it back). A tenant marked to be handed to a live sharing daemon
(``hive move``) is given back by its owner and taken by that daemon alone, whatever the counts;
a daemon does not give back a tenant handed to it while it has another to give.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Plan:
    #: Free tenants to take, and tenants to give back (never both at once).
    take: tuple[str, ...] = ()
    give: tuple[str, ...] = ()


def plan(
    me: str,
    tenants: set[str],
    owners: dict[str, str],
    sharing: set[str],
    handovers: dict[str, str] | None = None,
    pinned: frozenset[str] = frozenset(),
    reserved: frozenset[str] = frozenset(),
) -> Plan:
    """What daemon ``me`` does now. ``tenants``: every tenant known; ``owners``: tenant → the
    daemon whose live lease holds it; ``sharing``: the live sharing daemons (``me`` among
    them); ``handovers``: tenant → the daemon it is to be handed to; ``pinned``: tenants handed
    to ``me``, given back last; ``reserved``: tenants a live daemon started with them serves or
    stands by for — never taken, and given back at once."""
    handovers = handovers or {}
    sharing = sharing | {me}
    held_reserved = sorted(t for t in reserved if owners.get(t) == me)
    if held_reserved:
        return Plan(give=tuple(held_reserved))
    pool = sorted(
        t for t in tenants | set(owners) if owners.get(t, me) in sharing and t not in reserved
    )
    counts = dict.fromkeys(sharing, 0)
    for tenant in pool:
        if tenant in owners:
            counts[owners[tenant]] += 1
    mine = [t for t in pool if owners.get(t) == me]
    low, high = len(pool) // len(sharing), -(-len(pool) // len(sharing))
    handed_away = [t for t in mine if handovers.get(t, me) != me and handovers[t] in sharing]
    if handed_away:
        return Plan(give=tuple(handed_away))
    free = [t for t in pool if t not in owners]
    handed_here = [t for t in free if handovers.get(t) == me]
    if handed_here:
        return Plan(take=tuple(handed_here))
    # A free tenant marked for another live daemon is that one's to take.
    free = [t for t in free if handovers.get(t, me) == me or handovers[t] not in sharing]
    below = any(count < low for daemon, count in counts.items() if daemon != me)
    givable = [t for t in mine if t not in pinned] + [t for t in mine if t in pinned]
    if len(mine) > high:
        return Plan(give=tuple(givable[: len(mine) - high]))
    most = max(counts, key=lambda daemon: (counts[daemon], daemon))
    if below and len(mine) > low and most == me:
        return Plan(give=(givable[0],))
    room = (low if below else high) - len(mine)
    return Plan(take=tuple(free[: max(0, room)]))
