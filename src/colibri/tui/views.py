"""How the board's rows look: cells as rich ``Text`` (never markup: a task's text may say
``[red]``), made ``printable`` first, coloured by state."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from rich.text import Text

from colibri.core.model import Agent, HarnessStatus, LedgerEntry, Task
from colibri.core.schedules import Schedule
from colibri.core.text import one_line, printable, short_id
from colibri.tui.board import Board, age, in_zone

STATE_STYLES = {
    "pending": "yellow",
    "running": "cyan",
    "asking": "bold magenta",
    "done": "green",
    "failed": "bold red",
    "cancelled": "bright_black",
    "blocked": "dim yellow",
}

TASK_COLUMNS = (
    ("id", "ID"),
    ("state", "STATE"),
    ("age", "AGE"),
    ("text", "TEXT"),
    ("agent", "AGENT"),
    ("caps", "CAPABILITIES"),
    ("workspace", "WORKSPACE"),
    ("priority", "PRI"),
    ("cost", "COST"),
)
TASK_WIDTHS = {
    "id": 8,
    "state": 10,
    "age": 4,
    "text": 40,
    "agent": 10,
    "caps": 14,
    "workspace": 10,
    "priority": 4,
    "cost": 8,
}
AGENT_COLUMNS = ("NAME", "ONLINE", "WORKSPACE", "SLOTS", "SESSIONS", "HARNESS", "CAPABILITIES")
SCHEDULE_COLUMNS = ("NAME", "WHEN", "NEXT FIRE", "LAST FIRE", "PAUSED", "FIRES")


def cell(value: Any, style: str = "") -> Text:
    return Text("" if value is None else printable(str(value)), style=style)


def state_of(task: Task) -> str:
    """What a row says of a task: its state, the outcome of a closed one, ``asking`` for a
    session waiting for an answer."""
    if task.question is not None and task.state == "running":
        return "asking"
    if task.state == "closed":
        return task.outcome or "closed"
    if task.state == "pending" and task.attempts > 0:
        return "pending"  # a retry waiting out its backoff is still pending
    return task.state


def task_cells(task: Task, now: datetime, indent: int = 0, held: bool = False) -> tuple[Text, ...]:
    """``held``: it waits for other tasks (the row says ``blocked``)."""
    state = "blocked" if held else state_of(task)
    shown_state = state
    if task.state in ("done", "failed", "cancelled"):
        shown_state += "…"  # ended, its session not yet gone
    retry = f" {task.attempts}/{task.max_attempts}" if task.max_attempts > 1 else ""
    cost = f"${task.cost.usd:.4f}" if task.cost is not None and task.cost.usd else ""
    return (
        cell(short_id(task.id), "dim"),
        cell(shown_state + retry, STATE_STYLES.get(state, "")),
        cell(age(task.created_at, now)),
        cell(("  " * indent) + ("└ " if indent else "") + one_line(task.text, 100)),
        cell(task.agent or "-"),
        cell(",".join(task.capabilities) or "-"),
        cell(task.workspace or "-"),
        cell(task.priority),
        cell(cost),
    )


def text_width(screen_width: int) -> int:
    """The text column takes what the others leave, between 24 and 80 cells; on a narrow
    terminal the columns after it are cut (the detail screen has everything)."""
    others = sum(width + 1 for key, width in TASK_WIDTHS.items() if key != "text")
    return min(80, max(24, screen_width - others - 2))


def _line(cells: tuple[Text, ...], screen_width: int) -> Text:
    line = Text(no_wrap=True, overflow="ellipsis")
    for (key, _), value in zip(TASK_COLUMNS, cells, strict=True):
        width = text_width(screen_width) if key == "text" else TASK_WIDTHS[key]
        value.truncate(width, overflow="ellipsis", pad=True)
        line.append_text(value)
        line.append(" ")
    return line


def task_line(
    task: Task, now: datetime, screen_width: int, indent: int = 0, held: bool = False
) -> Text:
    """A task as one line of the task list."""
    return _line(task_cells(task, now, indent, held), screen_width)


def task_columns(screen_width: int) -> Text:
    cells = tuple(Text(label, style="bold") for _, label in TASK_COLUMNS)
    return _line(cells, screen_width)


def agent_cells(agent: Agent, board: Board) -> tuple[Text, ...]:
    harness = "-"
    for entry in board.harnesses:
        if entry.workspace == (agent.workspace or agent.name):
            harness = entry.describe()
    warnings = board.warnings.get(agent.workspace or agent.name)
    if warnings:
        harness += f", {warnings} not ready"
    if agent.ready:
        harness += f", {agent.ready} ready"
    online = ("online", "green") if agent.online else ("offline", "bright_black")
    if agent.breaker_open:
        online = ("breaker open", "bold red")
    sessions = " ".join(short_id(task_id) for task_id in agent.running) or "-"
    return (
        cell(agent.name, "bold"),
        cell(*online),
        cell(agent.workspace or "-"),
        cell(f"{len(agent.running)}/{agent.slots}"),
        cell(sessions),
        cell(harness),
        cell(",".join(agent.capabilities) or "-"),
    )


def harness_cells(harness: HarnessStatus) -> tuple[Text, ...]:
    """A workspace whose agent is not registered: what ``status`` says of its harness, its
    last failure in its own words."""
    return (
        cell(harness.workspace, "bold"),
        cell("no agent", "red"),
        cell(harness.workspace),
        cell("-"),
        cell("-"),
        cell(harness.describe(), "red" if harness.last_failure else ""),
        cell("-"),
    )


def schedule_cells(schedule: Schedule) -> tuple[Text, ...]:
    if schedule.kind == "cron":
        when = f"cron {schedule.cron}"
    elif schedule.kind == "interval":
        when = f"every {schedule.every:g}s"
    else:
        when = "once"
    tz = schedule.tz
    paused = schedule.paused
    return (
        cell(schedule.name, "bold"),
        cell(when),
        cell(in_zone(schedule.next_fire_at, tz)),
        cell(in_zone(schedule.last_fire_at, tz)),
        cell("paused" if paused else "no", "yellow" if paused else ""),
        cell(schedule.fires),
    )


def header(board: Board, now: datetime, where: str, width: int) -> Text:
    """One line: what is open, what ended today (UTC) and what it cost; the root when the
    terminal is wide enough."""
    counts = board.counts(now)
    text = Text(no_wrap=True, overflow="ellipsis")
    text.append(" colibri ", "bold reverse")
    text.append(" ")
    for label, key, style in (
        ("pending", "pending", "yellow"),
        ("running", "running", "cyan"),
        ("asking", "waiting", "magenta"),
    ):
        text.append(f"{counts[key]}", f"bold {style}")
        text.append(f" {label} ")
    text.append("│ today ", "dim")
    text.append(f"{counts['done']}", "bold green")
    text.append(" done ")
    text.append(f"{counts['failed']}", "bold red")
    text.append(" failed ")
    text.append(f"${counts['usd']:.2f}", "bold")
    text.append(" spent")
    if width - text.cell_len > len(where) + 4:
        text.append(f"  {printable(where)}", "dim")
    return text


def describe(
    task: Task, ledger: list[LedgerEntry], family: list[Task], after: list[Task] | None = None
) -> Text:
    """A task in full: its fields, text, output, error, question, ledger rows and family;
    ``after``: those of the tasks it waits for that the board in view holds, for their state."""
    text = Text()

    def field(name: str, value: Any, style: str = "") -> None:
        if value in (None, "", []):
            return
        text.append(f"{name + ':':14}", "bold")
        text.append(printable(str(value)) + "\n", style)

    field("id", task.id)
    field("state", state_of(task), STATE_STYLES.get(state_of(task), ""))
    field("capabilities", ", ".join(task.capabilities))
    field("workspace", task.workspace)
    field("agent", task.agent)
    field("parent", task.parent)
    field("priority", task.priority)
    field("attempts", f"{task.attempts} of {task.max_attempts}")
    field("schedule", task.schedule)
    if task.after:
        states = {d.id: state_of(d) for d in after or []}
        field("after", ", ".join(f"{short_id(d)} ({states.get(d, '?')})" for d in task.after))
        field("if one fails", task.if_dependency_fails)
    field("base", task.base)
    if task.change is not None:
        kept = f"; worktree kept at {task.change.worktree}" if task.change.worktree else ""
        field("change", task.change.describe() + kept)
    field("created", task.created_at)
    field("updated", task.updated_at)
    if task.cost is not None:
        field(
            "cost", f"${task.cost.usd:.4f} ({task.cost.tokens_in} in, {task.cost.tokens_out} out)"
        )
    for title, body, style in (
        ("text", task.text, ""),
        ("question", task.question, "bold magenta"),
        ("output", task.output, "green"),
        ("error", task.error, "red"),
    ):
        if body:
            text.append(f"\n{title}\n", "bold underline")
            text.append(printable(body, newlines=True).rstrip("\n") + "\n", style)
    text.append("\nledger\n", "bold underline")
    for row in ledger:
        arrow = f"{row.from_state or 'new'} → {row.to_state}"
        reason = f"  {row.reason}" if row.reason else ""
        text.append(f"#{row.seq:<6} {row.at[11:23]}  ", "dim")
        text.append(printable(f"{arrow:22}{row.agent or '':12}{reason}") + "\n")
    if len(family) > 1:
        text.append("\nfamily\n", "bold underline")
        depths: dict[str, int] = {}
        for member in family:
            depth = depths.get(member.parent or "", -1) + 1
            depths[member.id] = depth
            mark = "  ◀" if member.id == task.id else ""
            state = member.outcome or member.state
            said = one_line(member.text, 50)
            line = f"{'  ' * depth}{short_id(member.id)}  {state:10} {said}"
            text.append(printable(line) + mark + "\n", STATE_STYLES.get(state, ""))
    return text


def offline_text(root: Path | None, target: str, why: str) -> Text:
    """The screen shown while no daemon answers: how to start one."""
    text = Text()
    text.append("No daemon is answering\n\n", "bold red")
    text.append(f"at {target}: {why}\n\n")
    text.append("Start one in another terminal:\n\n", "bold")
    text.append(f"    colibri --root {root} run\n\n" if root else "    colibri run\n\n")
    text.append("or try a living demo swarm:  colibri demo\n\n")
    text.append("This screen connects by itself as soon as the daemon answers.  q quits.", "dim")
    return text
