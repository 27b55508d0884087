"""A failed command with --json prints ``{"ok": false, "error": {"code", "message"}}`` on stdout
and exits 1, so a script can branch on the code; without --json the same message is one line
on stderr. Each case is a real command against a real root, daemon or not."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from colibri.client import Client
from colibri.core.errors import UnknownParent, UnknownTask
from tests.cli.test_cli import colibri, error_line, json_error
from tests.helpers import Daemon

Case = Callable[[Path], tuple[list[str], dict[str, str] | None]]


def _ended_task(root: Path) -> str:
    with Client.for_root(root, timeout=10) as client:
        task = client.call("submit", text="cancelled at once")["task"]
        client.call("cancel", task=task["id"])
    return str(task["id"])


def _with_daemon(args: list[str]) -> Case:
    return lambda root: (args, None)


# (the command, what it needs, the code it fails with, words of the message)
WITH_DAEMON: list[tuple[str, Case, str, str]] = [
    ("unknown task", _with_daemon(["show", "no-such-task"]), "unknown_task", "no task with id"),
    (
        "unknown parent",
        _with_daemon(["submit", "a child", "--parent", "no-such-task"]),
        "unknown_parent",
        "parent task no-such-task",
    ),
    (
        "a cancel the state machine refuses",
        lambda root: (["cancel", _ended_task(root)], None),
        "illegal_transition",
        "cannot become cancelled",
    ),
    (
        "bad duration",
        _with_daemon(["schedule", "add", "s", "some work", "--every", "5parsecs"]),
        "bad_duration",
        "invalid duration '5parsecs'",
    ),
    (
        "duration out of range",
        _with_daemon(["schedule", "add", "s", "some work", "--every", "100000w"]),
        "bad_duration",
        "must be from 1s to 3650d",
    ),
    (
        "unknown schedule",
        _with_daemon(["schedule", "rm", "no-such-schedule"]),
        "unknown_schedule",
        "no schedule named",
    ),
]


def _broken_config(root: Path) -> tuple[list[str], dict[str, str] | None]:
    (root / "colibri.jsonc").write_text('{"scheduler": {"tick": "soon"}}')
    return ["workspace", "list"], None


def _not_a_task_file(root: Path) -> tuple[list[str], dict[str, str] | None]:
    task_file = root / "garbage.task"
    task_file.write_text("this is not what the harness wrote\n")
    return ["out", "the result"], {"COLIBRI_TASK_FILE": str(task_file)}


WITHOUT_DAEMON: list[tuple[str, Case, str, str]] = [
    ("no daemon", lambda root: (["list"], None), "no_daemon", "no daemon is running"),
    ("no daemon for a submit", lambda root: (["submit", "x"], None), "no_daemon", "colibri run"),
    ("bad config", _broken_config, "config_error", "scheduler.tick"),
    (
        "bad COLIBRI_HOST",
        lambda root: (["workspace", "list"], {"COLIBRI_HOST": "fast"}),
        "config_error",
        "COLIBRI_HOST='fast' is not a mode; modes: auto, portable",
    ),
    (
        "not a root",
        lambda root: (["--root", str(root / "nowhere"), "status"], None),
        "root_error",
        "is not a Colibri root",
    ),
    (
        "unknown workspace",
        lambda root: (["workspace", "show", "nope"], None),
        "unknown_workspace",
        "defines no workspace 'nope'",
    ),
    ("a task file that is not one", _not_a_task_file, "bad_task_body", "not a task body"),
]


def run_both(root: Path, case: Case) -> tuple[dict[str, str], str]:
    """The case with --json (its error document) and without (its one stderr line)."""
    args, extra = case(root)
    env = {**os.environ, **extra} if extra else None
    # --json goes last, after any global option in args: it is an option of the command.
    document = json_error(colibri(*args, "--json", root=None, cwd=root, env=env))
    line = error_line(colibri(*args, cwd=root, env=env))
    return document, line


@pytest.mark.parametrize(("what", "case", "code", "words"), WITH_DAEMON, ids=lambda v: v)
def test_refusals_of_the_daemon_as_json(
    daemon: Daemon, what: str, case: Case, code: str, words: str
) -> None:
    document, line = run_both(daemon.root, case)
    assert document["code"] == code, document
    assert words in document["message"]
    assert line == f"colibri: {document['message']}"


@pytest.mark.parametrize(("what", "case", "code", "words"), WITHOUT_DAEMON, ids=lambda v: v)
def test_errors_before_any_daemon_as_json(
    root: Path, what: str, case: Case, code: str, words: str
) -> None:
    document, line = run_both(root, case)
    assert document["code"] == code, document
    assert words in document["message"]
    assert line == f"colibri: {document['message']}"


def test_a_stream_of_json_lines_ends_with_the_error_as_one_more_line(daemon: Daemon) -> None:
    """``ledger --follow --json`` prints JSON lines; a daemon that goes away ends the stream
    with the error document, on one line of its own."""
    task = daemon.call("submit", text="a row for the ledger")["task"]["id"]
    follower = subprocess.Popen(
        [sys.executable, "-m", "colibri", "--root", str(daemon.root), "ledger", "--follow",
         "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert follower.stdout is not None
        first = json.loads(follower.stdout.readline())
        assert first["task"] == task and first["to_state"] == "pending"
        daemon.stop()
        out, err = follower.communicate(timeout=30)
    finally:
        if follower.poll() is None:
            follower.kill()
            follower.communicate()
    assert follower.returncode == 1, err
    assert err == ""
    last = json.loads(out.splitlines()[-1])
    assert last["ok"] is False and last["error"]["code"] == "closed"
    assert "closed the connection" in last["error"]["message"]


def test_usage_errors_stay_click_s_exit_2_without_json_on_stdout(root: Path) -> None:
    result = colibri("schedule", "add", "s", "some work", "--json", cwd=root)
    assert result.returncode == 2
    assert result.stdout == ""
    assert "give exactly one of --cron, --every or --at" in result.stderr


def test_the_client_raises_each_refusal_as_its_class(daemon: Daemon) -> None:
    with daemon.client() as client:
        with pytest.raises(UnknownTask) as unknown:
            client.call("get", task="no-such-task")
        with pytest.raises(UnknownParent) as parent:
            client.call("submit", text="x", parent="no-such-task")
    assert unknown.value.code == "unknown_task" and "no-such-task" in unknown.value.message
    assert parent.value.code == "unknown_parent"
