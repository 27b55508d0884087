"""What ``colibri init --starter`` writes: colibri.jsonc with two workspaces, a hand-off between
them, a schedule and a pipeline fired by hand, the folders of those workspaces, and the session
script they run (``colibri-task.sh``, a packaged stand-in for an AI agent), so that ``colibri
run`` shows tasks flowing at once with no agent installed. Also the agent CLIs Colibri knows how
to run one-shot, as templates: commented out in the starter, and the one ``init --scan`` writes."""

from __future__ import annotations

import json
import os
import string
from dataclasses import dataclass
from importlib import resources
from pathlib import Path

from colibri.config.template import TEMPLATE
from colibri.core.errors import FileExists, RootError
from colibri.layout import CONFIG_NAME
from colibri.privatefiles import what

#: The session script, written into the root beside colibri.jsonc.
SCRIPT_NAME = "colibri-task.sh"
#: The starter's workspaces: the first hands a child task to the second.
PLANNER, BUILDER = "planner", "builder"
#: The starter's schedule, and how often it fires: often enough that a newcomer sees work
#: within seconds of ``colibri run``, not so often that the board fills faster than one reads.
SCHEDULE, EVERY = "starter", "10s"
#: The starter's pipeline: a paused schedule of four steps, fired by hand.
PIPELINE = "pipeline"


@dataclass(frozen=True, slots=True)
class AgentCli:
    """An agent CLI run one-shot as a session: its command, the API keys it may need from the
    daemon's environment, and what to know about it (how its cost is read, if it is)."""

    name: str
    command: tuple[str, ...]
    pass_env: tuple[str, ...]
    notes: tuple[str, ...]

    def template(self) -> dict[str, object]:
        return {"session": {"command": list(self.command), "pass_env": list(self.pass_env)}}


AGENT_CLIS: dict[str, AgentCli] = {
    cli.name: cli
    for cli in (
        AgentCli(
            "claude",
            ("claude", "-p", "--output-format", "json"),
            ("ANTHROPIC_API_KEY",),
            (
                "Claude Code: `claude -p` reads the task on stdin; with --output-format json it",
                'ends with one JSON result, whose "result" Colibri takes as the output and whose',
                "total_cost_usd and usage tokens as the session's cost: the one CLI here whose",
                "cost Colibri reads as it is printed. --permission-mode acceptEdits lets it edit.",
            ),
        ),
        AgentCli(
            "codex",
            ("codex", "exec", "-"),
            ("OPENAI_API_KEY",),
            (
                "Codex CLI: `codex exec -` reads the task on stdin and prints its final message on",
                "stdout. No cost is recorded: it prints no dollars, and with --json its whole",
                "event stream would become the output (Colibri would read only the token counts",
                "of its last line). It wants a git repository (or --skip-git-repo-check);",
                "--sandbox workspace-write lets it edit files.",
            ),
        ),
        AgentCli(
            "aider",
            ("sh", "-c", 'exec aider --yes-always --message "$(cat)"'),
            ("ANTHROPIC_API_KEY", "OPENAI_API_KEY"),
            (
                "aider: takes the task as --message, so a shell hands it stdin (as data: the",
                'text of "$(cat)" is not run); --yes-always answers its questions (older versions:',
                "--yes). It prints its cost as text (Tokens: … Cost: $…), which Colibri does not",
                "read: no cost is recorded.",
            ),
        ),
        AgentCli(
            "gemini",
            ("gemini", "-p", "Do the task above."),
            ("GEMINI_API_KEY", "GOOGLE_API_KEY"),
            (
                "Gemini CLI: `gemini -p` runs headless, the task on stdin put before the -p",
                "prompt. No cost is recorded: its text has none, and --output-format json gives",
                "token counts in a shape Colibri does not read. --approval-mode auto_edit lets it",
                "edit files.",
            ),
        ),
    )
}

