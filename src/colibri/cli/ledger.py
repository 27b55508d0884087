"""The ledger: ``ledger`` (a page, rows since a seq or a time, or followed live; read from
the board itself when no daemon runs for the root), and the paging ``ledger export``
(cli/bulk.py) shares."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice
from typing import TYPE_CHECKING

import click

from colibri.cli.base import Context, cli, json_option, pass_ctx, through_takeovers
from colibri.cli.completion import task_ids
from colibri.cli.output import print_json_line, print_line, printable

if TYPE_CHECKING:
    from colibri.client import Client
    from colibri.core.model import LedgerEntry
    from colibri.core.replies import LedgerPage

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
    page: Callable[[int], LedgerPage], after: int, at_least: str = ""
) -> Iterator[LedgerEntry]:
    """Every ledger row after seq ``after``, page by page (``page(after)``: a ``ledger`` reply
    of ``LEDGER_PAGE`` rows), but those written before the instant ``at_least``. The ledger is
    read by seq only, so rows before that instant are read and passed over."""
    while True:
        reply = page(after)
        for entry in reply.entries:
            if not at_least or entry.at >= at_least:
                yield entry
        if not reply.more:
            return
        after = reply.next


def _ledger_page(
    ctx: Context, after: int, limit: int, task_id: str | None, *, say_where: bool
) -> LedgerPage:
    """Rows of the ledger, from the daemon; with no daemon running for this root, from its
    SQLite board itself, read-only, as ``hive list`` reads a PostgreSQL board: the ledger is
    what one reads after a daemon stopped or crashed, to see what happened."""
    import os

    from colibri.core.errors import DaemonNotRunning
    from colibri.core.protocol import Ledger

    try:
        with ctx.client() as client:
            return client.request(Ledger(after=after, limit=limit, task=task_id))
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

    def emit(entry: LedgerEntry) -> None:
        if at_least and entry.at < at_least:
            return
        if as_json:
            print_json_line(entry)
        else:
            extra = f"  [{entry.reason}]" if entry.reason else ""
            agent = f" @{entry.agent}" if entry.agent else ""
            by = f"  (uid {entry.uid} pid {entry.pid})" if entry.uid is not None else ""
            print_line(
                f"{entry.seq:>8} {entry.at} "
                f"{entry.task or 'schedule ' + str(entry.schedule)} "
                f"{entry.from_state or '-':>9} → {entry.to_state:<9}{agent}{extra}{by}",
                flush=True,
            )

    if not follow:
        told = as_json  # where the rows come from, said once (not into JSON lines)

        def page(after: int, size: int) -> LedgerPage:
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
                click.echo(f"more: colibri ledger --after {shown[limit - 1].seq}", err=True)
            return
        reply = page(after, limit)
        for entry in reply.entries:
            emit(entry)
        if reply.more:
            click.echo(f"more: colibri ledger --after {reply.next}", err=True)
        return
    last = after  # the position followed from: every row up to it has been printed

    def follow_from(client: Client) -> None:
        # Run again on the next daemon after a takeover: from the last row printed, so that
        # no row is skipped or printed twice.
        from colibri.core.events import LedgerAppended
        from colibri.core.protocol import Ledger

        nonlocal last
        # Rows before --since's instant are read only to be passed over: in large pages.
        page = LEDGER_PAGE if at_least else limit
        reply = client.request(Ledger(after=last, limit=page, task=task_id, follow=True))
        while True:  # the rows already written, page by page, then the new ones
            for entry in reply.entries:
                emit(entry)
            last = reply.next
            if not reply.more:
                break
            reply = client.request(Ledger(after=last, limit=page, task=task_id))
        for event in client.typed_events():
            if isinstance(event, LedgerAppended) and event.entry.seq > last:
                emit(event.entry)
                last = event.entry.seq

    through_takeovers(ctx, follow_from)
