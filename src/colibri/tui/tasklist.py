"""The task list: every task that matches, drawn a screen at a time.

A board holds tens of thousands of tasks; a table widget that lays out each of its rows costs
far too much to rebuild at every event. This list only knows the order of the ids; a row's
line is made when it is first drawn and kept until its task changes, so an event costs the
rows on screen and nothing more.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar

from rich.segment import Segment
from rich.style import Style
from rich.text import Text
from textual import events
from textual.binding import Binding, BindingType
from textual.geometry import Size
from textual.message import Message
from textual.scroll_view import ScrollView
from textual.strip import Strip

CURSOR = Style(reverse=True)


class TaskList(ScrollView, can_focus=True):
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("up,k", "move(-1)", "up", show=False),
        Binding("down,j", "move(1)", "down", show=False),
        Binding("pageup", "page(-1)", "page up", show=False),
        Binding("pagedown", "page(1)", "page down", show=False),
        Binding("home", "move(-1000000000)", "first", show=False),
        Binding("end", "move(1000000000)", "last", show=False),
        Binding("enter", "select", "open", show=False),
    ]

    class Selected(Message):
        def __init__(self, task_id: str) -> None:
            super().__init__()
            self.task_id = task_id

    def __init__(self, line_of: Callable[[str], Text], *, id: str | None = None) -> None:
        super().__init__(id=id)
        #: Makes the line of a task (the app's: it knows the board, the clock and the view).
        self.line_of = line_of
        self.rows: list[str] = []
        self.index: dict[str, int] = {}
        self.cursor = 0
        self._lines: dict[str, list[Segment]] = {}

    # -- what it shows ----------------------------------------------------------------------

    def show(self, rows: list[str]) -> None:
        """These ids, in this order. A cursor on the first row stays there, on the newest
        task, the view at the top: rows arriving come into view. Elsewhere it stays on its
        task (if it is still listed), on the same line of the screen: rows arriving above it
        scroll the view with it, and nothing under the reader's eyes moves."""
        current = self.selected()
        at_top = self.cursor == 0
        line = self.cursor - int(self.scroll_offset.y)
        self.rows = rows
        self.index = {task_id: n for n, task_id in enumerate(rows)}
        if not at_top and current is not None and current in self.index:
            self.cursor = self.index[current]
        self.cursor = max(0, min(self.cursor, len(rows) - 1))
        self.virtual_size = Size(self.size.width, len(rows))
        if not at_top:
            self.scroll_to(y=max(0, self.cursor - line), animate=False, immediate=True, force=True)
        self._keep_cursor_in_view()
        self.refresh()

    def forget(self, task_ids: set[str] | None = None) -> None:
        """Make these rows' lines again when next drawn (None: every row's)."""
        if task_ids is None:
            self._lines.clear()
        else:
            for task_id in task_ids:
                self._lines.pop(task_id, None)
        self.refresh()

    def selected(self) -> str | None:
        return self.rows[self.cursor] if 0 <= self.cursor < len(self.rows) else None

    def render_line(self, y: int) -> Strip:
        scroll_x, scroll_y = self.scroll_offset
        row = scroll_y + y
        width = self.size.width
        if row >= len(self.rows):
            return Strip.blank(width, self.rich_style)
        task_id = self.rows[row]
        segments = self._lines.get(task_id)
        if segments is None:
            text = self.line_of(task_id)
            text.no_wrap = True
            segments = self._lines[task_id] = list(text.render(self.app.console, end=""))
        strip = Strip(segments).crop_extend(scroll_x, scroll_x + width, self.rich_style)
        return strip.apply_style(CURSOR) if row == self.cursor and self.has_focus else strip

    # -- moving -----------------------------------------------------------------------------

    def move_to(self, row: int) -> None:
        before, top = self.cursor, int(self.scroll_offset.y)
        self.cursor = max(0, min(row, len(self.rows) - 1))
        self._keep_cursor_in_view()
        if int(self.scroll_offset.y) == top:  # only the two rows the cursor left and reached
            self.refresh_lines(before - top)
            self.refresh_lines(self.cursor - top)
        else:
            self.refresh()

    def action_move(self, by: int) -> None:
        self.move_to(self.cursor + by)

    def action_page(self, pages: int) -> None:
        self.move_to(self.cursor + pages * max(1, self.size.height - 1))

    def action_select(self) -> None:
        if (task_id := self.selected()) is not None:
            self.post_message(self.Selected(task_id))

    def on_click(self, event: events.Click) -> None:
        self.move_to(int(self.scroll_offset.y) + event.y)
        if event.chain == 2:
            self.action_select()

    def _keep_cursor_in_view(self) -> None:
        top, height = int(self.scroll_offset.y), max(1, self.size.height)
        if self.cursor < top:
            self.scroll_to(y=self.cursor, animate=False, immediate=True, force=True)
        elif self.cursor >= top + height:
            self.scroll_to(y=self.cursor - height + 1, animate=False, immediate=True, force=True)

    def on_focus(self) -> None:
        self.refresh()

    def on_blur(self) -> None:
        self.refresh()
