"""``colibri workspace``: list, show and add the workspaces of colibri.jsonc."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click

from colibri.cli.base import Context, cli, json_option, pass_ctx
from colibri.cli.completion import workspace_names
from colibri.cli.output import print_json, print_line, print_table
from colibri.core.errors import UnknownWorkspace, WorkspaceExists

if TYPE_CHECKING:
    from colibri.core.model import HarnessStatus


@cli.group()
def workspace() -> None:
    """The workspaces of colibri.jsonc: directories plus the agents that work in them."""


def _resolved(ctx: Context) -> dict[str, Any]:
    from colibri.config import load_config

    return load_config(ctx.root()).workspaces


@workspace.command("list")
@json_option
@pass_ctx
def list_workspaces(ctx: Context, as_json: bool) -> None:
    """List the workspaces, merged with their templates."""
    import msgspec

    workspaces = _resolved(ctx)
    if as_json:
        print_json([msgspec.to_builtins(w) for w in workspaces.values()])
        return
    root = str(ctx.root()) + "/"
    print_table(
        ["NAME", "PATH", "CAPABILITIES", "SLOTS", "BACKEND", "SEND TO", "COMMAND"],
        [
            [w.name, w.path.removeprefix(root), ",".join(w.capabilities) or "-", w.slots,
             w.backend, ",".join(w.send_to) or "-", " ".join(w.command)[:40]]
            for w in workspaces.values()
        ],
        empty="no workspaces (add one with: colibri workspace add NAME -- COMMAND)",
    )  # fmt: skip


@workspace.command("show")
@click.argument("name", shell_complete=workspace_names)
@json_option
@pass_ctx
def show_workspace(ctx: Context, name: str, as_json: bool) -> None:
    """Show one workspace as the daemon sees it (templates merged, durations in seconds), and
    its harness as the running daemon supervises it."""
    import msgspec

    workspaces = _resolved(ctx)
    if name not in workspaces:
        raise UnknownWorkspace(name, list(workspaces))
    doc = msgspec.to_builtins(workspaces[name])
    serving, harness = _harness(ctx, name)
    if as_json:
        print_json({**doc, "harness": harness and msgspec.to_builtins(harness)})
        return
    width = max(len(key) for key in (*doc, "harness")) + 2
    for key, value in doc.items():
        print_line(f"{key + ':':{width}}{_shown(key, value)}")
    if harness is not None:
        said = harness.describe()
    elif serving:
        said = "- (the daemon started before it was added; it starts one at its next start)"
    else:
        said = "- (no daemon is running; start one with: colibri run)"
    print_line(f"{'harness:':{width}}{said}")


def _harness(ctx: Context, name: str) -> tuple[bool, HarnessStatus | None]:
    """Whether a daemon runs for the root, and the workspace's harness in its ``status``
    (None: no daemon, or one started before the workspace was added)."""
    from colibri.core.errors import DaemonNotRunning
    from colibri.core.protocol import Status

    try:
        reply = ctx.request(Status())
    except DaemonNotRunning:
        return False, None
    return True, next((h for h in reply.harnesses or [] if h.workspace == name), None)


def _shown(key: str, value: object, nested: bool = False) -> str:
    """A setting as a person reads it: a command as a shell would take it, other lists joined,
    objects as key=value (a list in one as words), true and false as in the file, nothing as
    -."""
    if value is None or value == [] or value == {}:
        return "-"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, list):
        if key in ("command", "setup") or nested:
            import shlex

            return shlex.join(str(v) for v in value)
        return ", ".join(map(str, value))
    if isinstance(value, dict):
        return ", ".join(f"{k}={_shown(k, v, nested=True)}" for k, v in value.items())
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value)


@workspace.command("add")
@click.argument("name")
@click.argument("command", nargs=-1)
@click.option("--path", help="Its directory, relative to the root [default: NAME].")
@click.option("--extends", help="A template to start from.")
@click.option("--cap", "caps", multiple=True, metavar="CAP", help="A capability (repeatable).")
@click.option("--slots", type=click.IntRange(1, 1000), help="Sessions at once [default: 1].")
@click.option(
    "--send-to",
    "send_to",
    multiple=True,
    metavar="WORKSPACE",
    help="A workspace it may hand work to (repeatable).",
)
@click.option("--backend", type=click.Choice(["subprocess", "tmux"]), help="Session backend.")
@pass_ctx
def add_workspace(
    ctx: Context,
    name: str,
    command: tuple[str, ...],
    path: str | None,
    extends: str | None,
    caps: tuple[str, ...],
    slots: int | None,
    send_to: tuple[str, ...],
    backend: str | None,
) -> None:
    """Add workspace NAME to colibri.jsonc (its comments are kept), running COMMAND per task.

    \b
    Example:  colibri workspace add api --cap python --send-to web -- claude -p
    The daemon picks it up at its next start.
    """
    from colibri.config import load_config, replace_config_text
    from colibri.config.jsonc import insert_workspace
    from colibri.layout import CONFIG_NAME

    root = ctx.root()
    file = root / CONFIG_NAME
    # Loaded first: a file that is too big, not UTF-8 or invalid is refused before it is read.
    if name in load_config(root).workspaces:
        raise WorkspaceExists(name, str(file))
    text = file.read_text(encoding="utf-8") if file.exists() else ""
    entry: dict[str, Any] = {}
    for key, value in (("extends", extends), ("path", path), ("slots", slots)):
        if value is not None:
            entry[key] = value
    if caps:
        entry["capabilities"] = list(caps)
    if send_to:
        entry["send_to"] = list(send_to)
    session: dict[str, Any] = {}
    if command:
        session["command"] = list(command)
    if backend:
        session["backend"] = backend
    if session:
        entry["session"] = session
    replace_config_text(root, text, insert_workspace(text, name, entry), "not added")
    print_line(f"added workspace {name} to {file} (restart the daemon to start its harness)")
