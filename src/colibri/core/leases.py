"""The names a hive goes by: a PostgreSQL board's address, and its leases' rows.

A daemon serves a PostgreSQL board by its leases (``postgres.BoardLease``): one row for the
whole board (``board``), or one per tenant it serves (``tenant/<name>``). Where a tenant's
lease is read back, the whole board's stands for every tenant, ``*``. Pure: names in, names out.
"""

from __future__ import annotations

from dataclasses import dataclass

#: What a PostgreSQL board's connection string starts with (any other location is a file).
SCHEMES = ("postgresql://", "postgres://")
#: The lease row of a daemon serving the whole board.
BOARD_LEASE = "board"
_TENANT_PREFIX = "tenant/"


def is_postgres(location: str) -> bool:
    """Whether ``location`` names a PostgreSQL board (``postgresql://…``), not a file."""
    return location.startswith(SCHEMES)


def lease_name(tenant: str) -> str:
    """The lease row of one tenant."""
    return _TENANT_PREFIX + tenant


def lease_names(tenants: tuple[str, ...]) -> list[str]:
    """The lease rows a daemon serving ``tenants`` holds: one per tenant, or the whole board's."""
    return [lease_name(t) for t in tenants] or [BOARD_LEASE]


def is_tenant_lease(name: str) -> bool:
    """Whether the lease row ``name`` is one tenant's (not the whole board's)."""
    return name.startswith(_TENANT_PREFIX)


def lease_tenant(name: str) -> str:
    """What the lease row ``name`` serves: its tenant, or ``*`` for the whole board's."""
    return "*" if name == BOARD_LEASE else name.removeprefix(_TENANT_PREFIX)


@dataclass(frozen=True, slots=True)
class Survey:
    """The board's leases and daemons as a sharing daemon plans by (``core.sharing``)."""

    #: Every tenant known (the board's ``tenants``, and ``default``).
    tenants: set[str]
    #: tenant → the daemon whose live lease holds it ("*": a live whole-board lease's tenant).
    owners: dict[str, str]
    #: tenant → the daemon it is to be handed to (``hive move``).
    handovers: dict[str, str]
    #: The live sharing daemons.
    sharing: set[str]
    #: Tenants live daemons started with ``--tenants`` serve or stand by for: not shared out.
    reserved: set[str]
