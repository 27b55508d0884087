"""What sessions and other users wrote never drives the operator's terminal: the human formats
show control characters as visible escapes, ``--json`` keeps the exact text, and a task's
output printed by ``submit --wait`` stays byte for byte when piped."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from colibri.cli.output import printable
from tests.helpers import Daemon, FakeAgent, wait_until

#: Sets the window title, rings the bell, clears the screen, reverses what follows, is rich
#: markup, and is a one-character CSI on terminals that read C1 controls.
HOSTILE = "[red]x[/red] \x1b]0;pwned\x07 \x1b[2J \u202e \x9b end"  # short: list shows 50
#: The same as ``printable`` shows it.
SHOWN = r"[red]x[/red] \x1b]0;pwned\x07 \x1b[2J \u202e \x9b end"
#: ESC, BEL, U+009B and U+202E as UTF-8: none may reach the terminal raw.
RAW = [b"\x1b", b"\x07", b"\xc2\x9b", b"\xe2\x80\xae"]


def run(*args: str, root: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """``python -m colibri ARGS``, its output as bytes: what a terminal would be sent."""
    return subprocess.run(
        [sys.executable, "-m", "colibri", "--root", str(root), *args],
        input=stdin, capture_output=True, timeout=30,
    )  # fmt: skip


def assert_safe(result: subprocess.CompletedProcess[bytes], *visible: str) -> str:
    for raw in RAW:
        assert raw not in result.stdout, (raw, result.stdout)
        assert raw not in result.stderr, (raw, result.stderr)
    assert b"Traceback" not in result.stderr
    shown = (result.stdout + result.stderr).decode()
    for text in visible:
        assert text in shown, (text, shown)
    return shown


def ok(result: subprocess.CompletedProcess[bytes]) -> subprocess.CompletedProcess[bytes]:
    assert result.returncode == 0, result.stderr.decode()
    return result


@pytest.mark.parametrize(
    ("text", "newlines", "shown"),
    [
        ("plain text, ünïcode and → arrows", False, "plain text, ünïcode and → arrows"),
        ("\x1b[31mred\x1b[0m", False, r"\x1b[31mred\x1b[0m"),
        ("\x00\x08\x7f\x80\x9f", False, r"\x00\x08\x7f\x80\x9f"),
        ("a\u202ab\u202ec\u2066d\u2069e", False, r"a\u202ab\u202ec\u2066d\u2069e"),
        ("one\ntwo\r\n\tthree", False, r"one\ntwo\r\n three"),
        ("one\ntwo\r\n\tthree\x1b", True, "one\ntwo\\r\n\tthree\\x1b"),
        ("\u200e\u2028 marks and separators are not controls", False, None),
    ],
)
def test_printable(text: str, newlines: bool, shown: str | None) -> None:
    assert printable(text, newlines=newlines) == (text if shown is None else shown)


def test_printable_leaves_safe_text_as_it_is() -> None:
    text = "a long line of ordinary text " * 40
    assert printable(text) is text  # no copy on the fast path


def test_human_formats_show_escapes_from_every_field(daemon: Daemon) -> None:
    root = daemon.root
    agent = FakeAgent(daemon, "worker", ["python"])
    try:
        failed = daemon.call("submit", text=HOSTILE, capabilities=["python"])["task"]
        agent.fail(agent.next_assign(), error=HOSTILE)
        done = daemon.call("submit", text="ok", capabilities=["python"], parent=failed["id"])
        assign = agent.next_assign()
        agent.out(assign, output=HOSTILE, cost={"usd": 0.5, "model": HOSTILE})
        pending = daemon.call("submit", text=HOSTILE, capabilities=["zfs"])["task"]
        cancelled = daemon.call("submit", text="x", capabilities=["zfs"])["task"]
        daemon.call("cancel", task=cancelled["id"], reason=HOSTILE)
        daemon.call("describe-skill", name="python", description=HOSTILE)
        wait_until(lambda: daemon.call("get", task=done["task"]["id"])["task"]["state"] == "closed")

        assert_safe(ok(run("list", root=root)), r"\x1b]0;pwned\x07", "[red]x[/red]", r"\u202e")
        assert_safe(ok(run("list", "--tree", root=root)), r"\x1b]0;pwned\x07", "[red]x[/red]")
        assert_safe(ok(run("show", failed["id"], root=root)), f"text:           {SHOWN}",
                    f"error:          {SHOWN}")  # fmt: skip
        assert_safe(ok(run("show", done["task"]["id"], root=root)), f"output:         {SHOWN}",
                    f"model={SHOWN}")  # fmt: skip
        assert_safe(ok(run("show", failed["id"], "--family", root=root)), r"\x1b]0;pwned")
        assert_safe(ok(run("ledger", root=root)), f"[{SHOWN}]")  # the cancel's reason
        assert_safe(ok(run("why", pending["id"], root=root)), "no capability in common")
        assert_safe(ok(run("skills", root=root)), SHOWN)
        assert_safe(ok(run("agents", root=root)), "worker")
        assert_safe(ok(run("status", root=root)), "1 pending")
        # The id is echoed in the one-line error.
        refused = run("show", HOSTILE, root=root)
        assert refused.returncode == 1
        assert_safe(refused, f"colibri: no task with id {SHOWN}")
        assert refused.stderr.count(b"\n") == 1
    finally:
        agent.close()


def test_a_multi_line_output_keeps_its_lines_in_show(daemon: Daemon) -> None:
    agent = FakeAgent(daemon, "worker")
    try:
        task = daemon.call("submit", text="report")["task"]
        agent.out(agent.next_assign(), output="line one\n\x1b[1mline two\x1b[0m\n\tindented\n")
        shown = assert_safe(ok(run("show", task["id"], root=daemon.root)))
        assert "output:\n  line one\n  \\x1b[1mline two\\x1b[0m\n  \tindented\n" in shown
    finally:
        agent.close()


def test_json_keeps_the_exact_text_and_sends_no_raw_controls(daemon: Daemon) -> None:
    agent = FakeAgent(daemon, "worker")
    try:
        task = daemon.call("submit", text=HOSTILE)["task"]
        agent.fail(agent.next_assign(), error=HOSTILE)
        wait_until(lambda: daemon.call("get", task=task["id"])["task"]["state"] == "closed")
        shown = assert_safe(ok(run("show", task["id"], "--json", root=daemon.root)))
        assert json.loads(shown) == daemon.call("get", task=task["id"])["task"]
        assert json.loads(shown)["text"] == json.loads(shown)["error"] == HOSTILE
        [listed] = json.loads(assert_safe(ok(run("list", "--json", root=daemon.root))))
        assert listed["text"] == HOSTILE
        rows = assert_safe(ok(run("ledger", "--json", root=daemon.root))).splitlines()
        assert any(HOSTILE in (json.loads(row).get("reason") or "") for row in rows)
    finally:
        agent.close()


def test_schedules_and_workspaces_show_escapes(daemon: Daemon) -> None:
    root = daemon.root
    ok(run("schedule", "add", "nightly", HOSTILE, "--every", "1d", root=root))
    assert_safe(ok(run("schedule", "list", root=root)), r"\x1b]0;pwned\x07")
    assert_safe(ok(run("schedule", "show", "nightly", root=root)), f"task: {SHOWN}")
    shown = json.loads(ok(run("schedule", "show", "nightly", "--json", root=root)).stdout)
    assert shown["task"]["text"] == HOSTILE

    config = {"workspaces": {"api": {"session": {"command": ["echo", HOSTILE]}}}}
    (root / "colibri.jsonc").write_text(json.dumps(config))  # read by the command, not the daemon
    assert_safe(ok(run("workspace", "list", root=root)), r"echo [red]x[/red] \x1b]0;pwned")
    assert_safe(ok(run("workspace", "show", "api", root=root)), r"\x1b[2J")


def finish_waited_task(daemon: Daemon, waiter: subprocess.Popen[bytes], how: str) -> dict[str, Any]:
    """Let a FakeAgent end the task a ``submit --wait`` is waiting on."""
    agent = FakeAgent(daemon, "worker")
    try:
        assign = agent.next_assign()
        if how == "out":
            agent.out(assign, output=HOSTILE)
        else:
            agent.fail(assign, error=HOSTILE)
        return assign
    finally:
        agent.close()


def test_submit_wait_prints_the_output_byte_for_byte_into_a_pipe(daemon: Daemon) -> None:
    waiter = subprocess.Popen(
        [sys.executable, "-m", "colibri", "--root", str(daemon.root), "submit", "job", "--wait"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    finish_waited_task(daemon, waiter, "out")
    out, err = waiter.communicate(timeout=30)
    assert waiter.returncode == 0, err
    assert out == HOSTILE.encode() + b"\n"  # exactly what the session reported, for scripts

    waiter = subprocess.Popen(
        [sys.executable, "-m", "colibri", "--root", str(daemon.root), "submit", "job", "--wait"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    assign = finish_waited_task(daemon, waiter, "fail")
    out, err = waiter.communicate(timeout=30)
    assert waiter.returncode == 1
    assert out == b""
    for raw in RAW:
        assert raw not in err
    assert err.decode() == f"colibri: task {assign['task']['id']} failed: {SHOWN}\n"


def read_terminal(fd: int, process: subprocess.Popen[bytes], timeout: float = 30) -> bytes:
    """Everything written to a pseudo-terminal until the process on it exits."""
    data = b""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if select.select([fd], [], [], 0.1)[0]:
            try:
                chunk = os.read(fd, 65536)
            except OSError:  # EIO: the process closed its side
                break
            if not chunk:
                break
            data += chunk
        elif process.poll() is not None:
            break
    return data


def test_submit_wait_escapes_the_output_on_a_terminal(daemon: Daemon) -> None:
    terminal, side = pty.openpty()
    try:
        waiter = subprocess.Popen(
            [sys.executable, "-m", "colibri", "--root", str(daemon.root), "submit", "job",
             "--wait"],
            stdin=subprocess.DEVNULL, stdout=side, stderr=side,
        )  # fmt: skip
        os.close(side)
        side = -1
        finish_waited_task(daemon, waiter, "out")
        shown = read_terminal(terminal, waiter)
        assert waiter.wait(timeout=30) == 0
    finally:
        os.close(terminal)
        if side >= 0:
            os.close(side)
    for raw in RAW:
        assert raw not in shown, shown
    assert shown.decode() == SHOWN + "\r\n"  # the terminal's line discipline adds the \r
