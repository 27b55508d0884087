"""The TUI's modal screens: a task in full, a yes/no question, a line to type, submit, help."""

from __future__ import annotations

from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical, VerticalScroll
from textual.screen import ModalScreen, Screen
from textual.widgets import Footer, Input, Label, Static

from colibri.core import protocol as p

HELP = """\
 keys
   Enter  open the task under the cursor (text, output, error, ledger, family)
   c      cancel the task under the cursor, with its open descendants
   p      pause / resume dispatch
   a      answer the session waiting for an answer (the one under the cursor first)
   s      submit a task
   t      attach to the task's tmux session (back here when you detach: Ctrl+B d)
   /      filter: state:running outcome:failed ws:web agent:bsd-1 cap:zfs and words
   Esc    clear the filter
   v      newest first / families as a tree
   Home   the newest task: new ones then come in under the cursor (moved down, the
          cursor stays on its task as they arrive above)
   1 2 3  tasks, agents and workspaces, schedules
   ?      this help          q  quit
"""

MODAL_CSS = """
.modal { width: 90%; max-width: 100; height: auto; max-height: 90%;
         border: thick $accent; background: $surface; padding: 1 2; }
.modal Label { width: 100%; }
"""


class TaskScreen(Screen[None]):
    """A task in full; Escape or q goes back."""

    BINDINGS = [Binding("escape,q", "app.pop_screen", "back")]

    def __init__(self, body: Text) -> None:
        super().__init__()
        self.body = body

    def compose(self) -> ComposeResult:
        with VerticalScroll():
            yield Static(self.body, id="task-detail")
        yield Footer()


class Confirm(ModalScreen[bool]):
    """A yes/no question: y or Enter says yes, n or Escape no."""

    DEFAULT_CSS = MODAL_CSS
    BINDINGS = [
        Binding("y,enter", "answer(True)", "yes"),
        Binding("n,escape", "answer(False)", "no"),
    ]

    def __init__(self, question: str) -> None:
        super().__init__()
        self.question = question

    def compose(self) -> ComposeResult:
        with Vertical(classes="modal"):
            yield Label(Text(self.question))
            yield Label(Text("y: yes   n: no", style="dim"))

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)


class Prompt(ModalScreen[str | None]):
    """One line to type: Enter gives it, Escape gives None."""

    DEFAULT_CSS = MODAL_CSS
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def __init__(self, title: str, value: str = "", placeholder: str = "") -> None:
        super().__init__()
        self.title_text = title
        self.value = value
        self.placeholder = placeholder

    def compose(self) -> ComposeResult:
        with Vertical(classes="modal"):
            yield Label(Text(self.title_text))
            yield Input(value=self.value, placeholder=self.placeholder, id="prompt")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        self.dismiss(event.value)

    def action_cancel(self) -> None:
        self.dismiss(None)


class Submit(ModalScreen[p.Submit | None]):
    """A new task: its text, and optionally capabilities, a workspace and a priority."""

    DEFAULT_CSS = MODAL_CSS
    BINDINGS = [Binding("escape", "cancel", "cancel")]

    def compose(self) -> ComposeResult:
        with Vertical(classes="modal"):
            yield Label("Submit a task (Enter in any field submits, Escape cancels)")
            yield Input(placeholder="what to do", id="text")
            yield Input(placeholder="capabilities, comma-separated (optional)", id="caps")
            yield Input(placeholder="workspace (optional)", id="workspace")
            yield Input(placeholder="priority (optional, e.g. 5)", id="priority")

    def on_input_submitted(self, event: Input.Submitted) -> None:
        text = self.query_one("#text", Input).value
        if not text.strip():
            self.notify("a task needs a text", severity="warning")
            self.query_one("#text", Input).focus()
            return
        caps = self.query_one("#caps", Input).value
        priority = self.query_one("#priority", Input).value.strip()
        try:
            level = int(priority) if priority else 0
        except ValueError:
            self.notify(f"priority must be a whole number, not {priority!r}", severity="error")
            return
        self.dismiss(
            p.Submit(
                text=text,
                capabilities=[c.strip() for c in caps.split(",") if c.strip()],
                workspace=self.query_one("#workspace", Input).value.strip() or None,
                priority=level,
            )
        )

    def action_cancel(self) -> None:
        self.dismiss(None)


class Help(ModalScreen[None]):
    DEFAULT_CSS = MODAL_CSS
    BINDINGS = [Binding("escape,q,question_mark", "app.pop_screen", "close")]

    def compose(self) -> ComposeResult:
        with Vertical(classes="modal"):
            yield Static(HELP)
