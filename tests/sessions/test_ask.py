"""A session asks its operator a question and waits; the answer arrives; clocks pause."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from colibri.client import RemoteError
from tests.helpers import Daemon, wait_until

#: Asks a question, then reports the answer it got as its output.
ASKS = (
    "import subprocess, sys\n"
    "answer = subprocess.run([sys.executable, '-m', 'colibri', 'ask', 'which database?'],"
    " capture_output=True, text=True, check=True).stdout.strip()\n"
    "print('using ' + answer)\n"
)


def start(root: Path, **workspace: Any) -> Daemon:
    workspace.setdefault("session", {"command": [sys.executable, "-c", ASKS]})
    (root / "colibri.jsonc").write_text(json.dumps({"workspaces": {"ops": workspace}}))
    daemon = Daemon(root)
    daemon.start()
    return daemon


def waiting(daemon: Daemon, task_id: str) -> dict[str, Any] | None:
    task = daemon.call("get", task=task_id)["task"]
    return task if task.get("question") else None


def test_ask_waits_for_answer_and_the_task_shows_the_question(root: Path) -> None:
    daemon = start(root)
    try:
        with daemon.client() as watcher:
            watcher.call("subscribe")
            task = daemon.call("submit", text="migrate", workspace="ops")["task"]
            shown = wait_until(lambda: waiting(daemon, task["id"]))
            assert (shown["state"], shown["question"]) == ("running", "which database?")
            question = next(e for e in watcher.events() if e["event"] == "question")
            assert question["task"] == task["id"]
        listed = daemon.call("list", state="running")["tasks"]
        assert [t["question"] for t in listed] == ["which database?"]
        daemon.call("answer", task=task["id"], text="postgres")
        final = wait_until(
            lambda: (t := daemon.call("get", task=task["id"])["task"])["state"] == "closed" and t
        )
        assert (final["outcome"], final["output"].strip()) == ("done", "using postgres")
        assert final["question"] is None
    finally:
        daemon.stop()


def test_answering_a_task_that_asks_nothing_is_refused(root: Path) -> None:
    daemon = start(root, session={"command": [sys.executable, "-c", "import time; time.sleep(30)"]})
    try:
        task = daemon.call("submit", text="quiet", workspace="ops")["task"]
        wait_until(lambda: daemon.call("get", task=task["id"])["task"]["state"] == "running")
        with pytest.raises(RemoteError) as refused:
            daemon.call("answer", task=task["id"], text="x")
        assert refused.value.code == "bad_request" and "not waiting" in refused.value.message
        daemon.call("cancel", task=task["id"])
    finally:
        daemon.stop()


def test_max_runtime_does_not_count_the_wait_for_an_answer(root: Path) -> None:
    daemon = start(root, max_runtime="1.5s")
    try:
        task = daemon.call("submit", text="slow operator", workspace="ops")["task"]
        wait_until(lambda: waiting(daemon, task["id"]))
        time.sleep(2.5)  # longer than max_runtime, all of it waiting for the answer
        assert daemon.call("get", task=task["id"])["task"]["state"] == "running"
        daemon.call("answer", task=task["id"], text="sqlite")
        final = wait_until(
            lambda: (t := daemon.call("get", task=task["id"])["task"])["state"] == "closed" and t
        )
        assert final["outcome"] == "done" and "sqlite" in final["output"]
    finally:
        daemon.stop()
