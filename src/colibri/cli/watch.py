"""Watching the swarm live: ``colibri tui`` (Textual) and ``colibri attach`` (lines)."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from colibri.cli.base import Context, cli, json_option, pass_ctx

if TYPE_CHECKING:
    from colibri.client import Client


@cli.command()
@pass_ctx
def tui(ctx: Context) -> None:
    """The board live in the terminal: tasks, agents, schedules; cancel, pause, answer, submit.

    Press ? inside for the keys. It keeps going when the daemon restarts, and waits for one
    when none runs.
    """
    import sys

    from colibri.client import socket_path

    if not sys.stdout.isatty() or not sys.stdin.isatty():
        raise click.UsageError(
            "colibri tui needs a terminal; for a stream of lines use: colibri attach"
        )
    from colibri.tui.app import ColibriApp

    remote = ctx.remote()
    if remote is not None:
        ColibriApp(remote).run()
    else:
        root = ctx.root()
        ColibriApp(socket_path(root), root=root).run()


@cli.command()
@click.option(
    "--since",
    metavar="POSITION",
    help="First show the ledger rows after this position (acme:5,default:120, or a seq of the "
    "default tenant; 0: all of it), then follow.",
)
@json_option
@pass_ctx
def attach(ctx: Context, since: str | None, as_json: bool) -> None:
    """Follow what the daemon does, one line per event, until it stops (exit 0).

    Task transitions, agents coming and going, schedule fires, questions, pauses: coloured on
    a terminal; with --json each event as one JSON line (catch-up rows as
    {"event": "ledger", "entry": …}). Over --connect (a token may not subscribe) it follows
    the ledger's rows instead.
    """
    from colibri.cli.base import through_takeovers
    from colibri.cli.ledger import parse_position
    from colibri.cli.stream import Printer, Seen, follow
    from colibri.core import cursor
    from colibri.core import protocol as p
    from colibri.core.errors import ConnectionClosed

    printer = Printer(as_json)
    # Over TCP a token may not subscribe: there the ledger's rows are what is followed.
    remote = ctx.remote() is not None
    if since is not None:
        since = parse_position(since)
    seen = Seen(None if since is None else cursor.parse(since))
    attached = False

    def attach_to(client: Client) -> None:
        # Run again on the next daemon after a takeover: from where the last one left off.
        nonlocal attached
        catch_up = since
        announce = None
        if not attached:
            status = client.request(p.Status())
            daemon = status.daemon
            # Not told to a token: the ledger holds every tenant's rows.
            ledger_at = status.ledger_at if isinstance(status.ledger_at, str) else None
            version = f"version {daemon.get('version')}"
            where = f"pid {daemon['pid']}" if "pid" in daemon else version
            seq = f", ledger at {ledger_at or 'its start'}" if ledger_at is not None else ""
            # Said once nothing can be missed any more (subscribed): what happens after the
            # line is shown, however soon.
            line = f"attached to the daemon ({where}){seq}; Ctrl+C detaches"

            def announce() -> None:
                printer.say(line)

            if seen.after is None and ledger_at is not None:
                seen.after = cursor.parse(ledger_at)
            attached = True
        else:
            catch_up = None if seen.after is None else cursor.render(seen.after)
        if not follow(
            client, printer, since=catch_up, subscribe=not remote, seen=seen, subscribed=announce
        ):
            raise ConnectionClosed("the daemon closed the connection")

    try:
        through_takeovers(ctx, attach_to)
    except ConnectionClosed:
        pass  # the root's daemon stopped
    printer.say("the daemon stopped; detached")
