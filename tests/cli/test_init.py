"""`colibri init --starter` (a root that shows tasks flowing under a real daemon) and
`colibri init --scan` (workspaces proposed for the projects of a real tree, and written)."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import shutil
import signal
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import json5
import pytest

from colibri.cli.init import AGENTS
from colibri.config import load_config
from colibri.config.scan import MAX_DEPTH, find_projects, unique_name, workspace_name
from colibri.config.starter import AGENT_CLIS, SCRIPT_NAME
from colibri.core.text import short_id
from tests import prestarted
from tests.helpers import Daemon, colibri, one_line, wait_until
from tests.sessions.support import sweep


def ok(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 0, f"exit {result.returncode}: {result.stdout}{result.stderr}"
    return result.stdout


def init(*args: str) -> subprocess.CompletedProcess[str]:
    return colibri(None, "init", *args)


# -- the starter -------------------------------------------------------------------------------


def test_the_starter_runs_tasks_flowing_with_no_agent_installed(scratch: Path) -> None:
    root = scratch / "try"
    out = ok(init("--starter", str(root)))
    assert "colibri run" in out and "colibri tui" in out
    script = root / SCRIPT_NAME
    assert script.stat().st_mode & stat.S_IXUSR
    assert script.read_text().startswith("#!/bin/sh\n")
    assert (root / "planner").is_dir() and (root / "builder").is_dir()
    config = load_config(root)  # Colibri's own loader, as `colibri run` reads it
    assert config.workspaces["planner"].send_to == ["builder"]
    assert set(config.schedules) == {"starter", "pipeline"}
    assert config.schedules["pipeline"].paused
    assert "//" in (root / "colibri.jsonc").read_text()

    # Started by absolute path with no colibri on its PATH (`.venv/bin/colibri run` with the
    # virtual environment not activated): the sessions' `colibri submit` runs all the same.
    path = "/usr/bin:/bin"
    assert shutil.which("colibri", path=path) is None
    daemon = ByPath(root, log_level="info", env={"PATH": path})
    daemon.start()
    try:

        def family() -> tuple[dict[str, Any], dict[str, Any]] | None:
            tasks = daemon.call("list")["tasks"]
            for fired in (t for t in tasks if t.get("schedule") == "starter"):
                children = [t for t in tasks if t.get("parent") == fired["id"]]
                if fired["state"] == "closed" and children and children[0]["state"] == "closed":
                    return fired, children[0]
            return None

        fired, child = wait_until(family, timeout=60, interval=0.2)
        assert (fired["workspace"], fired["outcome"]) == ("planner", "done")
        assert (child["workspace"], child["sender"], child["outcome"]) == (
            "builder", "planner", "done",
        )  # fmt: skip
        assert f"handed {child['id']} to builder" in fired["output"]
        assert child["output"] == "worked on: the builder part of: plan the next small step"
        assert fired["cost"]["usd"] == pytest.approx(0.01)
        assert fired["cost"]["tokens_in"] == 1200
        # The pipeline, fired by hand: four steps, each run once the one before is done.
        last = daemon.call("schedule-run", name="pipeline")["task"]
        assert daemon.wait_closed(last["id"], timeout=60)["outcome"] == "done"
        steps = [t for t in daemon.call("list")["tasks"] if t.get("schedule") == "pipeline"]
        assert [t["text"] for t in steps] == ["plan the change", "implement the plan",
                                              "test the change", "review the change"]
        assert [t["after"] for t in steps[1:]] == [[t["id"]] for t in steps[:-1]]
        started = [min(r["seq"] for r in daemon.ledger(t["id"]) if r["to_state"] == "running")
                   for t in steps]  # fmt: skip
        assert started == sorted(started)
        daemon.stop()
        assert short_id(fired["id"]) not in daemon.log()  # not on a terminal: only the log
    finally:
        sweep(root, daemon)


class ByPath(Daemon):
    """A daemon started as the installed ``colibri`` script, by its absolute path."""

    def command(self) -> list[str]:
        python, dash_m, module, *args = super().command()
        assert (dash_m, module) == ("-m", "colibri")
        return [str(Path(python).parent / "colibri"), *args]


def test_the_starter_run_in_the_foreground_shows_its_tasks_on_the_terminal(
    scratch: Path,
) -> None:
    """`colibri init --starter DIR && cd DIR && colibri run`, on a terminal: beside the log,
    a line per task as it moves (`colibri attach`'s), as a foreground worker shows its work."""
    root = scratch / "try"
    ok(init("--starter", str(root)))
    terminal, side = pty.openpty()
    daemon = None
    try:
        daemon = prestarted.start(
            [sys.executable, "-m", "colibri", "run"], cwd=root, stdin=subprocess.DEVNULL,
            stdout=side, stderr=side, start_new_session=True,
        )  # fmt: skip
        os.close(side)
        side = -1
        shown = ""

        def the_family_done() -> bool:
            nonlocal shown
            while select.select([terminal], [], [], 0)[0]:
                shown += re.sub(r"\x1b\[[0-9;]*m", "", os.read(terminal, 65536).decode())
            return bool(re.search(r"running → done .*plan the next small step.*handed", shown))

        wait_until(the_family_done, timeout=60, interval=0.1)
        assert "daemon ready" in shown  # the log, as before
        planned = re.search(r"(\w{8}) +new → pending +plan the next small step", shown)
        assert planned, shown
        task = planned[1]
        assert re.search(rf"{task} +pending → running +on planner +plan the next", shown), shown
        assert re.search(r"new → pending +the builder part of: plan the next", shown), shown
        daemon.send_signal(signal.SIGTERM)
        assert daemon.wait(timeout=30) == 0
    finally:
        os.close(terminal)
        if side >= 0:
            os.close(side)
        sweep(root)


def test_the_starter_refuses_a_root_or_files_already_there(scratch: Path) -> None:
    ok(init(str(scratch / "a")))
    assert "Colibri root already" in one_line(init("--starter", str(scratch / "a")).stderr)

    (scratch / "b").mkdir()
    (scratch / "b" / "colibri.jsonc").write_text("{}")
    refused = init("--starter", str(scratch / "b"), "--json")
    assert refused.returncode == 2  # --json goes with --scan only
    refused = init("--starter", str(scratch / "b"))
    assert refused.returncode == 1 and "colibri.jsonc exists" in one_line(refused.stderr)
    assert not (scratch / "b" / ".colibri").exists()  # refused before anything was written

    (scratch / "c").mkdir()
    (scratch / "c" / "planner").write_text("a file")
    refused = init("--starter", str(scratch / "c"))
    assert refused.returncode == 1 and "planner" in one_line(refused.stderr)
    assert not (scratch / "c" / ".colibri").exists()


@pytest.mark.parametrize("agent", sorted(AGENT_CLIS))
def test_each_commented_agent_template_loads_once_uncommented(scratch: Path, agent: str) -> None:
    root = scratch / "try"
    ok(init("--starter", str(root)))
    file = root / "colibri.jsonc"
    text = file.read_text()
    line = next(x for x in text.splitlines() if x.strip().startswith(f'// "{agent}": '))
    text = text.replace(line, line.replace("// ", "", 1))
    text = text.replace('"builder": {', f'"builder": {{ "extends": "{agent}",', 1)
    text = text.replace('"session": { "command": ["../colibri-task.sh"] },', "", 1)
    file.write_text(text)
    builder = load_config(root).workspaces["builder"]
    assert builder.command == list(AGENT_CLIS[agent].command)
    assert builder.pass_env == list(AGENT_CLIS[agent].pass_env)


def test_the_cli_offers_every_agent_cli() -> None:
    assert AGENTS == tuple(AGENT_CLIS)


# -- the scan ----------------------------------------------------------------------------------


def projects(base: Path) -> None:
    """A python, a typescript and a rust project, plus what a scan must not take for one."""
    (base / "api").mkdir(parents=True)
    (base / "api" / "pyproject.toml").write_text("[project]\nname = 'api'\n")
    (base / "api" / "node_modules" / "left-pad").mkdir(parents=True)
    (base / "api" / "node_modules" / "left-pad" / "package.json").write_text("{}")
    (base / "web").mkdir()
    (base / "web" / "package.json").write_text("{}")
    (base / "web" / "tsconfig.json").write_text("{}")
    (base / "engine" / ".git").mkdir(parents=True)
    (base / "engine" / "Cargo.toml").write_text("[package]\n")
    (base / "engine" / "Dockerfile").write_text("FROM scratch\n")
    (base / "notes").mkdir()
    (base / "notes" / "todo.txt").write_text("nothing to see")
    (base / ".cache" / "x").mkdir(parents=True)
    (base / ".cache" / "x" / "go.mod").write_text("module x\n")


def scanned(root: Path, *args: str) -> dict[str, Any]:
    document: dict[str, Any] = json.loads(ok(init("--scan", "--json", *args, str(root))))
    return document


def test_scan_proposes_a_workspace_per_project_and_writes_nothing(scratch: Path) -> None:
    projects(scratch)
    proposal = scanned(scratch)
    assert proposal["written"] is False
    assert proposal["workspaces"] == [
        {"name": "api", "path": "api", "capabilities": ["python"], "status": "new"},
        {"name": "engine", "path": "engine", "capabilities": ["rust", "docker"], "status": "new"},
        {"name": "web", "path": "web", "capabilities": ["typescript"], "status": "new"},
    ]
    assert not (scratch / ".colibri").exists() and not (scratch / "colibri.jsonc").exists()
    table = ok(init("--scan", str(scratch)))
    assert "rust,docker" in table and "nothing written" in table
    assert f"colibri init --scan --yes {scratch}" in table


def test_scan_yes_writes_workspaces_that_load_and_run(scratch: Path) -> None:
    projects(scratch)
    written = scanned(scratch, "--yes")
    assert written["written"] is True
    config = load_config(scratch)
    assert set(config.workspaces) == {"api", "web", "engine"}
    web = config.workspaces["web"]
    assert web.capabilities == ["typescript"]
    assert web.path == str(scratch / "web")
    assert web.command == list(AGENT_CLIS["claude"].command)  # the template it extends
    # A second scan finds them there and leaves them alone.
    again = scanned(scratch, "--yes")
    assert again["written"] is False
    assert {w["status"] for w in again["workspaces"]} == {"exists"}
    assert "nothing to write" in ok(init("--scan", "--yes", str(scratch)))


def test_scan_keeps_the_comments_of_an_existing_file(scratch: Path) -> None:
    projects(scratch)
    ok(init(str(scratch)))
    file = scratch / "colibri.jsonc"
    file.write_text(
        "// my settings\n{\n  \"scheduler\": { \"tick\": \"5s\" }, // fast\n"
        '  "templates": {\n    // mine\n  },\n'
        '  "workspaces": {\n    "web": { "path": "web", "session": { "command": ["true"] } },\n'
        "  },\n}\n"
    )
    out = scanned(scratch, "--yes", "--agent", "gemini")
    text = file.read_text()
    for comment in ("// my settings", "// fast", "// mine"):
        assert comment in text
    statuses = {w["name"]: w["status"] for w in out["workspaces"]}
    assert statuses == {"api": "new", "engine": "new", "web": "exists"}
    parsed = json5.loads(text)
    assert parsed["workspaces"]["web"] == {"path": "web", "session": {"command": ["true"]}}
    assert parsed["workspaces"]["api"]["extends"] == "gemini"
    engine = load_config(scratch).workspaces["engine"]
    assert engine.command == list(AGENT_CLIS["gemini"].command)


def test_scan_names_are_valid_and_unique(scratch: Path) -> None:
    for folder in ("services/API", "tools/api", "misc/api-2", "Über Tool!", "---"):
        (scratch / folder).mkdir(parents=True)
        (scratch / folder / "go.mod").write_text("module x\n")
    ok(init(str(scratch)))
    file = scratch / "colibri.jsonc"
    file.write_text('{"workspaces": {"api": {"path": "old", "session": {"command": ["x"]}}}}')
    names = {w["path"]: w["name"] for w in scanned(scratch, "--yes")["workspaces"]}
    assert names == {
        "---": "project", "misc/api-2": "api-2", "services/API": "api-3", "tools/api": "api-4",
        "Über Tool!": "ber-tool",
    }  # fmt: skip
    assert set(load_config(scratch).workspaces) == {"api", *names.values()}


@pytest.mark.parametrize(
    ("folder", "name"),
    [("Web", "web"), ("my app", "my-app"), ("_x", "x"), ("a" * 80, "a" * 64), ("..", "project")],
)
def test_a_folder_name_becomes_a_workspace_name(folder: str, name: str) -> None:
    assert workspace_name(folder) == name


def test_a_unique_name_stays_within_64_characters() -> None:
    long = "a" * 64
    assert unique_name(long, {long}) == "a" * 62 + "-2"
    assert unique_name("web", {"web", "web-2"}) == "web-3"


def test_scan_never_follows_links_nor_walks_without_end(scratch: Path) -> None:
    (scratch / "loop").mkdir()
    (scratch / "loop" / "self").symlink_to("..")
    (scratch / "loop" / "back").symlink_to(scratch)
    outside = scratch.parent / (scratch.name + "-outside")
    (outside / "proj").mkdir(parents=True)
    try:
        (outside / "proj" / "Cargo.toml").write_text("")
        (scratch / "elsewhere").symlink_to(outside / "proj")
        deep = scratch / "deep"
        for _ in range(MAX_DEPTH + 3):
            deep = deep / "d"
        deep.mkdir(parents=True)
        (deep / "go.mod").write_text("module deep\n")
        (scratch / "wide").mkdir()
        for i in range(300):
            (scratch / "wide" / f"f{i}").mkdir()
        (scratch / "ok").mkdir()
        (scratch / "ok" / "setup.py").write_text("")
        result = scanned(scratch)
        assert [w["path"] for w in result["workspaces"]] == ["ok"]
        assert result["too_deep"] == 1 and result["stopped"] is None
        table = ok(init("--scan", str(scratch)))
        assert f"more than {MAX_DEPTH} levels down" in table
        stopped = find_projects(scratch, max_entries=100)
        assert stopped.stopped is not None and "100 directory entries" in stopped.stopped
    finally:
        import shutil

        shutil.rmtree(outside)


def test_scan_of_a_repository_proposes_its_projects_or_itself(scratch: Path) -> None:
    (scratch / ".git").mkdir()
    (scratch / "Dockerfile").write_text("FROM scratch\n")
    alone = scanned(scratch)["workspaces"]
    assert alone == [
        {"name": workspace_name(scratch.name), "path": ".", "capabilities": ["docker"],
         "status": "new"},
    ]  # fmt: skip
    (scratch / "backend").mkdir()
    (scratch / "backend" / "Gemfile").write_text("")
    (scratch / "frontend").mkdir()
    (scratch / "frontend" / "package.json").write_text("{}")
    inside = scanned(scratch)["workspaces"]
    assert [(w["path"], w["capabilities"]) for w in inside] == [
        ("backend", ["ruby"]), ("frontend", ["javascript"]),
    ]  # fmt: skip


def test_scan_refusals(scratch: Path) -> None:
    (scratch / "colibri.jsonc").write_text("{ nope")
    (scratch / "p").mkdir()
    (scratch / "p" / "go.mod").write_text("")
    bad = init("--scan", str(scratch))
    assert bad.returncode == 1 and "colibri.jsonc:1" in one_line(bad.stderr)
    as_json = init("--scan", "--json", str(scratch))
    assert as_json.returncode == 1
    assert json.loads(as_json.stdout)["error"]["code"] == "config_error"
    assert (scratch / "colibri.jsonc").read_text() == "{ nope"
    assert init("--scan", "--starter", str(scratch)).returncode == 2
    alone = init("--yes", str(scratch))
    assert alone.returncode == 2 and "--yes goes with --scan only" in alone.stderr
    assert init("--scan", "--agent", "nobody", str(scratch)).returncode == 2
    empty = scratch / "empty"
    empty.mkdir()
    assert "no projects found" in ok(init("--scan", str(empty)))
    assert not os.path.exists(empty / "colibri.jsonc")


def test_scan_yes_that_would_break_the_file_leaves_it_as_it_was(scratch: Path) -> None:
    (scratch / "p").mkdir()
    (scratch / "p" / "go.mod").write_text("module p\n")
    file = scratch / "colibri.jsonc"
    # A template of that name is used as it is; this one makes every workspace invalid.
    before = '{ // as it was\n  "templates": { "claude": { "slots": 0 } },\n}\n'
    file.write_text(before)
    refused = init("--scan", "--yes", str(scratch))
    assert refused.returncode == 1
    line = one_line(refused.stderr)
    assert "nothing written, the file is unchanged" in line and "slots" in line
    assert file.read_text() == before
