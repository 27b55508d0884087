"""The SQL of both stores: a statement both dialects write alike has one home, common.sql."""

from __future__ import annotations

from colibri.store import sql


def _alike(sqlite: str, postgresql: str) -> bool:
    return " ".join(sqlite.split()) == " ".join(postgresql.replace("%s", "?").split())


def test_no_statement_is_written_twice_in_the_two_dialects() -> None:
    shared = sql._blocks("common")
    own = {dialect: sql._blocks(dialect) for dialect in ("sqlite", "postgresql")}
    twice = [
        name
        for name in own["sqlite"].keys() & own["postgresql"].keys()
        if not name.startswith("migration_")
        and _alike(own["sqlite"][name], own["postgresql"][name])
    ]
    assert twice == [], f"the same in both dialects: move them to common.sql: {twice}"
    assert shared and not shared.keys() & (own["sqlite"].keys() | own["postgresql"].keys())


def test_both_dialects_load_the_shared_statements_with_their_placeholders() -> None:
    sqlite, postgresql = sql.load("sqlite"), sql.load("postgresql")
    assert sqlite["get_token"] == "SELECT * FROM tokens WHERE id = ?;"
    assert postgresql["get_token"] == "SELECT * FROM tokens WHERE id = %s;"
