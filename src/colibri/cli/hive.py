"""``colibri hive``: the daemons of a PostgreSQL board, read from the board itself."""

from __future__ import annotations

import click

from colibri.cli.main import Context, cli, json_option, pass_ctx
from colibri.cli.output import print_json, print_table


@cli.group()
def hive() -> None:
    """Several daemons on one PostgreSQL board (docs/HIVE.md)."""


@hive.command("list")
@click.option(
    "--store", metavar="postgresql://…",
    help="The board (default: this root's store, from colibri.jsonc).",
)  # fmt: skip
@json_option
@pass_ctx
def list_hive(ctx: Context, store: str | None, as_json: bool) -> None:
    """Each daemon of the board: serving (with its lease's epoch and time left) the whole board
    or some tenants, or standing by, and when it last said so. Read from PostgreSQL: it works
    while no daemon serves, and on any host."""
    from colibri.store.postgres import hive_list

    rows = hive_list(_postgres_board(ctx, store))
    if as_json:
        print_json(rows)
        return

    def role(row: dict[str, object]) -> str:
        left = row["lease_left_s"]
        if row["lease_epoch"] is not None and isinstance(left, float | int) and left > 0:
            return f"serving (epoch {row['lease_epoch']}, {float(left):.1f}s left)"
        # It beats at every third of its ttl: silent for longer than the ttl, it is gone.
        alive = float(row["beat_ago_s"]) <= float(row["ttl"])  # type: ignore[arg-type]
        return "standby" if alive else "gone"

    print_table(
        ["DAEMON", "ROLE", "TENANTS", "ADDRESS", "HOST", "PID", "LAST BEAT", "STARTED", "ROOT"],
        [
            [
                str(r["id"])[:8],
                role(r),
                ",".join(r["tenants"]) or "-",
                r["address"] or "-",
                r["host"],
                r["pid"],
                f"{float(r['beat_ago_s']):.1f}s ago",
                r["started_at"],
                r["root"] or "-",
            ]
            for r in rows
        ],  # fmt: skip
        empty="no daemon has run on this board",
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
