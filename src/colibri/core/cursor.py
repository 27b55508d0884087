"""Where a reader of the ledger stands: the last ``seq`` it has read of each tenant.

Each tenant's ledger is numbered on its own — 1, 2, 3 … with no gap and no number used twice —
so that daemons serving different tenants number their rows without waiting for each other,
and a tenant's numbers say nothing of another's volume. A row is known by ``(tenant, seq)``.

A cursor is written ``acme:55,default:120`` (tenants in name order; a tenant not named is read
from its first row; ``""`` is the start of every tenant's ledger), and ``end`` means "from
now". Names never hold a comma, and the seq is after the last colon, so the text parses back
whatever the names. A reader goes on from the ``next`` of its last page, or moves its cursor
past each row it is sent (``advance``); either way it never skips a row nor reads one twice.

Over several tenants, rows come merged: each tenant's in ``seq`` order, the tenants' rows
interleaved by their ``at`` (ties by tenant), as ``merged`` does.
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable, Mapping
from typing import Protocol, TypeVar

from colibri.core.errors import BadRequest, shown

#: The cursor that means "from now on": the next page starts after every row there is.
END = "end"
#: What the ledger's position was before it was per tenant; said to a client that sends one.
OLD_FORM = (
    "the ledger's position is per tenant now: send `after` as the text a reply's `next` gave "
    '(such as "default:120"; "" for the start, "end" for now), not the number {value} — '
    "this client speaks an older protocol: upgrade it"
)

Cursor = dict[str, int]


class Row(Protocol):
    """What the merge reads of a ledger row."""

    @property
    def tenant(self) -> str: ...
    @property
    def seq(self) -> int: ...
    @property
    def at(self) -> str: ...


R = TypeVar("R", bound=Row)


def parse(text: str) -> Cursor:
    """The cursor ``text`` writes (``END`` is the caller's to handle); BadRequest naming what is
    wrong and how it should read."""
    cursor: Cursor = {}
    if not text:
        return cursor
    for part in text.split(","):
        tenant, colon, number = part.rpartition(":")
        if not colon or not tenant or not number.isascii() or not number.isdigit():
            raise BadRequest(
                f"ledger position {shown(text, 80)}: each part is TENANT:SEQ, parts joined by "
                'commas ("default:120" or "acme:5,default:120"; "" for the start)'
            )
        seq = int(number)
        if seq >= 2**63 or tenant in cursor:
            why = "past the last seq there can be" if seq >= 2**63 else "names it twice"
            raise BadRequest(f"ledger position {shown(text, 80)}: {tenant} {why}")
        cursor[tenant] = seq
    return cursor


def render(cursor: Mapping[str, int]) -> str:
    """The text of ``cursor``; tenants at 0 are left out (they read from the start anyway)."""
    return ",".join(f"{tenant}:{seq}" for tenant, seq in sorted(cursor.items()) if seq)


def advance(cursor: Cursor, rows: Iterable[Row]) -> Cursor:
    """``cursor`` moved past ``rows`` (in place, and returned)."""
    for row in rows:
        if row.seq > cursor.get(row.tenant, 0):
            cursor[row.tenant] = row.seq
    return cursor


def unread(cursor: Mapping[str, int], row: Row) -> bool:
    """Whether ``row`` lies beyond ``cursor``: not read yet."""
    return row.seq > cursor.get(row.tenant, 0)


def merged(streams: Iterable[list[R]], limit: int) -> list[R]:
    """The first ``limit`` rows of several tenants' rows, each list one tenant's in ``seq``
    order: interleaved by ``at`` (then tenant), each list's order kept whatever its ``at``s
    (a clock set back never reorders a tenant's rows, so a cursor never passes one over)."""
    lists = [rows for rows in streams if rows]
    if len(lists) == 1:
        return lists[0][:limit]
    out: list[R] = []
    for row in heapq.merge(*lists, key=lambda r: (r.at, r.tenant)):
        out.append(row)
        if len(out) >= limit:
            break
    return out
