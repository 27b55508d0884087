"""Every tenant's ledger mirror, in process over a real SQLite board: a file per tenant, each
gap-free in its tenant's seq; a tenant's first row makes its file; a file of another history
is set aside, whatever its numbers."""

from __future__ import annotations

import json
from pathlib import Path

from colibri.core.model import LedgerEntry
from colibri.daemon.mirrors import LedgerMirrors
from colibri.store.sqlite import SqliteStore


def row(tenant: str, n: int) -> LedgerEntry:
    return LedgerEntry(
        at=f"2026-01-02T03:04:{n:02d}.000Z", schedule=f"s-{n}", tenant=tenant, to_state="missed"
    )


def lines(path: Path) -> list[tuple[str, int, str | None]]:
    return [
        (r["tenant"], r["seq"], r["schedule"])
        for r in map(json.loads, path.read_text().splitlines())
    ]


def test_each_tenant_has_its_file_made_at_its_first_row_and_gap_free(tmp_path: Path) -> None:
    store = SqliteStore(str(tmp_path / "board.sqlite"))
    try:
        mirrors = LedgerMirrors(tmp_path / "ledger.jsonl")
        assert mirrors.open(store) == 0
        assert (tmp_path / "ledger.jsonl").read_text() == ""  # there from the start
        written = [store.append_ledger(row({"d": "default", "a": "acme"}[t], n))
                   for n, t in enumerate("dad")]  # fmt: skip
        store.commit()
        mirrors.append(written)
        # The default tenant's rows at once; acme's file at the repair that its first row made
        # due (right after the commit, in the daemon).
        assert lines(tmp_path / "ledger.jsonl") == [("default", 1, "s-0"), ("default", 2, "s-2")]
        assert not (tmp_path / "ledger.acme.jsonl").exists()
        assert mirrors.repair_due(0.0)
        assert mirrors.repair(store) == 1
        assert lines(tmp_path / "ledger.acme.jsonl") == [("acme", 1, "s-1")]
        more = [store.append_ledger(row("acme", 5))]
        store.commit()
        mirrors.append([*written, *more])  # rows mirrored already are passed over
        assert lines(tmp_path / "ledger.acme.jsonl") == [("acme", 1, "s-1"), ("acme", 2, "s-5")]
        assert not mirrors.repair_due(0.0)
        mirrors.close()
        # Opened again (a restart): each file goes on where it was, nothing twice.
        again = LedgerMirrors(tmp_path / "ledger.jsonl")
        assert again.open(store) == 0
        again.close()
    finally:
        store.close()


def test_a_file_of_another_history_is_set_aside_even_where_its_numbers_fit(
    tmp_path: Path,
) -> None:
    """A mirror whose last row is not the store's row of that seq — rows of every tenant
    numbered in one sequence before the ledger was numbered per tenant, a board restored — is
    another history: set aside and written anew, though its last seq is within the store's."""
    store = SqliteStore(str(tmp_path / "board.sqlite"))
    try:
        for n in range(3):
            store.append_ledger(row("default", n))
        store.commit()
        old = [{"seq": 1, "at": "2025-01-01T00:00:00.000Z", "tenant": "acme", "to_state": "x"},
               {"seq": 2, "at": "2025-01-01T00:00:01.000Z", "tenant": "default",
                "schedule": "old", "to_state": "missed"}]  # fmt: skip
        (tmp_path / "ledger.jsonl").write_text("".join(json.dumps(r) + "\n" for r in old))
        mirrors = LedgerMirrors(tmp_path / "ledger.jsonl")
        assert mirrors.open(store) == 3
        mirrors.close()
        assert lines(tmp_path / "ledger.jsonl") == [("default", n + 1, f"s-{n}") for n in range(3)]
        (aside,) = tmp_path.glob("ledger.jsonl.2.orphaned")
        assert [json.loads(line) for line in aside.read_text().splitlines()] == old
    finally:
        store.close()
