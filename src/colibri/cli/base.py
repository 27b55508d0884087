"""What every command module of the ``colibri`` command builds on: the ``cli`` group and its
options, ``pass_ctx`` and ``json_option``; and, from cli/context.py, ``Context`` (the root or
the daemon over TCP a command talks to), ``through_takeovers``, ``wait_out_busy`` and
``in_session``. Commands are thin: parse, call the client, print.

Heavy modules (the daemon, rich, the store) are imported inside the commands that need them,
so ``colibri --help`` and the quick commands start fast. The command modules import this one,
and ``cli/main.py`` imports them; this one imports none of them. How a command fails is
``cli/failure.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from colibri import __version__
from colibri.cli.context import (
    FOLLOW_PATIENCE,
    Context,
    in_session,
    through_takeovers,
    wait_out_busy,
)
from colibri.cli.failure import JSON_META, Group

__all__ = [
    "Context",
    "cli",
    "complete_paths",
    "in_session",
    "json_option",
    "pass_ctx",
    "through_takeovers",
    "wait_out_busy",
]


pass_ctx = click.make_pass_decorator(Context)


def _note_json(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta[JSON_META] = True
    return value


json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    callback=_note_json,
    help='Print JSON instead of a table; an error as {"ok": false, "error": {"code", "message"}}.',
)


def complete_paths(kind: str) -> Callable[[click.Context, click.Parameter, str], list[Any]]:
    """Completes a file (``kind`` "file") or a directory ("dir") name: the shell does it."""

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        return [CompletionItem(incomplete, type=kind)]

    return complete


@click.group(
    cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.option(
    "--root",
    envvar="COLIBRI_ROOT",
    metavar="DIR",
    shell_complete=complete_paths("dir"),
    help="The Colibri root to use. Default: the nearest directory at or above the working "
    "directory that has .colibri/ [env: COLIBRI_ROOT]",
)
@click.option(
    "--connect",
    envvar="COLIBRI_CONNECT",
    metavar="tcp://HOST:PORT[,…]",
    help="Reach a daemon on another machine over TLS instead of this root's socket; several "
    "addresses are tried in turn [env: COLIBRI_CONNECT]",
)
@click.option(
    "--token",
    envvar="COLIBRI_TOKEN",
    metavar="TOKEN",
    help="The token to act with over --connect [env: COLIBRI_TOKEN; safer than the option, "
    "which other users can see in ps]",
)
@click.option(
    "--tls-ca",
    envvar="COLIBRI_TLS_CA",
    metavar="PEM",
    shell_complete=complete_paths("file"),
    help="The CA that signed the daemon's certificate (default: the system's) "
    "[env: COLIBRI_TLS_CA]",
)
@click.option(
    "--insecure-loopback",
    is_flag=True,
    envvar="COLIBRI_INSECURE_LOOPBACK",
    help="Plain TCP without TLS, to a loopback daemon run with --insecure-loopback (tests).",
)
@click.option(
    "--follow-for",
    envvar="COLIBRI_FOLLOW_FOR",
    metavar="DURATION",
    help="How long wait, submit --wait, attach and ledger --follow look for a daemon again "
    "after losing theirs (a takeover, a restart), before they give up; 0: not at all "
    f"[default: {FOLLOW_PATIENCE:.0f}s; env: COLIBRI_FOLLOW_FOR]",
)
@click.version_option(__version__, prog_name="colibri")
@click.pass_context
def cli(
    ctx: click.Context,
    root: str | None,
    connect: str | None,
    token: str | None,
    tls_ca: str | None,
    insecure_loopback: bool,
    follow_for: str | None,
) -> None:
    """Colibri: a task board and scheduler for fleets of agents.

    \b
    Start:   colibri init && colibri run
    Try:     colibri init --starter try && cd try && colibri run
    Agents:  colibri agent --name build-1 --cap python -- ./run-task.sh
    Work:    colibri submit "upgrade zfs" --cap freebsd --cap zfs --wait
    Watch:   colibri tui, colibri attach, colibri list, colibri ledger --follow
    """
    from click.core import ParameterSource

    if (
        ctx.get_parameter_source("root") == ParameterSource.COMMANDLINE
        and ctx.get_parameter_source("connect") == ParameterSource.ENVIRONMENT
    ):
        connect = None  # what the command line names wins over the environment
    ctx.obj = Context(root, connect, token, tls_ca, insecure_loopback, follow_for)
