"""Agent and board commands: agents, skills, status, pause, resume, and the agent harness."""

from __future__ import annotations

from pathlib import Path

import click

from colibri.cli.base import Context, cli, json_option, pass_ctx
from colibri.cli.completion import workspace_names
from colibri.cli.output import print_json, print_line, print_table
from colibri.core.errors import UnknownWorkspace


@cli.command()
@json_option
@pass_ctx
def agents(ctx: Context, as_json: bool) -> None:
    """List agents: capabilities, slots, presence, running tasks."""
    from colibri.core import protocol as p

    rows = ctx.request(p.Agents()).agents
    if as_json:
        print_json(rows)
        return
    print_table(
        ["NAME", "ONLINE", "SLOTS", "RUNNING", "CAPABILITIES", "WORKSPACE", "LAST SEEN"],
        [
            [
                a.name,
                "yes" if a.online else "no",
                a.slots,
                len(a.running),
                ",".join(a.capabilities) or "-",
                a.workspace or "-",
                a.last_seen or "-",
            ]
            for a in rows
        ],
        empty="no agents (start one with: colibri agent --name NAME --cap CAP -- COMMAND)",
    )


@cli.command()
@click.argument("name", required=False)
@click.argument("description", required=False)
@json_option
@pass_ctx
def skills(ctx: Context, name: str | None, description: str | None, as_json: bool) -> None:
    """List the skills catalog (capabilities), or describe one: skills NAME "DESCRIPTION"."""
    from colibri.core import protocol as p

    if name is not None:
        if description is None:
            raise click.UsageError("give a DESCRIPTION to describe the skill NAME")
        skill = ctx.request(p.DescribeSkill(name=name, description=description)).skill
        if as_json:
            print_json(skill)
        else:
            print_line(f"described {skill.name}")
        return
    rows = ctx.request(p.Skills()).skills
    if as_json:
        print_json(rows)
        return
    print_table(
        ["SKILL", "AGENTS", "DESCRIPTION"],
        [[s.name, s.agents, s.description or "-"] for s in rows],
        empty="no skills yet (agents add theirs when they register)",
    )


@cli.command()
@json_option
@pass_ctx
def status(ctx: Context, as_json: bool) -> None:
    """Show the daemon and the board at a glance."""
    from colibri.core import protocol as p
    from colibri.core import replies

    reply = ctx.request(p.Status())
    if as_json:
        print_json(replies.fields(reply))
        return
    d = reply.daemon
    if reply.you:  # over --connect: a token sees who it is, not the whole board
        you = reply.you
        agent = f" as agent {you['agent']}" if you.get("agent") else ""
        print_line(f"daemon   colibri {d['version']} at {ctx.connect}")
        print_line(f"you      {you['role']} token {you['token']} in tenant {you['tenant']}{agent}")
        print(f"dispatch {'PAUSED' if reply.paused else 'running'}")
        return
    assert reply.tasks and reply.agents and reply.slots  # to the owner, the board's counts
    print_line(f"daemon   pid {d['pid']}, up {d['uptime']:.0f}s, root {d['root']}")
    print_line(f"store    {d['store']} (durability {d['durability']})")
    if d.get("listen"):
        print_line(f"listen   {', '.join(d['listen'])}")
    if d.get("metrics"):
        print_line(f"metrics  {d['metrics']}")
    print(f"dispatch {'PAUSED (resume with: colibri resume)' if reply.paused else 'running'}")
    tasks, outcomes = reply.tasks, reply.outcomes or {}
    ended = ", ".join(f"{n} {o}" for o, n in outcomes.items())
    print_line(
        f"tasks    {tasks['pending']} pending, {tasks['running']} running; ended: {ended} "
        f"({tasks['closed']} closed)"
    )
    print_line(
        f"agents   {reply.agents['online']} online of {reply.agents['known']}, "
        f"{reply.slots['busy']}/{reply.slots['total']} slots busy"
    )
    if reply.warnings:
        counts = ", ".join(f"{w}: {n}" for w, n in reply.warnings.items())
        print_line(f"warnings sessions never ready — {counts}")
    for harness in reply.harnesses or []:
        print_line(f"harness  {harness.workspace}: {harness.describe()}")


def _toggle(ctx: Context, paused: bool, as_json: bool) -> None:
    from colibri.core import protocol as p

    now = ctx.request(p.ToggleSwarm(paused=paused)).paused
    if as_json:
        print_json({"paused": now})
    else:
        print("dispatch paused; submissions are still accepted" if now else "dispatch resumed")


@cli.command()
@json_option
@pass_ctx
def pause(ctx: Context, as_json: bool) -> None:
    """Pause dispatch (submissions are still accepted)."""
    _toggle(ctx, True, as_json)


@cli.command()
@json_option
@pass_ctx
def resume(ctx: Context, as_json: bool) -> None:
    """Resume dispatch."""
    _toggle(ctx, False, as_json)


