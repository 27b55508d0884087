"""The agents' and schedules' tables of the live board: their rows, and a table drawn again
only when its rows changed, its cursor kept on its row."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import DataTable

from colibri.tui import views
from colibri.tui.board import Board

#: A table's rows, each named by a key (an agent's, a workspace's or a schedule's name).
Rows = list[tuple[str, tuple[Text, ...]]]


def agent_rows(board: Board) -> Rows:
    """The agents, online first, then the workspaces' harnesses that have no agent yet."""
    agents = sorted(board.agents.values(), key=lambda a: (not a.online, a.name))
    rows = [(a.name, views.agent_cells(a, board)) for a in agents]
    rows += [
        (harness.workspace, views.harness_cells(harness))
        for harness in board.harnesses
        if harness.workspace not in board.agents
    ]
    return rows


def schedule_rows(board: Board) -> Rows:
    schedules = board.schedules
    return [(name, views.schedule_cells(schedules[name])) for name in sorted(schedules)]


class DrawnTables:
    """What each table shows (by the table's id), so that it is drawn again only when its
    rows changed."""

    def __init__(self) -> None:
        self._drawn: dict[str | None, list[tuple[str, list[tuple[str, str]]]]] = {}

    def fill(self, table: DataTable[Text], rows: Rows) -> None:
        """The table's rows, drawn again only when they changed; the cursor stays on the row
        of its key. Each column is as wide as its widest cell, set here: Textual measures them
        only when idle, and a row drawn before that kept its old width, cut short, until it
        changed."""
        drawn = [(key, [(c.plain, str(c.style)) for c in cells]) for key, cells in rows]
        before = self._drawn.get(table.id, [])
        if before == drawn:
            return
        self._drawn[table.id] = drawn
        cursor = table.cursor_row
        on = before[cursor][0] if 0 <= cursor < len(before) else None
        table.clear()
        for n, column in enumerate(table.ordered_columns):
            column.width = max([column.label.cell_len, *(c[n].cell_len for _, c in rows)])
            column.auto_width = False
        for _, cells in rows:
            table.add_row(*cells)
        keys = [key for key, _ in rows]
        if on in keys:
            table.move_cursor(row=keys.index(on), animate=False)
