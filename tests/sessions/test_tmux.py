"""The tmux backend with real tmux: attachable sessions, readiness, typing, timeouts, breaker."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Daemon, RecordingProxy, wait_until

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")

#: A session that shows a prompt, reads one line (the task, typed in), reports it, and exits.
PROMPTED = (
    "import sys, subprocess\n"
    "print('PROMPT>', flush=True)\n"
    "line = input()\n"
    "subprocess.run([sys.executable, '-m', 'colibri', 'out', 'got ' + line, '--cost', 'usd=0.1'])\n"
)
#: A session that says it is ready with `colibri ready`, then reads the task the same way.
SAYS_READY = (
    "import sys, subprocess\n"
    "subprocess.run([sys.executable, '-m', 'colibri', 'ready'], check=True)\n"
    "line = input()\n"
    "subprocess.run([sys.executable, '-m', 'colibri', 'out', 'ready then ' + line])\n"
)


def config(workspaces: dict[str, Any]) -> str:
    return json.dumps({"scheduler": {"agent_ttl": "30s"}, "workspaces": workspaces})


@pytest.fixture
def tmux_root(root: Path) -> Iterator[Path]:
    yield root
    for sock in (root / ".colibri" / "tmux").glob("*.sock"):
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True)


def start(root: Path, workspaces: dict[str, Any]) -> Daemon:
    (root / "colibri.jsonc").write_text(config(workspaces))
    daemon = Daemon(root)
    daemon.start()
    return daemon


def test_task_is_typed_in_after_the_ready_pattern_and_reported_with_out(tmux_root: Path) -> None:
    daemon = start(tmux_root, {"term": {"capabilities": ["tty"], "session": {
        "backend": "tmux", "ready_pattern": "PROMPT>", "ready_timeout": "10s",
        "command": [sys.executable, "-c", PROMPTED]}}})  # fmt: skip
    try:
        text = 'hello $(touch pwned) `touch pwned2` "quoted" ; echo no'
        task = daemon.call("submit", text=text, capabilities=["tty"])["task"]
        final = daemon.wait_closed(task["id"], timeout=20)
        assert (final["outcome"], final["output"]) == ("done", "got " + text)
        assert final["cost"] == {"usd": 0.1}
        assert not list(tmux_root.rglob("pwned*"))
        rows = [r["to_state"] for r in daemon.call("ledger", task=task["id"])["entries"]]
        assert rows == ["pending", "running", "done", "closed"]
    finally:
        daemon.stop()


def test_colibri_ready_and_attach_to_the_live_session(tmux_root: Path) -> None:
    daemon = start(tmux_root, {"term": {"session": {
        "backend": "tmux", "ready_timeout": "10s", "command": [sys.executable, "-c", SAYS_READY]
    }}})  # fmt: skip
    try:
        task = daemon.call("submit", text="go", workspace="term")["task"]
        final = daemon.wait_closed(task["id"], timeout=20)
        assert final["output"] == "ready then go"
    finally:
        daemon.stop()


def test_a_tmux_session_runs_its_harness_colibri_first_on_its_path(tmux_root: Path) -> None:
    """As a subprocess session does (tests/sessions/test_environment.py): the tmux server's
    own PATH, the daemon's, has no colibri."""
    (tmux_root / "colibri.jsonc").write_text(config({"term": {"session": {
        "backend": "tmux", "ready_timeout": "10s", "command": ["/bin/sh", "-c",
        'colibri ready && read -r line && colibri out "$line: $(command -v colibri)"']}}}))
    daemon = Daemon(tmux_root, env={"PATH": "/usr/bin:/bin"})  # fmt: skip
    daemon.start()
    try:
        task = daemon.call("submit", text="go", workspace="term")["task"]
        final = daemon.wait_closed(task["id"], timeout=20)
        said, colibri = final["output"].split(": ")
        assert said == "go" and Path(colibri).parent.parent == tmux_root / ".colibri" / "bin"
    finally:
        daemon.stop()


