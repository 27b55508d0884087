"""Two tenants' work interleaved over a pool of connections to one board, each transaction
naming its tenant (never the connection), as the role ``colibri hive grant`` makes: S4's
"0 cross-tenant reads or writes", checked from the board afterwards. The suite runs it small
(tests/postgres/test_rls.py); ``bench/chaos.py --only S4`` at the plan's size."""

from __future__ import annotations

import time
from typing import Any

import psycopg

from colibri.store.postgres import PostgresStore
from tests.store.values import entry_for, make_task

TENANTS = ("acme", "beta")


def tenants_interleaved(
    app_board: str, owner_board: str, *, operations: int, connections: int = 4
) -> dict[str, Any]:
    """``operations`` store operations, alternating between the two tenants and rotating over
    ``connections`` stores (each serves both tenants in turn): three in five submit a task, one
    reads a task of its own and tries the other tenant's newest by its id, one reads the ledger.
    Counts what crossed: a read that returned another tenant's row, a task or ledger row
    written under the wrong tenant, a gap in the ledger's seq."""
    stores = [PostgresStore(app_board) for _ in range(connections)]
    mine: dict[str, list[str]] = {t: [] for t in TENANTS}
    crossed_reads = misses = ledger_reads = 0
    started = time.monotonic()
    try:
        for n in range(operations):
            tenant, other = TENANTS[n % 2], TENANTS[(n + 1) % 2]
            store = stores[n % connections]
            store.tenants = tenant
            if n % 5 < 3 or not mine[tenant]:
                task = make_task(f"01a2-{n:07d}-{tenant}", tenant=tenant, text=f"op {n}")
                store.insert_task(task, entry_for(task))
                store.commit()
                mine[tenant].append(task.id)
            elif n % 5 == 3:
                if mine[other] and store.get_task(mine[other][-1]) is not None:
                    crossed_reads += 1
                if store.get_task(mine[tenant][-1]) is None:
                    misses += 1
            else:
                # The last 100 rows of the ledger as a whole board would read them: its own
                # only (each tenant's seq its own, one row a task so far).
                written = max(len(mine["acme"]), len(mine["beta"]))
                rows = store.ledger(dict.fromkeys(TENANTS, max(0, written - 100)), 100)
                ledger_reads += len(rows)
                crossed_reads += sum(1 for e in rows if e.tenant != tenant)
    finally:
        for store in stores:
            store.close()
    seconds = time.monotonic() - started
    with psycopg.connect(owner_board) as admin:
        placed: dict[str, str] = dict(admin.execute("SELECT id, tenant FROM tasks").fetchall())
        ledger = admin.execute(
            "SELECT seq, task, tenant FROM ledger ORDER BY tenant, seq"
        ).fetchall()
    misplaced = sum(1 for t in TENANTS for i in mine[t] if placed.get(i) != t)
    misplaced += sum(1 for _, task, tenant in ledger if placed.get(task) != tenant)
    # Each tenant's rows numbered 1, 2, 3 …: any other seq is a gap (or a number taken twice).
    gaps = sum(
        1 for t in TENANTS
        for i, seq in enumerate(s for s, _, tenant in ledger if tenant == t) if seq != i + 1
    )  # fmt: skip
    return {
        "operations": operations,
        "connections": connections,
        "tasks": {t: len(mine[t]) for t in TENANTS},
        "ledger_rows": len(ledger),
        "ledger_rows_read": ledger_reads,
        "crossed_reads": crossed_reads,
        "own_task_missed": misses,
        "misplaced_writes": misplaced + (len(placed) - sum(len(v) for v in mine.values())),
        "ledger_gaps": gaps,
        "seconds": round(seconds, 2),
    }
