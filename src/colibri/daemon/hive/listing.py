"""The ``hive`` request: the daemons of a PostgreSQL board, as this daemon's last beat read
them (``BoardLease.beat``, every third of the lease's ttl, on its own thread): answering reads
no database on the loop, and the times are brought forward by how long ago that was."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from colibri.core import replies as r
from colibri.core.errors import NoHive
from colibri.core.leases import lease_tenant

if TYPE_CHECKING:
    from colibri.store.postgres import BoardLease

NO_HIVE = (
    "this daemon's board is SQLite, which one daemon serves alone: there is no hive (several "
    "daemons share a PostgreSQL board, docs/HIVE.md)"
)


def hive(lease: BoardLease | None) -> r.Hive:
    if lease is None:
        raise NoHive(NO_HIVE)
    age = max(0.0, time.monotonic() - lease.hive_read) if lease.hive_read else 0.0
    return r.Hive(daemons=[daemon(row, age, lease.owner) for row in lease.hive])


def daemon(row: dict[str, Any], age: float, this: str) -> r.HiveDaemon:
    left = row["lease_left_s"]
    left = None if left is None else float(left) - age
    beat_ago = float(row["beat_ago_s"]) + age
    role: Any
    if row["lease_epoch"] is not None and left is not None and left > 0:
        role = "serving"
    elif beat_ago > float(row["ttl"]):  # it beats every third of its ttl: silent, it is gone
        role = "gone"
    else:
        role = "sharing" if row["sharing"] else "standby"
    return r.HiveDaemon(
        id=str(row["id"]), role=role, address=row["address"], host=row["host"],
        pid=int(row["pid"]), root=row["root"], ttl=float(row["ttl"]),
        started_at=row["started_at"], beat_ago_s=round(beat_ago, 3), sharing=bool(row["sharing"]),
        agents=int(row["agents"]), leases=list(row["leases"]), lease_epoch=row["lease_epoch"],
        lease_left_s=None if left is None else round(left, 3),
        tenants=[lease_tenant(n) for n in row["leases"]], this=row["id"] == this,
    )  # fmt: skip
