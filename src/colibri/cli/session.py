"""Commands a session runs from inside itself (out, fail, ask, ready), and the cost report.

A session's own commands wait out a daemon that is momentarily full, away or without its
store (a transient refusal): see ``context.wait_out_busy``.
"""

from __future__ import annotations

import sys
from typing import Any, Literal, NamedTuple

import click

from colibri.cli.base import Context, cli, json_option, pass_ctx
from colibri.cli.completion import task_ids, workspace_names
from colibri.cli.output import print_json, print_line, print_output, print_table
from colibri.core.errors import ColibriError, shown
from colibri.core.model import MIN_LINE

_session_options = [
    click.option(
        "--task", "task_id", envvar="COLIBRI_TASK_ID", metavar="ID",
        help="The session's task [env: COLIBRI_TASK_ID, or the header of COLIBRI_TASK_FILE].",
    ),
    click.option(
        "--epoch", envvar="COLIBRI_EPOCH", type=int,
        help="The claim reported on [env: COLIBRI_EPOCH, or the header of COLIBRI_TASK_FILE].",
    ),
    click.option(
        "--claim", "secret", envvar="COLIBRI_CLAIM", metavar="SECRET",
        help="The claim's secret [env: COLIBRI_CLAIM, or the header of COLIBRI_TASK_FILE].",
    ),
]  # fmt: skip


def session_options(f: Any) -> Any:
    for option in reversed(_session_options):
        f = option(f)
    return f


def current_task() -> str | None:
    """Inside a session: its task id, from the environment or its task file's header."""
    import os

    if os.environ.get("COLIBRI_TASK_ID"):
        return os.environ["COLIBRI_TASK_ID"]
    path = os.environ.get("COLIBRI_TASK_FILE")
    if path and os.path.exists(path):
        from colibri.core.lineage import parse_body

        with open(path, encoding="utf-8") as handle:
            return parse_body(handle.read()).task
    return None


class SessionClaim(NamedTuple):
    task: str
    epoch: int
    secret: str


def claim(task_id: str | None, epoch: int | None, secret: str | None) -> SessionClaim:
    """The claim a session reports on — task, epoch and secret — from the options or the
    environment, or, for a session started before its task came (a warm one), from its task
    file's header."""
    import os

    task_id = task_id or os.environ.get("COLIBRI_TASK_ID") or None
    if epoch is None and (os.environ.get("COLIBRI_EPOCH") or "").isdigit():
        epoch = int(os.environ["COLIBRI_EPOCH"])
    secret = secret or os.environ.get("COLIBRI_CLAIM") or None
    path = os.environ.get("COLIBRI_TASK_FILE")
    if (task_id is None or epoch is None or not secret) and path and os.path.exists(path):
        from colibri.core.lineage import parse_body

        with open(path, encoding="utf-8") as handle:
            body = parse_body(handle.read())
        task_id = task_id or body.task
        epoch = epoch if epoch is not None else body.epoch
        secret = secret or body.claim
    if task_id is None or epoch is None or not secret:
        raise click.UsageError(
            "run this inside a session (it sets COLIBRI_TASK_ID, COLIBRI_EPOCH and "
            "COLIBRI_CLAIM), or give --task, --epoch and --claim"
        )
    return SessionClaim(task_id, epoch, secret)


def parse_cost(text: str) -> dict[str, Any]:
    """``--cost`` as JSON (``{"usd": 0.12}``) or ``usd=0.12,tokens_in=900,model=sonnet``."""
    import json

    text = text.strip()
    if text.startswith("{"):
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise click.BadParameter(f"not valid JSON: {exc}") from None
        if not isinstance(value, dict):
            raise click.BadParameter("give a JSON object")
        return value
    cost: dict[str, Any] = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, raw = part.partition("=")
        if not eq:
            raise click.BadParameter(
                f"{shown(part)}: write key=value (usd, tokens_in, tokens_out, model)"
            )
        try:
            if key in ("tokens_in", "tokens_out"):
                cost[key] = int(raw)
            elif key == "usd":
                cost[key] = float(raw)
            else:
                cost[key] = raw
        except ValueError:
            raise click.BadParameter(f"{shown(part)}: {key} must be a number") from None
    return cost


