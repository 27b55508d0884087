"""``colibri export-skill``: the SKILL.md is made from the CLI's click commands and the root's
workspaces; its examples parse as the CLI's own commands, and, run as written by a scripted
supervisor against a real daemon and real sessions, they do the work and cancel it."""

from __future__ import annotations

import importlib
import json
import pkgutil
import re
import shlex
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import click
import pytest

from colibri import cli as cli_package
from tests.helpers import Daemon, colibri, one_line, online, wait_until
from tests.sessions.support import ECHO, PY, alive, gated

Fleet = Callable[..., Daemon]
ROLES = ("supervisor", "worker")


def the_cli() -> click.Group:
    """The ``colibri`` group with every command of every CLI module registered."""
    for module in pkgutil.iter_modules(cli_package.__path__, "colibri.cli."):
        importlib.import_module(module.name)
    from colibri.cli.main import cli

    return cli


def leaves(group: click.Group, prefix: str = "") -> Iterator[tuple[str, click.Command]]:
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from leaves(command, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", command


def export(*args: str, root: Path | None = None, cwd: Path | None = None) -> str:
    """``colibri export-skill ARGS`` as a subprocess; its stdout."""
    done = colibri(root, "export-skill", *args, cwd=cwd)
    assert done.returncode == 0, done.stderr
    return done.stdout


def sections(skill: str) -> dict[str, str]:
    """The command reference: each ``### colibri NAME`` section's text by command name."""
    found = re.split(r"^### colibri (.+)$", skill, flags=re.M)
    return {found[i]: found[i + 1] for i in range(1, len(found), 2)}


def command_lines(skill: str) -> list[list[str]]:
    """Every ``colibri …`` line of the skill's fenced shell blocks, as an argv."""
    blocks = re.findall(r"^```sh\n(.*?)^```$", skill, flags=re.M | re.S)
    return [
        shlex.split(line)
        for block in blocks
        for line in block.splitlines()
        if line.startswith("colibri ")
    ]


def shown(skill: str, verb: str, *having: str) -> list[str]:
    """The first line the skill shows for ``colibri VERB`` with the options ``having``."""
    for argv in command_lines(skill):
        if argv[1] == verb and all(option in argv for option in having):
            return argv
    raise AssertionError(f"the skill shows no `colibri {verb} {' '.join(having)}` line")


def filled(argv: list[str], **values: str) -> list[str]:
    """``argv`` with its placeholders (TEXT, CAP, TASK_ID …) put in, as an agent would."""
    return [values.get(word, word) for word in argv]


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A directory in no root."""
    (tmp_path / "here").mkdir()
    return tmp_path / "here"


# -- generated from the click commands: the drift test ---------------------------------------


def covered(role: str) -> dict[str, click.Command]:
    """What the skill of ``role`` must cover, read from the click commands: for a worker, the
    commands that act on a session's own task (they take ``--claim``) and submit, show and
    wait; for a supervisor, every other command but those the skill names as not for it."""
    from colibri.cli.skill import NOT_FOR_SUPERVISOR

    every = dict(leaves(the_cli()))
    in_session = {n for n, c in every.items() if any("--claim" in p.opts for p in c.params)}
    if role == "worker":
        return {n: every[n] for n in sorted(in_session | {"submit", "show", "wait"})}
    return {
        n: c
        for n, c in every.items()
        if n not in in_session and n.split()[0] not in NOT_FOR_SUPERVISOR
    }


@pytest.mark.parametrize("role", ROLES)
def test_the_skill_covers_every_command_and_option_it_is_meant_to(role: str, outside: Path) -> None:
    skill = export("--role", role, cwd=outside)
    reference = sections(skill)
    expected = covered(role)
    assert set(reference) == set(expected)
    for name, command in expected.items():
        section = reference[name]
        for param in command.params:
            if isinstance(param, click.Option):
                for flag in param.opts:
                    assert f"`{flag}" in section or f", {flag}" in section, (name, flag)
            else:
                assert (param.metavar or param.name or "").upper() in section, (name, param.name)
        first_line = (command.help or "").strip().splitlines()[0]
        assert first_line in section
    globals_part = skill.split("## Command reference", 1)[1].split("### colibri", 1)[0]
    for param in the_cli().params:
        for flag in param.opts:
            if flag not in ("--help", "-h", "--version"):
                assert f"`{flag}" in globals_part, flag


def test_the_skills_teach_what_each_role_does(outside: Path) -> None:
    supervisor, worker = (export("--role", role, cwd=outside) for role in ROLES)
    for verb in ("submit", "wait", "list", "show", "cancel", "answer", "why", "cost", "status",
                 "schedule add", "schedule list", "schedule pause"):  # fmt: skip
        assert f"### colibri {verb}\n" in supervisor, verb
    for verb in ("out", "fail", "ask", "submit"):
        assert f"### colibri {verb}\n" in worker, verb
    assert "### colibri out\n" not in supervisor  # a session's own commands are the worker's
    for skill in (supervisor, worker):
        assert "--json" in skill and '{"ok":false,"error":{"code":' in skill
        assert "`0` success; `1` an error" in skill and "`2` a usage error" in skill
        from colibri.core.errors import BY_CODE

        for code in BY_CODE:
            if code != "error":
                assert f"`{code}`" in skill, code
    assert shown(supervisor, "list", "--tree")
    assert shown(worker, "submit", "--to")
    assert shown(worker, "out", "--cost")
    assert "COLIBRI_TASK_FILE" in worker


def test_a_command_or_option_added_to_the_cli_is_in_the_skill() -> None:
    """The reference follows the click objects it is given, not a list of its own."""
    from colibri.cli.skill import render

    group = click.Group("colibri", params=[click.Option(["--root"], help="The root.")])

    @group.command("frobnicate")
    @click.argument("thing")
    @click.option("--harder", type=int, help="How much harder.")
    def frobnicate(thing: str, harder: int) -> None:
        """Frobnicate THING."""

    skill = render(group, "supervisor")
    section = sections(skill)["frobnicate"]
    assert "`colibri frobnicate [OPTIONS] THING`" in section
    assert "Frobnicate THING." in section
    assert "`--harder INTEGER`: How much harder." in section


@pytest.mark.parametrize("role", ROLES)
def test_every_example_parses_as_the_cli_takes_it(role: str, outside: Path) -> None:
    cli = the_cli()
    existing = outside / "result.txt"
    existing.write_text("done")
    lines = command_lines(export("--role", role, cwd=outside))
    assert len(lines) >= 6
    for argv in lines:
        args = filled(argv[1:], PATH=str(existing))
        node: click.Command = cli
        while isinstance(node, click.Group):
            assert args and args[0] in node.commands, argv
            node, args = node.commands[args[0]], args[1:]
        try:
            node.make_context(argv[1], args)
        except click.UsageError as exc:
            raise AssertionError(f"{shlex.join(argv)}: {exc.format_message()}") from None


# -- the file, the front matter, the workspaces ------------------------------------------------


def test_front_matter_names_and_describes_the_skill(outside: Path) -> None:
    for role in ROLES:
        skill = export("--role", role, cwd=outside)
        head, _, body = skill.partition("\n---\n")
        lines = head.splitlines()
        assert lines[0] == "---"
        assert lines[1] == f"name: colibri-{role}"
        assert lines[2].startswith("description: ")
        description = json.loads(lines[2].removeprefix("description: "))
        assert len(description) > 40 and "\n" not in description
        assert body.lstrip().startswith("# ")


def test_inside_a_root_the_skill_shows_its_workspaces_and_their_send_to(root: Path) -> None:
    config = {
        "workspaces": {
            "api": {"capabilities": ["python", "postgres"], "send_to": ["web"], "slots": 2,
                    "session": {"command": ECHO}},
            "web": {"capabilities": ["typescript"], "session": {"command": ECHO}},
        }
    }  # fmt: skip
    (root / "colibri.jsonc").write_text(json.dumps(config))
    for role in ROLES:
        skill = export("--role", role, root=root)
        assert "## The workspaces of this root" in skill
        assert "| `api` | python, postgres | 2 | web |" in skill
        assert "| `web` | typescript | 1 | - |" in skill
        assert "api → web" in skill
    # found from the working directory too, as without --root
    assert "| `api` |" in export(cwd=root)


def test_outside_a_root_there_is_no_workspace_section(outside: Path) -> None:
    skill = export(cwd=outside)
    assert "workspaces of this root" not in skill
    assert "### colibri submit" in skill


def test_a_root_with_a_bad_config_is_an_error_not_a_skill(root: Path) -> None:
    (root / "colibri.jsonc").write_text('{"workspaces": {"api": {"slots": 0}}}')
    done = colibri(root, "export-skill")
    assert done.returncode == 1 and done.stdout == ""
    assert "slots" in one_line(done.stderr)


def test_out_writes_the_file_and_never_replaces_one_without_force(outside: Path) -> None:
    target = outside / ".claude" / "skills" / "colibri" / "SKILL.md"
    done = colibri(None, "export-skill", "--out", str(target), cwd=outside)
    assert done.returncode == 0, done.stderr
    assert done.stdout == ""
    written = target.read_text()
    assert written == export(cwd=outside)

    target.write_text("mine")
    again = colibri(None, "export-skill", "--role", "worker", "--out", str(target), cwd=outside)
    assert again.returncode == 1
    assert "exists already" in one_line(again.stderr) and "--force" in again.stderr
    assert target.read_text() == "mine"
    as_json = colibri(None, "export-skill", "--out", str(target), "--json", cwd=outside)
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["error"]["code"] == "file_exists"

    forced = colibri(None, "export-skill", "--role", "worker", "--out", str(target), "--force",
                     "--json", cwd=outside)  # fmt: skip
    assert forced.returncode == 0, forced.stderr
    doc = json.loads(forced.stdout)
    assert doc["name"] == "colibri-worker" and doc["path"] == str(target)
    assert target.read_text() == doc["skill"] and "name: colibri-worker" in doc["skill"]


def test_bad_arguments_are_usage_errors(outside: Path) -> None:
    done = colibri(None, "export-skill", "--role", "boss", cwd=outside)
    assert done.returncode == 2 and "boss" in done.stderr
    a_dir = outside / "adir"
    a_dir.mkdir()
    done = colibri(None, "export-skill", "--out", str(a_dir), "--force", cwd=outside)
    assert done.returncode == 2 and "directory" in done.stderr


# -- a scripted supervisor runs the skill's examples as written --------------------------------


def run(argv: list[str], root: Path) -> tuple[int, Any]:
    """One command line as the skill shows it, the root named by COLIBRI_ROOT; exit, JSON."""
    assert argv[0] == "colibri"
    done = colibri(None, *argv[1:], env={"COLIBRI_ROOT": str(root)})
    return done.returncode, json.loads(done.stdout)


def test_a_scripted_supervisor_does_the_work_and_cancels_it_as_the_skill_shows(
    root: Path, fleet: Fleet
) -> None:
    daemon = fleet({
        "build": {"capabilities": ["python"], "session": {"command": ECHO}},
        "slow": {"capabilities": ["slow"], "session": {"command": gated(root)}},
    })  # fmt: skip
    wait_until(lambda: online(daemon, "build", "slow"))
    skill = export(root=root)  # what the supervising agent is given, and all it knows

    code, task = run(filled(shown(skill, "submit", "--cap"), TEXT="say hello", CAP="python"), root)
    assert code == 0 and task["state"] in ("pending", "running")
    code, ended = run(filled(shown(skill, "wait"), TASK_ID=task["id"]), root)
    assert code == 0
    assert ended["id"] == task["id"] and ended["outcome"] == "done" and ended["agent"] == "build"
    assert "say hello" in ended["output"]

    code, held = run(filled(shown(skill, "submit", "--workspace"), TEXT="hold on",
                            WORKSPACE="slow"), root)  # fmt: skip
    assert code == 0 and held["workspace"] == "slow"
    started = root / f"started-{held['id']}"
    wait_until(started.exists)
    session_pid = int(started.read_text())
    code, cancelled = run(filled(shown(skill, "cancel"), TASK_ID=held["id"]), root)
    assert code == 0 and cancelled == [held["id"]]
    code, ended = run(filled(shown(skill, "wait"), TASK_ID=held["id"]), root)
    assert code == 0 and ended["outcome"] == "cancelled"
    wait_until(lambda: not alive(session_pid))
    assert not (root / f"go-{held['id']}").exists()

    # The error document the rules describe, for a task that is not there.
    code, error = run(filled(shown(skill, "wait"), TASK_ID="no-such-task"), root)
    assert code == 1
    assert error["ok"] is False and error["error"]["code"] == "unknown_task"


#: A session that knows only the worker's skill (the file named by its argument): it runs the
#: skill's hand-off, wait and out lines as written, placeholders filled in, and checks each.
WORKER_SESSION = r"""
import json, re, shlex, subprocess, sys

skill = open(sys.argv[1]).read()
blocks = re.findall(r"^```sh\n(.*?)^```$", skill, flags=re.M | re.S)
lines = [shlex.split(l) for b in blocks for l in b.splitlines() if l.startswith("colibri ")]

def shown(verb, *having):
    return next(a for a in lines if a[1] == verb and all(h in a for h in having))

def run(argv, **values):
    argv = [values.get(word, word) for word in argv]
    done = subprocess.run([sys.executable, "-m", *argv], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)

child = run(shown("submit", "--to"), TEXT="write the notes", WORKSPACE="helper")
ended = run(shown("wait"), TASK_ID=child["id"])
run(shown("out", "--cost"), RESULT="helper said: " + ended["output"].strip())
"""


def test_a_session_hands_off_and_reports_as_the_worker_skill_shows(
    root: Path, fleet: Fleet
) -> None:
    (root / "worker.md").write_text(export("--role", "worker", cwd=root))
    (root / "session.py").write_text(WORKER_SESSION)
    session = [PY, str(root / "session.py"), str(root / "worker.md")]
    daemon = fleet({
        "lead": {"session": {"command": session}, "send_to": ["helper"]},
        "helper": {"session": {"command": ECHO}},
    })  # fmt: skip
    wait_until(lambda: online(daemon, "lead", "helper"))
    lead = daemon.submit("plan the release", workspace="lead")
    done = daemon.wait_closed(lead["id"], timeout=60)
    assert done["outcome"] == "done", done["error"]
    assert done["output"] == "helper said: write the notes"
    assert done["cost"] == {"usd": 0.02, "tokens_in": 1200, "tokens_out": 300}
    (child,) = daemon.call("list", parent=lead["id"])["tasks"]
    assert child["workspace"] == "helper" and child["sender"] == "lead"
    assert child["outcome"] == "done"
