"""A client that goes away while the daemon owes it a reply (a ``wait``, an ``ask``, a ledger
it follows, an attach) leaves nothing behind on the daemon: its connections go back to what
they were, at once, through the relay of a remote agent's sessions and from the plain client
alike."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from colibri.agent.relay import IN_FLIGHT, Relay
from colibri.client import Client
from tests.helpers import PYTHON, claim_of, wait_until
from tests.remote.conftest import TlsDaemon


def _connections(daemon: TlsDaemon) -> int:
    """The daemon's connections, this status request's own among them."""
    return int(daemon.call("status")["daemon"]["connections"])


class Holder:
    """Agent ``far-1`` over TLS with a token of its own, holding ``slots`` running tasks: each
    one's claim, as its session would be given it."""

    def __init__(self, daemon: TlsDaemon, slots: int) -> None:
        self.token = daemon.token("agent", "default", agent="far-1", capabilities=["far"])
        self.client = Client.remote(daemon.remote(self.token))
        # (It sends no heartbeat: a ttl long enough for the test.)
        self.client.call("register-agent", name="far-1", capabilities=["far"], slots=slots, ttl=120)
        self.claims: list[dict[str, Any]] = []
        for n in range(slots):
            daemon.submit(f"session {n}", capabilities=["far"])
        for event in self.client.events():
            if event["event"] == "assign":
                task, epoch = event["task"]["id"], event["epoch"]
                secret = claim_of(daemon, task, epoch)
                self.claims.append({"task": task, "epoch": epoch, "claim": secret})
                if len(self.claims) == slots:
                    break

    def close(self) -> None:
        self.client.close()


@pytest.fixture
def holder(tls_daemon: TlsDaemon) -> Iterator[Holder]:
    agent = Holder(tls_daemon, slots=3)
    try:
        yield agent
    finally:
        agent.close()


def test_sessions_gone_with_waits_and_asks_in_flight_free_the_relays_connections(
    tls_daemon: TlsDaemon, holder: Holder
) -> None:
    """Each session's connection to the relay is given a TLS connection to the daemon; a
    session that goes away (killed, timed out) while its ``wait`` or ``ask`` is unanswered
    takes that connection with it at once, not when the task ends (before, twenty abandoned
    waits held twenty of the daemon's connections until then)."""
    pending = tls_daemon.submit("nobody runs this", capabilities=["nobody"])
    baseline = _connections(tls_daemon)
    folder = Path(tempfile.mkdtemp(prefix="cr-", dir="/tmp"))  # a Unix socket's path is short
    path = folder / "relay.sock"
    requests: list[dict[str, Any]] = [{"cmd": "wait", "task": pending["id"]}] * 6
    requests.append({"cmd": "ask", "question": "which branch?", **holder.claims[0]})

    async def scenario() -> None:
        relay = asyncio.create_task(Relay(tls_daemon.remote(holder.token), path).serve())
        try:
            await asyncio.to_thread(wait_until, path.exists)
            sessions = []
            for request in requests:
                reader, writer = await asyncio.open_unix_connection(str(path))
                # A ping behind it: its answer says the daemon holds the request before it.
                writer.write(msgspec.json.encode({**request, "id": 1}) + b"\n")
                writer.write(b'{"cmd": "ping", "id": 2}\n')
                async with asyncio.timeout(10):
                    reply = msgspec.json.decode(await reader.readline())
                assert reply["id"] == 2 and reply["ok"], reply
                sessions.append(writer)
            assert await asyncio.to_thread(_connections, tls_daemon) == baseline + len(requests)
            for writer in sessions:
                writer.close()
            await asyncio.to_thread(
                wait_until, lambda: _connections(tls_daemon) == baseline, timeout=10
            )
        finally:
            relay.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await relay

    try:
        asyncio.run(scenario())
    finally:
        with contextlib.suppress(OSError):
            folder.rmdir()
    # The task that was waited for, and the question, are as they were.
    assert tls_daemon.task(pending["id"])["state"] == "pending"
    assert tls_daemon.task(holder.claims[0]["task"])["state"] == "running"


