"""Backends for the store contract suite: one fixture per backend.

A backend fixture yields a ``Backend``: one fresh board plus how to open stores on it (several
at once, to check what a second connection sees) and how to read a table directly, for the
few facts the ``Store`` protocol has no reader for. To add a backend, write one fixture and
decorate it with ``@backend_fixture``; every contract test then runs against it too (a backend
that cannot run here, a database server that is not configured, skips in its fixture).

Every store a ``Backend`` opens is a ``RecordingStore``: the real store behind a proxy that
notes the name of each ``Store`` method called, then calls it. ``test_every_method.py`` reads
those names to check that the suite calls every method of the protocol. The proxy refuses what
is not in the protocol, so a contract test cannot lean on one backend's internals.
"""

from __future__ import annotations

import inspect
import os
import sqlite3
from collections.abc import Callable, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any, cast

import pytest

from colibri.store import Store
from colibri.store.sqlite import SqliteStore

#: The methods of the ``Store`` protocol, and its attributes.
STORE_METHODS = frozenset(
    name
    for name, value in vars(Store).items()
    if inspect.isfunction(value) and not name.startswith("_")
)
STORE_ATTRIBUTES = frozenset(Store.__annotations__)
#: The file each newly called method name is appended to, when the suite is run to find out
#: which it calls (not a ``COLIBRI_`` name: the suite clears those for every test).
CALLS_FILE_VARIABLE = "STORE_CONTRACT_CALLS"
_called: set[str] = set()


def _record(name: str) -> None:
    if name in _called:
        return
    _called.add(name)
    path = os.environ.get(CALLS_FILE_VARIABLE)
    if path:
        with open(path, "a", encoding="utf-8") as calls:
            calls.write(name + "\n")


class RecordingStore:
    """A real store, its ``Store`` methods recorded by name as they are called."""

    def __init__(self, store: Store) -> None:
        self._store = store

    def __getattr__(self, name: str) -> Any:
        if name in STORE_ATTRIBUTES:
            return getattr(self._store, name)
        if name not in STORE_METHODS:
            raise AttributeError(f"{name} is not part of the Store protocol")
        method = getattr(self._store, name)

        def recorded(*args: Any, **kwargs: Any) -> Any:
            _record(name)
            return method(*args, **kwargs)

        return recorded


class Backend:
    def __init__(
        self,
        name: str,
        location: str,
        opener: Callable[[str], Store],
        query: Callable[[str, tuple[Any, ...]], list[tuple[Any, ...]]],
    ) -> None:
        self.name = name
        #: What ``Store.location`` says for a store of this board.
        self.location = location
        self._opener = opener
        self._query = query
        #: The stores opened and not yet closed: the proxy a test uses, and the store itself.
        self._opened: list[tuple[Store, Store]] = []

    def open(self, durability: str = "full") -> Store:
        """A new store (a new connection) on this backend's board; closed at teardown."""
        real = self._opener(durability)
        store = cast(Store, RecordingStore(real))
        self._opened.append((store, real))
        return store

    def close(self, store: Store) -> None:
        """Close one store before teardown does (through the proxy: a call of the suite)."""
        self._opened = [(proxy, real) for proxy, real in self._opened if proxy is not store]
        store.close()

    def query(self, text: str, *args: Any) -> list[tuple[Any, ...]]:
        """Read committed rows through a connection of its own."""
        return self._query(text, args)

    def close_all(self) -> None:
        """Teardown: close what is still open, past the proxy (teardown is no contract test)."""
        while self._opened:
            self._opened.pop()[1].close()


#: The names of the backend fixtures, each a parameter of ``backend``.
BACKENDS: list[str] = []


def backend_fixture(factory: Callable[..., Iterator[Backend]]) -> Any:
    """Make ``factory`` a fixture and a backend every contract test runs against."""
    BACKENDS.append(factory.__name__)
    return pytest.fixture(factory)


