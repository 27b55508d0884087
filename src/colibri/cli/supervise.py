"""Commands for supervising AI agents: ``export-skill`` (a SKILL.md that teaches one to drive
this CLI) and ``mcp`` (the same verbs as the tools of a Model Context Protocol server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from colibri.cli.base import Context, cli, json_option, pass_ctx


@cli.command("export-skill")
@click.option(
    "--role",
    type=click.Choice(["supervisor", "worker"]),
    default="supervisor",
    show_default=True,
    help="supervisor: submits and follows work; worker: runs inside a session.",
)
@click.option(
    "--out",
    "path",
    type=click.Path(dir_okay=False, path_type=Path),
    metavar="PATH",
    help="Write it to PATH (its folders are made) instead of stdout.",
)
@click.option("--force", is_flag=True, help="Replace the file at --out.")
@json_option
@pass_ctx
def export_skill(ctx: Context, role: str, path: Path | None, force: bool, as_json: bool) -> None:
    """Print a SKILL.md that teaches an AI agent to drive this swarm with the CLI.

    \b
    Made from the CLI's own commands and, inside a root, its workspaces and their send_to.
    Example:  colibri export-skill --out .claude/skills/colibri/SKILL.md
    """
    from colibri.cli.output import print_json
    from colibri.cli.skill import render

    text = render(cli, role, _workspaces(ctx))
    if path is not None:
        _write(path, text, force)
    if as_json:
        print_json({"role": role, "name": f"colibri-{role}",
                    "path": str(path) if path else None, "skill": text})  # fmt: skip
    elif path is None:
        click.echo(text, nl=False)
    else:
        click.echo(f"wrote {path}", err=True)


def _workspaces(ctx: Context) -> dict[str, Any] | None:
    """The root's workspaces: of the root named, or the one around the working directory;
    None outside any root (or for a daemon on another machine, whose file is not here)."""
    if ctx.connect:
        return None
    from colibri.config import find_root, load_config

    if ctx.root_option is None:
        found = find_root(Path.cwd())
        if found is None:
            return None
        from colibri.trust import check_root

        check_root(found)
        return load_config(found).workspaces
    return load_config(ctx.root()).workspaces


def _write(path: Path, text: str, force: bool) -> None:
    import os

    from colibri.core.errors import FileExists
    from colibri.privatefiles import write_private

    path.parent.mkdir(parents=True, exist_ok=True)
    if force:
        # Replaced whole, never written through a link planted at the path (in a folder others
        # may write, such a link would have the file written wherever it points).
        write_private(path, text.encode(), mode=0o644)
        return
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise FileExists(f"{path} exists already (give --force to replace it)") from None
    with open(fd, "w", encoding="utf-8") as file:
        file.write(text)


@cli.command("mcp")
@pass_ctx
def mcp(ctx: Context) -> None:
    """Serve the board's verbs as tools of a Model Context Protocol server on stdio.

    \b
    Tools:      submit, list, show, wait, cancel, answer, why, cost, status, agents,
                schedule_list, schedule_add, schedule_pause, schedule_resume
    Resources:  colibri://tasks, colibri://tasks/{task_id}, colibri://agents, colibri://status
    An MCP client starts it as:  colibri --root DIR mcp
    It needs the mcp extra:      pip install 'colibri-board[mcp]'
    """
    from colibri.cli.mcp_server import serve  # without the SDK: one line (colibri.extras)
    from colibri.client import socket_path

    remote = ctx.remote()
    serve(remote if remote is not None else socket_path(ctx.root()))
