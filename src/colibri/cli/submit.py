"""Submitting work and waiting for it: submit (one task; ``--from`` hands a file to
cli/bulk.py) and wait, both followed through a takeover or a restart of the daemon."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING, Any

import click

from colibri.cli.base import (
    Context,
    cli,
    in_session,
    json_option,
    pass_ctx,
    through_takeovers,
    wait_out_busy,
)
from colibri.cli.completion import agent_names, task_ids, workspace_names
from colibri.cli.output import print_json, print_line, print_output, printable

if TYPE_CHECKING:
    from colibri.client import Client
    from colibri.core.model import Task
    from colibri.core.replies import SubmitReply


@cli.command()
@click.argument("text", required=False)
@click.option(
    "--from",
    "source",
    metavar="FILE",
    help="Submit every task of a JSON lines file (- for stdin), one object a line with the "
    "fields of a submission; all are checked before any is sent.",
)
@click.option(
    "--cap",
    "--capability",
    "caps",
    multiple=True,
    metavar="CAP",
    help="A required capability (repeatable).",
)
@click.option(
    "--agent",
    shell_complete=agent_names,
    help="Pin the task to this agent (create-task) instead of best fit.",
)
@click.option(
    "--workspace",
    shell_complete=workspace_names,
    help="Only agents of this workspace may take it (one nothing serves yet: it waits, and "
    "submit says so).",
)
@click.option(
    "--parent",
    shell_complete=task_ids(),
    help="The task this one is a child of (for families and cancel).",
)
@click.option(
    "--to",
    "to",
    metavar="WORKSPACE",
    help="Inside a session: hand a child task to WORKSPACE (parent: this session's task).",
)
@click.option("--priority", type=int, default=0, show_default=True, help="Higher runs first.")
@click.option(
    "--min-score", type=click.FloatRange(0, 1), help="Lowest capability score accepted (1 = all)."
)
@click.option("--label", "labels", multiple=True, help="A label (repeatable).")
@click.option(
    "--max-attempts",
    type=click.IntRange(1, 100),
    default=1,
    show_default=True,
    help="Sessions to try before the task fails.",
)
@click.option("--idempotency-key", help="Retrying with the same key returns the same task.")
@click.option(
    "--budget-usd",
    type=click.FloatRange(min=0, min_open=True),
    help="Dollars this task and its descendants may spend (children inherit what remains).",
)
@click.option("--tenant", help="Tenant of the task (default: default).")
@click.option(
    "--after",
    "after",
    multiple=True,
    metavar="ID",
    shell_complete=task_ids(),
    help="Run only once task ID has ended done (repeatable: every one).",
)
@click.option(
    "--if-dependency-fails",
    type=click.Choice(["cancel", "run", "wait"]),
    default="cancel",
    show_default=True,
    help="When a task of --after fails or is cancelled: cancel this one too, run it anyway, "
    "or wait for a retry of that task (colibri retry).",
)
@click.option(
    "--base",
    metavar="REF",
    help="In a workspace of worktrees: the branch or commit this task's worktree starts from.",
)
@click.option(
    "--wait",
    is_flag=True,
    help="Block until the task ends; print its output (exactly as the session wrote it when "
    "stdout is a pipe or a file; on a terminal, control characters are shown escaped).",
)
@json_option
@pass_ctx
def submit(
    ctx: Context,
    text: str,
    caps: tuple[str, ...],
    agent: str | None,
    workspace: str | None,
    parent: str | None,
    to: str | None,
    priority: int,
    min_score: float | None,
    labels: tuple[str, ...],
    max_attempts: int,
    idempotency_key: str | None,
    tenant: str | None,
    wait: bool,
    as_json: bool,
    budget_usd: float | None,
    source: str | None,
    after: tuple[str, ...],
    if_dependency_fails: str,
    base: str | None,
) -> None:
    """Submit a task. TEXT is what to do ("-" reads it from stdin); --from FILE submits many."""
    if source is not None:
        given = [o for o, v in (("TEXT", text), ("--cap", caps), ("--agent", agent),
                                ("--workspace", workspace), ("--parent", parent), ("--to", to),
                                ("--wait", wait), ("--after", after), ("--base", base),
                                ("--if-dependency-fails", if_dependency_fails != "cancel"))
                 if v]  # fmt: skip
        if given:
            raise click.UsageError(
                f"--from takes every field from the file; leave out {', '.join(given)}"
            )
        from colibri.cli.bulk import submit_file

        submit_file(ctx, source, as_json)
        return
    if text is None:
        raise click.UsageError("give the task's TEXT, or --from FILE")
    if wait:
        ctx.patience()  # a bad --follow-for is refused before anything is submitted
    if text == "-":
        text = sys.stdin.read()
    handoff: str | None = None
    own_key = False  # an idempotency key made here, for a hand-off sent again
    if in_session():
        # Inside a session every new task is a hand-off: a child of the session's own task,
        # proved by its claim, and only to a workspace its workspace may send to.
        from colibri.cli.session import claim

        own = claim(None, None, None)
        if parent is not None and parent != own.task:
            raise click.UsageError(
                f"inside a session a new task is a child of its task ({own.task}); "
                "drop --parent (outside the session's environment, any parent may be given)"
            )
        parent, handoff = own.task, own.secret
        workspace = to or workspace
        # Sent again if the daemon restarts under it (wait_out_busy): a key of its own makes
        # the second send return the task the first one made, never a second child.
        if idempotency_key is None:
            import secrets

            idempotency_key, own_key = f"handoff-{secrets.token_hex(16)}", True
    elif to is not None:
        if not parent:
            raise click.UsageError(
                "--to hands work on from inside a session; outside one, give --parent ID too"
            )
        workspace = to
    from colibri.core import protocol as p

    fields: dict[str, Any] = dict(
        text=text,
        capabilities=list(caps),
        workspace=workspace,
        parent=parent,
        priority=priority,
        min_score=min_score,
        labels=list(labels),
        max_attempts=max_attempts,
        idempotency_key=idempotency_key,
        tenant=tenant,
        budget_usd=budget_usd,
        after=list(after),
        if_dependency_fails=if_dependency_fails,
        base=base,
        claim=handoff,
    )
    req = p.CreateTask(agent=agent, **fields) if agent else p.Submit(**fields)
    opened: list[Client] = []

    def send() -> SubmitReply:
        client = ctx.client()
        try:
            reply = client.request(req)
        except BaseException:
            client.close()
            raise
        opened.append(client)  # kept for the wait, if there is one: one connection for both
        return reply

    # A session handing work on waits out a busy or restarting daemon, as its reports do.
    reply = wait_out_busy(send) if in_session() else send()
    with opened[-1] as client:
        task = reply.task
        # (A key the client made itself, sent again after a takeover, is no news to the user.)
        if not reply.created and idempotency_key is not None and not own_key:
            click.echo(
                printable(f"colibri: idempotency key {idempotency_key} already names task "
                          f"{task.id} ({task.state}); nothing new was submitted"),
                err=True,
            )  # fmt: skip
        if reply.waits:
            click.echo(
                printable(f"colibri: task {task.id} waits: {reply.waits} "
                          f"(see: colibri why {task.id})"),
                err=True,
            )  # fmt: skip
        if wait:
            task = _wait(ctx, task.id, client)
    if as_json:
        print_json(task)
    elif wait:
        _say_ended(task)
    else:
        print_line(task.id)
    if wait and task.outcome != "done":
        sys.exit(1)


def _say_ended(task: Task) -> None:
    """An ended task's output on stdout; unless it is done, its outcome on stderr."""
    if task.output:
        print_output(task.output)
    if task.outcome != "done":
        error = f": {task.error}" if task.error else ""
        click.echo(printable(f"colibri: task {task.id} {task.outcome}{error}"), err=True)


@cli.command()
@click.argument("task_id", metavar="ID", shell_complete=task_ids("pending", "running"))
@json_option
@pass_ctx
def wait(ctx: Context, task_id: str, as_json: bool) -> None:
    """Block until task ID has ended (done, failed or cancelled); print its output.

    Exit 0 once it ended, whatever the outcome: read the task's outcome (with --json, the task
    object). A retry (back to pending) does not end the wait.
    """
    task = _wait(ctx, task_id)
    if as_json:
        print_json(task)
        return
    _say_ended(task)


def _wait(ctx: Context, task_id: str, client: Client | None = None) -> Task:
    """The task once it has ended, waited for through a takeover (or a restart) of the
    daemon: on the next daemon to answer, the wait is simply asked again. First on
    ``client``, if given (the connection that submitted it)."""
    from colibri.core.protocol import Wait

    return through_takeovers(
        ctx, lambda client: client.request(Wait(task=task_id)).task, patient=in_session(),
        connected=client,
    )  # fmt: skip
