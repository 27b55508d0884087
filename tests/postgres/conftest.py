"""A fresh PostgreSQL board (a schema of its own) per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.store.conftest import pg_schema


@pytest.fixture
def board() -> Iterator[str]:
    """The connection string of an empty board, dropped after the test."""
    dsn, drop = pg_schema()
    try:
        yield dsn
    finally:
        drop()