_STARTER = string.Template("""\
  // ---- The starter ---------------------------------------------------------------------
  // `colibri run` starts a harness for each workspace below. Every $every the schedule
  // "$schedule" submits a task to "$planner", whose session hands a child task to "$builder".
  // `colibri run` on a terminal shows each task as it moves; from another terminal: colibri
  // tui (or: colibri attach, colibri list --tree, colibri cost --by workspace). Stop the
  // schedule with: colibri schedule pause $schedule
  //
  // Both workspaces run $script, beside this file (a command's path is taken from the
  // workspace's folder, hence ../). It stands in for an AI agent: it reads the task on
  // stdin, hands work on when given a workspace, and reports a made-up cost. To run an agent
  // CLI instead, uncomment its template below and give a workspace "extends": "claude" (say)
  // in place of its "session".
  "templates": {
    // The agent CLIs, each run once per task with the task's text on stdin. pass_env lets a
    // session see that API key from the daemon's environment (nothing else of it passes).
$agent_templates
  },
  "workspaces": {
    // A workspace is a folder (path, relative to this file; default: its name) plus the agent
    // that works there. send_to: the workspaces its sessions may hand child tasks to.
    "$planner": {
      "capabilities": ["planning"],
      "send_to": ["$builder"],
      "session": { "command": ["../$script", "$builder"] },
    },
    "$builder": {
      "capabilities": ["python"],
      "session": { "command": ["../$script"] },
    },
    // A project of yours, run by Claude Code (with its template above uncommented):
    // "my-app": { "extends": "claude", "path": "src/my-app", "capabilities": ["python"] },
    // Add "isolation": "worktree" to it for a git worktree and branch per session; its
    // "worktree" settings (all optional): { "base": "main", "copy": [".env"],
    // "setup": ["npm", "ci"], "keep_failed": false, "refuse_dirty": false }.
  },
  "schedules": {
    // Fires every $every from the daemon's first start; none while the last fire's task is
    // still open (overlap "skip"). Or "cron": "0 9 * * mon-fri" with "tz", or "at".
    "$schedule": {
      "every": "$every",
      "task": { "text": "plan the next small step", "workspace": "$planner" },
    },
    // A pipeline: each fire submits the task and the steps of "then", each run once the one
    // before it is done (a failed step cancels those after it). Paused, so it fires only when
    // asked: colibri schedule run $pipeline — then watch it in colibri tui.
    "$pipeline": {
      "every": "1d",
      "paused": true,
      "task": { "text": "plan the change", "workspace": "$planner" },
      "then": [
        { "text": "implement the plan", "workspace": "$builder" },
        { "text": "test the change", "workspace": "$builder" },
        { "text": "review the change", "workspace": "$planner" },
      ],
    },
  },
""")


def agent_templates_commented() -> str:
    """The agent templates as commented-out lines of the ``templates`` object."""
    lines: list[str] = []
    for cli in AGENT_CLIS.values():
        lines += [f"    // {note}" for note in cli.notes]
        lines.append(f"    // {json.dumps(cli.name)}: {json.dumps(cli.template())},")
    return "\n".join(lines)


def starter_config() -> str:
    """The starter's colibri.jsonc: ``init``'s commented settings, then the starter's own."""
    assert TEMPLATE.endswith("}\n")
    starter = _STARTER.substitute(
        every=EVERY, schedule=SCHEDULE, planner=PLANNER, builder=BUILDER, script=SCRIPT_NAME,
        pipeline=PIPELINE,
        agent_templates=agent_templates_commented(),
    )  # fmt: skip
    return TEMPLATE[: -len("}\n")] + starter + "}\n"


def starter_script() -> str:
    """The session script, as packaged. It runs plain ``colibri``: a session finds its
    harness's own first on its PATH (``agent/shim.py``), whatever the daemon's PATH."""
    return resources.files("colibri.config").joinpath(SCRIPT_NAME).read_text(encoding="utf-8")


def check_starter_target(target: Path) -> None:
    """Refuse, before anything is written, a root to be that has what the starter would write."""
    if (target / ".colibri").exists() or os.path.islink(target / ".colibri"):
        raise RootError(
            f"{target} is a Colibri root already; the starter makes a new one: give another "
            "directory (colibri init --starter DIR)"
        )
    for name in (CONFIG_NAME, SCRIPT_NAME):
        path = target / name
        if os.path.lexists(path):
            raise FileExists(
                f"{path} exists; the starter writes its own: move it away, or give another "
                "directory (colibri init --starter DIR)"
            )
    for name in (PLANNER, BUILDER):
        path = target / name
        if os.path.lexists(path) and not (path.is_dir() and not path.is_symlink()):
            raise FileExists(
                f"{path} is {what(os.lstat(path))}, where the starter's {name} "
                "workspace keeps its folder: move it away, or give another directory"
            )


def write_starter_files(root: Path) -> Path:
    """The starter's workspace folders and session script in ``root`` (a root whose
    colibri.jsonc is the starter's); the script's path."""
    for name in (PLANNER, BUILDER):
        (root / name).mkdir(exist_ok=True)
    script = root / SCRIPT_NAME
    try:
        fd = os.open(script, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755)
    except FileExistsError:
        raise FileExists(f"{script} exists; the starter writes its own: move it away") from None
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(starter_script())
    return script
