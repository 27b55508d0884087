"""A session's report is the agent's to keep until the daemon has taken it: a real harness over
TCP whose session ends while PostgreSQL is away — the relay to it cut, the server restarted, or
the daemon serving the board stopped past its lease — delivers its report once the board is
served again. The task ends done, once, and the agent's slot is free for the next task.

Before, the report refused ``storage_unavailable`` (or ``internal``) was logged and forgotten:
the task stayed running, the slot taken, until the harness registered again and the task failed
``session lost`` (or, with attempts left, its finished work ran a second time)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from colibri.core.errors import ColibriError
from tests.helpers import PYTHON, stop_process, wait_until
from tests.postgres.cluster import PrivateServer
from tests.postgres.hive import Member, Relay


class FarAgent:
    """``colibri agent --connect`` with one slot, whose sessions wait for the test's ``go`` file
    before they print their task and end (writing ``ended`` as they do)."""

    def __init__(self, connect: str, token: str) -> None:
        self.state = Path(tempfile.mkdtemp(prefix="cr-", dir="/tmp"))
        self.go, self.ended, self.log = (self.state / n for n in ("go", "ended", "agent.log"))
        #: Written when a session is told to stop (SIGTERM): it then waits for ``go`` too.
        self.stopped = self.state / "stopped"
        stop = f'touch "{self.stopped}"; while [ ! -e {self.go} ]; do sleep 0.05; done; exit 1'
        session = (
            f"trap '{stop}' TERM; while [ ! -e {self.go} ]; do sleep 0.05; done; cat; "
            f'touch "{self.ended}"'
        )
        with open(self.log, "wb") as log:
            self.process = subprocess.Popen(
                [PYTHON, "-m", "colibri", "agent", "--connect", connect, "--insecure-loopback",
                 "--name", "far", "--cap", "far", "--slots", "1", "--state-dir",
                 str(self.state / "agent"), "--", "sh", "-c", session],
                env={**os.environ, "COLIBRI_TOKEN": token}, stdin=subprocess.DEVNULL,
                stdout=log, stderr=log, start_new_session=True,
            )  # fmt: skip

    def said(self) -> str:
        return self.log.read_text(errors="replace")

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            stop_process(self.process)
        shutil.rmtree(self.state, ignore_errors=True)


@pytest.fixture
def far_agents() -> Iterator[Callable[[str, str], FarAgent]]:
    made: list[FarAgent] = []

    def make(connect: str, token: str) -> FarAgent:
        made.append(FarAgent(connect, token))
        return made[-1]

    yield make
    for agent in made:
        agent.close()


def running(daemon: Member, task_id: str) -> bool:
    return bool(daemon.task(task_id)["state"] == "running")


def start_a_session(
    daemon: Member, far_agents: Callable[[str, str], FarAgent], connect: str
) -> tuple[FarAgent, str, str]:
    """The agent running task A (one attempt), with task B pending behind its one slot."""
    token = daemon.call("token-create", role="agent", tenant="default", agent="far")["secret"]
    agent = far_agents(connect, token)
    first = daemon.submit("task A", capabilities=["far"], max_attempts=1)["id"]
    wait_until(lambda: running(daemon, first), timeout=20)
    second = daemon.submit("task B", capabilities=["far"])["id"]
    return agent, first, second


def answers(daemon: Member) -> bool:
    try:
        daemon.call("status")
    except ColibriError:
        return False
    return True


def ended_once(daemon: Member, agent: FarAgent, first: str, second: str) -> None:
    """A ends done with its session's output, by one ``out`` under its one claim; B runs next."""
    wait_until(lambda: answers(daemon), timeout=30)
    final = daemon.wait_closed(first, timeout=30)
    assert (final["outcome"], final["output"], final["attempts"]) == ("done", "task A", 1), final
    rows = [(r["to_state"], r["epoch"]) for r in daemon.ledger(first)]
    assert rows.count(("done", 1)) == 1 and ("running", 2) not in rows, rows
    agent.go.touch()
    assert daemon.wait_closed(second, timeout=30)["outcome"] == "done"
    assert "report refused" not in agent.said(), agent.said()


