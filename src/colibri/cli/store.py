"""``colibri store``: the board's storage itself, without a daemon."""

from __future__ import annotations

import os
import sys
from typing import Any

import click

from colibri.cli.base import Context, cli, json_option, pass_ctx
from colibri.cli.output import counted, print_json, print_line


@cli.group()
def store() -> None:
    """The board's storage, read and written without a daemon."""


@store.command("copy")
@click.option(
    "--to",
    "target",
    required=True,
    metavar="postgresql://…",
    help="The PostgreSQL board to copy into (made if its schema holds none).",
)
@click.option("--tenant", required=True, help="The tenant of that board every copied row goes to.")
@click.option(
    "--from",
    "source",
    metavar="PATH",
    help="The SQLite board to copy (default: this root's store, from colibri.jsonc).",
)
@click.option(
    "--dry-run", is_flag=True, help="Check everything, clashes and lease too; write nothing."
)
@json_option
@pass_ctx
def copy_store(
    ctx: Context, target: str, tenant: str, source: str | None, dry_run: bool, as_json: bool
) -> None:
    """Copy an SQLite board (tasks, ledger, schedules, agents, skills) into one tenant of a
    PostgreSQL board, in one transaction: all of it or nothing. No daemon may serve either
    board meanwhile. What is copied and what is not: docs/HIVE.md."""
    from colibri.core.errors import LockHeld
    from colibri.locks import hold_lock, store_lock
    from colibri.store.copy import check_source, copy_board

    if source is None:
        from colibri.config import load_config

        source = load_config(ctx.root()).store
    elif "://" not in source:
        source = os.path.abspath(os.path.expanduser(source))
    check_source(source)
    try:
        # Held through the copy: no daemon starts on the board while it is read.
        held = hold_lock(store_lock(source), own_folder=False)
    except LockHeld as exc:
        raise LockHeld(
            exc.holder,
            f"a daemon has the board {source} open: stop the daemon (pid {exc.holder}) first; "
            "nothing was copied",
        ) from None
    try:
        summary = copy_board(
            source, target, tenant, dry_run=dry_run,
            progress=_progress if sys.stderr.isatty() else None,
        )  # fmt: skip
    finally:
        os.close(held)
    if as_json:
        print_json(summary)
        return
    for line in summary_lines(summary):
        print_line(line)


def _progress(kind: str, done: int, total: int) -> None:
    """On a terminal: how far the copy is, on one line that each report rewrites."""
    click.echo(f"\rcopying {kind}: {done:,} of {total:,}", nl=done >= total, err=True)


def summary_lines(summary: dict[str, Any]) -> list[str]:
    """What a copy did, in the past; for a dry run, what it would do, in the conditional."""
    tenant = summary["tenant"]
    dry = bool(summary["dry_run"])
    states = ", ".join(f"{n} {state}" for state, n in summary["by_state"].items())
    seqs = summary["ledger_seqs"]
    numbered = f" (seq {seqs[0]}-{seqs[1]})" if seqs else ""
    lines = [
        f"{'would copy' if dry else 'copied'} {counted(summary['tasks'], 'task')}"
        f"{f' ({states})' if states else ''}, {counted(summary['ledger'], 'ledger row')}"
        f"{numbered}, {counted(summary['schedules'], 'schedule')} with "
        f"{counted(summary['fires'], 'fire record')}, {counted(summary['agents'], 'agent')} and "
        f"{counted(summary['skills'], 'new skill')} from {summary['from']} into tenant {tenant} "
        f"of {summary['to']}"
    ]
    others = [t for t in summary["tenants"] if t != tenant]
    if others:
        lines.append(
            f"the rows of {counted(len(others), 'tenant').split(' ', 1)[1]} {', '.join(others)} "
            + (f"would be in tenant {tenant}" if dry else f"are in tenant {tenant} now")
        )
    if summary["agents_kept"]:
        lines.append(
            f"{counted(summary['agents_kept'], 'agent')} registered in tenant {tenant} already "
            f"{'would keep' if dry else 'kept'} the target's registration"
        )
    if summary["running"]:
        lines.append(
            f"{counted(summary['running'], 'task')} running: the first daemon to serve the hive "
            f"{'would hold' if dry else 'holds'} them as orphans; not claimed back within its "
            f"adoption window, each {'would be' if dry else 'is'} retried if it has attempts "
            "left, otherwise failed"
        )
    if summary["tokens_not_copied"]:
        lines.append(
            f"{counted(summary['tokens_not_copied'], 'token')} "
            f"{'would not be' if dry else 'not'} copied: make the hive's own with colibri "
            f"token create --tenant {tenant}"
        )
    if summary["dry_run"]:
        lines.append("dry run: nothing was written")
    return lines
