"""The PostgreSQL store's ledger numbering: each tenant's rows of a sending in one statement,
numbered from the tenant's row of ``ledger_heads`` (``unit.py`` says when a batch sends)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import msgspec

from colibri.core.model import LedgerEntry
from colibri.store.postgres.schema import _Q
from colibri.store.rows import LEDGER_COLUMNS

if TYPE_CHECKING:
    import psycopg

#: The PostgreSQL type of each ledger column but ``tenant`` (one per statement, below).
_LEDGER_TYPES = {"epoch": "bigint", "uid": "bigint", "pid": "bigint", "cost": "json"}
_SENT = [c for c in LEDGER_COLUMNS if c != "tenant"]
#: A tenant's rows of one sending, in one statement: its head moved past them (the row kept
#: locked until the batch ends) and the rows numbered after where it was, sent as one JSON
#: array of the entries themselves (encoded and parsed in C; the cost's text kept as it was
#: encoded, as ``rows.encode_cost`` writes it); the new head is returned. One update of the
#: head a sending, not a look-up a row (the head is one row updated by every batch of its
#: tenant: its old versions pile up until PostgreSQL prunes them, and each look-up would walk
#: them).
INSERT_LEDGER = (
    "WITH head AS (" + _Q["ledger_take"].rstrip().rstrip(";") + "), "
    f"rows AS (INSERT INTO ledger (seq, tenant, {', '.join(_SENT)}) "
    f"SELECT head.seq - %(n)s + r.n, %(tenant)s, "
    + ", ".join(f"r.{c}::text" if c == "cost" else f"r.{c}" for c in _SENT)
    + " "
    "FROM head, ROWS FROM (json_to_recordset(%(rows)s::json) AS ("
    + ", ".join(f"{c} {_LEDGER_TYPES.get(c, 'text')}" for c in _SENT)
    + f")) WITH ORDINALITY AS r({', '.join(_SENT)}, n)) SELECT seq FROM head"
).encode()
_rows_json = msgspec.json.Encoder().encode


def by_tenant(entries: list[LedgerEntry]) -> dict[str, dict[str, Any]]:
    """The parameters of ``INSERT_LEDGER`` for each tenant of the batch's ledger rows,
    in name order: its name, its count, and its rows."""
    grouped: dict[str, list[LedgerEntry]] = {}
    for entry in entries:
        grouped.setdefault(entry.tenant, []).append(entry)
    return {
        tenant: {"tenant": tenant, "n": len(rows), "rows": _rows_json(rows).decode()}
        for tenant, rows in sorted(grouped.items())
    }


def numbered(
    entries: list[LedgerEntry],
    by_tenant: dict[str, dict[str, Any]],
    heads: list[psycopg.Cursor[dict[str, Any]]],
) -> None:
    """Set each entry's ``seq`` from its tenant's head as the sending left it."""
    top = {}
    for (tenant, columns), cursor in zip(by_tenant.items(), heads, strict=True):
        found = cursor.fetchone()
        assert found is not None
        top[tenant] = int(found["seq"]) - columns["n"]
    for entry in entries:
        top[entry.tenant] += 1
        entry.seq = top[entry.tenant]
