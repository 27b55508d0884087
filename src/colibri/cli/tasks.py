"""Task commands: list, show, cancel, retry, why (``submit`` and ``wait`` are in
cli/submit.py, ``ledger`` in cli/ledger.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from colibri.cli.base import Context, cli, json_option, pass_ctx
from colibri.cli.completion import agent_names, task_ids, workspace_names
from colibri.cli.output import (
    TASK_COLUMNS,
    describe_task,
    print_json,
    print_line,
    print_table,
    print_tree,
    printable,
    task_row,
)

if TYPE_CHECKING:
    from colibri.core.model import Task

STATES = ["pending", "running", "done", "failed", "cancelled", "closed"]
OUTCOMES = ["done", "failed", "cancelled"]
#: The states of a task that has ended (one ``retry`` takes).
ENDED = ("done", "failed", "cancelled", "closed")


@cli.command("list")
@click.option("--state", type=click.Choice(STATES), help="Only tasks in this state.")
@click.option(
    "--outcome", type=click.Choice(OUTCOMES), help="Only tasks that ended so (closed or not)."
)
@click.option("--agent", shell_complete=agent_names, help="Only tasks of this agent.")
@click.option("--workspace", shell_complete=workspace_names, help="Only tasks of this workspace.")
@click.option(
    "--parent", metavar="ID", shell_complete=task_ids(), help="Only children of this task."
)
@click.option("--tenant", help="Only tasks of this tenant.")
@click.option(
    "--limit", type=click.IntRange(1, 10_000), default=100, show_default=True,
    help="Tasks shown at most (the newest, unless --after).",
)  # fmt: skip
@click.option("--all", "every", is_flag=True, help="Every matching task, oldest first.")
@click.option("--before", metavar="ID", help="The newest tasks older than this id.")
@click.option("--after", metavar="ID", help="The oldest tasks newer than this id.")
@click.option("--tree", is_flag=True, help="Show families: children indented under parents.")
@json_option
@pass_ctx
def list_tasks(
    ctx: Context,
    state: str | None,
    outcome: str | None,
    agent: str | None,
    workspace: str | None,
    parent: str | None,
    tenant: str | None,
    limit: int,
    every: bool,
    before: str | None,
    after: str | None,
    tree: bool,
    as_json: bool,
) -> None:
    """List tasks: the newest (--limit, 100), the latest at the bottom.

    --after ID pages forward from ID, oldest first; --before ID pages back; --all lists
    every matching task."""
    if every and (before or after):
        raise click.UsageError("--all lists every task; leave out --before and --after")
    if before and after:
        raise click.UsageError("give --before or --after, not both")
    filters: dict[str, Any] = dict(
        state=state, outcome=outcome, agent=agent, workspace=workspace, parent=parent,
        tenant=tenant,
    )  # fmt: skip
    from colibri.core.protocol import ListTasks

    if every:
        tasks: list[Task] = []
        with ctx.client() as client:
            cursor = None
            while True:
                reply = client.request(ListTasks(**filters, after=cursor, limit=10_000))
                tasks += reply.tasks
                cursor = reply.next
                if not cursor:
                    break
        remaining = 0
    else:
        newest = after is None
        reply = ctx.request(
            ListTasks(**filters, after=after, before=before, newest=newest, limit=limit, count=True)
        )
        tasks = reply.tasks[::-1] if newest else reply.tasks
        remaining = reply.remaining or 0
    if as_json:
        print_json(tasks)
    elif tree:
        print_tree(tasks)
    else:
        print_table(TASK_COLUMNS, [task_row(t) for t in tasks], empty="no tasks")
        if not tasks and state in OUTCOMES:
            click.echo(
                f"colibri: a task is {state} only until its session is gone, then closed; "
                f"to list the tasks that ended {state}: colibri list --outcome {state}",
                err=True,
            )
    if remaining:
        older = not every and after is None
        more = (
            f"{remaining} older task{'s' if remaining != 1 else ''} not shown: "
            f"colibri list --before {reply.next} (or --all)"
            if older
            else f"{remaining} more: colibri list --after {reply.next}"
        )
        click.echo(printable(more), err=True)


@cli.command()
@click.argument("task_id", metavar="ID", shell_complete=task_ids())
@click.option("--family", is_flag=True, help="Show the task's whole family as a tree.")
@json_option
@pass_ctx
def show(ctx: Context, task_id: str, family: bool, as_json: bool) -> None:
    """Show one task (--family: its whole family as a tree)."""
    from colibri.core.protocol import Family, Get

    if family:
        reply = ctx.request(Family(task=task_id))
        if as_json:
            print_json(reply.tasks)
        else:
            print_tree(reply.tasks, mark=task_id)
        if not reply.complete:
            click.echo(
                f"colibri: the family is larger than one reply; {len(reply.tasks)} tasks "
                f"shown (list the rest with: colibri list --parent ID)",
                err=True,
            )
        return
    task = ctx.request(Get(task=task_id)).task
    if as_json:
        print_json(task)
    else:
        describe_task(task)


@cli.command()
@click.argument("task_id", metavar="ID", shell_complete=task_ids("pending", "running"))
@click.option("--reason", help="Why; kept in the ledger.")
@json_option
@pass_ctx
def cancel(ctx: Context, task_id: str, reason: str | None, as_json: bool) -> None:
    """Cancel a task and its whole family of descendants."""
    from colibri.core.protocol import Cancel

    cancelled = ctx.request(Cancel(task=task_id, reason=reason)).cancelled
    if as_json:
        print_json(cancelled)
        return
    n = len(cancelled)
    print(f"cancelled {n} task{'s' if n != 1 else ''}")
    for cancelled_id in cancelled:
        print_line(f"  {cancelled_id}")


@cli.command()
@click.argument("task_id", metavar="ID", shell_complete=task_ids(*ENDED))
@json_option
@pass_ctx
def retry(ctx: Context, task_id: str, as_json: bool) -> None:
    """Submit an ended task again, as a new task."""
    from colibri.core.protocol import Retry

    task = ctx.request(Retry(task=task_id)).task
    print_json(task) if as_json else print_line(task.id)


@cli.command()
@click.argument("task_id", metavar="ID", shell_complete=task_ids())
@json_option
@pass_ctx
def why(ctx: Context, task_id: str, as_json: bool) -> None:
    """Explain where a task stands: every agent considered and why it can or cannot take it."""
    from colibri.core import replies
    from colibri.core.protocol import Why

    reply = ctx.request(Why(task=task_id))
    if as_json:
        print_json(replies.fields(reply))
        return
    task = reply.task
    print_line(f"task {task.id} is {task.state}: {reply.summary}")
    print_line(
        f"requires: {', '.join(reply.required) or '(nothing: any agent fits)'}; "
        f"min_score {reply.min_score}"
    )
    rows = [
        [
            a.agent,
            f"{a.score:.2f}",
            ",".join(a.missing) or "-",
            "yes" if a.eligible else "no",
            "; ".join(a.reasons) or "-",
        ]
        for a in reply.agents
    ]
    print_table(
        ["AGENT", "SCORE", "MISSING", "ELIGIBLE", "WHY NOT"], rows, empty="no agents are registered"
    )
