"""A session asks its operator a question and waits; the answer arrives; clocks pause."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from colibri.core.errors import ColibriError
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
        final = daemon.wait_closed(task["id"])
        assert (final["outcome"], final["output"].strip()) == ("done", "using postgres")
        assert final["question"] is None
    finally:
        daemon.stop()


def test_answering_a_task_that_asks_nothing_is_refused(root: Path) -> None:
    daemon = start(root, session={"command": [sys.executable, "-c", "import time; time.sleep(30)"]})
    try:
        task = daemon.call("submit", text="quiet", workspace="ops")["task"]
        wait_until(lambda: daemon.call("get", task=task["id"])["task"]["state"] == "running")
        with pytest.raises(ColibriError) as refused:
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
        final = daemon.wait_closed(task["id"])
        assert final["outcome"] == "done" and "sqlite" in final["output"]
    finally:
        daemon.stop()


#: Asks, but the asking command is killed after a second; then the session runs on.
ABANDONS = (
    "import subprocess, sys, time\n"
    "subprocess.run(['timeout', '1', sys.executable, '-m', 'colibri', 'ask', 'q1?'])\n"
    "time.sleep(40)\n"
    "print('ran to its end')\n"
)


def test_an_abandoned_question_is_withdrawn_and_max_runtime_counts_again(root: Path) -> None:
    """The asker dies: after the re-ask grace the question is withdrawn (an event says so),
    `answer` says nobody waits, and max_runtime stops the session — before, the clock stayed
    paused for good and the task ran its 40 s to `done`."""
    from colibri.daemon.board import ASK_GRACE

    daemon = start(root, max_runtime="3s", session={"command": [sys.executable, "-c", ABANDONS]})
    try:
        with daemon.client(timeout=ASK_GRACE + 10) as watcher:
            watcher.call("subscribe")
            task = daemon.call("submit", text="asks then wanders off", workspace="ops")["task"]
            wait_until(lambda: waiting(daemon, task["id"]))
            withdrawn = next(e for e in watcher.events() if e["event"] == "question_withdrawn")
            assert withdrawn["task"] == task["id"]
        assert daemon.call("get", task=task["id"])["task"]["question"] is None
        with pytest.raises(ColibriError) as err:
            daemon.call("answer", task=task["id"], text="too late")
        assert err.value.code == "bad_request" and "not waiting" in err.value.message
        final = daemon.wait_closed(task["id"], timeout=ASK_GRACE + 15)
        assert final["outcome"] == "failed" and "max_runtime" in final["error"], final
    finally:
        daemon.stop()


def test_a_question_survives_a_daemon_crash_because_its_session_asks_again(root: Path) -> None:
    """The daemon is killed while a session waits for its answer. The new daemon finds the
    question in the store; the session's `colibri ask` asks again within the grace, so the
    question is not withdrawn, and the answer reaches it."""
    from colibri.daemon.board import ASK_GRACE

    daemon = start(root)
    try:
        task = daemon.call("submit", text="migrate", workspace="ops")["task"]
        wait_until(lambda: waiting(daemon, task["id"]))
        daemon.restart()
        time.sleep(ASK_GRACE + 1.5)
        assert daemon.call("get", task=task["id"])["task"]["question"] == "which database?"
        daemon.call("answer", task=task["id"], text="postgres")
        final = daemon.wait_closed(task["id"])
        assert (final["outcome"], final["output"].strip()) == ("done", "using postgres")
    finally:
        daemon.stop()
