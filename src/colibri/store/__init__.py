"""The board's durable storage: one ``Store`` protocol; SQLite and PostgreSQL implementations."""

from __future__ import annotations

from colibri.core.leases import is_postgres
from colibri.store.base import BatchRefused, Store, StoreConflict
from colibri.store.task_query import TaskFilter, named_task

__all__ = ["BatchRefused", "Store", "StoreConflict", "TaskFilter", "named_task", "open_store"]


def open_store(location: str, *, durability: str = "full", lease_ttl: float | None = None) -> Store:
    """Open (creating and migrating if needed) the store at a file path, or on the PostgreSQL
    database a ``postgresql://`` connection string names — for a daemon holding a lease of
    ``lease_ttl`` seconds, with its waits bounded by it (``PostgresStore._bound``)."""
    if is_postgres(location):
        from colibri.store.postgres import PostgresStore

        return PostgresStore(location, durability=durability, lease_ttl=lease_ttl)
    from colibri.store.sqlite import SqliteStore

    return SqliteStore(location, durability=durability)
