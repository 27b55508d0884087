"""A fresh PostgreSQL board (a schema of its own) per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.postgres.hive import Relay, relayed
from tests.store.conftest import pg_schema


@pytest.fixture
def board() -> Iterator[str]:
    """The connection string of an empty board, dropped after the test."""
    dsn, drop = pg_schema()
    try:
        yield dsn
    finally:
        drop()


@pytest.fixture
def relayed_board(board: str) -> Iterator[tuple[Relay, str]]:
    """A relay to the server, and the board's connection string through it."""
    relay, through = relayed(board)
    try:
        yield relay, through
    finally:
        relay.close()