@backend_fixture
def sqlite(tmp_path: Path) -> Iterator[Backend]:
    path = str(tmp_path / "colibri.sqlite")

    def query(text: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        with closing(sqlite3.connect(path)) as conn:
            return [tuple(row) for row in conn.execute(text, args)]

    backend = Backend(
        "sqlite", path, lambda durability: SqliteStore(path, durability=durability), query
    )
    yield backend
    backend.close_all()


#: The PostgreSQL server the suite uses: ``COLIBRI_TEST_PG``, else this machine's default.
PG_DSN = os.environ.get("COLIBRI_TEST_PG") or "postgresql://postgres@127.0.0.1:5432/test"
#: Read here, at collection: every test's environment is cleared of COLIBRI_* variables.
PG_REQUIRED = bool(os.environ.get("COLIBRI_TEST_PG_REQUIRED"))


def pg_schema(dsn: str = PG_DSN) -> tuple[str, Callable[[], None]]:
    """A fresh schema on the test server: the DSN that puts a board there, and its removal.

    Skips (one line: how to enable) when no server answers — unless
    ``COLIBRI_TEST_PG_REQUIRED`` is set (``.ci/run`` sets it), where they must run and fail."""
    import uuid

    try:
        import psycopg
    except ImportError:
        pytest.skip("psycopg is not installed: pip install 'colibri-board[postgresql]'")
    try:
        admin = psycopg.connect(dsn, autocommit=True, connect_timeout=3)
        admin.close()
    except psycopg.Error as exc:
        if PG_REQUIRED:
            raise
        pytest.skip(f"no PostgreSQL at {dsn} ({str(exc).strip().splitlines()[0]}); set "
                    "COLIBRI_TEST_PG=postgresql://… to run these tests")  # fmt: skip
    from tests.leaks import schema_prefix

    # Named with the run's id: what a run leaves is found by name, never another run's.
    name = schema_prefix() + uuid.uuid4().hex[:16]
    with psycopg.connect(dsn, autocommit=True) as admin:
        admin.execute(f"CREATE SCHEMA {name}")
    separator = "&" if "?" in dsn else "?"

    def drop() -> None:
        with psycopg.connect(dsn, autocommit=True) as admin:
            admin.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")

    return f"{dsn}{separator}options=-csearch_path%3D{name}", drop


#: The role the suite's stores and daemons connect as, held to row-level security (made once,
#: never dropped: roles belong to the server, not to a schema). It logs in without a password,
#: as the suite's server trusts its users.
PG_APP_ROLE = "colibri_test_app"


def as_app_role(dsn: str) -> str:
    """The board at ``dsn`` (a fresh schema, connected to as its owner) granted to
    ``PG_APP_ROLE`` by ``colibri hive grant``'s own function; the DSN that connects as it."""
    from urllib.parse import urlsplit, urlunsplit

    import psycopg

    from colibri.store.postgres import grant_role

    with psycopg.connect(dsn, autocommit=True) as admin:
        try:
            admin.execute(f"CREATE ROLE {PG_APP_ROLE} LOGIN")
        except (psycopg.errors.DuplicateObject, psycopg.errors.UniqueViolation):
            pass  # made before, or by another worker at the same moment
    grant_role(dsn, PG_APP_ROLE)
    parts = urlsplit(dsn)
    host = parts.netloc.rpartition("@")[2]
    return urlunsplit(parts._replace(netloc=f"{PG_APP_ROLE}@{host}"))


@backend_fixture
def postgresql() -> Iterator[Backend]:
    from colibri.store.postgres import PostgresStore, shown_location

    owner_dsn, drop = pg_schema()
    # Every contract test runs as a role that row-level security binds (the superuser that
    # made the board is not bound by it: the direct reads of ``query`` see every row).
    dsn = as_app_role(owner_dsn)

    def query(text: str, args: tuple[Any, ...]) -> list[tuple[Any, ...]]:
        import psycopg

        with psycopg.connect(owner_dsn) as conn:
            return [tuple(row) for row in conn.execute(text.replace("?", "%s"), args)]

    backend = Backend(
        "postgresql", shown_location(dsn),
        lambda durability: PostgresStore(dsn, durability=durability), query,
    )  # fmt: skip
    try:
        yield backend
    finally:
        backend.close_all()
        drop()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> Backend:
    return cast(Backend, request.getfixturevalue(request.param))


@pytest.fixture
def store(backend: Backend) -> Store:
    """A store on a fresh board; closed at teardown."""
    return backend.open()
