"""``colibri attach`` against a real daemon: it catches up from a ledger position, follows
the events, and ends with exit 0 and one line when the daemon stops."""

from __future__ import annotations

import json
import os
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import PYTHON, Daemon, FakeAgent, colibri, one_line, wait_until


class Attached:
    """``colibri attach`` as a process, its stdout read line by line as it comes."""

    def __init__(self, root: Path, *args: str) -> None:
        self.process = subprocess.Popen(
            [PYTHON, "-m", "colibri", "--root", str(root), "attach", *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, "COLUMNS": "200"},
        )
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.lines.append(line.rstrip("\n"))

    def saw(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def end(self, timeout: float = 15.0) -> tuple[int, str]:
        code = self.process.wait(timeout=timeout)
        self._reader.join(timeout=5)
        assert self.process.stdout is not None and self.process.stderr is not None
        stderr = self.process.stderr.read()
        self.process.stdout.close()
        self.process.stderr.close()
        return code, stderr


def test_attach_catches_up_then_follows_and_ends_with_the_daemon(daemon: Daemon) -> None:
    early = daemon.submit("written before attach", capabilities=["nobody-has-this"])
    at = daemon.call("status")["ledger_at"]
    assert at == "default:1"
    skipped = daemon.submit("also before, but after --since", capabilities=["nobody-has-this"])
    attached = Attached(daemon.root, "--since", at)
    try:
        wait_until(lambda: attached.saw(skipped["id"][-8:]))
        assert not attached.saw(early["id"][-8:])  # before --since: not shown
        agent = FakeAgent(daemon, "linux-1", ["linux"])
        task = daemon.submit("rebuild the kernel module", capabilities=["linux"])
        assign = agent.next_assign()
        agent.out(assign, output="module built")
        daemon.wait_closed(task["id"])
        wait_until(lambda: attached.saw("module built"))
        agent.client.call("heartbeat", ready=2)  # its ready pool changed size: an agent event
        wait_until(lambda: attached.saw("agent linux-1 online (linux; 1 slot; 2 ready)"))
        daemon.call("toggle-swarm", paused=True)
        wait_until(lambda: attached.saw("dispatch paused"))
        agent.close()
    finally:
        daemon.stop()
    code, stderr = attached.end()
    assert code == 0, stderr
    assert stderr == ""
    assert attached.lines[-1] == "the daemon stopped; detached"
    assert attached.lines[0].startswith("attached to the daemon")
    assert attached.lines[0].endswith(", ledger at default:2; Ctrl+C detaches")
    text = "\n".join(attached.lines)
    assert "agent linux-1 online (linux; 1 slot)" in text
    assert "running" in text and "on linux-1" in text and "rebuild the kernel module" in text
    # No colour codes when stdout is not a terminal, and each transition shown once.
    assert "\x1b[" not in text
    assert sum("→ running" in line and task["id"][-8:] in line for line in attached.lines) == 1


def test_attach_json_is_one_event_a_line(daemon: Daemon) -> None:
    first = daemon.submit("caught up", capabilities=["nobody-has-this"])
    attached = Attached(daemon.root, "--json", "--since", "0")
    try:
        wait_until(lambda: len(attached.lines) >= 1)
        later = daemon.submit("followed", capabilities=["nobody-has-this"])
        daemon.call("cancel", task=later["id"])
        wait_until(lambda: sum(later["id"] in line for line in attached.lines) >= 2)
    finally:
        daemon.stop()
    code, stderr = attached.end()
    assert code == 0
    events = [json.loads(line) for line in attached.lines]
    assert events[0] == {"event": "ledger", "entry": daemon_row(events[0])}
    assert events[0]["entry"]["task"] == first["id"] and events[0]["entry"]["seq"] == 1
    followed = [e for e in events if e["event"] == "task" and e["task"]["id"] == later["id"]]
    assert [(e["from"], e["to"]) for e in followed] == [
        (None, "pending"),
        ("pending", "cancelled"),
        ("cancelled", "closed"),
    ]
    # stdout stays JSON; the two lines for people went to stderr.
    lines = stderr.strip().splitlines()
    assert lines[0].startswith("attached to the daemon")
    assert lines[-1] == "the daemon stopped; detached"


def daemon_row(event: dict) -> dict:
    entry = event["entry"]
    assert set(entry) >= {"seq", "at", "task", "from_state", "to_state", "reason"}
    return entry


def test_attach_without_a_daemon_says_so(root: Path) -> None:
    result = colibri(root, "attach")
    assert result.returncode == 1
    assert "no daemon" in one_line(result.stderr).lower()
    result = colibri(root, "attach", "--json")
    assert result.returncode == 1
    assert json.loads(result.stdout)["error"]["code"] == "no_daemon"


def test_attach_refuses_a_bad_since(root: Path) -> None:
    for bad in ("-1", "seven", str(2**63), "acme", "acme:x", "acme:1,acme:2", "acme:-1"):
        result = colibri(root, "attach", "--since", bad)
        assert result.returncode == 2, bad
        assert "--since" in result.stderr


def test_tui_without_a_terminal_points_to_attach(root: Path) -> None:
    result = colibri(root, "tui")
    assert result.returncode == 2
    assert "colibri attach" in result.stderr


def test_a_follow_goes_on_on_another_connection_without_a_row_skipped_or_shown_twice(
    daemon: Daemon, capsys: pytest.CaptureFixture[str]
) -> None:
    """What ``attach`` does after a takeover, on this root's socket (subscribed): the second
    connection catches up from where the first one started, and shows only the transitions
    the first did not (those that happened between the two, and none again)."""
    from colibri.cli.stream import Printer, Seen, follow
    from colibri.core import cursor

    start = cursor.parse(daemon.call("status")["ledger_at"])
    seen = Seen(dict(start))
    first: dict[str, Any] = {}

    def submit_first() -> None:
        first.update(daemon.submit("one"))

    def its_pending(message: dict[str, Any]) -> bool:
        return message.get("event") == "task" and message["task"]["id"] == first["id"]

    with daemon.client() as client:
        assert follow(client, Printer(True), seen=seen, stop=its_pending,
                      subscribed=submit_first)  # fmt: skip
    # Meanwhile, with no connection: what the second one must catch up on.
    second = daemon.submit("two")
    daemon.call("cancel", task=first["id"])
    third: dict[str, Any] = {}

    def submit_third() -> None:
        third.update(daemon.submit("three"))

    def thirds(message: dict[str, Any]) -> bool:
        task = message.get("task", {}).get("id") or message.get("entry", {}).get("task")
        return bool(task == third["id"])

    with daemon.client() as client:
        assert seen.after is not None
        assert follow(client, Printer(True), since=cursor.render(seen.after), seen=seen,
                      stop=thirds, subscribed=submit_third)  # fmt: skip
    shown = []
    for line in capsys.readouterr().out.splitlines():
        message = json.loads(line)
        if message["event"] == "ledger":
            row = message["entry"]
            shown.append((row["task"], row["from_state"], row["to_state"]))
        elif message["event"] == "task":
            shown.append((message["task"]["id"], message["from"], message["to"]))
    rows = [(r["task"], r["from_state"], r["to_state"]) for r in daemon.ledger()
            if r["seq"] > start.get(r["tenant"], 0)]  # fmt: skip
    assert sorted(shown, key=rows.index) == rows[: len(shown)]  # none twice, in order
    assert len(set(shown)) == len(shown)
    assert {(second["id"], None, "pending"), (first["id"], "pending", "cancelled")} <= set(shown)