def test_an_operator_can_see_the_session_while_it_runs(tmux_root: Path) -> None:
    daemon = start(tmux_root, {"term": {"session": {
        "backend": "tmux", "ready_pattern": "PROMPT>", "ready_timeout": "10s",
        "command": [sys.executable, "-c", "print('PROMPT>', flush=True); import time; "
                    "line = input(); print('working on', line, flush=True); time.sleep(60)"],
    }}})  # fmt: skip
    try:
        task = daemon.call("submit", text="the long job", workspace="term")["task"]
        sock = tmux_root / ".colibri" / "tmux" / "term.sock"

        def screen() -> str:
            out = subprocess.run(
                ["tmux", "-S", str(sock), "capture-pane", "-p", "-t", task["id"]],
                capture_output=True, text=True,
            )  # fmt: skip
            return out.stdout

        assert "working on the long job" in wait_until(
            lambda: "working on" in (s := screen()) and s
        )
        # attach-session refuses politely when there is no terminal, but finds the session
        listed = subprocess.run(["tmux", "-S", str(sock), "list-sessions", "-F",
                                 "#{session_name}"], capture_output=True, text=True)  # fmt: skip
        assert task["id"] in listed.stdout.split()
        daemon.call("cancel", task=task["id"])
        final = daemon.wait_closed(task["id"], timeout=20)
        assert final["outcome"] == "cancelled"
        wait_until(lambda: task["id"] not in subprocess.run(
            ["tmux", "-S", str(sock), "list-sessions", "-F", "#{session_name}"],
            capture_output=True, text=True).stdout.split())  # fmt: skip
    finally:
        daemon.stop()


def test_a_window_that_closes_without_out_fails_its_task(tmux_root: Path) -> None:
    daemon = start(tmux_root, {"term": {"session": {
        "backend": "tmux", "ready_pattern": "PROMPT>", "ready_timeout": "10s",
        "command": [sys.executable, "-c", "print('PROMPT>', flush=True); input()"],
    }}})  # fmt: skip
    try:
        task = daemon.call("submit", text="vanish", workspace="term")["task"]
        final = daemon.wait_closed(task["id"], timeout=20)
        assert final["outcome"] == "failed"
        assert "without out" in final["error"]
    finally:
        daemon.stop()


def test_never_ready_sessions_requeue_with_warnings_then_open_the_breaker(
    tmux_root: Path,
) -> None:
    daemon = start(tmux_root, {"slow": {"session": {
        "backend": "tmux", "ready_timeout": "0.5s", "command": ["sleep", "60"],
    }}})  # fmt: skip
    try:
        task = daemon.call("submit", text="never served", workspace="slow")["task"]

        def breaker_open() -> bool:
            why = daemon.call("why", task=task["id"])
            return any("circuit breaker" in r for a in why["agents"] for r in a["reasons"])

        wait_until(breaker_open, timeout=20)
        rows = daemon.call("ledger", task=task["id"])["entries"]
        requeued = [r for r in rows if (r.get("reason") or "").startswith("requeued")]
        assert len(requeued) == 3
        current = daemon.call("get", task=task["id"])["task"]
        assert current["state"] == "pending" and current["attempts"] == 0
        assert daemon.call("status")["warnings"] == {"slow": 3}
        time.sleep(1.0)  # the breaker holds: no fourth attempt meanwhile
        rows_later = daemon.call("ledger", task=task["id"])["entries"]
        assert len(rows_later) == len(rows)
        # no session of the workspace is left running (tmux delivers the hang-up of a killed
        # session's window asynchronously: the last one may take a moment to go on a busy host)
        # (its own: another test may run a `sleep 60` of its own meanwhile)
        root = str(daemon.root)
        wait_until(
            lambda: not [p for p in os.listdir("/proc") if p.isdigit() and _is_sleep60(p, root)]
        )
    finally:
        daemon.stop()


def _is_sleep60(pid: str, root: str) -> bool:
    """A live ``sleep 60`` of a session of the root ``root`` (its COLIBRI_ROOT)."""
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        if cmdline[:2] != [b"sleep", b"60"] or state == "Z":
            return False
        environ = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except (FileNotFoundError, IndexError, ProcessLookupError, PermissionError):
        return False
    return f"COLIBRI_ROOT={root}".encode() in environ


def test_a_warm_tmux_session_takes_the_task_and_is_renamed_after_it(tmux_root: Path) -> None:
    warm_script = (
        "import os, sys, subprocess\n"
        "open(f'warm-{os.getpid()}', 'w').close()\n"
        "print('PROMPT>', flush=True)\n"
        "line = input()\n"
        "subprocess.run([sys.executable, '-m', 'colibri', 'out', f'{os.getpid()} got {line}'])\n"
    )
    daemon = start(tmux_root, {"term": {"warm": 1, "session": {
        "backend": "tmux", "ready_pattern": "PROMPT>", "ready_timeout": "10s", "idle": "60s",
        "command": [sys.executable, "-c", warm_script]}}})  # fmt: skip
    try:
        folder = tmux_root / "term"
        started = wait_until(lambda: list(folder.glob("warm-*")) if folder.exists() else [])
        pid = int(started[0].name.split("-")[1])
        # Its prompt showed: the harness holds it ready, and says so in its heartbeat.
        wait_until(lambda: [a["ready"] for a in daemon.call("agents")["agents"]] == [1], timeout=30)
        task = daemon.call("submit", text="warm hello", workspace="term")["task"]
        final = daemon.wait_closed(task["id"], timeout=20)
        assert final["output"] == f"{pid} got warm hello", "the warm session took the task"
        wait_until(lambda: len(list(folder.glob("warm-*"))) == 2)  # the pool refilled
    finally:
        daemon.stop()