def test_a_report_refused_while_the_relay_to_postgresql_is_cut_is_delivered_once_it_is_back(
    tmp_path: Path, relayed_board: tuple[Relay, str], far_agents: Callable[[str, str], FarAgent]
) -> None:
    relay, through = relayed_board
    daemon = Member(tmp_path / "a", through, ttl="15s")
    daemon.start()
    try:
        agent, first, second = start_a_session(daemon, far_agents, daemon.address)
        relay.cut()
        agent.go.touch()
        wait_until(agent.ended.exists, timeout=20)
        agent.go.unlink()  # B, assigned next, waits for it again
        # Refused while the store is away: kept, and sent again.
        wait_until(lambda: "code=storage_unavailable" in agent.said(), timeout=20)
        assert "event=report_deferred" in agent.said()
        relay.restore()
        ended_once(daemon, agent, first, second)
    finally:
        daemon.stop()


def test_a_report_refused_while_postgresql_restarts_is_delivered_once_it_is_back(
    tmp_path: Path, private_server: PrivateServer, far_agents: Callable[[str, str], FarAgent]
) -> None:
    daemon = Member(tmp_path / "a", private_server.dsn, ttl="20s")
    daemon.start()
    try:
        agent, first, second = start_a_session(daemon, far_agents, daemon.address)
        private_server.stop("immediate")
        agent.go.touch()
        wait_until(agent.ended.exists, timeout=20)
        agent.go.unlink()  # B, assigned next, waits for it again
        wait_until(lambda: "event=report_deferred" in agent.said(), timeout=20)
        private_server.start()
        ended_once(daemon, agent, first, second)
    finally:
        daemon.stop()


def test_a_report_made_while_its_daemon_is_stopped_past_its_lease_reaches_the_next_one(
    tmp_path: Path, board: str, far_agents: Callable[[str, str], FarAgent]
) -> None:
    """The owner SIGSTOPped with the session running, the standby takes the board over, the
    session ends; the owner wakes past its lease (its answers, if any: lease_lost, closed) and
    stops: the report reaches the standby, which adopted the session."""
    owner, standby = Member(tmp_path / "a", board), Member(tmp_path / "b", board)
    owner.start()
    try:
        standby.stand_by()
        connect = f"{owner.address},{standby.address}"
        agent, first, second = start_a_session(owner, far_agents, connect)
        assert owner.process is not None
        owner.process.send_signal(signal.SIGSTOP)
        try:
            wait_until(standby.serving, timeout=20)
            agent.go.touch()
            wait_until(agent.ended.exists, timeout=20)
            agent.go.unlink()  # B, assigned next, waits for it again
        finally:
            owner.process.send_signal(signal.SIGCONT)
        assert owner.process.wait(timeout=30) == 1
        ended_once(standby, agent, first, second)
    finally:
        owner.stop_with(standby)


def test_a_cancelled_sessions_end_refused_while_the_relay_is_cut_is_delivered_once_it_is_back(
    tmp_path: Path, relayed_board: tuple[Relay, str], far_agents: Callable[[str, str], FarAgent]
) -> None:
    """The same for the harness's word that a cancelled task's session is gone (``reclaimed``),
    which frees the agent's slot: before, a refusal of it was dropped, and the task stayed
    cancelled, not closed, with the slot taken."""
    relay, through = relayed_board
    daemon = Member(tmp_path / "a", through, ttl="15s")
    daemon.start()
    try:
        agent, first, second = start_a_session(daemon, far_agents, daemon.address)
        daemon.call("cancel", task=first)
        wait_until(agent.stopped.exists, timeout=20)  # told to stop; it waits for go
        relay.cut()
        agent.go.touch()
        wait_until(lambda: "event=report_deferred" in agent.said(), timeout=20)
        relay.restore()
        agent.go.unlink()
        wait_until(lambda: answers(daemon), timeout=30)
        final = daemon.wait_closed(first, timeout=30)
        assert final["outcome"] == "cancelled", final
        agent.go.touch()
        assert daemon.wait_closed(second, timeout=30)["outcome"] == "done"
    finally:
        daemon.stop()
