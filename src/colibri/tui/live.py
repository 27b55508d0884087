"""The TUI's live board: one load from the daemon, then its events, drawn as they come. It
outlives the daemon: when the connection ends it says so, connects again, and loads the board
afresh (what happened meanwhile is then on it). The keys that steer the swarm are in
``tui/app.py``."""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

from rich.text import Text
from textual.app import App, ComposeResult
from textual.css.query import NoMatches
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from colibri.client import AsyncClient, Remote
from colibri.core import events
from colibri.core import protocol as p
from colibri.core.errors import ColibriError
from colibri.core.model import LedgerEntry, Task
from colibri.core.protocol import LEDGER_END
from colibri.core.request_fields import R
from colibri.core.text import printable
from colibri.tui import tables, views
from colibri.tui.board import Board, Filter, moves_a_session
from colibri.tui.tasklist import TaskList

#: How often the shown rows catch up with the events (and the ages with the clock). A frame
#: of a big terminal costs Textual tens of milliseconds: four a second leave room for keys,
#: which redraw at once.
REDRAW_EVERY = 0.25
CLOCK_EVERY = 5.0
HEADER_EVERY = 0.5
RECONNECT_EVERY = 0.5


class LiveBoard(App[None]):
    TITLE = "colibri"
    CSS = """
    #header { height: 1; background: $boost; }
    #banner { height: auto; display: none; padding: 0 1; }
    #banner.paused { display: block; background: $error; color: $text; text-style: bold; }
    #banner.lost { display: block; background: $warning; color: $background; text-style: bold; }
    #offline { display: none; padding: 2 4; }
    #notes { height: 1; color: $text-muted; }
    .offline #offline { display: block; }
    .offline #tabs { display: none; }
    #tabs { height: 1fr; }
    DataTable, TaskList { height: 1fr; }
    TaskList { overflow-x: hidden; }
    #task-columns { height: 1; }
    """

    def __init__(self, target: Path | Remote, *, root: Path | None = None) -> None:
        super().__init__()
        #: The daemon's socket, or a daemon over TCP.
        self.target = target
        self.root = root
        self.board = Board()
        self.filter = Filter()
        self.as_tree = False
        self.client: AsyncClient | None = None
        #: Whether the board ever loaded (then a lost daemon leaves the old board in view).
        self.loaded = False
        self.lost = False
        self._dirty = False
        self._others_dirty = False
        self._header_due = False
        self._header_at = 0.0
        self._status_due = False
        self._schedules_due = False
        #: The agents are to be read again (a session came or went); and a read is under way.
        self._agents_due = False
        self._agents_reading = False
        #: What the agents' and schedules' tables show (drawn again only when it changed).
        self._tables = tables.DrawnTables()
        #: Tasks changed since the list was last drawn.
        self._changed: set[str] = set()
        self._listed = ""
        self._drawn: dict[str, Text] = {}
        self._banner_state: tuple[bool, bool] | None = None
        self._filter_spec = ""
        self._now = self.board.now()

    def compose(self) -> ComposeResult:
        yield Static(id="header")
        yield Static(id="banner")
        yield Static(id="offline")
        with TabbedContent(id="tabs", initial="tasks"):
            with TabPane("Tasks", id="tasks"):
                yield Static(id="task-columns")
                yield TaskList(self._line_of, id="task-list")
            with TabPane("Agents & workspaces", id="agents"):
                yield DataTable(id="agent-table", cursor_type="row")
            with TabPane("Schedules", id="schedules"):
                yield DataTable(id="schedule-table", cursor_type="row")
        yield Static(id="notes")
        yield Footer()

    def on_mount(self) -> None:
        self.query_one("#task-columns", Static).update(views.task_columns(self.size.width))
        self.task_list.focus()
        self.query_one("#agent-table", DataTable).add_columns(*views.AGENT_COLUMNS)
        self.query_one("#schedule-table", DataTable).add_columns(*views.SCHEDULE_COLUMNS)
        self.set_interval(REDRAW_EVERY, self._catch_up)
        self.set_interval(CLOCK_EVERY, self._tick)
        self.run_worker(self._follow(), exclusive=True, group="feed")
        self._draw_header()

    # -- the daemon -----------------------------------------------------------------------

    async def _follow(self) -> None:
        """Connect, load, follow the events; again whenever the connection ends."""
        while True:
            try:
                client = await AsyncClient(self.target).connect()
            except (ColibriError, OSError) as exc:
                self._offline(str(getattr(exc, "message", exc)))
                await asyncio.sleep(RECONNECT_EVERY)
                continue
            try:
                if self.remote:
                    await client.request(p.Ledger(after=LEDGER_END, limit=1, follow=True))
                else:
                    await client.request(p.Subscribe(name="tui"))
                await self._load(client)
                self.client = client
                async for event in client.events():
                    if isinstance(event, events.LedgerAppended):
                        await self._ledger_row(client, event.entry)
                    elif self.board.apply(event):
                        self._changed.add(_task_id(event))
                    self._header_due = True
                    kind = type(event).__name__
                    # The tables of agents and schedules change with their own events, and
                    # an agent's sessions with the events of the tasks it takes and releases.
                    self._others_dirty |= kind in ("AgentChanged", "BreakerOpened")
                    # The harnesses and the ready pools are in status: read again when an agent,
                    # a harness or a session ready to be handed out changed.
                    self._status_due |= kind in ("AgentChanged", "HarnessExited", "SessionNotReady")
                    self._schedules_due |= kind == "ScheduleNoted"
                    if isinstance(event, events.TaskChanged):
                        moved = (event.from_state, event.to_state, event.task.agent)
                        self._agents_due |= moves_a_session(*moved)
                    elif kind == "AgentChanged":
                        # A read under way may answer what was before it: read again after.
                        self._agents_due |= self._agents_reading
            except (ColibriError, OSError) as exc:
                self.board.note(f"the connection ended: {getattr(exc, 'message', exc)}")
            finally:
                self.client = None
                await client.close()
            if self.loaded:
                self.lost = True
                self._draw_banner()

    @property
    def remote(self) -> bool:
        """Over TCP: a token may not subscribe, so the ledger's rows say which tasks changed,
        and each is read again (and the agents and the pause with them)."""
        return isinstance(self.target, Remote)

    async def _ledger_row(self, client: AsyncClient, entry: LedgerEntry) -> None:
        if entry.task is None:
            self._schedules_due = True  # a schedule's skipped or missed fire
            return
        try:
            task = await client.get(entry.task)
        except ColibriError:
            return  # gone (another tenant's, or never ours to see)
        self.board.put(task)
        self._changed.add(entry.task)
        self._header_due = self._status_due = self._agents_due = True
        self._schedules_due |= entry.schedule is not None

    async def _load(self, client: AsyncClient) -> None:
        tasks = await client.all_tasks()
        status = await client.request(p.Status())
        agents = (await client.request(p.Agents())).agents
        schedules = await client.schedules()
        self.board.load(tasks, status, agents, schedules)
        if self.lost:
            self.board.note(f"the daemon is back: reloaded {len(tasks)} tasks")
        self.loaded = True
        self.lost = False
        self.remove_class("offline")
        self._dirty = self._others_dirty = True
        self._draw_banner()

    def _offline(self, why: str) -> None:
        if self.loaded:
            self.lost = True
            self._draw_banner()
            return
        where = str(self.target)
        self.query_one("#offline", Static).update(views.offline_text(self.root, where, why))
        self.add_class("offline")

    async def request(self, req: p.Request[R]) -> R | None:
        """A request; an error the daemon answered is shown, not raised."""
        if self.client is None:
            self.notify("not connected to the daemon", severity="error")
            return None
        try:
            return await self.client.request(req)
        except ColibriError as exc:
            self.notify(printable(f"{exc.code}: {exc.message}"), severity="error", timeout=8)
            return None
        except OSError as exc:  # the connection broke under the request
            self.notify(f"lost the daemon: {exc}", severity="error", timeout=8)
            return None

    # -- drawing --------------------------------------------------------------------------

    def _catch_up(self) -> None:
        try:
            self._draw_what_changed()
        except NoMatches:  # a last tick while the app closes: its widgets are gone
            pass

    def _draw_what_changed(self) -> None:
        if self._status_due and self.client is not None:
            self._status_due = False
            self.run_worker(self._refresh_status(), group="status")
        if self._schedules_due and self.client is not None:
            self._schedules_due = False
            self.run_worker(self._refresh_schedules(), group="schedules")
        if self._agents_due and not self._agents_reading and self.client is not None:
            self._agents_due = False
            self._agents_reading = True
            self.run_worker(self._refresh_agents(), group="agents")
        if self._dirty:
            self._dirty = False
            self._changed.clear()
            self.draw_tasks()
        elif self._changed:
            self._draw_changes()
        # The header counts every task: under a stream of events, twice a second is enough.
        header_ready = time.monotonic() - self._header_at >= HEADER_EVERY
        if (self._header_due and header_ready) or self._others_dirty:
            self._header_due = False
            self._header_at = time.monotonic()
            self._draw_header()
            self._draw_banner()
        if self._others_dirty:
            self._others_dirty = False
            self._draw_agents()
            self._draw_schedules()

    def _tick(self) -> None:
        self._now = self.board.now()
        with contextlib.suppress(NoMatches):  # (closing)
            self.task_list.forget()  # the ages
        self._others_dirty = True

    async def _refresh_status(self) -> None:
        if self.client is not None and (status := await self.request(p.Status())) is not None:
            self.board.take_status(status)
            self._others_dirty = True

    async def _refresh_agents(self) -> None:
        """The agents as they are now: their slots in use, sessions, ready pools, breakers."""
        try:
            if self.client is not None and (reply := await self.request(p.Agents())) is not None:
                self.board.agents = {a.name: a for a in reply.agents}
                self._others_dirty = True
        finally:
            self._agents_reading = False

    async def _refresh_schedules(self) -> None:
        if self.client is not None:
            schedules = await self.client.schedules()
            self.board.schedules = {s.name: s for s in schedules}
            self._others_dirty = True

    @property
    def task_list(self) -> TaskList:
        return self.query_one("#task-list", TaskList)

    @property
    def rows(self) -> list[str]:
        """The ids of the tasks listed, in order."""
        return self.task_list.rows

    def _line_of(self, task_id: str) -> Text:
        task = self.board.tasks[task_id]
        depth = self.board.depth(task) if self.as_tree else 0
        return views.task_line(task, self._now, self.size.width, depth, self.board.held(task))

    def draw_tasks(self, changed: set[str] | None = None) -> None:
        """The list made again: which tasks match, in which order (the cursor stays on its
        task). ``changed``: only these tasks' lines are made again (None: every line, for a
        new view)."""
        shown = self.board.shown(self.filter, tree=self.as_tree)
        self.task_list.forget(changed)
        self.task_list.show([t.id for t in shown])
        total = len(self.board.tasks)
        # On the status line, not the tab: a tab whose label changes keeps its old underline.
        self._listed = f"{len(shown)} of {total} tasks" if self.filter else f"{total} tasks"
        if self.filter:
            self._listed += f" (filter: {self._filter_spec})"
        self._draw_notes()

    def _draw_changes(self) -> None:
        """Tasks that changed: only their lines again, when each is listed and still matches;
        the list again when one comes in or drops out."""
        changed, self._changed = self._changed, set()
        index = self.task_list.index
        for task_id in changed:
            task = self.board.tasks.get(task_id)
            listed = task_id in index
            if task is None or listed != self.filter.matches(task) or (listed and self.as_tree):
                self.draw_tasks(changed)
                return
        self.task_list.forget(changed)

    def _draw_header(self) -> None:
        where = str(self.root or self.target)
        header = views.header(self.board, self.board.now(), where, self.size.width)
        self._put("#header", header)
        self._draw_notes()

    def _draw_notes(self) -> None:
        """The status line: how many tasks are listed, and the last thing worth a note."""
        line = Text(printable(self._listed), style="bold", no_wrap=True, overflow="ellipsis")
        if self.board.notes:
            line.append("  │ " + printable(self.board.notes[-1]), style="")
        self._put("#notes", line)

    def _put(self, line: str, text: Text) -> None:
        """A one-line widget's new text, drawn only when it changed and without a new layout
        (its size stays): under a stream of events this runs ten times a second."""
        if self._drawn.get(line) != text:
            self._drawn[line] = text
            self.query_one(line, Static).update(text, layout=False)

    def _draw_banner(self) -> None:
        state = (self.lost, self.board.paused)
        if state == self._banner_state:
            return
        self._banner_state = state
        banner = self.query_one("#banner", Static)
        banner.set_class(self.lost, "lost")
        banner.set_class(self.board.paused and not self.lost, "paused")
        if self.lost:
            banner.update("The daemon went away: reconnecting… (the board below is as it was)")
        elif self.board.paused:
            banner.update("Dispatch is PAUSED: no task goes to an agent.  p resumes.")

    def _draw_agents(self) -> None:
        self._tables.fill(self.query_one("#agent-table", DataTable), tables.agent_rows(self.board))

    def _draw_schedules(self) -> None:
        table = self.query_one("#schedule-table", DataTable)
        self._tables.fill(table, tables.schedule_rows(self.board))

    def on_resize(self) -> None:
        self.query_one("#task-columns", Static).update(views.task_columns(self.size.width))
        self.task_list.forget()

    def selected_id(self) -> str | None:
        return self.task_list.selected()

    def selected(self) -> Task | None:
        task_id = self.selected_id()
        return self.board.tasks.get(task_id) if task_id else None


def _task_id(event: Any) -> str:
    """The task an event is about (a ``task`` event carries the task, others its id)."""
    task = event.task
    return task if isinstance(task, str) else str(task.id)