#: Shows its claim and a workspace secret to the test (through a file), then waits for "go".
SHOWS_SECRETS = (
    "import os, subprocess, sys, time\n"
    "open(os.environ['COLIBRI_TASK_ID'] + '.env', 'w').write(\n"
    "    os.environ['COLIBRI_CLAIM'] + ' ' + os.environ['API_KEY'])\n"
    "while not os.path.exists('go'):\n"
    "    time.sleep(0.05)\n"
    "subprocess.run([sys.executable, '-m', 'colibri', 'out', 'done'])\n"
)


def test_no_command_line_on_the_machine_shows_a_sessions_secrets(tmux_root: Path) -> None:
    """Command lines are readable by every user of the machine (/proc/PID/cmdline). A tmux
    session gets its claim and its workspace's env through the tmux client's environment,
    never its arguments, and so does the tmux server that outlives it."""
    secret = "sk-not-for-other-users-0123456789"
    daemon = start(tmux_root, {"term": {"session": {
        "backend": "tmux", "command": [sys.executable, "-c", SHOWS_SECRETS],
        "env": {"API_KEY": secret},
    }}})  # fmt: skip
    try:
        task = daemon.call("submit", text="x", workspace="term")["task"]
        shown = tmux_root / "term" / f"{task['id']}.env"
        claim, key = wait_until(lambda: shown.exists() and shown.read_text()).split()
        assert key == secret and len(claim) == 32
        for pid in (p for p in os.listdir("/proc") if p.isdigit()):
            try:
                cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
            except (FileNotFoundError, ProcessLookupError):
                continue
            assert secret.encode() not in cmdline and claim.encode() not in cmdline, pid
        (tmux_root / "term" / "go").write_text("")
        assert daemon.wait_closed(task["id"], timeout=20)["output"] == "done"
    finally:
        daemon.stop()


#: A harness of the tmux backend, in its own process, reaching the daemon through the proxy.
TMUX_HARNESS = (
    "import asyncio, sys\n"
    "from pathlib import Path\n"
    "from colibri.agent.harness import Harness\n"
    "from colibri.agent.spec import AgentSpec\n"
    "spec = AgentSpec(name='term', command=[sys.executable, '-c', sys.argv[3]],\n"
    "                 backend='tmux', ready_pattern='PROMPT>', ready_timeout=10.0)\n"
    "asyncio.run(Harness(spec, Path(sys.argv[1]), Path(sys.argv[2])).run())\n"
)


@pytest.mark.parametrize(
    ("script", "outcome"),
    [(PROMPTED, "done"), ("print('PROMPT>', flush=True); input()", "failed")],
    ids=["reported-with-out", "ended-without-out"],
)
def test_a_session_that_ends_is_reported_once_as_reclaimed(
    tmux_root: Path, script: str, outcome: str
) -> None:
    """The end of a tmux session says nothing of its task: the harness sends ``reclaimed``
    once, and the daemon closes a task the session reported itself, or fails one it did not
    (before: a ``fail`` first, refused when the session had reported, then ``reclaimed``)."""
    daemon = start(tmux_root, {})
    proxy = RecordingProxy(tmux_root / ".colibri" / "p.sock", daemon.socket)
    agent = subprocess.Popen(
        [sys.executable, "-c", TMUX_HARNESS, str(proxy.path), str(tmux_root), script],
        cwd=tmux_root, start_new_session=True,
    )  # fmt: skip
    try:
        wait_until(lambda: any(a["online"] for a in daemon.call("agents")["agents"]))
        task = daemon.call("submit", text="once", capabilities=[])["task"]
        final = daemon.wait_closed(task["id"], timeout=20)
        assert final["outcome"] == outcome, final
        if outcome == "failed":
            assert final["error"] == "session ended without out"
        wait_until(lambda: proxy.harness_reports(task["id"]))
        time.sleep(0.3)  # anything more it would send has come by now
        assert proxy.harness_reports(task["id"]) == ["reclaimed"]
    finally:
        os.killpg(agent.pid, signal.SIGTERM)
        agent.wait(timeout=20)
        proxy.close()
        daemon.stop()
