"""Clients waiting on the board follow it through a takeover: the serving daemon SIGKILLed
while a task runs, ``submit --wait``, ``wait``, ``ledger --follow`` and ``attach``, given both
daemons' addresses, go on on the standby that takes over — each says so in one line on stderr —
and end as they would have: the task's output once it is done, every ledger row printed once.
The task's own session, on an agent over TCP, waits through the agent's relay meanwhile, and
follows too. Submits sent one after another through a kill, by the CLI or one ``Client``, wait
out the takeover and are each taken once (the client's own idempotency key)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from colibri.client import takeover_patience
from tests.helpers import PYTHON, colibri, online, wait_until
from tests.postgres.hive import Member

T = TypeVar("T")


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


def _leases(board: str) -> dict[str, str]:
    """tenant → the address of the daemon whose live lease holds it."""
    import psycopg

    with psycopg.connect(board) as conn:
        rows = conn.execute(
            "SELECT substr(name, 8), address FROM leases "
            "WHERE name LIKE 'tenant/%' AND expires_at > now()"
        ).fetchall()
    return dict(rows)


def _one_by_one(submit: Callable[[int], T], serving: Member) -> list[T]:
    """``submit(n)`` for n from 0 to 59, one after another in a thread, ``serving`` SIGKILLed
    once the 20th has returned; what each returned (what the first to raise raised)."""
    results: list[T] = []
    failures: list[BaseException] = []

    def submit_all() -> None:
        try:
            for n in range(60):
                results.append(submit(n))
        except BaseException as exc:
            failures.append(exc)

    submitter = threading.Thread(target=submit_all)
    submitter.start()
    try:
        wait_until(lambda: len(results) >= 20 or failures, timeout=60)
        serving.kill()
    finally:
        submitter.join(timeout=120)
    assert not submitter.is_alive()
    if failures:
        raise failures[0]
    return results


def _sent_on(address: str, token: str) -> bool:
    """Whether a client given ``address`` alone reaches its token's tenant at once, sent on to
    the daemon serving it, with no takeover to wait out."""
    from colibri.client import Client, Remote
    from colibri.core.errors import NotOwner

    try:
        remote = Remote.parse(address, token=token, insecure_loopback=True)
        Client.remote(remote, patience=0).close()
    except NotOwner:
        return False
    return True


def _submitted(board: str, tenant: str) -> dict[str, int]:
    """task text → how many tasks of ``tenant`` the board holds with it."""
    import psycopg

    with psycopg.connect(board) as conn:
        rows = conn.execute(
            "SELECT text, count(*) FROM tasks WHERE tenant = %s GROUP BY text", (tenant,)
        ).fetchall()
    return dict(rows)


def test_submits_one_by_one_through_the_serving_daemons_kill_are_each_taken_once(
    tmp_path: Path, board: str
) -> None:
    """Two daemons sharing the tenants out; 60 submits of tenant acme, one after another, each
    its own ``colibri submit`` given both addresses; the daemon serving acme is SIGKILLed
    after the 20th is acknowledged. Every submit is acknowledged (exit 0), and each made one
    task: those cut off mid-request were sent again with the client's own idempotency key.
    The first submit after the kill says once that it waits for a daemon to take acme over."""
    first = Member(tmp_path / "a", board, share=True)
    second = Member(tmp_path / "b", board, share=True)
    first.start()
    try:
        operator = first.call("token-create", role="operator", tenant="acme")["secret"]
        second.start()
        # Shared out: acme one daemon's, default the other's.
        wait_until(lambda: len(set(_leases(board).values())) == 2, timeout=30)
        serving = {m.address: m for m in (first, second)}[_leases(board)["acme"]]
        other = second if serving is first else first
        # ... and the other daemon has read so (at its next beat): it sends acme's clients on.
        wait_until(lambda: _sent_on(other.address, operator), timeout=20)
        connect = f"{first.address},{second.address}"
        results = _one_by_one(
            lambda n: colibri(None, "--connect", connect, "--insecure-loopback", "submit",
                              f"task {n}", "--cap", "nobody", env={"COLIBRI_TOKEN": operator}),
            serving,
        )  # fmt: skip
        failed = [(n, r.stderr) for n, r in enumerate(results) if r.returncode != 0]
        assert failed == []
        assert len({r.stdout for r in results}) == 60  # 60 task ids, none twice
        assert _submitted(board, "acme") == {f"task {n}": 1 for n in range(60)}
        assert _leases(board)["acme"] == other.address
        # Said once, by the first submit after the kill, and by no other.
        said = [[line for line in _lines(r.stderr) if " waits: " not in line] for r in results]
        waited = [n for n, lines in enumerate(said) if lines]
        assert len(waited) == 1 and waited[0] >= 20, said
        # It names acme when the other daemon's refusal said so; when that daemon did not answer
        # in time either (taking acme over, on a slow machine), the tenant is not known yet.
        patience = takeover_patience(2)
        assert said[waited[0]] in [
            [f"colibri: waiting for a daemon to take over {what} (up to {patience:g} s)"]
            for what in ("tenant 'acme'", "the board")
        ], said
    finally:
        first.stop_with(second)


def test_one_client_submitting_through_a_kill_of_the_whole_boards_daemon_sends_each_once(
    tmp_path: Path, board: str
) -> None:
    """One ``Client`` of both daemons (the whole board by one lease, the other standing by,
    listening nowhere until it serves) submits 60 tasks one after another on its connection;
    the serving daemon is SIGKILLed after the 20th. The submit the kill cuts off, or the next
    one, finds its connection closed: the client waits until the standby serves, says so
    once, and sends it again with the idempotency key it gave it — every submit returns a
    task, and the board holds each once."""
    from colibri.client import Client, Remote

    first, second = Member(tmp_path / "a", board), Member(tmp_path / "b", board)
    first.start()
    try:
        second.stand_by()
        operator = first.call("token-create", role="operator", tenant="default")["secret"]
        remote = Remote.parse(f"{first.address},{second.address}", token=operator,
                              insecure_loopback=True)  # fmt: skip
        said: list[str] = []
        with Client.remote(remote, on_wait=said.append) as client:
            tasks = _one_by_one(lambda n: client.submit(f"task {n}"), first)
        ids, keys = [t.id for t in tasks], [t.idempotency_key for t in tasks]
        assert len(set(ids)) == 60 and len(set(keys)) == 60 and None not in keys
        assert _submitted(board, "default") == {f"task {n}": 1 for n in range(60)}
        assert second.serving()
        assert said == [f"waiting for a daemon to take over the board (up to "
                        f"{takeover_patience(10):g} s)"]  # fmt: skip
    finally:
        first.stop_with(second)
