"""Backends for the store contract suite: one factory per backend name.

A ``Backend`` is one fresh board location plus how to open stores on it (several at once, to
check what a second connection sees) and how to read a table directly, for the few facts the
``Store`` protocol has no reader for. To add a backend, write a factory and add it to
``BACKENDS``; every contract test then runs against it too.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest

from colibri.store import Store
from colibri.store.sqlite import SqliteStore


class Backend:
    def __init__(
        self,
        name: str,
        opener: Callable[[str], Store],
        query: Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]],
    ) -> None:
        self.name = name
        self._opener = opener
        self._query = query
        self._opened: list[Store] = []

    def open(self, durability: str = "full") -> Store:
        """A new store (a new connection) on this backend's board; closed at teardown."""
        store = self._opener(durability)
        self._opened.append(store)
        return store

    def close(self, store: Store) -> None:
        """Close one store before teardown does."""
        self._opened.remove(store)
        store.close()

    def query(self, text: str, *args: Any) -> list[tuple[Any, ...]]:
        """Read committed rows through a connection of its own."""
        return self._query(text, args)

    def close_all(self) -> None:
        while self._opened:
            self._opened.pop().close()


def _sqlite_backend(tmp_path: Path) -> Backend:
    path = str(tmp_path / "colibri.sqlite")

    def close(self, store: Store) -> None:
        """Close one store before teardown does."""
        self._opened.remove(store)
        store.close()

    def query(text: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with closing(sqlite3.connect(path)) as conn:
            return [tuple(row) for row in conn.execute(text, args)]

    return Backend(
        "sqlite",
        lambda durability: SqliteStore(path, durability=durability),
        query,
    )


BACKENDS: dict[str, Callable[[Path], Backend]] = {"sqlite": _sqlite_backend}


@pytest.fixture(params=sorted(BACKENDS))
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    b = BACKENDS[request.param](tmp_path)
    yield b
    b.close_all()


@pytest.fixture
def store(backend: Backend) -> Store:
    """A store on a fresh board; closed at teardown."""
    return backend.open()
