"""A fresh PostgreSQL board (a schema of its own) per test."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.postgres.cluster import PrivateServer, unavailable
from tests.postgres.hive import Relay, relayed
from tests.store.conftest import PG_REQUIRED, pg_schema


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


@pytest.fixture
def private_server() -> Iterator[PrivateServer]:
    """A PostgreSQL server of the test's own, running, which it may restart or stop."""
    why = unavailable()
    if why is not None:
        if PG_REQUIRED:
            raise AssertionError(f"a private PostgreSQL server is needed here: {why}")
        pytest.skip(f"{why}; install PostgreSQL's server to run this test")
    server = PrivateServer()
    try:
        server.start()
        yield server
    finally:
        server.close()
