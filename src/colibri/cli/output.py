"""Printing: JSON documents for scripts, tables for people.

Task texts, outputs, errors and names come from sessions and other users. Whatever is printed
for people goes through ``printable`` first, and JSON through ``json_safe`` (both of
``core/text.py``, the one place that says which characters are unsafe), so what a task says can
never drive the operator's terminal (set its title, clear it, recolour or reorder what follows).
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import msgspec

# (here too, as the CLI's modules have always found it)
from colibri.core.text import json_safe, one_line
from colibri.core.text import printable as printable

if TYPE_CHECKING:
    from rich.text import Text

    from colibri.core.model import Task


def counted(n: int, noun: str) -> str:
    """``1 task``, ``2 tasks``: a count and its noun, agreeing."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def print_line(text: str, *, flush: bool = False) -> None:
    """Print one line made of data from the daemon (see ``printable``)."""
    print(printable(text), flush=flush)


def print_output(text: str) -> None:
    """Print what a session produced (a task's output, an answer) for a program to read: byte
    for byte when stdout is a pipe or a file, made ``printable`` on a terminal."""
    if sys.stdout.isatty():
        text = printable(text, newlines=True)
    sys.stdout.write(text if text.endswith("\n") else text + "\n")


def print_json(value: Any) -> None:
    data = msgspec.json.format(msgspec.json.encode(value), indent=2)
    sys.stdout.buffer.write(json_safe(data) + b"\n")
    sys.stdout.flush()


def print_json_line(value: Any) -> None:
    sys.stdout.buffer.write(json_safe(msgspec.json.encode(value)) + b"\n")
    sys.stdout.flush()


def _cell(value: Any) -> Text:
    from rich.text import Text

    # A Text, not a str: rich would read "[red]" in a task's text as markup.
    return Text("" if value is None else printable(str(value)))


def print_table(
    columns: Sequence[str], rows: Sequence[Sequence[Any]], *, empty: str = "nothing to show"
) -> None:
    if not rows:
        print(empty)
        return
    from rich.console import Console
    from rich.table import Table

    table = Table(box=None, pad_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column, overflow="fold")
    for row in rows:
        table.add_row(*(_cell(v) for v in row))
    # Piped output keeps every row on one line, so ids survive grep and cut.
    Console(soft_wrap=True, width=None if sys.stdout.isatty() else 100_000).print(table)


def task_row(task: Task) -> list[Any]:
    state = task.state
    if state == "closed" and task.outcome:
        state = f"closed/{task.outcome}"
    if task.question:
        state += " (waiting)"
    return [
        task.id,
        state,
        task.priority,
        ",".join(task.capabilities) or "-",
        task.agent or "-",
        one_line(task.text, 50),
    ]


TASK_COLUMNS = ["ID", "STATE", "PRI", "CAPABILITIES", "AGENT", "TEXT"]


def describe_task(task: Task) -> None:
    fields = [
        "id",
        "state",
        "outcome",
        "text",
        "capabilities",
        "workspace",
        "agent",
        "pinned",
        "parent",
        "priority",
        "min_score",
        "attempts",
        "max_attempts",
        "epoch",
        "tenant",
        "labels",
        "idempotency_key",
        "not_before",
        "question",
        "after",
        "if_dependency_fails",
        "base",
        "change",
        "created_at",
        "updated_at",
        "cost",
        "error",
        "output",
    ]
    for name in fields:
        value = getattr(task, name)
        if name == "if_dependency_fails" and not task.after:
            continue  # (no dependency: nothing it says)
        if name == "change" and task.change is not None:
            value = task.change.describe() + (
                f" (worktree kept at {task.change.worktree})" if task.change.worktree else ""
            )
        elif isinstance(value, msgspec.Struct):  # the cost: as it is sent, defaults left out
            value = msgspec.to_builtins(value)
        if value in (None, [], "", False) and name not in ("state", "priority"):
            continue
        if isinstance(value, list):
            value = ", ".join(map(str, value))
        elif isinstance(value, dict):
            value = " ".join(f"{k}={v}" for k, v in value.items())
        text = printable(str(value), newlines=True)
        if "\n" in text:
            print(f"{name}:")
            for line in text.rstrip("\n").split("\n"):
                print(f"  {line}")
        else:
            print(f"{name + ':':15} {text}")


def print_tree(tasks: list[Task], mark: str | None = None) -> None:
    """Tasks as families: each child indented under its parent (parents outside the list are
    roots here)."""
    if not tasks:
        print("no tasks")
        return
    ids = {t.id for t in tasks}
    children: dict[str | None, list[Task]] = {}
    for task in tasks:
        parent = task.parent if task.parent in ids else None
        children.setdefault(parent, []).append(task)

    def line(task: Task, prefix: str, last: bool, top: bool) -> None:
        state = task.state if task.state != "closed" else f"closed/{task.outcome}"
        branch = "" if top else ("└─ " if last else "├─ ")
        where = f" @{task.workspace}" if task.workspace else ""
        here = "  ◀" if task.id == mark else ""
        text = one_line(task.text, 40)
        print_line(f"{prefix}{branch}{task.id}  {state}{where}  {text}{here}")
        kids = children.get(task.id, [])
        deeper = prefix + ("" if top else ("   " if last else "│  "))
        for n, kid in enumerate(kids):
            line(kid, deeper, n == len(kids) - 1, False)

    for task in children.get(None, []):
        line(task, "", True, True)