@cli.command("out")
@click.argument("text", required=False)
@click.option(
    "--file",
    "path",
    type=click.Path(exists=True, dir_okay=False),
    help="Read the output from a file.",
)
@click.option(
    "--cost", help="What the session cost: usd=0.12,tokens_in=900,tokens_out=300 or JSON."
)
@session_options
@json_option
@pass_ctx
def out(
    ctx: Context,
    text: str | None,
    path: str | None,
    cost: str | None,
    task_id: str | None,
    epoch: int | None,
    secret: str | None,
    as_json: bool,
) -> None:
    """Inside a session: report the task done with TEXT ("-": stdin) as its output.

    The session may go on running; the task is closed when it ends. An output too long for
    one request line is cut to fit: its head and tail are kept, and a line between says so.
    """
    own = claim(task_id, epoch, secret)
    if path is not None:
        with open(path, encoding="utf-8", errors="replace") as handle:
            output = handle.read()
    elif text == "-" or text is None:
        output = sys.stdin.read() if text == "-" or not sys.stdin.isatty() else ""
    else:
        output = text
    import msgspec

    from colibri.core import protocol as p
    from colibri.core.errors import BadRequest

    fields: dict[str, Any] = dict(
        task=own.task, epoch=own.epoch, cost=parse_cost(cost) if cost else None,
        session_ended=False, from_session=True, claim=own.secret,
    )  # fmt: skip
    from colibri.core.sizes import fit_report
    from colibri.core.text import storable

    output = storable(output)
    if len(output) > MIN_LINE // 8:  # might not fit: ask the daemon how long a line may be
        max_line = ctx.request(p.Ping(), patient=True).max_line
        output = fit_report(output, max_line, "out", fields)
    try:
        report = msgspec.convert({**fields, "output": output}, p.Out)
    except msgspec.ValidationError as exc:  # a --cost the daemon would refuse, as it says it
        raise BadRequest(str(exc)) from None
    task = ctx.request(report, patient=True).task
    print_json(task) if as_json else print_line(f"task {own.task} done")


@cli.command("fail")
@click.argument("error", required=False, default="")
@session_options
@json_option
@pass_ctx
def fail(
    ctx: Context,
    error: str,
    task_id: str | None,
    epoch: int | None,
    secret: str | None,
    as_json: bool,
) -> None:
    """Inside a session: report the task failed, saying why."""
    from colibri.core import protocol as p

    own = claim(task_id, epoch, secret)
    report = p.Fail(
        task=own.task, epoch=own.epoch, error=error or "reported failed by the session",
        session_ended=False, from_session=True, claim=own.secret,
    )  # fmt: skip
    task = ctx.request(report, patient=True).task
    print_json(task) if as_json else print_line(f"task {own.task} {task.state}")


@cli.command("ask")
@click.argument("question")
@session_options
@pass_ctx
def ask(
    ctx: Context, question: str, task_id: str | None, epoch: int | None, secret: str | None
) -> None:
    """Inside a session: ask the operator QUESTION; wait for the answer and print it."""
    own = claim(task_id, epoch, secret)
    import time

    from colibri.core import protocol as p

    asking = p.Ask(task=own.task, epoch=own.epoch, claim=own.secret, question=question)
    while True:  # a daemon restart drops the wait: ask again once it is back
        try:
            reply = ctx.request(asking, patient=True)
        except ColibriError as exc:
            if not exc.transient:
                raise
            time.sleep(0.5)
            continue
        print_output(reply.answer)
        return


@cli.command("answer")
@click.argument("task_id", metavar="TASK", shell_complete=task_ids("running", asking=True))
@click.argument("text")
@json_option
@pass_ctx
def answer(ctx: Context, task_id: str, text: str, as_json: bool) -> None:
    """Answer the question TASK's session is waiting on."""
    from colibri.core import protocol as p

    task = ctx.request(p.Answer(task=task_id, text=text)).task
    print_json(task) if as_json else print_line(f"answered {task_id}")


@cli.command("ready")
@session_options
@pass_ctx
def ready(ctx: Context, task_id: str | None, epoch: int | None, secret: str | None) -> None:
    """Inside a tmux session: say the agent is ready; its task is typed in next."""
    from colibri.core import protocol as p

    own = claim(task_id, epoch, secret)
    ctx.request(p.Ready(task=own.task, epoch=own.epoch, claim=own.secret), patient=True)


