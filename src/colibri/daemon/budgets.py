"""Daily budgets of workspaces: dollars per UTC day, and what was spent today.

Spending is counted from the costs sessions report; at start-up and at each new day it is read
back from the ledger (the store's ``cost_totals``), so a restart forgets nothing. A workspace
that has spent its budget gets no work until the next UTC day.
"""

from __future__ import annotations

import logging

from colibri.store import Store

log = logging.getLogger(__name__)


class DailyBudgets:
    def __init__(self, budgets: dict[str, float]) -> None:
        self.budgets = dict(budgets)
        self.spent: dict[str, float] = {}
        self.day = ""

    def __bool__(self) -> bool:
        return bool(self.budgets)

    def load(self, store: Store, day: str) -> None:
        """Today's spending per workspace, from the ledger."""
        self.day = day
        try:
            rows = store.cost_totals("workspace", day)
        except Exception as exc:  # derived from the ledger: it must never keep the board down
            log.error(
                "could not sum today's spending from the ledger; daily budgets count from 0",
                extra={"event": "budgets_unreadable", "error": str(exc)},
            )
            rows = []
        self.spent = {r["key"]: float(r["usd"]) for r in rows if r["key"]}

    def over(self, workspace: str | None) -> bool:
        if workspace is None or workspace not in self.budgets:
            return False
        return self.spent.get(workspace, 0.0) >= self.budgets[workspace]

    def spend(self, workspace: str, usd: float) -> bool:
        """Count ``usd``; True when this spending used up the workspace's budget."""
        was_over = self.over(workspace)
        self.spent[workspace] = self.spent.get(workspace, 0.0) + usd
        return self.over(workspace) and not was_over

    def start_day(self, store: Store, day: str) -> set[str]:
        """A new UTC day: spending starts again; return the workspaces that were over."""
        reopened = {w for w in self.budgets if self.over(w)}
        self.load(store, day)
        return reopened
