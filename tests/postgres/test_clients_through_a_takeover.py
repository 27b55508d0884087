"""Clients waiting on the board follow it through a takeover: the serving daemon SIGKILLed
while a task runs, ``submit --wait``, ``wait``, ``ledger --follow`` and ``attach``, given both
daemons' addresses, go on on the standby that takes over — each says so in one line on stderr —
and end as they would have: the task's output once it is done, every ledger row printed once.
The task's own session, on an agent over TCP, waits through the agent's relay meanwhile, and
follows too."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any

from tests.helpers import PYTHON, online, wait_until
from tests.postgres.hive import Member


def _client(connect: str, token: str, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [PYTHON, "-m", "colibri", "--connect", connect, "--insecure-loopback", *args],
        env={**os.environ, "COLIBRI_TOKEN": token}, stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip


def _agent(connect: str, token: str, state: str, other: Path) -> subprocess.Popen[bytes]:
    """Agent ``far`` over TCP, whose sessions first wait, through the agent's relay, for the
    task whose id is in the file ``other`` to end, then answer their task's text."""
    return subprocess.Popen(
        [PYTHON, "-m", "colibri", "agent", "--connect", connect, "--insecure-loopback",
         "--name", "far", "--cap", "far", "--state-dir", state, "--",
         "sh", "-c", f'"{PYTHON}" -m colibri wait "$(cat {other})" >/dev/null && cat'],
        env={**os.environ, "COLIBRI_TOKEN": token}, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


def _lines(stream: Any) -> list[str]:
    return [line for line in stream.splitlines() if line.strip()]


def test_waits_follows_and_attaches_go_on_on_the_standby_that_takes_over(
    tmp_path: Path, board: str
) -> None:
    first, second = Member(tmp_path / "a", board), Member(tmp_path / "b", board)
    first.start()
    state = tempfile.mkdtemp(prefix="cr-", dir="/tmp")
    other = tmp_path / "other"
    connect = f"{first.address},{second.address}"
    started: list[subprocess.Popen[Any]] = []
    try:
        second.stand_by()
        agent_token = first.call("token-create", role="agent", tenant="default", agent="far")
        operator = first.call("token-create", role="operator", tenant="default")["secret"]
        started.append(_agent(connect, agent_token["secret"], state, other))
        wait_until(lambda: online(first, "far"), timeout=20)
        gate = first.submit("the session waits for this one", capabilities=["nobody"])
        other.write_text(gate["id"])
        follower = _client(connect, operator, "ledger", "--follow", "--json")
        # From a position (--since): over TCP an attach from now on has none until its first
        # row comes, and one cut off before that goes on from now (README, "follow it").
        attached = _client(connect, operator, "attach", "--since", "0", "--json")
        submitted = _client(connect, operator, "submit", "through a takeover", "--cap", "far",
                            "--wait")  # fmt: skip
        started += [follower, attached, submitted]
        running = wait_until(lambda: first.call("list", state="running")["tasks"], timeout=20)
        (task,) = running
        waiter = _client(connect, operator, "wait", task["id"])
        started.append(waiter)
        assert attached.stderr is not None
        assert attached.stderr.readline().startswith("attached to the daemon")
        rows_before = len(first.ledger())
        # Each client holds its connection: the agent, its session's wait through the relay,
        # four clients, and this status's own.
        wait_until(lambda: first.call("status")["daemon"]["connections"] == 7, timeout=20)

        first.kill()
        wait_until(second.serving, timeout=20)
        # The session, adopted by the standby, waited on through it: it ends now.
        second.call("cancel", task=gate["id"])
        out, err = submitted.communicate(timeout=60)
        assert submitted.returncode == 0, err
        assert out == "through a takeover\n"
        (said,) = _lines(err)
        assert said == (f"colibri: lost the daemon at {first.address} (the daemon closed the "
                        f"connection); following the board at {second.address}"), said  # fmt: skip
        out, err = waiter.communicate(timeout=60)
        assert waiter.returncode == 0, err
        assert out == "through a takeover\n"
        assert _lines(err) == [said]
        assert second.task(task["id"])["outcome"] == "done"

        # The follower printed every row once, in order, across the two daemons.
        rows = [row["seq"] for row in second.ledger()]
        assert len(rows) > rows_before
        assert follower.stdout is not None
        printed = [json.loads(follower.stdout.readline())["seq"] for _ in rows]
        assert printed == rows == list(range(1, len(rows) + 1))
        # The attach too, and its task's end came to it from the daemon that took over.
        assert attached.stdout is not None
        ended = None
        while ended is None:
            event = json.loads(attached.stdout.readline())
            entry = event.get("entry") or {}
            if event.get("event") == "ledger" and entry.get("to_state") == "done":
                ended = entry
        assert ended["task"] == task["id"]
        for process in (follower, attached):
            process.send_signal(signal.SIGINT)
            _, err = process.communicate(timeout=30)
            assert said in _lines(err), err
    finally:
        for process in started:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=20)
        shutil.rmtree(state, ignore_errors=True)
        first.stop_with(second)
