"""The board's durable storage: one ``Store`` protocol, an SQLite implementation."""

from __future__ import annotations

from colibri.store.base import Store, StoreConflict, TaskFilter

__all__ = ["Store", "StoreConflict", "TaskFilter", "open_store"]


def open_store(location: str, *, durability: str = "full") -> Store:
    """Open (creating and migrating if needed) the store at a file path."""
    from colibri.store.sqlite import SqliteStore

    return SqliteStore(location, durability=durability)
