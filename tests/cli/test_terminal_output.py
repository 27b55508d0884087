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
from tests import prestarted
from tests.helpers import Daemon, FakeAgent, claim_of, wait_until
from tests.prestarted import Forked

#: Sets the window title, rings the bell, clears the screen, reverses what follows (an
#: override, a mark, the Arabic letter mark, an isolate), is rich markup, and is a
#: one-character CSI on terminals that read C1 controls.
HOSTILE = "[red]x[/red] \x1b]0;pwned\x07 \x1b[2J \u202e \x9b \u200f\u061c\u2066 end"  # list: 50
#: The same as ``printable`` shows it.
SHOWN = r"[red]x[/red] \x1b]0;pwned\x07 \x1b[2J \u202e \x9b \u200f\u061c\u2066 end"
#: ESC, BEL, U+009B, the bidi controls, the separators, a tag as UTF-8: none may reach a
#: terminal raw.
RAW = [b"\x1b", b"\x07", b"\xc2\x9b"] + [
    chr(c).encode() for c in (0x202E, 0x200E, 0x200F, 0x061C, 0x2066, 0x2028, 0x2029, 0xE0041)
]


def run(*args: str, root: Path, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    """``python -m colibri ARGS``, its output as bytes: what a terminal would be sent."""
    return prestarted.run(
        [sys.executable, "-m", "colibri", "--root", str(root), *args],
        input=stdin, timeout=30, text=False,
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
        ("a\u200eb\u200fc\u061cd", False, r"a\u200eb\u200fc\u061cd"),  # the bidi marks
        ("a\u2028b\u2029c", True, r"a\u2028b\u2029c"),  # separators, even in a block
        ("a\u200bb\ufeffc\xadd", False, r"a\u200bb\ufeffc\xadd"),  # invisible
        ("tag\U000e0041\U000e007f", False, r"tag\U000e0041\U000e007f"),  # spells hidden text
        ("\u0915\u094d\u200d\u0937 \U0001f469\u200d\U0001f4bb", False, None),  # joiners stay
    ],
)
def test_printable(text: str, newlines: bool, shown: str | None) -> None:
    assert printable(text, newlines=newlines) == (text if shown is None else shown)