@cli.command("attach-session")
@click.argument("task_id", metavar="TASK", shell_complete=task_ids("running"))
@pass_ctx
def attach_session(ctx: Context, task_id: str) -> None:
    """Watch (and type into) the tmux session running TASK. Detach with Ctrl+B d."""
    import os

    from colibri.agent.tmux import socket_for
    from colibri.core import protocol as p
    from colibri.core.errors import NoSession

    task = ctx.request(p.Get(task=task_id)).task
    task_id = task.id  # the whole id, as the tmux session is named, where a prefix was given
    if task.state != "running" or not task.agent:
        raise NoSession(f"task {task_id} is {task.state}: no session to attach to")
    sock = socket_for(ctx.root(), task.agent)
    if not sock.exists():
        raise NoSession(f"agent {task.agent} runs no tmux sessions here ({sock})")
    os.execvp("tmux", ["tmux", "-S", str(sock), "attach-session", "-t", task_id])


@cli.command()
@click.option(
    "--by",
    type=click.Choice(["agent", "workspace", "tenant", "day"]),
    default="agent",
    show_default=True,
    help="Sum per this.",
)
@click.option("--since", metavar="TIME", help="Only sessions since this (2026-11-30 or RFC 3339).")
@json_option
@pass_ctx
def cost(
    ctx: Context,
    by: Literal["agent", "workspace", "tenant", "day"],
    since: str | None,
    as_json: bool,
) -> None:
    """What the sessions cost: sessions, dollars and tokens, summed."""
    from colibri.core import protocol as p

    rows = ctx.request(p.CostTotals(by=by, since=since)).totals
    if as_json:
        print_json(rows)
        return
    print_table(
        [by.upper(), "SESSIONS", "USD", "TOKENS IN", "TOKENS OUT"],
        [
            [r["key"] or "-", r["sessions"], _dollars(r["usd"]), r["tokens_in"], r["tokens_out"]]
            for r in rows
        ],
        empty="no session has reported a cost yet",
    )
    if len(rows) > 1:
        print(
            f"total: {sum(r['sessions'] for r in rows)} sessions, "
            f"${_dollars(sum(r['usd'] or 0.0 for r in rows))}"
        )


@cli.command("send")
@click.option(
    "--to",
    "to",
    required=True,
    metavar="WORKSPACE",
    shell_complete=workspace_names,
    help="The workspace to message.",
)
@click.argument("text")
@json_option
@pass_ctx
def send(ctx: Context, to: str, text: str, as_json: bool) -> None:
    """Send TEXT (no task) to WORKSPACE's subscribers.

    A message that carries a task header goes down their priority chain until one consumes it;
    any other is broadcast to all of them.
    """
    import msgspec

    from colibri.core import protocol as p

    reply = ctx.request(p.Send(to=to, text=text))
    if as_json:
        shown = msgspec.to_builtins(reply)
        del shown["ok"], shown["id"]
        print_json(shown)
    elif reply.consumed_by:
        print_line(f"consumed by {reply.consumed_by}")
    else:
        print(f"delivered to {len(reply.delivered)} subscriber(s)")


@cli.command("events")
@click.option("--priority", type=int, default=0, show_default=True, help="Higher hears first.")
@click.option(
    "--workspace",
    shell_complete=workspace_names,
    help="Also receive the messages sent to this workspace.",
)
@click.option("--name", help="How send replies name this subscriber.")
@pass_ctx
def events(ctx: Context, priority: int, workspace: str | None, name: str | None) -> None:
    """Print every event as it happens, as JSON lines (Ctrl+C stops)."""
    from colibri.cli.output import print_json_line
    from colibri.core import protocol as p

    with ctx.client() as client:
        client.request(p.Subscribe(priority=priority, workspace=workspace, name=name))
        for event in client.events():
            print_json_line(event)


def _dollars(usd: float | None) -> str:
    """Dollars to four places; a sum too large for a float (the store had costs from before
    they were bounded) comes as null in JSON."""
    return "too large to show" if usd is None or usd == float("inf") else f"{usd:.4f}"
