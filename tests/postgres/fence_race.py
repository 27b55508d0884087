"""Writes racing lease takeovers: the fence must refuse every write of a stale epoch.

One writer commits ledger rows as fast as it can under the lease it took; a thief makes the
lease lapse (its expiry set to the past, as if the writer had stopped renewing) and takes it,
again and again, writing a marker row after each takeover; the writer takes the lease back
whenever it can. In the ledger's order, no row of an epoch may follow the marker of a later
epoch: a write that committed after the takeover under the old epoch would. Shared by
``test_failover.py`` (short) and ``bench/chaos.py --only F1`` (10,000 writes).
"""

from __future__ import annotations

import threading
import time
from typing import Any

from colibri.core.errors import LeaseLost
from colibri.core.model import LedgerEntry
from colibri.store.postgres import BoardLease, PostgresStore

AT = "2026-01-01T00:00:00.000Z"


def writes_racing_takeovers(
    board: str, *, writes: int, takeovers: int, give_up_s: float = 60.0, pause: float = 0.02
) -> dict[str, Any]:
    """Race until the writer has committed ``writes`` rows and the thief has taken the lease
    ``takeovers`` times (or ``give_up_s`` passed); the figures, ``stale`` the rows out of
    order (0 when the fence held)."""
    import psycopg

    writer_store = PostgresStore(board)
    marker_store = PostgresStore(board)
    stop = threading.Event()
    refused = written = 0
    failure: list[BaseException] = []

    def write() -> None:
        nonlocal refused, written
        lease = BoardLease(board, ttl=30)
        try:
            while not stop.is_set():
                if not lease.take():
                    time.sleep(0.001)
                    continue
                writer_store.fence = lease.fence
                while not stop.is_set():
                    try:
                        entry = LedgerEntry(at=AT, to_state="x", epoch=lease.epoch, reason="write")
                        writer_store.append_ledger(entry)
                        writer_store.commit()
                        written += 1
                    except LeaseLost:
                        refused += 1
                        writer_store.rollback()
                        break
        except BaseException as exc:  # shown by the caller, not lost in the thread
            failure.append(exc)
        finally:
            lease.close()

    thief = BoardLease(board, ttl=30)
    writer = threading.Thread(target=write)
    started = time.monotonic()
    taken = 0
    writer.start()
    try:
        with psycopg.connect(board, autocommit=True) as admin:
            give_up = started + give_up_s
            while (taken < takeovers or written < writes) and time.monotonic() < give_up:
                if failure:
                    break
                time.sleep(pause)
                admin.execute("UPDATE leases SET expires_at = now() - interval '1 ms'")
                if thief.take():
                    taken += 1
                    entry = LedgerEntry(at=AT, to_state="x", epoch=thief.epoch, reason="marker")
                    marker_store.append_ledger(entry)
                    marker_store.commit()
                    admin.execute("UPDATE leases SET expires_at = now() - interval '1 ms'")
    finally:
        stop.set()
        writer.join(30)
        rows = marker_store.ledger({}, 10_000_000)
        thief.close()
        writer_store.close()
        marker_store.close()
    if failure:
        raise failure[0]
    stale, newest = 0, 0
    for row in rows:
        if row.reason == "marker":
            newest = max(newest, row.epoch)
        elif row.epoch <= newest:
            stale += 1
    return {
        "writes": sum(1 for r in rows if r.reason == "write"),
        "markers": sum(1 for r in rows if r.reason == "marker"),
        "takeovers": taken,
        "refused_lease_lost": refused,
        "stale": stale,
        "epochs": max((r.epoch for r in rows), default=0),
        "seconds": round(time.monotonic() - started, 1),
    }
