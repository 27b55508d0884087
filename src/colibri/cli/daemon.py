"""Root and daemon commands: init, run, demo."""

from __future__ import annotations

import os
from pathlib import Path

import click

from colibri.cli.main import Context, cli, pass_ctx


@cli.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Create the root even inside another root.")
def init(directory: Path | None, force: bool) -> None:
    """Make DIRECTORY (default: here) a Colibri root: colibri.jsonc and .colibri/."""
    from colibri.config import init_root
    from colibri.layout import CONFIG_NAME

    target = (directory or Path.cwd()).resolve()
    if init_root(target, force=force):
        print(f"initialised {target} (edit {target / CONFIG_NAME}; start with: colibri run)")
    else:
        print(f"{target} is already a Colibri root")


@cli.command()
@click.option(
    "--store", metavar="PATH", help="Put the SQLite board here instead of .colibri/colibri.sqlite."
)
@click.option(
    "--durability",
    type=click.Choice(["full", "relaxed"]),
    help="full: fsync each commit (default); relaxed: survive a daemon crash, not power loss.",
)
@click.option("--force", is_flag=True, help="Run even inside another root (creates a nested root).")
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)
@click.option(
    "--log-format", default="text", show_default=True, type=click.Choice(["text", "json"])
)
@click.option(
    "--loop",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "uvloop", "asyncio"]),
    help="Event loop: uvloop when it is installed (auto), or force one.",
)
@click.option(
    "--listen",
    multiple=True,
    metavar="tcp://HOST:PORT",
    help="Listen on TCP too, for agents and operators on other machines (repeatable; "
    "TLS: give --tls-cert and --tls-key).",
)
@click.option("--tls-cert", metavar="PEM", help="The TLS certificate (chain) to present.")
@click.option("--tls-key", metavar="PEM", help="The TLS certificate's private key.")
@click.option(
    "--lease-ttl",
    metavar="DURATION",
    help="On a PostgreSQL board: how long this daemon's lease lasts unrenewed (store.lease_ttl; "
    "10s by default); a standby takes over that long after a crash.",
)
@click.option(
    "--insecure-loopback",
    is_flag=True,
    help="Allow plain TCP without TLS on loopback addresses (for tests on one machine).",
)
@pass_ctx
def run(
    ctx: Context,
    store: str | None,
    durability: str | None,
    force: bool,
    log_level: str,
    log_format: str,
    loop: str,
    listen: tuple[str, ...],
    tls_cert: str | None,
    tls_key: str | None,
    lease_ttl: str | None,
    insecure_loopback: bool,
) -> None:
    """Run the daemon in the foreground (creating the root here if there is none).

    Stop it with Ctrl+C or SIGTERM. One daemon per root.
    """
    from colibri.config import init_root, load_config
    from colibri.daemon.app import run_loop, serve
    from colibri.logs import setup

    root = Path(ctx.root_option or os.getcwd()).expanduser().resolve()
    if init_root(root, force=force):
        click.echo(f"colibri: initialised a new root at {root}", err=True)
    config = load_config(
        root, store=store, durability=durability, listen=listen, tls_cert=tls_cert,
        tls_key=tls_key, insecure_loopback=insecure_loopback, lease_ttl=lease_ttl,
    )  # fmt: skip
    setup(log_level, log_format)
    raise SystemExit(run_loop(serve(config), loop))


@cli.command()
@click.argument(
    "directory",
    required=False,
    default="colibri-demo",
    type=click.Path(file_okay=False, path_type=Path),
)
@click.option(
    "--exit-when-done",
    is_flag=True,
    help="Submit one round of work, follow it until every task has ended, then stop.",
)
def demo(directory: Path, exit_when_done: bool) -> None:
    """A living demo swarm in DIRECTORY: a daemon, three agents, two workspaces, and tasks
    arriving until you quit (in the TUI on a terminal, else as lines). Quitting stops them."""
    from colibri.cli.demo import run_demo

    raise SystemExit(run_demo(directory.resolve(), exit_when_done=exit_when_done))
