"""``colibri tui``: the live board (``tui/live.py``) and the keys that steer the swarm:
open a task, cancel a family, pause dispatch, answer a session, submit, attach, filter."""

from __future__ import annotations

import subprocess
import sys
from typing import ClassVar

from textual.app import SuspendNotSupported
from textual.binding import Binding, BindingType
from textual.widgets import DataTable, TabbedContent

from colibri.core import protocol as p
from colibri.core.model import Task
from colibri.core.text import one_line, printable, short_id
from colibri.tui import views
from colibri.tui.board import OPEN_STATES, Filter
from colibri.tui.live import LiveBoard
from colibri.tui.screens import Confirm, Help, Prompt, Submit, TaskScreen
from colibri.tui.tasklist import TaskList


class ColibriApp(LiveBoard):
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

    async def on_task_list_selected(self, event: TaskList.Selected) -> None:
        await self.open_task(event.task_id)

    async def open_task(self, task_id: str) -> None:
        task = self.board.tasks.get(task_id)
        ledger = await self.request(p.Ledger(task=task_id, limit=1000))
        family = await self.request(p.Family(task=task_id))
        if task is None or ledger is None or family is None:
            return
        known = self.board.tasks
        after = [known.get(d) for d in task.after]
        body = views.describe(task, ledger.entries, family.tasks, [a for a in after if a])
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
        self._filter_spec = " ".join(spec.split())
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
        reply = await self.request(p.ToggleSwarm())
        if reply is not None:
            self.board.paused = reply.paused
            self._draw_banner()
            self.notify("dispatch paused" if self.board.paused else "dispatch resumed")

    async def action_cancel(self) -> None:
        task = self.selected()
        if task is None:
            self.notify("no task under the cursor", severity="warning")
            return
        family = await self.request(p.Family(task=task.id))
        if family is None:
            return
        descendants = _open_descendants(task.id, family.tasks)
        question = f"Cancel {short_id(task.id)} «{one_line(task.text, 50)}»"
        if descendants:
            question += f" and its {descendants} open descendant{'s' * (descendants != 1)}"

        async def confirmed(yes: bool | None) -> None:
            cancel = p.Cancel(task=task.id, reason="cancelled from the tui")
            if yes and (reply := await self.request(cancel)) is not None:
                self.notify(f"cancelled {len(reply.cancelled)} task(s)")

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
            if text and await self.request(p.Answer(task=chosen.id, text=text)) is not None:
                self.notify(f"answered {short_id(chosen.id)}")

        title = f"{short_id(chosen.id)} asks: {chosen.question}"
        self.push_screen(Prompt(printable(title), placeholder="your answer"), answered)

    def action_submit(self) -> None:
        async def submitted(submit: p.Submit | None) -> None:
            if submit and (reply := await self.request(submit)) is not None:
                self.notify(f"submitted {short_id(reply.task.id)}")

        self.push_screen(Submit(), submitted)

    def action_attach(self) -> None:
        task = self.selected()
        if task is None or task.state != "running":
            self.notify("attach: put the cursor on a running task", severity="warning")
            return
        if self.root is None:
            self.notify("attach works on the daemon's host: its tmux sessions are there",
                        severity="warning")  # fmt: skip
            return
        command = [sys.executable, "-m", "colibri", "--root", str(self.root)]
        try:
            with self.suspend():
                code = subprocess.call([*command, "attach-session", task.id])
        except SuspendNotSupported:
            self.notify("this terminal cannot hand itself over to tmux", severity="error")
            return
        if code:
            self.notify("attach-session failed (is its agent a tmux one?)", severity="error")


def _open_descendants(task_id: str, family: list[Task]) -> int:
    """How many pending or running tasks below ``task_id`` (``family`` lists parents first)."""
    below = {task_id}
    count = 0
    for member in family:
        if member.parent in below:
            below.add(member.id)
            count += member.state in OPEN_STATES
    return count