def test_every_control_format_and_separator_character_is_unsafe() -> None:
    """``UNSAFE`` against this Python's Unicode database: every control (Cc), format (Cf),
    line and paragraph separator (Zl, Zp) and surrogate (Cs) is escaped for a terminal and in
    JSON, but the two joiners, which scripts and emoji need."""
    import unicodedata

    from colibri.core.text import json_safe

    kept = {"\u200c", "\u200d"}
    for code in range(0x110000):
        char = chr(code)
        if unicodedata.category(char) not in ("Cc", "Cf", "Zl", "Zp", "Cs") or char in kept:
            continue
        assert printable(char) != char, f"U+{code:04X}"
        assert printable(char, newlines=True) != char or char in "\n\t", f"U+{code:04X}"
        if 0x20 <= code < 0xD800 or code > 0xDFFF:  # (JSON has no lone surrogate)
            encoded = json.dumps(char, ensure_ascii=False).encode()
            assert json_safe(encoded).isascii(), f"U+{code:04X}"
            assert json.loads(json_safe(encoded)) == char


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
        assert_safe(ok(run("cost", "--by", "agent", root=root)))
        exported = assert_safe(ok(run("ledger", "export", root=root))).splitlines()
        assert any(json.loads(row).get("reason") == HOSTILE for row in exported)  # exact
        # What a shell writes at a Tab: each shell's completions, the question of a session
        # offered to `answer`, and every value a completer offers.
        from tests.cli.test_completion import complete

        asker = FakeAgent(daemon, "asker", ["ask"])
        asking = daemon.call("submit", text="asks", capabilities=["ask"])["task"]
        assign = asker.next_assign()
        claim = claim_of(daemon, asking["id"], assign["epoch"])
        asker.client.send("ask", task=asking["id"], epoch=assign["epoch"], claim=claim,
                          question=HOSTILE)  # fmt: skip
        wait_until(lambda: daemon.call("get", task=asking["id"])["task"]["question"])
        for shell in ("bash", "zsh", "fish"):
            for words in (["show", ""], ["answer", ""], ["cancel", pending["id"][:20]],
                          ["schedule", "show", ""], ["submit", "x", "--agent", ""]):  # fmt: skip
                tab = complete(["--root", str(root), *words], kind=shell)
                assert tab.returncode == 0 and tab.stderr == "", tab.stderr
                for raw in RAW:
                    assert raw not in tab.stdout.encode(), (shell, words, raw, tab.stdout)
            if shell != "bash":  # (bash shows no descriptions)
                shown = complete(["--root", str(root), "answer", ""], kind=shell).stdout
                assert f"running: {SHOWN}" in shown, shown
                shown = complete(["--root", str(root), "show", failed["id"]], kind=shell).stdout
                assert SHOWN[:40] in shown, shown
        asker.close()
        # What `attach` prints: each kind of event, from the same tasks.
        from colibri.cli.stream import render

        tasks = daemon.call("list", limit=100)["tasks"]
        entries = daemon.call("ledger", limit=1000)["entries"]
        events = [{"event": "task", "task": t, "from": "pending", "to": t["state"],
                   "reason": HOSTILE} for t in tasks] + [
            {"event": "ledger", "entry": e} for e in entries] + [
            {"event": "question", "task": asking["id"], "question": HOSTILE},
            {"event": "warning", "workspace": HOSTILE, "reason": HOSTILE},
            {"event": "message", "to": HOSTILE, "text": HOSTILE},
            {"event": "schedule", "schedule": HOSTILE, "what": "fired"},
            {"event": "agent", "agent": {"name": HOSTILE, "online": True,
                                         "capabilities": [HOSTILE], "slots": 1}},
        ]  # fmt: skip
        for message in events:
            line = render(message)
            assert line is not None
            for raw in RAW:
                assert raw.decode() not in line.plain, (message, line.plain)
        # The TUI's cells.
        from datetime import UTC, datetime

        import msgspec

        from colibri.core.model import Task
        from colibri.tui.views import task_cells

        for task in tasks:
            for cell in task_cells(msgspec.convert(task, Task), datetime.now(UTC)):
                for raw in RAW:
                    assert raw.decode() not in cell.plain, (task, cell.plain)
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
        separated = daemon.call("submit", text="one\u2028two\u2029three", capabilities=["x"])
        shown = assert_safe(ok(run("show", separated["task"]["id"], "--json",
                                   root=daemon.root)))  # fmt: skip
        assert "\\u2028" in shown and "\\u2029" in shown
        assert json.loads(shown)["text"] == "one\u2028two\u2029three"
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


def finish_waited_task(
    daemon: Daemon, waiter: subprocess.Popen[bytes] | Forked, how: str
) -> dict[str, Any]:
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


def read_terminal(fd: int, process: subprocess.Popen[bytes] | Forked, timeout: float = 30) -> bytes:
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
        waiter = prestarted.start(
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


def test_a_csv_export_onto_a_terminal_shows_escapes(daemon: Daemon) -> None:
    """Into a file or a pipe a CSV export is the text as it was (for a spreadsheet); onto a
    terminal, as every table, it shows escapes."""
    task = daemon.call("submit", text="x", capabilities=["zfs"])["task"]
    daemon.call("cancel", task=task["id"], reason=HOSTILE)
    terminal, side = pty.openpty()
    try:
        exporter = prestarted.start(
            [sys.executable, "-m", "colibri", "--root", str(daemon.root), "ledger", "export",
             "--format", "csv"],
            stdin=subprocess.DEVNULL, stdout=side, stderr=side,
        )  # fmt: skip
        os.close(side)
        side = -1
        shown = read_terminal(terminal, exporter)
        assert exporter.wait(timeout=30) == 0
    finally:
        os.close(terminal)
        if side >= 0:
            os.close(side)
    for raw in RAW:
        assert raw not in shown, shown
    assert SHOWN.encode() in shown
    piped = run("ledger", "export", "--format", "csv", root=daemon.root)
    assert HOSTILE.encode() in ok(piped).stdout  # a spreadsheet's data, byte for byte