def test_a_session_may_have_so_many_requests_in_flight_and_no_more(
    tls_daemon: TlsDaemon, holder: Holder
) -> None:
    """Past ``IN_FLIGHT`` unanswered requests a session's next one is refused ``busy`` (the
    relay does not hold without end what one session pipelines); the others are still its
    own, and go with it."""
    pending = tls_daemon.submit("nobody runs this", capabilities=["nobody"])
    baseline = _connections(tls_daemon)
    folder = Path(tempfile.mkdtemp(prefix="cr-", dir="/tmp"))
    path = folder / "relay.sock"

    async def scenario() -> None:
        relay = asyncio.create_task(Relay(tls_daemon.remote(holder.token), path).serve())
        try:
            await asyncio.to_thread(wait_until, path.exists)
            reader, writer = await asyncio.open_unix_connection(str(path))
            for n in range(IN_FLIGHT + 1):
                wait = {"cmd": "wait", "task": pending["id"], "id": n}
                writer.write(msgspec.json.encode(wait) + b"\n")
            async with asyncio.timeout(10):
                refused = msgspec.json.decode(await reader.readline())
            assert refused["id"] == IN_FLIGHT and refused["error"]["code"] == "busy", refused
            await asyncio.to_thread(
                wait_until, lambda: _connections(tls_daemon) == baseline + 1, timeout=10
            )
            writer.close()
            await asyncio.to_thread(
                wait_until, lambda: _connections(tls_daemon) == baseline, timeout=10
            )
        finally:
            relay.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await relay

    try:
        asyncio.run(scenario())
    finally:
        with contextlib.suppress(OSError):
            folder.rmdir()


def _command(daemon: TlsDaemon, args: list[str], env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [PYTHON, "-m", "colibri", "--root", str(daemon.root), *args],
        env={**os.environ, **env}, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


def test_clients_killed_while_they_wait_ask_follow_or_attach_leave_no_connection(
    tls_daemon: TlsDaemon, holder: Holder
) -> None:
    """``colibri wait``, ``ask``, ``ledger --follow`` and ``attach``, on the Unix socket and
    over TLS, each SIGKILLed while the daemon owes it a reply: its connection, its wait, its
    question's asker and its follow all go with it."""
    pending = tls_daemon.submit("nobody runs this", capabilities=["nobody"])
    operator = tls_daemon.client_env(tls_daemon.token("operator"))
    agent = tls_daemon.client_env(holder.token)

    def ask(claim: dict[str, Any]) -> list[str]:
        return ["ask", "which branch?", "--task", claim["task"], "--epoch", str(claim["epoch"]),
                "--claim", claim["claim"]]  # fmt: skip

    commands = [
        (["wait", pending["id"]], {}),
        (["ledger", "--follow"], {}),
        (["attach"], {}),
        (ask(holder.claims[1]), {}),
        (["wait", pending["id"]], operator),
        (["ledger", "--follow"], operator),
        (["attach"], operator),
        (ask(holder.claims[2]), agent),
    ]
    baseline = _connections(tls_daemon)
    started: list[subprocess.Popen[bytes]] = []
    try:
        for args, env in commands:
            started.append(_command(tls_daemon, args, env))
        wait_until(lambda: _connections(tls_daemon) == baseline + len(commands), timeout=20)
        asked = [claim["task"] for claim in holder.claims[1:]]
        wait_until(lambda: all(tls_daemon.task(task).get("question") for task in asked))
        for process in started:
            process.send_signal(signal.SIGKILL)
        wait_until(lambda: _connections(tls_daemon) == baseline, timeout=10)
    finally:
        for process in started:
            if process.poll() is None:
                process.kill()
            process.wait(timeout=10)
