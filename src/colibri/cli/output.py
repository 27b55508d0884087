"""Printing: JSON documents for scripts, tables for people."""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

import msgspec


def print_json(value: Any) -> None:
    sys.stdout.buffer.write(msgspec.json.format(msgspec.json.encode(value), indent=2) + b"\n")
    sys.stdout.flush()


def print_json_line(value: Any) -> None:
    sys.stdout.buffer.write(msgspec.json.encode(value) + b"\n")
    sys.stdout.flush()


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
        table.add_row(*("" if v is None else str(v) for v in row))
    # Piped output keeps every row on one line, so ids survive grep and cut.
    Console(soft_wrap=True, width=None if sys.stdout.isatty() else 100_000).print(table)


def short(text: str, width: int = 50) -> str:
    line = " ".join(text.split())
    return line if len(line) <= width else line[: width - 1] + "…"


def task_row(task: dict[str, Any]) -> list[Any]:
    state = task["state"]
    if state == "closed" and task.get("outcome"):
        state = f"closed/{task['outcome']}"
    if task.get("question"):
        state += " (waiting)"
    return [
        task["id"],
        state,
        task["priority"],
        ",".join(task["capabilities"]) or "-",
        task.get("agent") or "-",
        short(task["text"]),
    ]


TASK_COLUMNS = ["ID", "STATE", "PRI", "CAPABILITIES", "AGENT", "TEXT"]


def describe_task(task: dict[str, Any]) -> None:
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
        "created_at",
        "updated_at",
        "cost",
        "error",
        "output",
    ]
    for name in fields:
        value = task.get(name)
        if value in (None, [], "", False) and name not in ("state", "priority"):
            continue
        if isinstance(value, list):
            value = ", ".join(map(str, value))
        elif isinstance(value, dict):
            value = " ".join(f"{k}={v}" for k, v in value.items())
        text = str(value)
        if "\n" in text:
            print(f"{name}:")
            for line in text.rstrip("\n").splitlines():
                print(f"  {line}")
        else:
            print(f"{name + ':':16}{text}")


def print_tree(tasks: list[dict[str, Any]], mark: str | None = None) -> None:
    """Tasks as families: each child indented under its parent (parents outside the list are
    roots here)."""
    if not tasks:
        print("no tasks")
        return
    ids = {t["id"] for t in tasks}
    children: dict[str | None, list[dict[str, Any]]] = {}
    for task in tasks:
        parent = task.get("parent") if task.get("parent") in ids else None
        children.setdefault(parent, []).append(task)

    def line(task: dict[str, Any], prefix: str, last: bool, top: bool) -> None:
        state = task["state"] if task["state"] != "closed" else f"closed/{task.get('outcome')}"
        branch = "" if top else ("└─ " if last else "├─ ")
        where = f" @{task['workspace']}" if task.get("workspace") else ""
        here = "  ◀" if task["id"] == mark else ""
        print(f"{prefix}{branch}{task['id']}  {state}{where}  {short(task['text'], 40)}{here}")
        kids = children.get(task["id"], [])
        deeper = prefix + ("" if top else ("   " if last else "│  "))
        for n, kid in enumerate(kids):
            line(kid, deeper, n == len(kids) - 1, False)

    for task in children.get(None, []):
        line(task, "", True, True)
