"""The ledger: ``ledger`` (a page, rows since a position or a time, or followed live; read from
the board itself when no daemon runs for the root), and the paging ``ledger export``
(cli/bulk.py) shares."""

from __future__ import annotations

from collections.abc import Callable, Iterator
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


def parse_since(value: str | None) -> tuple[str, str]:
    """``--since`` of ``ledger``, ``ledger export`` and ``attach``: a ledger position (rows
    beyond it) or a date or instant (rows at or after it): ``(position, "")`` or
    ``("", instant)``."""
    if value is None:
        return "", ""
    from colibri.core.model import parse_rfc3339, rfc3339

    try:
        return "", rfc3339(parse_rfc3339(value if "T" in value else value + "T00:00:00Z"))
    except ValueError:
        pass
    try:
        return parse_position(value), ""
    except click.BadParameter:
        if value.isascii() and value.isdigit():
            raise  # a seq, but past the last there can be: said so
        raise click.BadParameter(
            f"{value!r} is neither a ledger position nor a time: write 1200, acme:40, "
            "2026-11-30 or 2026-11-30T08:00:00Z",
            param_hint="--since",
        ) from None


def parse_position(value: str, hint: str = "--since") -> str:
    """A ledger position as a user writes it: what ``more:`` printed (``acme:5,default:120``),
    or a number, the default tenant's seq (the rows of a board of one tenant are numbered so).
    Each tenant must be a name a tenant can have: a typo (``"2026-11-30 08:00"``, a time
    mistyped) would otherwise name a tenant there is none of, and read from the start."""
    from colibri.core import cursor
    from colibri.core.errors import BadRequest, shown
    from colibri.core.model import DEFAULT_TENANT, check_name

    if value.isascii() and value.isdigit():
        value = f"{DEFAULT_TENANT}:{value}"
    try:
        position = cursor.parse(value)
        for tenant in position:
            try:
                check_name(tenant, "tenant")
            except BadRequest as exc:
                raise BadRequest(f"ledger position {shown(value, 80)}: {exc.message}") from None
    except BadRequest as exc:
        raise click.BadParameter(exc.message, param_hint=hint) from None
    return cursor.render(position)


def position_of(entry: LedgerEntry) -> str:
    """How a row's place is shown: its seq, after its tenant's name but for the default's."""
    from colibri.core.model import DEFAULT_TENANT

    return str(entry.seq) if entry.tenant == DEFAULT_TENANT else f"{entry.tenant}:{entry.seq}"


def ledger_rows(page: Callable[[str], LedgerPage], after: str) -> Iterator[LedgerEntry]:
    """Every ledger row beyond the position ``after``, page by page (``page(after)``: a
    ``ledger`` reply of ``LEDGER_PAGE`` rows)."""
    while True:
        reply = page(after)
        yield from reply.entries
        if not reply.more:
            return
        after = reply.next


def _ledger_page(
    ctx: Context, after: str, limit: int, task_id: str | None, *, say_where: bool
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
@click.option(
    "--after",
    default="",
    metavar="POSITION",
    help="Only rows after this position: what `more:` printed (acme:5,default:120), or a seq "
    "of the default tenant.",
)
@click.option(
    "--since", metavar="POSITION|TIME",
    help="Only rows after this position, or at or after this date or instant (2026-11-30, "
    "2026-11-30T08:00:00Z).",
)  # fmt: skip
@click.option("--limit", type=click.IntRange(1, 10_000), default=1000, show_default=True)
@click.option("--follow", "-f", is_flag=True, help="Keep printing new rows as they are written.")
@json_option
@pass_ctx
def ledger(
    ctx: Context,
    task_id: str | None,
    after: str,
    since: str | None,
    limit: int,
    follow: bool,
    as_json: bool,
) -> None:
    """Print the ledger: every transition, oldest first (JSON lines with --json).

    colibri ledger export writes it whole, as JSON lines or CSV."""
    from colibri.core import cursor

    click_ctx = click.get_current_context()
    if click_ctx.invoked_subcommand is not None:
        return
    at_least = ""
    if since is not None:
        if click_ctx.get_parameter_source("after") is not click.core.ParameterSource.DEFAULT:
            raise click.UsageError(
                "give --since or --after, not both (--since POSITION is --after POSITION)"
            )
        after, at_least = parse_since(since)
    else:
        after = parse_position(after, "--after")

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
                f"{position_of(entry):>8} {entry.at} "
                f"{entry.task or 'schedule ' + str(entry.schedule)} "
                f"{entry.from_state or '-':>9} → {entry.to_state:<9}{agent}{extra}{by}",
                flush=True,
            )

    if not follow:
        told = as_json  # where the rows come from, said once (not into JSON lines)

        def page(after: str, size: int) -> LedgerPage:
            nonlocal told
            reply = _ledger_page(ctx, after, size, task_id, say_where=not told)
            told = True
            return reply

        if at_least:
            # Rows before the instant are read only to be passed over: in large pages.
            position = cursor.parse(after)
            shown = 0
            for entry in ledger_rows(lambda after: page(after, LEDGER_PAGE), after):
                if entry.at >= at_least:
                    if shown == limit:
                        click.echo(f"more: colibri ledger --after {cursor.render(position)}",
                                   err=True)  # fmt: skip
                        return
                    emit(entry)
                    shown += 1
                cursor.advance(position, (entry,))
            return
        reply = page(after, limit)
        for entry in reply.entries:
            emit(entry)
        if reply.more:
            click.echo(f"more: colibri ledger --after {reply.next}", err=True)
        return
    # The position followed from: every row up to it has been printed.
    last = cursor.parse(after)

    def follow_from(client: Client) -> None:
        # Run again on the next daemon after a takeover: from the last row printed, so that
        # no row is skipped or printed twice.
        from colibri.core.events import LedgerAppended
        from colibri.core.protocol import Ledger

        nonlocal last
        # Rows before --since's instant are read only to be passed over: in large pages.
        page = LEDGER_PAGE if at_least else limit
        at = cursor.render(last)
        reply = client.request(Ledger(after=at, limit=page, task=task_id, follow=True))
        while True:  # the rows already written, page by page, then the new ones
            for entry in reply.entries:
                emit(entry)
            last = cursor.parse(reply.next)
            if not reply.more:
                break
            reply = client.request(Ledger(after=reply.next, limit=page, task=task_id))
        for event in client.typed_events():
            if isinstance(event, LedgerAppended) and cursor.unread(last, event.entry):
                emit(event.entry)
                cursor.advance(last, (event.entry,))

    through_takeovers(ctx, follow_from)
