"""``colibri hive``: the daemons of a PostgreSQL board, read from the board itself."""

from __future__ import annotations

import click

from colibri.cli.base import Context, cli, json_option, pass_ctx
from colibri.cli.output import print_json, print_table


@cli.group()
def hive() -> None:
    """Several daemons on one PostgreSQL board (docs/HIVE.md)."""


#: How long ``hive list`` goes on showing a daemon gone (silent past its lease's ttl), seconds.
GONE_SHOWN = 3600


def _silent_for(row: dict[str, object]) -> float:
    return float(row["beat_ago_s"])  # type: ignore[arg-type]


def _gone(row: dict[str, object]) -> bool:
    """It beats at every third of its ttl: silent for longer than the ttl, it is gone."""
    return _silent_for(row) > float(row["ttl"])  # type: ignore[arg-type]


@hive.command("list")
@click.option(
    "--store", metavar="postgresql://…",
    help="The board (default: this root's store, from colibri.jsonc).",
)  # fmt: skip
@click.option(
    "--all", "every", is_flag=True,
    help="Also the daemons gone for over an hour (the board keeps each a day after its last "
    "beat).",
)  # fmt: skip
@json_option
@pass_ctx
def list_hive(ctx: Context, store: str | None, every: bool, as_json: bool) -> None:
    """Each daemon of the board: serving (with its lease's epoch and time left) the whole board
    or some tenants, or standing by, its agents connected, and when it last said so; a daemon
    gone (silent past its lease's ttl) for an hour after its last beat (--all: longer). Read
    from PostgreSQL: it works while no daemon serves, and on any host."""
    from colibri.store.postgres import hive_list

    found = hive_list(_postgres_board(ctx, store))
    rows = [r for r in found if every or not _gone(r) or _silent_for(r) <= GONE_SHOWN]
    hidden = len(found) - len(rows)
    if as_json:
        print_json(rows)
        return
    if hidden:
        click.echo(
            f"{hidden} daemon{'s' if hidden > 1 else ''} gone for over an hour not shown "
            "(colibri hive list --all)",
            err=True,
        )

    def role(row: dict[str, object]) -> str:
        left = row["lease_left_s"]
        if row["lease_epoch"] is not None and isinstance(left, float | int) and left > 0:
            return f"serving (epoch {row['lease_epoch']}, {float(left):.1f}s left)"
        if _gone(row):
            return "gone"
        return "sharing (no tenant yet)" if row.get("sharing") else "standby"

    print_table(
        [
            "DAEMON",
            "ROLE",
            "TENANTS",
            "AGENTS",
            "ADDRESS",
            "HOST",
            "PID",
            "LAST BEAT",
            "STARTED",
            "ROOT",
        ],
        [
            [
                str(r["id"])[:8],
                role(r),
                ",".join(r["tenants"]) or "-",
                r["agents"],
                r["address"] or "-",
                r["host"],
                r["pid"],
                f"{float(r['beat_ago_s']):.1f}s ago",
                r["started_at"],
                r["root"] or "-",
            ]
            for r in rows
        ],  # fmt: skip
        empty="no daemon has run on this board" if not hidden else "no daemon beat within the hour",
    )


@hive.command("move")
@click.argument("tenant")
@click.option(
    "--to",
    "to",
    required=True,
    metavar="DAEMON",
    help="The daemon to serve it (its id, or the start of it; colibri hive list).",
)
@click.option(
    "--store",
    metavar="postgresql://…",
    help="The board (default: this root's store, from colibri.jsonc).",
)
@click.option(
    "--timeout",
    default=60.0,
    show_default=True,
    metavar="SECONDS",
    help="How long to wait for the daemon to take it.",
)
@json_option
@pass_ctx
def move(
    ctx: Context, tenant: str, to: str, store: str | None, timeout: float, as_json: bool
) -> None:
    """Hand TENANT over to another daemon sharing the board's tenants out (run --share): its
    owner stops serving it and gives its lease back at its next renewal, and that daemon — no
    other — takes it and serves it. Its agents and clients are sent there (not_owner); tasks
    that run keep running, and are adopted there. Waits until it is taken."""
    import time

    from colibri.core.errors import DaemonNotRunning
    from colibri.store.postgres import hand_over, lease_holder_of

    board = _postgres_board(ctx, store)
    marked = hand_over(board, tenant, to)
    started = time.monotonic()
    held = lease_holder_of(board, tenant) if not marked["already"] else None
    while not marked["already"] and (held is None or held["owner"] != marked["to"]):
        if time.monotonic() - started > timeout:
            raise DaemonNotRunning.at(
                f"daemon {marked['to'][:8]}",
                f"it did not take tenant {tenant} within {timeout:g}s (the tenant stays marked "
                "for it while it lives: see colibri hive list)",
            )
        time.sleep(0.1)
        held = lease_holder_of(board, tenant)
    took = round(time.monotonic() - started, 3)
    epoch = held["epoch"] if held is not None else marked["epoch"]
    done = {**marked, "epoch": epoch, "seconds": took}
    if as_json:
        print_json(done)
    elif marked["already"]:
        click.echo(f"tenant {tenant} is served by daemon {marked['to'][:8]} already")
    else:
        click.echo(
            f"moved tenant {tenant} from daemon {marked['from'][:8]} to {marked['to'][:8]} "
            f"(lease epoch {epoch}) in {took:.1f}s"
        )


@hive.command("grant")
@click.argument("role")
@click.option(
    "--store", metavar="postgresql://…",
    help="The board, connected to as the owner of its tables (default: this root's store).",
)  # fmt: skip
@json_option
@pass_ctx
def grant(ctx: Context, role: str, store: str | None, as_json: bool) -> None:
    """Make ROLE the one the board's daemons connect as, held to row-level security: made if
    it does not exist (LOGIN, no password), given the rows of the board's tables and nothing
    more. Run as the tables' owner; it makes or migrates the board first."""
    from colibri.store.postgres import grant_role

    done = grant_role(_postgres_board(ctx, store), role)
    if as_json:
        print_json(done)
        return
    made = "made role" if done["created"] else "role"
    forced = (
        "row-level security forced on every one"
        if not done["not_forced"]
        else f"row-level security NOT forced on {', '.join(done['not_forced'])}"
    )
    click.echo(
        f"{made} {done['role']}: the rows of the {len(done['tables'])} tables of schema "
        f"{done['schema']} at {done['board']}, {forced}; start daemons with the same "
        f"connection string and user={done['role']}"
    )


def _postgres_board(ctx: Context, store: str | None) -> str:
    """``--store``, or the root's; refused unless it is a PostgreSQL board."""
    from colibri.core.errors import ConfigError
    from colibri.store.postgres import is_postgres

    if store is None:
        from colibri.config import load_config

        store = load_config(ctx.root()).store
    if not is_postgres(store):
        raise ConfigError(
            f"the board {store} is an SQLite file: one daemon, no hive (give --store "
            "postgresql://… to name a PostgreSQL board)"
        )
    return store
