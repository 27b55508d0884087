"""The TUI's app: the board from one load and then the daemon's events, and the keys that
steer it. It outlives the daemon: when the connection ends it says so, connects again, and
loads the board afresh (what happened meanwhile is then on it)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path
from typing import Any, ClassVar

from rich.text import Text
from textual.app import App, ComposeResult
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, Footer, Static, TabbedContent, TabPane

from colibri.client import AsyncClient, Remote
from colibri.core.errors import ColibriError
from colibri.core.model import Task
from colibri.core.text import printable, short_id
from colibri.tui import views
from colibri.tui.board import OPEN_STATES, Board, Filter
from colibri.tui.screens import Confirm, Help, Prompt, Submit, TaskScreen
from colibri.tui.tasklist import TaskList

#: A page of the first load.
PAGE = 10_000
#: How often the shown rows catch up with the events (and the ages with the clock).
REDRAW_EVERY = 0.1
CLOCK_EVERY = 5.0
RECONNECT_EVERY = 0.5


def offline_text(root: Path | None, target: str, why: str) -> Text:
    text = Text()
    text.append("No daemon is answering\n\n", "bold red")
    text.append(f"at {target}: {why}\n\n")
    text.append("Start one in another terminal:\n\n", "bold")
    text.append(f"    colibri --root {root} run\n\n" if root else "    colibri run\n\n")
    text.append("or try a living demo swarm:  colibri demo\n\n")
    text.append("This screen connects by itself as soon as the daemon answers.  q quits.", "dim")
    return text


class ColibriApp(App[None]):
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
    DataTable, TaskList { height: 1fr; }
    #task-columns { height: 1; }
    """
    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("q", "quit", "quit"),
        Binding("question_mark", "help", "help"),
        Binding("slash", "filter", "filter"),
        Binding("escape", "clear_filter", "clear filter", show=False),
        Binding("c", "cancel", "cancel"),
        Binding("p", "pause", "pause/resume"),
        Binding("a", "answer", "answer"),
        Binding("s", "submit", "submit"),
        Binding("t", "attach", "attach"),
        Binding("v", "tree", "tree", show=False),
        Binding("enter", "open", "open", show=False),
        Binding("1", "tab('tasks')", "tasks", show=False),
        Binding("2", "tab('agents')", "agents", show=False),
        Binding("3", "tab('schedules')", "schedules", show=False),
    ]

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
        self._status_due = False
        self._schedules_due = False
        #: Tasks changed since the list was last drawn.
        self._changed: set[str] = set()
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
                await client.call("subscribe", name="tui")
                await self._load(client)
                self.client = client
                async for event in client.events():
                    if self.board.apply(event):
                        self._changed.add(_task_id(event))
                    self._header_due = True
                    kind = type(event).__name__
                    # The tables of agents and schedules change with their own events only.
                    self._others_dirty |= kind in ("AgentChanged", "BreakerOpened")
                    self._status_due |= kind == "AgentChanged"
                    self._schedules_due |= kind == "ScheduleNoted"
            except ColibriError as exc:
                self.board.note(f"the daemon closed the connection: {exc.message}")
            finally:
                self.client = None
                await client.close()
            if self.loaded:
                self.lost = True
                self._draw_banner()

    async def _load(self, client: AsyncClient) -> None:
        tasks: list[dict[str, Any]] = []
        after = None
        while True:
            reply = await client.call("list", limit=PAGE, after=after)
            tasks += reply["tasks"]
            after = reply.get("next")
            if after is None:
                break
        status = await client.call("status")
        agents = (await client.call("agents"))["agents"]
        schedules = await self._schedules(client)
        self.board.load(tasks, status, agents, schedules)
        if self.lost:
            self.board.note(f"the daemon is back: reloaded {len(tasks)} tasks")
        self.loaded = True
        self.lost = False
        self.remove_class("offline")
        self._dirty = self._others_dirty = True
        self._draw_banner()

    async def _schedules(self, client: AsyncClient) -> list[dict[str, Any]]:
        try:
            return list((await client.call("schedule-list"))["schedules"])
        except ColibriError:  # a token that may not list them
            return []

    def _offline(self, why: str) -> None:
        if self.loaded:
            self.lost = True
            self._draw_banner()
            return
        where = str(self.target)
        self.query_one("#offline", Static).update(offline_text(self.root, where, why))
        self.add_class("offline")

    async def call(self, cmd: str, **fields: Any) -> dict[str, Any] | None:
        """A request; an error the daemon answered is shown, not raised."""
        if self.client is None:
            self.notify("not connected to the daemon", severity="error")
            return None
        try:
            return await self.client.call(cmd, **fields)
        except ColibriError as exc:
            self.notify(f"{exc.code}: {exc.message}", severity="error", timeout=8)
            return None

    # -- drawing --------------------------------------------------------------------------

    def _catch_up(self) -> None:
        if self._status_due and self.client is not None:
            self._status_due = False
            self.run_worker(self._refresh_status(), group="status")
        if self._schedules_due and self.client is not None:
            self._schedules_due = False
            self.run_worker(self._refresh_schedules(), group="schedules")
        if self._dirty:
            self._dirty = False
            self._changed.clear()
            self.draw_tasks()
        elif self._changed:
            self._draw_changes()
        if self._header_due or self._others_dirty:
            self._header_due = False
            self._draw_header()
            self._draw_banner()
        if self._others_dirty:
            self._others_dirty = False
            self._draw_agents()
            self._draw_schedules()

    def _tick(self) -> None:
        self._now = self.board.now()
        self.task_list.forget()  # the ages
        self._others_dirty = True

    async def _refresh_status(self) -> None:
        if self.client is not None and (reply := await self.call("status")) is not None:
            self.board.status = reply
            self._others_dirty = True

    async def _refresh_schedules(self) -> None:
        if self.client is not None:
            schedules = await self._schedules(self.client)
            self.board.schedules = {s["name"]: s for s in schedules}
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
        return views.task_line(task, self._now, self.size.width, depth)

    def draw_tasks(self, changed: set[str] | None = None) -> None:
        """The list made again: which tasks match, in which order (the cursor stays on its
        task). ``changed``: only these tasks' lines are made again (None: every line, for a
        new view)."""
        shown = self.board.shown(self.filter, tree=self.as_tree)
        self.task_list.forget(changed)
        self.task_list.show([t.id for t in shown])
        total = len(self.board.tasks)
        label = f"Tasks {len(shown)}" + (f" of {total}" if len(shown) != total else "")
        if self.filter:
            label += " (filtered)"
        self.query_one(TabbedContent).get_tab("tasks").label = label

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
        self.query_one("#header", Static).update(
            views.header(self.board, self.board.now(), where, self.size.width)
        )
        notes = self.board.notes
        self.query_one("#notes", Static).update(Text(notes[-1] if notes else "", no_wrap=True))

    def _draw_banner(self) -> None:
        banner = self.query_one("#banner", Static)
        banner.set_class(self.lost, "lost")
        banner.set_class(self.board.paused and not self.lost, "paused")
        if self.lost:
            banner.update("The daemon went away: reconnecting… (the board below is as it was)")
        elif self.board.paused:
            banner.update("Dispatch is PAUSED: no task goes to an agent.  p resumes.")

    def _draw_agents(self) -> None:
        table = self.query_one("#agent-table", DataTable)
        table.clear()
        for agent in sorted(self.board.agents.values(), key=lambda a: (not a.online, a.name)):
            table.add_row(*views.agent_cells(agent, self.board))

    def _draw_schedules(self) -> None:
        table = self.query_one("#schedule-table", DataTable)
        table.clear()
        for name in sorted(self.board.schedules):
            table.add_row(*views.schedule_cells(self.board.schedules[name]))

    def on_resize(self) -> None:
        self.query_one("#task-columns", Static).update(views.task_columns(self.size.width))
        self.task_list.forget()

    # -- keys -----------------------------------------------------------------------------

    def selected_id(self) -> str | None:
        return self.task_list.selected()

    def selected(self) -> Task | None:
        task_id = self.selected_id()
        return self.board.tasks.get(task_id) if task_id else None

    async def on_task_list_selected(self, event: TaskList.Selected) -> None:
        await self.open_task(event.task_id)

    async def open_task(self, task_id: str) -> None:
        task = self.board.tasks.get(task_id)
        ledger = await self.call("ledger", task=task_id, limit=1000)
        family = await self.call("family", task=task_id)
        if task is None or ledger is None or family is None:
            return
        body = views.describe(task, ledger["entries"], family["tasks"])
        await self.push_screen(TaskScreen(body))

    async def action_open(self) -> None:
        if (task_id := self.selected_id()) is not None:
            await self.open_task(task_id)

    def action_help(self) -> None:
        self.push_screen(Help())

    def action_tab(self, tab: str) -> None:
        self.query_one(TabbedContent).active = tab
        if tab == "tasks":
            self.task_list.focus()
        else:
            self.query_one(f"#{tab[:-1]}-table", DataTable).focus()

    def action_tree(self) -> None:
        self.as_tree = not self.as_tree
        self.draw_tasks()

    def action_clear_filter(self) -> None:
        self.set_filter("")

    def set_filter(self, spec: str) -> None:
        self.filter = Filter.parse(spec)
        self.sub_title = f"filter: {spec}" if self.filter else ""
        self.draw_tasks()

    def action_filter(self) -> None:
        current = " ".join(
            [f"{k}:{v}" for k, v in vars(self.filter).items() if v and k != "words"]
            + list(self.filter.words)
        )
        self.push_screen(
            Prompt("Filter (state:… outcome:… ws:… agent:… cap:… and words; empty: all)",
                   current, "state:running web"),
            lambda spec: self.set_filter(spec) if spec is not None else None,
        )  # fmt: skip

    async def action_pause(self) -> None:
        reply = await self.call("toggle-swarm")
        if reply is not None:
            self.board.paused = bool(reply["paused"])
            self._draw_banner()
            self.notify("dispatch paused" if self.board.paused else "dispatch resumed")

    async def action_cancel(self) -> None:
        task = self.selected()
        if task is None:
            self.notify("no task under the cursor", severity="warning")
            return
        family = await self.call("family", task=task.id)
        if family is None:
            return
        descendants = _open_descendants(task.id, family["tasks"])
        question = f"Cancel {short_id(task.id)} «{views.short(task.text, 50)}»"
        if descendants:
            question += f" and its {descendants} open descendant{'s' * (descendants != 1)}"

        async def confirmed(yes: bool | None) -> None:
            if yes and (reply := await self.call("cancel", task=task.id, reason="cancelled "
                                                  "from the tui")) is not None:  # fmt: skip
                self.notify(f"cancelled {len(reply['cancelled'])} task(s)")

        self.push_screen(Confirm(question + "?"), confirmed)

    async def action_answer(self) -> None:
        task = self.selected()
        if task is None or task.question is None:
            waiting = self.board.waiting()
            task = waiting[0] if waiting else None
        if task is None:
            self.notify("no session is waiting for an answer", severity="warning")
            return
        chosen = task

        async def answered(text: str | None) -> None:
            if text and await self.call("answer", task=chosen.id, text=text) is not None:
                self.notify(f"answered {short_id(chosen.id)}")

        title = f"{short_id(chosen.id)} asks: {chosen.question}"
        self.push_screen(Prompt(printable(title), placeholder="your answer"), answered)

    def action_submit(self) -> None:
        async def submitted(spec: dict[str, Any] | None) -> None:
            if spec and (reply := await self.call("submit", **spec)) is not None:
                self.notify(f"submitted {short_id(reply['task']['id'])}")

        self.push_screen(Submit(), submitted)

    def action_attach(self) -> None:
        task = self.selected()
        if task is None or task.state != "running":
            self.notify("attach: put the cursor on a running task", severity="warning")
            return
        command = [sys.executable, "-m", "colibri"]
        if self.root is not None:
            command += ["--root", str(self.root)]
        with self.suspend():
            code = subprocess.call([*command, "attach-session", task.id])
        if code:
            self.notify("attach-session failed (is its agent a tmux one?)", severity="error")


def _task_id(event: Any) -> str:
    """The task an event is about (a ``task`` event carries the task, others its id)."""
    task = event.task
    return task if isinstance(task, str) else str(task.id)


def _open_descendants(task_id: str, family: list[dict[str, Any]]) -> int:
    """How many pending or running tasks below ``task_id`` (``family`` lists parents first)."""
    below = {task_id}
    count = 0
    for member in family:
        if member.get("parent") in below:
            below.add(member["id"])
            count += member["state"] in OPEN_STATES
    return count
