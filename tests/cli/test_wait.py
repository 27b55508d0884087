"""``colibri wait ID``: blocks until a task submitted earlier has ended, then prints it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from tests.helpers import PYTHON, Daemon, FakeAgent, RecordingProxy, colibri, one_line


def waiting(root: Path, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PYTHON, "-m", "colibri", "--root", str(root), "wait", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_wait_blocks_until_the_session_reports_and_prints_the_output(daemon: Daemon) -> None:
    agent = FakeAgent(daemon, "build-1", ["python"])
    task = daemon.submit("run the tests", capabilities=["python"])
    assign = agent.next_assign()
    plain, as_json = waiting(daemon.root, task["id"]), waiting(daemon.root, task["id"], "--json")
    try:
        # Neither can have ended: the task runs until the report below.
        assert plain.poll() is None and as_json.poll() is None
        agent.out(assign, "412 passed")
        out, err = plain.communicate(timeout=30)
        assert (plain.returncode, out, err) == (0, "412 passed\n", "")
        out, err = as_json.communicate(timeout=30)
        assert as_json.returncode == 0, err
        doc = json.loads(out)
        assert doc["id"] == task["id"] and doc["outcome"] == "done"
        assert doc["output"] == "412 passed"
    finally:
        for process in (plain, as_json):
            if process.poll() is None:
                process.kill()
                process.wait()
        agent.close()


def test_an_ended_task_is_answered_at_once_whatever_its_outcome(daemon: Daemon) -> None:
    agent = FakeAgent(daemon, "build-1", ["python"])
    task = daemon.submit("break", capabilities=["python"])
    agent.fail(agent.next_assign(), "boom")
    agent.close()
    plain = colibri(daemon.root, "wait", task["id"])
    assert plain.returncode == 0 and plain.stdout == ""
    assert one_line(plain.stderr) == f"colibri: task {task['id']} failed: boom"
    doc = json.loads(colibri(daemon.root, "wait", task["id"], "--json").stdout)
    assert doc["outcome"] == "failed" and doc["error"] == "boom"

    pending = daemon.submit("never taken", capabilities=["gpu"])
    daemon.call("cancel", task=pending["id"])
    done = colibri(daemon.root, "wait", pending["id"], "--json")
    assert done.returncode == 0 and json.loads(done.stdout)["outcome"] == "cancelled"


def test_wait_refuses_an_unknown_task_and_a_missing_daemon(daemon: Daemon, tmp_path: Path) -> None:
    done = colibri(daemon.root, "wait", "no-such-task")
    assert done.returncode == 1 and "no-such-task" in one_line(done.stderr)
    done = colibri(daemon.root, "wait", "no-such-task", "--json")
    assert done.returncode == 1
    assert json.loads(done.stdout)["error"]["code"] == "unknown_task"
    assert colibri(daemon.root, "wait").returncode == 2  # no ID: a usage error

    from colibri.config import init_root

    init_root(tmp_path / "idle")
    done = colibri(tmp_path / "idle", "wait", "x", "--json")
    assert done.returncode == 1 and json.loads(done.stdout)["error"]["code"] == "no_daemon"


def test_a_bad_follow_for_is_refused_in_one_line_before_anything_is_submitted(
    daemon: Daemon,
) -> None:
    for args in (["wait", "some-task"], ["submit", "never stored", "--wait"]):
        result = colibri(daemon.root, "--follow-for", "soon", *args)
        assert result.returncode == 1, result
        assert one_line(result.stderr).startswith("colibri: "), result.stderr
        assert "--follow-for" in result.stderr and "soon" in result.stderr
    assert daemon.call("list")["tasks"] == []


def test_submit_wait_submits_and_waits_on_one_connection(daemon: Daemon) -> None:
    """``submit --wait`` asks on the connection that submitted (it used to open a second one);
    seen by a real socket in the daemon's place that forwards and records every line."""
    real = daemon.socket.with_name("real.sock")
    daemon.socket.rename(real)
    proxy = RecordingProxy(daemon.socket, real)
    agent = FakeAgent(daemon, "build-1", ["python"])
    submitting = subprocess.Popen(
        [PYTHON, "-m", "colibri", "--root", str(daemon.root), "submit", "run the tests",
         "--cap", "python", "--wait"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        agent.out(agent.next_assign(), "412 passed")
        out, err = submitting.communicate(timeout=30)
        assert (submitting.returncode, out, err) == (0, "412 passed\n", "")
        commands = [[line["cmd"] for line in lines] for lines in proxy.sent]
        assert [c for c in commands if c[:1] != ["register-agent"]] == [["submit", "wait"]]
    finally:
        if submitting.poll() is None:
            submitting.kill()
            submitting.wait()
        agent.close()
        proxy.close()
        real.rename(daemon.socket)
