"""``colibri agent`` end to end: real harness processes running real sessions."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from colibri.client import socket_path
from tests.helpers import Daemon, colibri, group_members, harness, stop_process, wait_until

UPPER = [sys.executable, "-c", "import sys; print(sys.stdin.read().upper())"]

#: Writes its stdin to ROOT/stdin-TASK and echoes it on stdout.
RECORD = [
    sys.executable,
    "-c",
    "import os, sys\n"
    "data = sys.stdin.buffer.read()\n"
    "path = os.path.join(os.environ['COLIBRI_ROOT'], 'stdin-' + os.environ['COLIBRI_TASK_ID'])\n"
    "open(path, 'wb').write(data)\n"
    "sys.stdout.buffer.write(data)\n",
]

#: Prints what a session sees of itself as JSON.
INTROSPECT = [
    sys.executable,
    "-c",
    "import json, os\n"
    "names = ['COLIBRI_TASK_ID', 'COLIBRI_SOCKET', 'COLIBRI_ROOT', 'COLIBRI_AGENT']\n"
    "print(json.dumps({'env': {n: os.environ.get(n) for n in names}, 'pid': os.getpid(),\n"
    "                  'pgid': os.getpgid(0), 'cwd': os.getcwd()}))\n",
]

#: Starts `sleep 1000` as a child, writes "PGID SLEEP_PID" to ROOT/group-TASK, and waits.
#: The child shares the session's stdout and stderr pipes, as the children of a script do;
#: given an argument, the session detaches them instead.
LONG = [
    sys.executable,
    "-c",
    "import os, subprocess, sys\n"
    "quiet = {'stdout': subprocess.DEVNULL, 'stderr': subprocess.DEVNULL} if sys.argv[1:] else {}\n"
    "child = subprocess.Popen(['sleep', '1000'], stdin=subprocess.DEVNULL, **quiet)\n"
    "path = os.path.join(os.environ['COLIBRI_ROOT'], 'group-' + os.environ['COLIBRI_TASK_ID'])\n"
    "open(path + '.tmp', 'w').write(f'{os.getpgid(0)} {child.pid}')\n"
    "os.rename(path + '.tmp', path)\n"
    "child.wait()\n",
]

#: Says it started (ROOT/started-TASK), waits for ROOT/go-TASK to appear, then prints.
GATED = [
    sys.executable,
    "-c",
    "import os, time\n"
    "root, task = os.environ['COLIBRI_ROOT'], os.environ['COLIBRI_TASK_ID']\n"
    "open(os.path.join(root, 'started-' + task), 'w').write(str(os.getpgid(0)))\n"
    "while not os.path.exists(os.path.join(root, 'go-' + task)):\n"
    "    time.sleep(0.02)\n"
    "print('released', task)\n",
]


@pytest.fixture
def agents(root: Path) -> Iterator[list[subprocess.Popen[bytes]]]:
    """Harness processes a test starts; each is stopped afterwards, even when the test fails."""
    started: list[subprocess.Popen[bytes]] = []
    yield started
    for process in started:
        try:
            stop_process(process)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
            raise


@pytest.fixture
def sessions() -> Iterator[list[int]]:
    """Process groups of sessions a test saw; any still alive afterwards is killed."""
    groups: list[int] = []
    yield groups
    for pgid in groups:
        if group_members(pgid):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pgid, signal.SIGKILL)


def start_agent(
    started: list[subprocess.Popen[bytes]],
    root: Path,
    name: str,
    command: list[str],
    *extra: str,
    caps: list[str] | None = None,
) -> subprocess.Popen[bytes]:
    process = harness(root, name, caps or [], command, *extra)
    started.append(process)
    return process


def agent_log(root: Path, name: str) -> str:
    return (root / f"agent-{name}.log").read_text(errors="replace")


def process_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] not in ("Z", "X")


def test_submit_wait_prints_the_session_output(
    daemon: Daemon, agents: list[subprocess.Popen[bytes]]
) -> None:
    start_agent(agents, daemon.root, "upper", UPPER, caps=["text"])
    result = colibri(daemon.root, "submit", "hello, world", "--cap", "text", "--wait")
    assert result.returncode == 0, result.stderr
    assert result.stdout == "HELLO, WORLD\n"
    [task] = daemon.call("list")["tasks"]
    assert (task["state"], task["outcome"], task["agent"]) == ("closed", "done", "upper")
    assert task["output"] == "HELLO, WORLD\n"
    assert task["attempts"] == 1

    as_json = colibri(daemon.root, "submit", "again", "--wait", "--json")
    assert as_json.returncode == 0, as_json.stderr
    assert json.loads(as_json.stdout)["output"] == "AGAIN\n"


def test_a_failing_session_fails_the_task(
    daemon: Daemon, agents: list[subprocess.Popen[bytes]]
) -> None:
    failing = [
        sys.executable,
        "-c",
        "import sys; sys.stdout.write('partial'); "
        "sys.stderr.write('noise\\nthe disk is on fire\\n'); sys.exit(3)",
    ]
    start_agent(agents, daemon.root, "broken", failing)
    result = colibri(daemon.root, "submit", "do it", "--wait")
    assert result.returncode == 1
    [task] = daemon.call("list")["tasks"]
    assert task["id"] in result.stderr
    assert "failed" in result.stderr
    assert "exit 3" in result.stderr

    shown = colibri(daemon.root, "show", task["id"], "--json")
    assert shown.returncode == 0, shown.stderr
    error = json.loads(shown.stdout)["error"]
    assert "exit 3" in error
    assert "the disk is on fire" in error
    assert (task["state"], task["outcome"]) == ("closed", "failed")


def test_task_text_reaches_stdin_byte_for_byte_without_a_shell(
    daemon: Daemon, agents: list[subprocess.Popen[bytes]], tmp_path: Path
) -> None:
    start_agent(agents, daemon.root, "recorder", RECORD)
    # No surrounding whitespace: the daemon trims that from every task text.
    text = (
        '$(touch pwned); "; touch pwned2 `touch pwned3` | touch pwned4 && touch pwned5; '
        "'$HOME' \\n ünï ✓\n\ttab > pwned6"
    )
    result = subprocess.run(
        [sys.executable, "-m", "colibri", "--root", str(daemon.root), "submit", text, "--wait"],
        capture_output=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == text.encode() + b"\n"  # --wait ends the output with a newline
    [task] = daemon.call("list")["tasks"]
    assert (daemon.root / f"stdin-{task['id']}").read_bytes() == text.encode()
    assert task["output"] == text
    for where in (daemon.root, tmp_path):
        assert list(where.rglob("pwned*")) == [], where
    assert list(Path.cwd().glob("pwned*")) == []  # the daemon's working directory


def test_session_environment_and_process_group(
    daemon: Daemon, agents: list[subprocess.Popen[bytes]]
) -> None:
    agent = start_agent(agents, daemon.root, "inspector", INTROSPECT)
    task_id = colibri(daemon.root, "submit", "who am I").stdout.strip()
    task = daemon.wait_closed(task_id)
    assert task["outcome"] == "done", task
    seen = json.loads(task["output"])
    assert seen["env"] == {
        "COLIBRI_TASK_ID": task_id,
        "COLIBRI_SOCKET": str(socket_path(daemon.root)),
        "COLIBRI_ROOT": str(daemon.root),
        "COLIBRI_AGENT": "inspector",
    }
    # Its own process group, led by the session, apart from the harness's.
    assert seen["pgid"] == seen["pid"]
    assert seen["pgid"] != os.getpgid(agent.pid)
    assert Path(seen["cwd"]).resolve() == daemon.root.resolve()  # the harness's cwd


@pytest.mark.parametrize("pipes", ["shared", "detached"])
def test_cancel_stops_the_whole_session_group(
    daemon: Daemon, agents: list[subprocess.Popen[bytes]], sessions: list[int], pipes: str
) -> None:
    # With its pipes detached, the child outlives the session unless the whole group is signalled.
    command = [*LONG, "detached"] if pipes == "detached" else LONG
    agent = start_agent(agents, daemon.root, "sleeper", command)
    task_id = colibri(daemon.root, "submit", "sleep for a long time").stdout.strip()
    marker = daemon.root / f"group-{task_id}"
    wait_until(marker.exists)
    pgid, sleep_pid = map(int, marker.read_text().split())
    sessions.append(pgid)
    members = group_members(pgid)
    assert pgid in members and sleep_pid in members
    assert daemon.task(task_id)["state"] == "running"

    result = colibri(daemon.root, "cancel", task_id, "--reason", "no longer needed")
    assert result.returncode == 0, result.stderr
    task = daemon.wait_closed(task_id)
    assert task["outcome"] == "cancelled"
    wait_until(lambda: not group_members(pgid), timeout=10)
    wait_until(lambda: not process_alive(sleep_pid), timeout=10)
    # The harness lives on and the agent has its slot back.
    assert agent.poll() is None
    wait_until(lambda: daemon.call("agents")["agents"][0]["running"] == [])


def test_harness_outlives_a_daemon_crash(
    daemon: Daemon, agents: list[subprocess.Popen[bytes]], sessions: list[int]
) -> None:
    agent = start_agent(agents, daemon.root, "steady", GATED)
    task_id = colibri(daemon.root, "submit", "survive the crash").stdout.strip()
    started = daemon.root / f"started-{task_id}"
    wait_until(lambda: started.exists() and started.read_text())
    sessions.append(int(started.read_text()))
    before = daemon.task(task_id)
    assert (before["state"], before["attempts"], before["agent"]) == ("running", 1, "steady")

    daemon.kill()
    daemon.start()

    def adopted() -> bool:
        listed = daemon.call("agents")["agents"]
        return any(
            a["name"] == "steady" and a["online"] and task_id in a["running"] for a in listed
        )

    wait_until(adopted, timeout=15)
    assert agent.poll() is None
    assert daemon.task(task_id)["state"] == "running"

    (daemon.root / f"go-{task_id}").touch()
    task = daemon.wait_closed(task_id)
    assert task["outcome"] == "done", task
    assert task["output"] == f"released {task_id}\n"
    assert task["attempts"] == 1
    assert task["epoch"] == before["epoch"]
    rows = daemon.call("ledger", task=task_id)["entries"]
    assert [r["to_state"] for r in rows] == ["pending", "running", "done", "closed"]
    assert agent_log(daemon.root, "steady").count("registered") >= 2


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["term", "hangup"])
def test_sigterm_or_a_closed_terminal_stops_the_harness_and_fails_its_task(
    daemon: Daemon, agents: list[subprocess.Popen[bytes]], sessions: list[int], signum: int
) -> None:
    agent = start_agent(agents, daemon.root, "leaving", GATED)
    task_id = colibri(daemon.root, "submit", "never finishes").stdout.strip()
    started = daemon.root / f"started-{task_id}"
    wait_until(lambda: started.exists() and started.read_text())
    session_group = int(started.read_text())
    sessions.append(session_group)
    assert group_members(session_group)

    agent.send_signal(signum)
    assert agent.wait(timeout=15) == 0, agent_log(daemon.root, "leaving")
    task = daemon.wait_closed(task_id)
    assert task["outcome"] == "failed"
    assert "leaving" in task["error"] and "stopped" in task["error"]
    assert not group_members(session_group)
    assert not (daemon.root / f"go-{task_id}").exists()
