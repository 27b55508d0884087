"""The PostgreSQL store: the same ``Store`` contract as SQLite, on a database server.

``--store postgresql://user@host/db`` (any libpq connection string; ``options=-csearch_path=S``
puts the board in schema ``S``). Its parts, each a module of this package:

- ``connection``: a connection that gives up on a silent server (``_connect``), and
  ``shown_location``, a connection string without its password;
- ``schema``: the board's tables, made or migrated (``SCHEMA_VERSION``, ``check_shape``);
- ``connected``: the store's one connection, bounded by the daemon's lease and made again
  after a loss (``StoreConnection``);
- ``unit``: the unit of work, a batch's writes held and sent together (``UnitOfWork``);
- ``commit``: how a batch ends — its commit, one whose answer was lost, its rollback;
- ``store``: ``PostgresStore``, the contract's methods as statements;
- ``lease``: ``BoardLease``, the leases by which a daemon serves the board or some tenants;
- ``admin``: what the command line does on a board no daemon need serve (``hive_list``,
  ``hand_over``, ``grant_role``).

psycopg is imported only inside the functions that use it: importing this package loads no
driver (the CLI starts fast, and says what to install when a command needs it).
"""

from __future__ import annotations

from colibri.core.leases import Survey, is_postgres
from colibri.store.postgres.admin import grant_role, hand_over, hive_list, lease_holder_of
from colibri.store.postgres.connection import (
    _NAME_TENANTS,
    LEAST_SILENCE,
    _connect,
    _first_line,
    shown_location,
)
from colibri.store.postgres.lease import TAKING_ROUND_TRIPS, BoardLease
from colibri.store.postgres.schema import (
    _BOARD_KEY,
    _COLUMNS,
    _MIGRATIONS,
    SCHEMA_VERSION,
    check_shape,
    live_lease,
)
from colibri.store.postgres.store import PostgresStore
from colibri.store.postgres.unit import _text

__all__ = [
    "LEAST_SILENCE",
    "SCHEMA_VERSION",
    "TAKING_ROUND_TRIPS",
    "_BOARD_KEY",
    "_COLUMNS",
    "_MIGRATIONS",
    "_NAME_TENANTS",
    "BoardLease",
    "PostgresStore",
    "Survey",
    "_connect",
    "_first_line",
    "_text",
    "check_shape",
    "grant_role",
    "hand_over",
    "hive_list",
    "is_postgres",
    "lease_holder_of",
    "live_lease",
    "shown_location",
]
