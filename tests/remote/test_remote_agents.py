"""An agent on another machine (here: another directory, no root) runs tasks over TLS.

The agent is a real ``colibri agent --connect`` process with its token in its environment; its
sessions report through its relay with the CLI they would use on the daemon's host.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from colibri.certs import Pki
from tests.helpers import PYTHON, colibri, free_port, wait_until
from tests.remote.conftest import TlsDaemon

SESSION = f"""#!/bin/sh
colibri() {{ "{PYTHON}" -m colibri "$@"; }}
text=$(cat)
case "$text" in
  ask*)
    answer=$(colibri ask "which branch?")
    colibri out "answer was $answer" --cost usd=0.5,tokens_in=100,tokens_out=7 ;;
  handoff*)
    colibri submit "child of $COLIBRI_TASK_ID" --cap far --parent "$COLIBRI_TASK_ID" --wait
    colibri out "handed on" ;;
  env*)
    env | grep '^COLIBRI_' | cut -d= -f1 | sort ;;
  *)
    echo "ran: $text" ;;
esac
"""


class RemoteAgent:
    def __init__(self, daemon: TlsDaemon, home: Path, token: str, *args: str) -> None:
        home.mkdir(parents=True, exist_ok=True)
        script = home / "session.sh"
        script.write_text(SESSION)
        script.chmod(0o755)
        self.log = home / "agent.log"
        # Short: the relay's socket must fit a Unix socket path.
        self.state = Path(tempfile.mkdtemp(prefix="cr-", dir="/tmp"))
        env = {**os.environ, **daemon.client_env(token), "XDG_STATE_HOME": str(self.state)}
        env.pop("COLIBRI_ROOT", None)
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [PYTHON, "-m", "colibri", "agent", *args, "--", str(script)],
                cwd=home, env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                start_new_session=True,
            )  # fmt: skip

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        code = self.process.wait(timeout=20)
        shutil.rmtree(self.state, ignore_errors=True)
        return code


@pytest.fixture
def far_agent(tls_daemon: TlsDaemon, tmp_path: Path) -> Iterator[RemoteAgent]:
    token = tls_daemon.token("agent", "acme", agent="far-1", capabilities=["far"])
    agent = RemoteAgent(tls_daemon, tmp_path / "elsewhere", token, "--name", "far-1",
                        "--cap", "far", "--slots", "2")  # fmt: skip
    try:
        wait_until(lambda: any(a["name"] == "far-1" and a["online"]
                               for a in tls_daemon.call("agents")["agents"]))  # fmt: skip
        yield agent
    finally:
        agent.stop()


def test_a_remote_agent_runs_tasks_submitted_locally_and_remotely(
    tls_daemon: TlsDaemon, far_agent: RemoteAgent
) -> None:
    local = tls_daemon.submit("from the daemon's host", capabilities=["far"], tenant="acme")
    assert tls_daemon.wait_closed(local["id"])["output"] == "ran: from the daemon's host\n"
    operator = tls_daemon.token("operator", "acme")
    done = colibri(None, "submit", "from an operator afar", "--cap", "far", "--wait", "--json",
                   env=tls_daemon.client_env(operator))  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert '"output": "ran: from an operator afar\\n"' in done.stdout
    assert '"tenant": "acme"' in done.stdout
    # Its ledger rows are the board's like any other's.
    assert [r["to_state"] for r in tls_daemon.ledger(local["id"])][-1] == "closed"


def test_a_remote_session_asks_reports_cost_and_hands_off_through_its_relay(
    tls_daemon: TlsDaemon, far_agent: RemoteAgent
) -> None:
    asking = tls_daemon.submit("ask me", capabilities=["far"], tenant="acme")
    wait_until(lambda: tls_daemon.task(asking["id"]).get("question") == "which branch?")
    operator = tls_daemon.token("operator", "acme")
    answered = colibri(None, "answer", asking["id"], "main", env=tls_daemon.client_env(operator))
    assert answered.returncode == 0, answered.stderr
    task = tls_daemon.wait_closed(asking["id"])
    assert (task["outcome"], task["output"]) == ("done", "answer was main")
    assert task["cost"]["usd"] == 0.5 and task["cost"]["tokens_in"] == 100
    assert tls_daemon.call("cost", by="tenant")["totals"][0]["key"] == "acme"

    parent = tls_daemon.submit("handoff", capabilities=["far"], tenant="acme")
    assert tls_daemon.wait_closed(parent["id"], timeout=30)["output"] == "handed on"
    family = tls_daemon.call("family", task=parent["id"])["tasks"]
    assert len(family) == 2
    child = family[1]
    assert (child["parent"], child["tenant"], child["outcome"]) == (parent["id"], "acme", "done")


def test_a_remote_session_never_sees_the_agents_token(
    tls_daemon: TlsDaemon, far_agent: RemoteAgent
) -> None:
    task = tls_daemon.submit("env", capabilities=["far"], tenant="acme")
    names = tls_daemon.wait_closed(task["id"])["output"].split()
    assert "COLIBRI_TOKEN" not in names and "COLIBRI_CONNECT" not in names
    assert {"COLIBRI_TASK_ID", "COLIBRI_CLAIM", "COLIBRI_ROOT"} <= set(names)


def test_revoking_the_agents_token_closes_its_connection_and_stops_it(
    tls_daemon: TlsDaemon, tmp_path: Path
) -> None:
    token = tls_daemon.token("agent", "acme", agent="doomed")
    agent = RemoteAgent(tls_daemon, tmp_path / "doomed", token, "--name", "doomed")
    try:
        wait_until(lambda: any(a["name"] == "doomed" and a["online"]
                               for a in tls_daemon.call("agents")["agents"]))  # fmt: skip
        token_id = token.split("_")[1]
        assert tls_daemon.call("token-revoke", token=token_id)["closed"] >= 1
        # Its connection is gone at once; trying again, it is refused, and the harness stops.
        assert agent.process.wait(timeout=20) != 0
    finally:
        agent.stop()
    assert "revoked" in agent.output()
    assert token.split("_", 2)[2] not in agent.output() + tls_daemon.log()


def test_a_remote_agent_tries_its_addresses_in_turn(tls_daemon: TlsDaemon, tmp_path: Path) -> None:
    dead = f"tcp://127.0.0.1:{free_port()}"  # held, nobody listens: the first address fails
    token = tls_daemon.token("agent", "default", agent="second-try")
    env = {**tls_daemon.client_env(token), "COLIBRI_CONNECT": f"{dead},{tls_daemon.address}"}
    home = tmp_path / "second"
    home.mkdir()
    state = tempfile.mkdtemp(prefix="cr-", dir="/tmp")
    agent = subprocess.Popen(
        [sys.executable, "-m", "colibri", "agent", "--name", "second-try", "--state-dir",
         state, "--", "cat"],
        env={**os.environ, **env}, cwd=home, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        start_new_session=True,
    )  # fmt: skip
    try:
        task = tls_daemon.call("create-task", text="echo me", agent="second-try")["task"]
        assert tls_daemon.wait_closed(task["id"])["output"] == "echo me"
    finally:
        agent.send_signal(signal.SIGTERM)
        agent.wait(timeout=20)
        shutil.rmtree(state, ignore_errors=True)


def test_a_remote_agent_comes_back_after_the_daemon_restarts(tmp_path: Path, pki: Pki) -> None:
    port = free_port()  # a fixed port, so the restarted daemon is where it was
    root = tmp_path / "board"
    root.mkdir()
    daemon = TlsDaemon(root, pki, listen=f"tcp://127.0.0.1:{port}")
    daemon.start()
    agent = None
    try:
        token = daemon.token("agent", "default", agent="steady")
        agent = RemoteAgent(daemon, tmp_path / "steady", token, "--name", "steady")
        first = daemon.call("create-task", text="before", agent="steady")["task"]
        assert daemon.wait_closed(first["id"], timeout=20)["output"] == "ran: before\n"
        daemon.restart()
        second = daemon.call("create-task", text="after", agent="steady")["task"]
        assert daemon.wait_closed(second["id"], timeout=30)["output"] == "ran: after\n"
        assert agent.process.poll() is None
        assert "lost the daemon; reconnecting" in agent.output()
    finally:
        if agent is not None:
            agent.stop()
        daemon.stop()
