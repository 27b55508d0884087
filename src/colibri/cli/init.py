"""``colibri init``: a root and its commented colibri.jsonc; with ``--starter``, one that shows
tasks flowing as soon as it runs; with ``--scan``, workspaces for the projects already there."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from colibri.cli.base import cli, json_option
from colibri.cli.output import print_json, print_line, print_table

if TYPE_CHECKING:
    from colibri.config.scan import Proposal, Walk

#: The agent CLIs ``--agent`` may name (``config.starter.AGENT_CLIS``, written out here so
#: that ``colibri --help`` need not load the settings).
AGENTS = ("claude", "codex", "aider", "gemini")


@cli.command()
@click.argument("directory", required=False, type=click.Path(file_okay=False, path_type=Path))
@click.option("--force", is_flag=True, help="Create the root even inside another root.")
@click.option(
    "--starter",
    is_flag=True,
    help="Write a starter to try: two workspaces, a hand-off between them, a schedule and a "
    "stand-in agent script, so that `colibri run` shows tasks flowing at once.",
)
@click.option(
    "--scan",
    is_flag=True,
    help="Propose a workspace for each project found under DIRECTORY (a git repository, or a "
    "folder with pyproject.toml, package.json, Cargo.toml …); writes nothing without --yes.",
)
@click.option("--yes", is_flag=True, help="With --scan: write the proposal into colibri.jsonc.")
@click.option(
    "--agent",
    type=click.Choice(AGENTS),
    default="claude",
    show_default=True,
    help="With --scan: the agent CLI the new workspaces run (a template of that name).",
)
@json_option
def init(
    directory: Path | None,
    force: bool,
    starter: bool,
    scan: bool,
    yes: bool,
    agent: str,
    as_json: bool,
) -> None:
    """Make DIRECTORY (default: here) a Colibri root: colibri.jsonc and .colibri/.

    \b
    colibri init --starter DIR        a root to try, with tasks flowing once it runs
    colibri init --scan               propose workspaces for the projects here
    colibri init --scan --yes         … and write them into colibri.jsonc
    """
    from colibri.layout import CONFIG_NAME

    if starter and scan:
        raise click.UsageError("--starter and --scan do not go together: pick one")
    if not scan:
        given = [o for o, on in (("--yes", yes), ("--json", as_json)) if on]
        agent_given = click.get_current_context().get_parameter_source("agent")
        if agent_given == click.core.ParameterSource.COMMANDLINE:
            given.append("--agent")
        if given:
            verb = "goes" if len(given) == 1 else "go"
            raise click.UsageError(f"{' and '.join(given)} {verb} with --scan only")
    target = (directory or Path.cwd()).resolve()
    if scan:
        _scan(target, force=force, write=yes, agent=agent, as_json=as_json)
        return
    if starter:
        _starter(target, force=force)
        return
    from colibri.config import init_root

    if init_root(target, force=force):
        print_line(f"initialised {target} (edit {target / CONFIG_NAME}; start with: colibri run)")
    else:
        print_line(f"{target} is already a Colibri root")


def _starter(target: Path, *, force: bool) -> None:
    from colibri.config import init_root, load_config
    from colibri.config.starter import (
        BUILDER,
        EVERY,
        PLANNER,
        SCHEDULE,
        check_starter_target,
        starter_config,
        write_starter_files,
    )

    check_starter_target(target)
    init_root(target, force=force, config=starter_config())
    write_starter_files(target)
    load_config(target)  # what `colibri run` will read: valid, or said so now
    print_line(
        f"initialised {target} with a starter: workspaces {PLANNER} and {BUILDER}, and a "
        f"schedule ({SCHEDULE}) that gives {PLANNER} a task every {EVERY}"
    )
    print_line(
        f"start it:  cd {target} && colibri run  (on a terminal it shows each task as it moves)"
    )
    print_line("or watch it from another terminal there:  colibri tui  (or: colibri attach)")


def _scan(target: Path, *, force: bool, write: bool, agent: str, as_json: bool) -> None:
    from colibri.config import check_state_entry, load_config
    from colibri.config.scan import find_projects, propose
    from colibri.layout import CONFIG_NAME

    file = target / CONFIG_NAME
    if not target.is_dir():
        from colibri.core.errors import RootError

        raise RootError(f"{target} is not a directory to scan")
    existing: dict[str, str] = {}
    if file.exists() or check_state_entry(target):
        existing = {name: w.path for name, w in load_config(target).workspaces.items()}
    walk = find_projects(target)
    proposals = propose(target, walk.projects, existing)
    new = [p for p in proposals if not p.exists]
    written = False
    if write:
        written = _write(target, new, agent, force=force)
    if as_json:
        print_json(_document(target, walk, proposals, agent, written))
        return
    _report(target, walk, proposals, agent, write=write)


def _write(target: Path, new: list[Proposal], agent: str, *, force: bool) -> bool:
    """Create the root if need be, and add the new workspaces (and the agent's template, if
    the file has none of that name) to its colibri.jsonc; whether the file changed."""
    from colibri.config import init_root, read_config_text, replace_config_text
    from colibri.config.jsonc import insert_member, insert_workspace
    from colibri.config.starter import AGENT_CLIS
    from colibri.layout import CONFIG_NAME

    init_root(target, force=force)
    if not new:
        return False
    file = target / CONFIG_NAME
    before = read_config_text(file) or ""
    text = before
    if agent not in _templates(target):
        text = insert_member(text, "templates", agent, AGENT_CLIS[agent].template())
    for proposal in new:
        entry: dict[str, Any] = {"extends": agent, "path": proposal.path}
        if proposal.capabilities:
            entry["capabilities"] = list(proposal.capabilities)
        text = insert_workspace(text, proposal.name, entry)
    replace_config_text(target, before, text, "nothing written")
    return True


def _templates(target: Path) -> set[str]:
    """The names of the templates colibri.jsonc defines (loaded and checked before this)."""
    from colibri.config import parse_jsonc, read_config_text
    from colibri.layout import CONFIG_NAME

    file = target / CONFIG_NAME
    text = read_config_text(file)
    raw = parse_jsonc(file, text) if text else {}
    templates = raw.get("templates", {}) if isinstance(raw, dict) else {}
    return set(templates) if isinstance(templates, dict) else set()


def _document(
    target: Path, walk: Walk, proposals: list[Proposal], agent: str, written: bool
) -> dict[str, Any]:
    return {
        "root": str(target),
        "agent": agent,
        "workspaces": [
            {"name": p.name, "path": p.path, "capabilities": list(p.capabilities),
             "status": "exists" if p.exists else "new"}
            for p in proposals
        ],
        "written": written,
        "stopped": walk.stopped,
        "too_deep": walk.too_deep,
        "unreadable": walk.unreadable,
    }  # fmt: skip


def _report(
    target: Path, walk: Walk, proposals: list[Proposal], agent: str, *, write: bool
) -> None:
    from colibri.config.scan import MAX_DEPTH
    from colibri.layout import CONFIG_NAME

    new = [p for p in proposals if not p.exists]
    print_table(
        ["WORKSPACE", "PATH", "CAPABILITIES", "STATUS"],
        [
            [p.name, p.path, ",".join(p.capabilities) or "-",
             "exists, left alone" if p.exists else "new"]
            for p in proposals
        ],
        empty=f"no projects found under {target} (a project: a git repository, or a folder "
        "with pyproject.toml, package.json, Cargo.toml, go.mod …)",
    )  # fmt: skip
    if walk.stopped:
        print_line(f"note: {walk.stopped}")
    if walk.too_deep:
        print_line(
            f"note: {walk.too_deep} folder(s) more than {MAX_DEPTH} levels down were not "
            "looked at; scan a folder nearer them to see what they hold"
        )
    if walk.unreadable:
        print_line(f"note: could not read {', '.join(walk.unreadable[:5])}")
    file = target / CONFIG_NAME
    if not new:
        if proposals:
            print_line(f"every project found is a workspace of {file} already: nothing to write")
        return
    if write:
        print_line(
            f"wrote {len(new)} workspace(s) to {file}, each extending the template {agent!r} "
            "(change its session.command there to run another agent); start with: colibri run"
        )
    else:
        print_line(
            f"nothing written; write {'this' if len(new) == 1 else 'these'} into {file} with: "
            f"colibri init --scan --yes {target}"
            + ("" if agent == "claude" else f" --agent {agent}")
        )
