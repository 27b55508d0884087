"""The SKILL.md of ``colibri export-skill``: how an AI agent drives the swarm with this CLI.

The recipes are written here; everything else is read from what it describes, so the skill
cannot fall behind the code: the command reference from the click commands themselves (each
command in the role's scope, its arguments, every option with its help), the error codes from
``core/errors/``, and the workspaces with their ``send_to`` edges from ``colibri.jsonc``.
"""

from __future__ import annotations

import inspect
import json
import textwrap
from collections.abc import Iterator, Mapping
from typing import Any

import click

from colibri.core.errors import BY_CODE

ROLES = ("supervisor", "worker")

#: Commands a supervisor does not drive, and why: they run or set up a host, a daemon or a
#: harness, or need a terminal. Every other command is in the supervisor's skill.
NOT_FOR_SUPERVISOR = {
    "init": "makes a root (a person's set-up)",
    "run": "runs the daemon",
    "demo": "runs a demo fleet",
    "tls": "makes certificates",
    "hive": "reads a PostgreSQL board's daemons",
    "token": "manages remote access",
    "agent": "runs a harness",
    "attach-session": "needs a terminal",
    "export-skill": "writes this file",
    "mcp": "serves these verbs over MCP",
}

#: Read commands a worker uses besides those that act on its own task.
WORKER_READS = ("show", "wait")


def walk(group: click.Group, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, click.Command]]:
    """Every leaf command under ``group``, by its full name (``schedule add``)."""
    for name in sorted(group.commands):
        command = group.commands[name]
        if command.hidden:
            continue
        if isinstance(command, click.Group):
            yield from walk(command, (*prefix, name))
        else:
            yield " ".join((*prefix, name)), command


def acts_in_a_session(command: click.Command) -> bool:
    """A command a session runs on its own task: it takes the claim (``--claim``)."""
    return any("--claim" in getattr(p, "opts", ()) for p in command.params)


def in_scope(group: click.Group, role: str) -> dict[str, click.Command]:
    """The commands the skill of ``role`` teaches, by full name."""
    commands = dict(walk(group))
    if role == "worker":
        return {
            name: command
            for name, command in commands.items()
            if acts_in_a_session(command) or name in ("submit", *WORKER_READS)
        }
    return {
        name: command
        for name, command in commands.items()
        if name.split()[0] not in NOT_FOR_SUPERVISOR and not acts_in_a_session(command)
    }


def global_flags(group: click.Group) -> set[str]:
    """The root group's options (``--root``, ``--connect`` …); the CLI lets each command take
    the remote ones too, so they are described once, not per command."""
    return {opt for p in group.params for opt in getattr(p, "opts", ())}


def option_lines(command: click.Command, ctx: click.Context, skip: set[str]) -> list[str]:
    lines = []
    for param in command.get_params(ctx):
        if not isinstance(param, click.Option) or skip & set(param.opts):
            continue
        record = param.get_help_record(ctx)
        if record is None:
            continue
        flags, help_text = record
        if param.name == "as_json":  # the same on every command; the rules say what it prints
            help_text = "Print JSON (see the rules)."
        help_text = " ".join(help_text.split())
        lines.append(f"- `{flags}`: {help_text}" if help_text else f"- `{flags}`")
    return lines


def help_of(command: click.Command) -> str:
    """A command's help as click shows it, without its no-rewrap markers (``\\b``)."""
    text = inspect.cleandoc(command.help or "")
    return "\n".join(line for line in text.splitlines() if line.strip() != "\b")


def reference(group: click.Group, commands: Mapping[str, click.Command]) -> str:
    """The command reference: usage, help and options of each command, from click."""
    root = click.Context(group, info_name="colibri")
    skip = global_flags(group) | {"--help", "-h"}
    parts = []
    for name, command in commands.items():
        ctx = click.Context(command, info_name=name, parent=root)
        usage = " ".join(command.collect_usage_pieces(ctx))
        body = [f"### colibri {name}", "", f"`colibri {name} {usage}`", "", help_of(command)]
        options = option_lines(command, ctx, skip)
        if options:
            body += ["", *options]
        parts.append("\n".join(body))
    return "\n\n".join(parts)


def globals_section(group: click.Group) -> str:
    root = click.Context(group, info_name="colibri")
    lines = option_lines(group, root, {"--help", "-h", "--version"})
    return "\n".join(
        [
            "Options every command takes (before its name; the remote ones after it too):",
            "",
            *lines,
        ]
    )


def error_codes() -> str:
    codes = ", ".join(f"`{code}`" for code in sorted(BY_CODE) if code != "error")
    return textwrap.fill(f"Error codes: {codes}.", width=96, break_on_hyphens=False)


def workspaces_section(workspaces: Mapping[str, Any], role: str) -> str:
    """This root's workspaces, what each can do and where each may hand work."""
    if not workspaces:
        return ""
    rows = ["| workspace | capabilities | slots | may hand work to |", "| --- | --- | --- | --- |"]
    for w in workspaces.values():
        caps = ", ".join(w.capabilities) or "(any task)"
        rows.append(f"| `{w.name}` | {caps} | {w.slots} | {', '.join(w.send_to) or '-'} |")
    edges = [f"{w.name} → {target}" for w in workspaces.values() for target in w.send_to]
    if role == "worker":
        lead = (
            "A session may hand work only along these `send_to` edges, from its own workspace "
            "(`$COLIBRI_WORKSPACE`) to one it names; any other is refused as `handoff_refused`."
        )
    else:
        lead = (
            "Submit with `--workspace NAME` to keep a task to one workspace's agents. Sessions "
            "hand work on along the `send_to` edges, and their tasks become children of yours."
        )
    listed = f"\n\nEdges: {'; '.join(edges)}." if edges else ""
    return "## The workspaces of this root\n\n" + lead + "\n\n" + "\n".join(rows) + listed


def front_matter(name: str, description: str) -> str:
    # A JSON string is a valid YAML double-quoted scalar, whatever the description holds.
    return f"---\nname: {name}\ndescription: {json.dumps(description, ensure_ascii=False)}\n---"


def render(group: click.Group, role: str, workspaces: Mapping[str, Any] | None = None) -> str:
    """The SKILL.md of ``role`` for the CLI ``group``, with ``workspaces`` (None or empty:
    outside a root, no workspace section)."""
    from colibri.cli import skill_text

    if role not in ROLES:
        raise ValueError(f"unknown role {role!r}")
    commands = in_scope(group, role)
    text = skill_text.SUPERVISOR if role == "supervisor" else skill_text.WORKER
    sections = [
        front_matter(f"colibri-{role}", skill_text.DESCRIPTIONS[role]),
        text.strip().replace("{ERROR_CODES}", error_codes()),
        workspaces_section(workspaces or {}, role),
        "## Command reference\n\n" + globals_section(group),
        reference(group, commands),
    ]
    return "\n\n".join(s for s in sections if s).rstrip() + "\n"
