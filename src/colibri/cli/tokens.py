"""``colibri token``: the tokens agents and operators on other machines connect with.

Tokens are made, listed and revoked by the daemon's owner, on its Unix socket; the secret is
printed once, when it is made, and kept by the daemon only as a hash.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from colibri.cli.base import Context, cli, json_option, pass_ctx
from colibri.cli.completion import token_ids
from colibri.cli.output import print_json, print_line, print_table, printable

if TYPE_CHECKING:
    from colibri.core.tokens import Role


@cli.group()
def token() -> None:
    """Tokens for agents and operators on other machines (see colibri run --listen).

    \b
    colibri token create --tenant acme --role agent --agent build-7 --cap zfs --expires 30d
    colibri token create --tenant acme --role operator
    colibri token list
    colibri token revoke 3f9a0c51d2e4
    """


@token.command("create")
@click.option("--tenant", default="default", show_default=True, help="The one tenant it acts in.")
@click.option(
    "--role", required=True, type=click.Choice(["agent", "operator"]),
    help="agent: registers as --agent and runs tasks; operator: submits, reads, cancels.",
)  # fmt: skip
@click.option("--agent", "agent_name", metavar="NAME", help="The agent name it registers as.")
@click.option(
    "--cap", "caps", multiple=True, metavar="CAP",
    help="A capability the agent may offer (repeatable; none given: any).",
)  # fmt: skip
@click.option(
    "--workspace", metavar="NAME",
    help="The workspace the agent serves (without it, the agent may register with none).",
)  # fmt: skip
@click.option("--expires", metavar="DURATION", help="It stops working after this: 30d, 12h …")
@json_option
@pass_ctx
def create(
    ctx: Context,
    tenant: str,
    role: Role,
    agent_name: str | None,
    caps: tuple[str, ...],
    workspace: str | None,
    expires: str | None,
    as_json: bool,
) -> None:
    """Make a token; its secret is printed this once."""
    expires_in = None
    if expires is not None:
        from colibri.core.durations import MAX_DURATION, parse_duration

        expires_in = parse_duration(expires, low=1.0, high=MAX_DURATION)
    if role == "agent" and agent_name is None:
        raise click.UsageError("an agent token is for one agent: give --agent NAME")
    from colibri.core.protocol import TokenCreate

    reply = ctx.request(TokenCreate(
        tenant=tenant, role=role, agent=agent_name, capabilities=list(caps),
        workspace=workspace, expires_in=expires_in,
    ))  # fmt: skip
    info = reply.token
    if as_json:
        print_json({"id": info.id, "token": reply.secret})
        return
    who = f"agent {info.agent}" if info.agent else "operator"
    until = f", expires {info.expires_at}" if info.expires_at else ""
    # The secret alone on stdout (TOKEN=$(colibri token create …)); what it is, on stderr.
    click.echo(printable(f"token {info.id}: {who} in tenant {info.tenant}{until}"),
               err=True)  # fmt: skip
    print_line(reply.secret)
    click.echo(
        "this is the only time the secret is shown: hand it over now (COLIBRI_TOKEN=… on the "
        "other machine)",
        err=True,
    )


@token.command("list")
@json_option
@pass_ctx
def list_tokens(ctx: Context, as_json: bool) -> None:
    """Every token: id, tenant, role, agent, capabilities, dates (never a secret)."""
    from colibri.core.protocol import TokenList

    rows = ctx.request(TokenList()).tokens
    if as_json:
        print_json(rows)
        return
    print_table(
        [
            "ID",
            "TENANT",
            "ROLE",
            "AGENT",
            "CAPS",
            "WORKSPACE",
            "CREATED",
            "EXPIRES",
            "LAST USED",
            "REVOKED",
        ],  # fmt: skip
        [
            [
                r.id,
                r.tenant,
                r.role,
                r.agent or "-",
                ",".join(r.capabilities) or "-",
                r.workspace or "-",
                r.created_at,
                r.expires_at or "never",
                r.last_used_at or "never",
                r.revoked_at or "-",
            ]
            for r in rows
        ],  # fmt: skip
        empty="no tokens (make one with: colibri token create)",
    )


@token.command("revoke")
@click.argument("token_id", metavar="ID", shell_complete=token_ids)
@json_option
@pass_ctx
def revoke(ctx: Context, token_id: str, as_json: bool) -> None:
    """Revoke a token for good; connections that use it are closed at once.

    ID is the token's id, or any prefix of it that names one token (at least 4 characters)."""
    from colibri.core.protocol import TokenRevoke

    reply = ctx.request(TokenRevoke(token=token_id))
    if as_json:
        print_json(reply)
        return
    closed = reply.closed
    print_line(
        f"token {reply.token.id} revoked; {closed} connection{'s' * (closed != 1)} using it closed"
    )
