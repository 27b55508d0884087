"""Daily budgets read back what was spent today from the ledger: at start-up and at each new UTC
day. The board on a real SQLite store, in process."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

import pytest

from colibri.core.model import Cost, LedgerEntry, TaskSpec
from colibri.daemon.budgets import DailyBudgets
from colibri.store import open_store
from tests.inprocess import board_on

DAY = "2030-03-01"


def spend(path: Path, *costs: Cost) -> None:
    """Ledger rows of sessions of a task of workspace ``w`` that ended today with ``costs``,
    and one of yesterday."""
    with board_on(path) as (board, _):
        task, _ = board.submit(TaskSpec(text="spends", workspace="w"))
        for n, cost in enumerate(costs):
            board.store.append_ledger(
                LedgerEntry(at=f"{DAY}T0{n}:00:00.000Z", task=task.id, to_state="done", cost=cost)
            )
        board.store.append_ledger(
            LedgerEntry(at="2030-02-28T23:59:59.999Z", task=task.id, to_state="done",
                        cost=Cost(usd=100.0))
        )  # fmt: skip
        board.store.commit()


def test_todays_spending_is_read_back_from_the_ledger(tmp_path: Path) -> None:
    path = tmp_path / "board.sqlite"
    spend(path, Cost(usd=1.5), Cost(usd=2.0))
    store = open_store(str(path), durability="relaxed")
    try:
        budgets = DailyBudgets({"w": 4.0})
        budgets.load(store, DAY)
        assert budgets.spent == {"w": 3.5} and not budgets.over("w")  # not yesterday's 100
        assert budgets.spend("w", 0.5) is True and budgets.over("w")
        assert budgets.start_day(store, "2030-03-02") == {"w"} and not budgets.over("w")
        assert budgets.spent == {}
    finally:
        store.close()


def test_spending_that_cannot_be_summed_counts_from_zero_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """A ledger row whose cost is not JSON (a file edited by hand, a disk that garbled it):
    the sum fails. Budgets are derived from the ledger, so they must never keep the board from
    starting: they count from 0 and the log says why."""
    path = tmp_path / "board.sqlite"
    spend(path, Cost(usd=1.0))
    with sqlite3.connect(path) as db:
        db.execute("UPDATE ledger SET cost = '{not json'")
    store = open_store(str(path), durability="relaxed")
    try:
        budgets = DailyBudgets({"w": 3.0})
        with caplog.at_level(logging.ERROR, logger="colibri.daemon.budgets"):
            budgets.load(store, DAY)
        assert budgets.spent == {} and budgets.day == DAY
        [record] = [r for r in caplog.records if getattr(r, "event", "") == "budgets_unreadable"]
        assert "malformed JSON" in record.error  # type: ignore[attr-defined]
        assert "daily budgets count from 0" in record.getMessage()
    finally:
        store.close()