@cli.command(context_settings={"ignore_unknown_options": False})
@click.option("--name", help="Unique agent name (default: the workspace's name).")
@click.option("--cap", "caps", multiple=True, metavar="CAP", help="A capability (repeatable).")
@click.option("--slots", type=click.IntRange(1, 10_000), help="Sessions at once [default: 1].")
@click.option("--ttl", type=float, help="Seconds of silence before the daemon counts it offline.")
@click.option(
    "--workspace",
    shell_complete=workspace_names,
    help="The workspace this agent serves; without COMMAND, run it as colibri.jsonc defines it.",
)
@click.option("--tenant", help="Tenant (default: default; with --connect: the token's).")
@click.option(
    "--state-dir",
    type=click.Path(file_okay=False, path_type=Path),
    metavar="DIR",
    help="With --connect: where this agent keeps its sessions' files and their socket "
    "[default: $XDG_STATE_HOME/colibri/agents/NAME].",
)
@click.option(
    "--log-level", default="info", show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
)  # fmt: skip
@click.option(
    "--log-file",
    type=click.Path(dir_okay=False, path_type=Path),
    hidden=True,
    help="The file stdout and stderr are (the daemon gives its harnesses one); rotated past "
    "--log-rotate-bytes.",
)
@click.option("--log-rotate-bytes", type=click.IntRange(0), default=0, hidden=True)
@click.option(
    "--orphan-after",
    type=click.FloatRange(min=0, min_open=True),
    hidden=True,
    help="Stop, sessions and all, once no daemon has held the root this many seconds (the "
    "daemon gives its harnesses supervisor.orphan_after).",
)
@click.argument("command", nargs=-1)
@pass_ctx
def agent(
    ctx: Context,
    name: str | None,
    caps: tuple[str, ...],
    slots: int | None,
    ttl: float | None,
    workspace: str | None,
    tenant: str | None,
    state_dir: Path | None,
    log_level: str,
    log_file: Path | None,
    log_rotate_bytes: int,
    orphan_after: float | None,
    command: tuple[str, ...],
) -> None:
    """Run an agent: each assigned task runs COMMAND with the task text on stdin.

    \b
    Exit 0 reports the task done with stdout as its output; any other exit fails it.
    Example:  colibri agent --name build-7 --cap freebsd --cap zfs -- ./run-task.sh
    A workspace of colibri.jsonc, as defined there:  colibri agent --workspace api
    On another machine:  colibri agent --connect tcp://board:7433 --tls-ca ca.pem \\
                         --name build-7 --cap zfs -- ./run-task.sh   (COLIBRI_TOKEN set)
    """
    import os

    from colibri import host
    from colibri.agent.harness import run_agent
    from colibri.agent.spec import AgentSpec
    from colibri.client import socket_path
    from colibri.config import host_mode
    from colibri.logs import setup

    setup(
        log_level, "text", (log_file, log_rotate_bytes) if log_file and log_rotate_bytes else None
    )
    host.select(host_mode(os.environ))
    remote = ctx.remote()
    if remote is not None:
        if not command or name is None:
            raise click.UsageError(
                "an agent on another machine needs a --name (its token's) and a COMMAND to run "
                "per task (colibri.jsonc workspaces are the daemon host's)"
            )
        root = _agent_state(state_dir, name)
    else:
        root = ctx.root()
    if command:
        if name is None:
            raise click.UsageError("give the agent a --name")

        spec = AgentSpec(
            name=name, command=list(command), capabilities=list(caps), slots=slots or 1,
            ttl=ttl, workspace=workspace, tenant=tenant, cwd=Path.cwd(),
        )  # fmt: skip
    else:
        if workspace is None:
            raise click.UsageError("give a COMMAND to run per task, or --workspace NAME")
        from colibri.config import load_config

        workspaces = load_config(root).workspaces
        defined = workspaces.get(workspace)
        if defined is None:
            raise UnknownWorkspace(workspace, list(workspaces))
        spec = AgentSpec.from_workspace(
            defined, name=name, capabilities=list(caps), slots=slots, ttl=ttl, tenant=tenant
        )
    if remote is None:
        spec.orphan_after = orphan_after
    spec.check_command()
    run_agent(spec, remote if remote is not None else socket_path(root), root)


def _agent_state(state_dir: Path | None, name: str) -> Path:
    """The folder an agent on another machine works from: a root of its own (``.colibri/``
    inside, 0700), holding its sessions' files and the relay's socket, no colibri.jsonc."""
    import os

    from colibri.config import MAX_SOCKET_PATH
    from colibri.core.model import check_name
    from colibri.layout import RootLayout
    from colibri.privatefiles import private_dir

    check_name(name, "agent name")
    if state_dir is None:
        base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
        state_dir = Path(base) / "colibri" / "agents" / name
    root = state_dir.expanduser().resolve()
    root.mkdir(mode=0o700, parents=True, exist_ok=True)
    layout = RootLayout(root)
    private_dir(layout.state)
    if len(os.fsencode(layout.socket)) > MAX_SOCKET_PATH:
        from colibri.core.errors import ConfigError

        raise ConfigError(
            f"{layout.socket} is longer than Unix sockets allow ({MAX_SOCKET_PATH} bytes); "
            "give a shorter --state-dir"
        )
    return root
