"""Task commands: submit, list, show, wait, cancel, retry, why, ledger."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from itertools import islice
from typing import Any

import click

from colibri.cli.completion import agent_names, task_ids, workspace_names
from colibri.cli.main import (
    Context,
    cli,
    in_session,
    json_option,
    pass_ctx,
    through_takeovers,
    wait_out_busy,
)
from colibri.cli.output import (
    TASK_COLUMNS,
    describe_task,
    print_json,
    print_json_line,
    print_line,
    print_output,
    print_table,
    print_tree,
    printable,
    task_row,
)

STATES = ["pending", "running", "done", "failed", "cancelled", "closed"]
OUTCOMES = ["done", "failed", "cancelled"]
#: The states of a task that has ended (one ``retry`` takes).
ENDED = ("done", "failed", "cancelled", "closed")


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
) -> None:
    """Submit a task. TEXT is what to do ("-" reads it from stdin); --from FILE submits many."""
    if source is not None:
        given = [o for o, v in (("TEXT", text), ("--cap", caps), ("--agent", agent),
                                ("--workspace", workspace), ("--parent", parent), ("--to", to),
                                ("--wait", wait)) if v]  # fmt: skip
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
        claim=handoff,
    )

    def send() -> dict[str, Any]:
        return ctx.call("create-task" if agent else "submit", agent=agent, **fields)

    # A session handing work on waits out a busy or restarting daemon, as its reports do.
    reply = wait_out_busy(send) if in_session() else send()
    task = reply["task"]
    # (A key the client made itself, sent again after a takeover, is no news to the user.)
    if not reply.get("created", True) and idempotency_key is not None and not own_key:
        click.echo(
            printable(f"colibri: idempotency key {idempotency_key} already names task "
                      f"{task['id']} ({task['state']}); nothing new was submitted"),
            err=True,
        )  # fmt: skip
    if reply.get("waits"):
        click.echo(
            printable(f"colibri: task {task['id']} waits: {reply['waits']} "
                      f"(see: colibri why {task['id']})"),
            err=True,
        )  # fmt: skip
    if wait:
        task = _wait(ctx, task["id"])
    if as_json:
        print_json(task)
    elif wait:
        if task.get("output"):
            print_output(task["output"])
        if task.get("outcome") != "done":
            error = f": {task['error']}" if task.get("error") else ""
            message = f"colibri: task {task['id']} {task.get('outcome')}{error}"
            click.echo(printable(message), err=True)
    else:
        print_line(task["id"])
    if wait and task.get("outcome") != "done":
        sys.exit(1)


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
    if every:
        tasks: list[dict[str, Any]] = []
        with ctx.client() as client:
            cursor = None
            while True:
                reply = client.call("list", **filters, after=cursor, limit=10_000)
                tasks += reply["tasks"]
                cursor = reply.get("next")
                if not cursor:
                    break
        remaining = 0
    else:
        newest = after is None
        reply = ctx.call(
            "list", **filters, after=after, before=before, newest=newest, limit=limit, count=True
        )
        tasks = reply["tasks"][::-1] if newest else reply["tasks"]
        remaining = reply.get("remaining", 0)
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
            f"colibri list --before {reply['next']} (or --all)"
            if older
            else f"{remaining} more: colibri list --after {reply['next']}"
        )
        click.echo(printable(more), err=True)


@cli.command()
@click.argument("task_id", metavar="ID", shell_complete=task_ids())
@click.option("--family", is_flag=True, help="Show the task's whole family as a tree.")
@json_option
@pass_ctx
def show(ctx: Context, task_id: str, family: bool, as_json: bool) -> None:
    """Show one task (--family: its whole family as a tree)."""
    if family:
        reply = ctx.call("family", task=task_id)
        if as_json:
            print_json(reply["tasks"])
        else:
            print_tree(reply["tasks"], mark=task_id)
        if not reply.get("complete", True):
            click.echo(
                f"colibri: the family is larger than one reply; {len(reply['tasks'])} tasks "
                f"shown (list the rest with: colibri list --parent ID)",
                err=True,
            )
        return
    task = ctx.call("get", task=task_id)["task"]
    if as_json:
        print_json(task)
    else:
        describe_task(task)


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
    if task.get("output"):
        print_output(task["output"])
    if task.get("outcome") != "done":
        error = f": {task['error']}" if task.get("error") else ""
        click.echo(printable(f"colibri: task {task['id']} {task.get('outcome')}{error}"), err=True)


def _wait(ctx: Context, task_id: str) -> dict[str, Any]:
    """The task once it has ended, waited for through a takeover (or a restart) of the
    daemon: on the next daemon to answer, the wait is simply asked again."""
    return through_takeovers(
        ctx, lambda client: client.call("wait", task=task_id)["task"], patient=in_session()
    )


@cli.command()
@click.argument("task_id", metavar="ID", shell_complete=task_ids("pending", "running"))
@click.option("--reason", help="Why; kept in the ledger.")
@json_option
@pass_ctx
def cancel(ctx: Context, task_id: str, reason: str | None, as_json: bool) -> None:
    """Cancel a task and its whole family of descendants."""
    reply = ctx.call("cancel", task=task_id, reason=reason)
    if as_json:
        print_json(reply["cancelled"])
        return
    n = len(reply["cancelled"])
    print(f"cancelled {n} task{'s' if n != 1 else ''}")
    for cancelled_id in reply["cancelled"]:
        print_line(f"  {cancelled_id}")


@cli.command()
@click.argument("task_id", metavar="ID", shell_complete=task_ids(*ENDED))
@json_option
@pass_ctx
def retry(ctx: Context, task_id: str, as_json: bool) -> None:
    """Submit an ended task again, as a new task."""
    task = ctx.call("retry", task=task_id)["task"]
    print_json(task) if as_json else print_line(task["id"])


@cli.command()
@click.argument("task_id", metavar="ID", shell_complete=task_ids())
@json_option
@pass_ctx
def why(ctx: Context, task_id: str, as_json: bool) -> None:
    """Explain where a task stands: every agent considered and why it can or cannot take it."""
    reply = ctx.call("why", task=task_id)
    reply.pop("ok", None)
    reply.pop("id", None)
    if as_json:
        print_json(reply)
        return
    task = reply["task"]
    print_line(f"task {task['id']} is {task['state']}: {reply['summary']}")
    print_line(
        f"requires: {', '.join(reply['required']) or '(nothing: any agent fits)'}; "
        f"min_score {reply['min_score']}"
    )
    rows = [
        [
            a["agent"],
            f"{a['score']:.2f}",
            ",".join(a["missing"]) or "-",
            "yes" if a["eligible"] else "no",
            "; ".join(a["reasons"]) or "-",
        ]
        for a in reply["agents"]
    ]
    print_table(
        ["AGENT", "SCORE", "MISSING", "ELIGIBLE", "WHY NOT"], rows, empty="no agents are registered"
    )


#: Rows asked for a page when the ledger is read on past rows that are not shown.
LEDGER_PAGE = 10_000


def parse_since(value: str | None) -> tuple[int, str]:
    """``--since`` of ``ledger`` and ``ledger export``: a ledger seq (rows after it), or a
    date or instant (rows at or after it): ``(seq, "")`` or ``(0, instant)``."""
    if value is None:
        return 0, ""
    if value.isascii() and value.isdigit():
        if int(value) >= 1 << 63:
            raise click.BadParameter(f"{value} is past the last seq there can be",
                                     param_hint="--since")  # fmt: skip
        return int(value), ""
    from colibri.core.model import parse_rfc3339, rfc3339

    try:
        return 0, rfc3339(parse_rfc3339(value if "T" in value else value + "T00:00:00Z"))
    except ValueError:
        raise click.BadParameter(
            f"{value!r} is neither a seq nor a time: write 1200, 2026-11-30 or "
            "2026-11-30T08:00:00Z",
            param_hint="--since",
        ) from None


def ledger_rows(
    page: Callable[[int], dict[str, Any]], after: int, at_least: str = ""
) -> Iterator[dict[str, Any]]:
    """Every ledger row after seq ``after``, page by page (``page(after)``: a ``ledger`` reply
    of ``LEDGER_PAGE`` rows), but those written before the instant ``at_least``. The ledger is
    read by seq only, so rows before that instant are read and passed over."""
    while True:
        reply = page(after)
        for entry in reply["entries"]:
            if not at_least or entry["at"] >= at_least:
                yield entry
        if not reply.get("more"):
            return
        after = reply["next"]


def _ledger_page(
    ctx: Context, after: int, limit: int, task_id: str | None, *, say_where: bool
) -> dict[str, Any]:
    """Rows of the ledger, from the daemon; with no daemon running for this root, from its
    SQLite board itself, read-only, as ``hive list`` reads a PostgreSQL board: the ledger is
    what one reads after a daemon stopped or crashed, to see what happened."""
    import os

    from colibri.core.errors import DaemonNotRunning

    try:
        with ctx.client() as client:
            return dict(client.call("ledger", after=after, limit=limit, task=task_id))
    except DaemonNotRunning:
        if ctx.remote() is not None:
            raise
        from colibri.config import load_config
        from colibri.store.offline import read_ledger
        from colibri.store.postgres import is_postgres

        root = ctx.root()
        board = load_config(root).store
        if is_postgres(board) or not os.path.lexists(board):
            # Its daemons may run elsewhere (colibri hive list says where); or no daemon has
            # run on this root yet: nothing to read.
            raise
        reply = read_ledger(board, after, limit, task_id)
    if say_where:
        click.echo(
            printable(f"colibri: no daemon is running for {root}: read from its board, {board}"),
            err=True,
        )
    return reply


@cli.group(invoke_without_command=True)
@click.option(
    "--task", "task_id", metavar="ID", shell_complete=task_ids(), help="Only rows of this task."
)
@click.option("--after", type=int, default=0, show_default=True, help="Only rows after this seq.")
@click.option(
    "--since", metavar="SEQ|TIME",
    help="Only rows after this seq, or at or after this date or instant (2026-11-30, "
    "2026-11-30T08:00:00Z).",
)  # fmt: skip
@click.option("--limit", type=click.IntRange(1, 10_000), default=1000, show_default=True)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new rows as they are written.")
@json_option
@pass_ctx
def ledger(
    ctx: Context,
    task_id: str | None,
    after: int,
    since: str | None,
    limit: int,
    follow: bool,
    as_json: bool,
) -> None:
    """Print the ledger: every transition, oldest first (JSON lines with --json).

    colibri ledger export writes it whole, as JSON lines or CSV."""
    click_ctx = click.get_current_context()
    if click_ctx.invoked_subcommand is not None:
        return
    at_least = ""
    if since is not None:
        if click_ctx.get_parameter_source("after") is not click.core.ParameterSource.DEFAULT:
            raise click.UsageError("give --since or --after, not both (--since SEQ is --after SEQ)")
        after, at_least = parse_since(since)

    def emit(entry: dict[str, Any]) -> None:
        if at_least and entry["at"] < at_least:
            return
        if as_json:
            print_json_line(entry)
        else:
            extra = f"  [{entry['reason']}]" if entry.get("reason") else ""
            agent = f" @{entry['agent']}" if entry.get("agent") else ""
            asked = entry.get("uid") is not None
            by = f"  (uid {entry['uid']} pid {entry['pid']})" if asked else ""
            print_line(
                f"{entry['seq']:>8} {entry['at']} "
                f"{entry.get('task') or 'schedule ' + str(entry.get('schedule'))} "
                f"{entry.get('from_state') or '-':>9} → {entry['to_state']:<9}{agent}{extra}{by}",
                flush=True,
            )

    if not follow:
        told = as_json  # where the rows come from, said once (not into JSON lines)

        def page(after: int, size: int) -> dict[str, Any]:
            nonlocal told
            reply = _ledger_page(ctx, after, size, task_id, say_where=not told)
            told = True
            return reply

        if at_least:
            rows = ledger_rows(lambda after: page(after, LEDGER_PAGE), after, at_least)
            shown = list(islice(rows, limit + 1))
            for entry in shown[:limit]:
                emit(entry)
            if len(shown) > limit:
                click.echo(f"more: colibri ledger --after {shown[limit - 1]['seq']}", err=True)
            return
        reply = page(after, limit)
        for entry in reply["entries"]:
            emit(entry)
        if reply.get("more"):
            click.echo(f"more: colibri ledger --after {reply['next']}", err=True)
        return
    last = after  # the position followed from: every row up to it has been printed

    def follow_from(client: Any) -> None:
        # Run again on the next daemon after a takeover: from the last row printed, so that
        # no row is skipped or printed twice.
        nonlocal last
        # Rows before --since's instant are read only to be passed over: in large pages.
        page = LEDGER_PAGE if at_least else limit
        reply = client.call("ledger", after=last, limit=page, task=task_id, follow=True)
        while True:  # the rows already written, page by page, then the new ones
            for entry in reply["entries"]:
                emit(entry)
            last = reply["next"]
            if not reply.get("more"):
                break
            reply = client.call("ledger", after=last, limit=page, task=task_id)
        for event in client.events():
            if event["event"] == "ledger" and event["entry"]["seq"] > last:
                emit(event["entry"])
                last = event["entry"]["seq"]

    through_takeovers(ctx, follow_from)
