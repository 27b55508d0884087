"""The ``colibri`` command. Commands are thin: parse, call the client, print.

Heavy modules (the daemon, rich, the store) are imported inside the commands that need them,
so ``colibri --help`` and the quick commands start fast.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click

from colibri import __version__
from colibri.core.errors import ColibriError


class Context:
    def __init__(self, root: str | None) -> None:
        self.root_option = root

    def root(self) -> Path:
        from colibri.config import resolve_root

        return resolve_root(self.root_option, Path.cwd())

    def client(self) -> Any:
        from colibri.client import Client

        return Client.for_root(self.root())

    def call(self, cmd: str, **fields: Any) -> dict[str, Any]:
        with self.client() as client:
            return client.call(cmd, **fields)  # type: ignore[no-any-return]


pass_ctx = click.make_pass_decorator(Context)

json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")


class Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ColibriError as exc:
            from colibri.cli.output import printable

            click.echo(f"colibri: {printable(exc.message)}", err=True)
            sys.exit(1)
        except KeyboardInterrupt:
            sys.exit(130)


@click.group(
    cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.option(
    "--root",
    envvar="COLIBRI_ROOT",
    metavar="DIR",
    help="The Colibri root to use. Default: the nearest directory at or above the working "
    "directory that has .colibri/ [env: COLIBRI_ROOT]",
)
@click.version_option(__version__, prog_name="colibri")
@click.pass_context
def cli(ctx: click.Context, root: str | None) -> None:
    """Colibri: a task board and scheduler for fleets of agents.

    \b
    Start:   colibri init && colibri run
    Agents:  colibri agent --name build-1 --cap python -- ./run-task.sh
    Work:    colibri submit "upgrade zfs" --cap freebsd --cap zfs --wait
    Watch:   colibri list, colibri agents, colibri ledger --follow
    """
    ctx.obj = Context(root)


def main() -> None:
    from colibri.cli import agents, daemon, schedules, session, tasks, workspaces  # noqa: F401

    cli(prog_name="colibri")
