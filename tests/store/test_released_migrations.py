"""A migration, once on main, is released: boards were made with it, and a board says only its
version, not which text of that version made it. So a released migration's text never changes
again; a change goes in a new migration. Some were changed before that rule: every text they
were released with before their last is kept as ``released/<dialect>/N.K-<commit>.sql`` (K: the
order they were released in, ``commit`` the first build that had it). The tests of the
migrations make boards with each of them, and with the store's own (the last).
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from colibri.store import sql

RELEASED_DIR = Path(__file__).parent / "released"

#: The first 16 hex digits of the SHA-256 of each migration's text as the store loads it. A
#: migration added is recorded here with it; a recorded one is never changed.
MIGRATIONS = {
    "postgresql": {
        1: "0cd1fa2c6f00665b",
        2: "151893a82214cf5c",
        3: "e56f79a6fe0bc470",
        4: "1e1d9acda68f49aa",
        5: "6c1b4c1dbcea4c70",
        6: "72695749d794aa89",
        7: "c96ffee9cbb56376",
        8: "edb7f2b918f00daf",
        9: "09b54b6a56264bdd",
        10: "f2b4853eb26851d4",
        11: "92f21f5fa6e8140c",
        12: "3b1c56234d94916e",
        13: "f403566f71fb1b2c",
        14: "c7d725516171f1d9",
        15: "c923b3e766923ae3",
    },
    "sqlite": {
        1: "99002eedcb5e8eb8",
        2: "63dd4bb80791dc7a",
        3: "77848991e26d054f",
        4: "dea0d85832fa5674",
        5: "edb7f2b918f00daf",
        6: "09b54b6a56264bdd",
        7: "f2b4853eb26851d4",
        8: "35604eb7d28385b1",
    },
}

#: Every text each migration was released with, oldest first (those of ``released/``, then the
#: store's own).
RELEASED = {
    "postgresql": {
        1: ["0cd1fa2c6f00665b"],
        2: ["151893a82214cf5c"],
        3: ["e56f79a6fe0bc470"],
        4: ["1e1d9acda68f49aa"],
        5: ["c5f16604da73fdd9", "6c1b4c1dbcea4c70"],
        6: ["9d1e96f7c78b2d50", "b175eb70bdd09cac", "72695749d794aa89"],
        7: ["c96ffee9cbb56376"],
        8: ["edb7f2b918f00daf"],
        9: ["09b54b6a56264bdd"],
        10: ["f2b4853eb26851d4"],
        11: ["92f21f5fa6e8140c"],
        12: ["3b1c56234d94916e"],
        13: ["f403566f71fb1b2c"],
        14: ["c7d725516171f1d9"],
        15: ["c923b3e766923ae3"],
    },
    "sqlite": {
        1: [
            "db0b2a3b2873eff8",
            "2078275f1238eb49",
            "6236516534ba16cb",
            "ad27e662e37f793b",
            "3ace8b5c886bb9d5",
            "99002eedcb5e8eb8",
        ],  # fmt: skip
        2: ["63dd4bb80791dc7a"],
        3: ["a2a957238e8f94de", "e71f0e7d0ecafc96", "77848991e26d054f"],
        4: ["f327405cb1ebe754", "dea0d85832fa5674"],
        5: ["edb7f2b918f00daf"],
        6: ["09b54b6a56264bdd"],
        7: ["f2b4853eb26851d4"],
        8: ["35604eb7d28385b1"],
    },
}


def digest(text: str) -> str:
    return hashlib.sha256(text.strip().encode()).hexdigest()[:16]


def migrations(dialect: str) -> dict[int, str]:
    """The store's migrations of ``dialect``, by number."""
    return {
        int(name.split("_")[1]): body
        for name, body in sql.load(dialect).items()
        if name.startswith("migration_")
    }


def released_texts(dialect: str) -> dict[int, list[str]]:
    """Every text each migration of ``dialect`` was released with, oldest first: those kept
    under ``released/``, then the store's own."""
    kept: dict[int, list[tuple[int, str]]] = {}
    for path in (RELEASED_DIR / dialect).glob("*.sql"):
        step, order = path.name.split("-")[0].split(".")
        kept.setdefault(int(step), []).append((int(order), path.read_text().strip()))
    return {
        n: [text for _, text in sorted(kept.get(n, []))] + [current]
        for n, current in sorted(migrations(dialect).items())
    }


@pytest.mark.parametrize("dialect", sorted(MIGRATIONS))
def test_a_released_migration_never_changes(dialect: str) -> None:
    loaded = migrations(dialect)
    for n, text in sorted(loaded.items()):
        assert n in MIGRATIONS[dialect], (
            f"migration_{n} of sql/{dialect}.sql is new: record its digest {digest(text)} in "
            "MIGRATIONS here (and never change its text once it is on main)"
        )
        assert digest(text) == MIGRATIONS[dialect][n], (
            f"migration_{n} of sql/{dialect}.sql was released and has changed: boards made with "
            "it would not match boards made now; restore its text and put the change in a new "
            "migration"
        )
    assert sorted(loaded) == sorted(MIGRATIONS[dialect]), "a released migration was removed"


@pytest.mark.parametrize("dialect", sorted(MIGRATIONS))
def test_every_text_a_migration_was_released_with_is_kept(dialect: str) -> None:
    texts = released_texts(dialect)
    assert {n: [digest(t) for t in found] for n, found in texts.items()} == RELEASED[dialect]
