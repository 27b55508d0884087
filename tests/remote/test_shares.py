"""One token, or one tenant, cannot take the daemon from anyone else: TCP peers have room of
their own apart from the Unix socket's, and each token and tenant a share of it — of connections,
of waits still to be answered, and of ledger follows. Past a share a request is told ``busy``,
naming the setting to raise; the owner and the other tenants are served as before.

Real TLS on loopback, raw sockets where a flooder would not use the client.
"""

from __future__ import annotations

import json
import socket
import ssl
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from colibri.certs import Pki
from tests.remote.conftest import TlsDaemon
from tests.remote.test_refusals import tls_socket


class Peers:
    """A TLS daemon started with a test's ``server`` settings, and the raw TLS connections the
    test keeps open: all closed at its end whatever happened."""

    def __init__(self, root: Path, pki: Pki) -> None:
        self.root, self.pki = root, pki
        self.daemon: TlsDaemon | None = None
        self.socks: list[ssl.SSLSocket] = []

    def start(self, **server: Any) -> TlsDaemon:
        self.daemon = TlsDaemon(self.root, self.pki, server=server)
        self.daemon.start()
        return self.daemon

    def pipeline(self, token: str, *requests: dict[str, Any]) -> tuple[dict[str, Any], Any]:
        """A new connection: ``auth`` with ``token``, then the requests sent at once (ids 1,
        2 …); the reply to ``auth``, and the connection's reader for the rest."""
        assert self.daemon is not None
        sock = tls_socket(self.daemon)
        self.socks.append(sock)
        reader = sock.makefile("rb")
        sock.sendall(line({"cmd": "auth", "id": 0, "token": token}))
        auth = json.loads(reader.readline())
        sock.sendall(b"".join(line({"id": n, **r}) for n, r in enumerate(requests, 1)))
        return auth, reader

    def open(self, token: str, *requests: dict[str, Any]) -> list[dict[str, Any]]:
        """``pipeline``, then one reply per request (none of them a wait that waits): the
        replies, or the one refusal the connection got before it was closed."""
        auth, reader = self.pipeline(token, *requests)
        if not auth["ok"]:
            return [auth]
        return [auth, *(json.loads(reader.readline()) for _ in requests)]

    def close(self) -> None:
        for sock in self.socks:
            sock.close()
        self.socks.clear()


def line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode() + b"\n"


@pytest.fixture
def peers(tmp_path: Path, pki: Pki) -> Iterator[Peers]:
    root = tmp_path / "board"
    root.mkdir()
    made = Peers(root, pki)
    try:
        yield made
    finally:
        made.close()
        if made.daemon is not None:
            made.daemon.stop()


def busy(reply: dict[str, Any]) -> str:
    assert reply["ok"] is False and reply["error"]["code"] == "busy", reply
    return str(reply["error"]["message"])


FOLLOW = {"cmd": "ledger", "after": "end", "follow": True}


def test_one_operator_tokens_follows_leave_the_owner_and_other_tenants_in(peers: Peers) -> None:
    """256 connections of one operator token, each following the ledger (which locked out
    the Unix socket and every other token before): 128 are let in, the rest told busy naming
    server.token_connections, and 8 of those follow (server.token_follows); a second token of
    the tenant gets the tenant's other 128, then busy naming server.tenant_connections; the
    owner (its socket's cap 4) and another tenant are served throughout."""
    daemon = peers.start(max_connections=4)
    flooder = daemon.token("operator", "tb")
    outcomes = [peers.open(flooder, FOLLOW) for _ in range(256)]
    let_in = [o for o in outcomes if o[0]["ok"]]
    refused = [busy(o[0]) for o in outcomes if not o[0]["ok"]]
    assert (len(let_in), len(refused)) == (128, 128)
    follows = [o[1] for o in let_in]  # and of those, 8 follow (server.token_follows)
    assert [f["ok"] for f in follows] == [True] * 8 + [False] * 120
    assert "server.token_follows" in busy(follows[8])
    assert "128 connections open" in refused[0] and "server.token_connections" in refused[0]
    second = daemon.token("operator", "tb")
    outcomes = [peers.open(second, {"cmd": "ping"}) for _ in range(140)]
    refused = [busy(o[0]) for o in outcomes if not o[0]["ok"]]
    assert len(refused) == 12
    assert "tenant tb's tokens have 256" in refused[0]
    assert "server.tenant_connections" in refused[0]
    # The owner, on a socket of 4 places, and tenant ta over TCP, as if nothing happened.
    assert daemon.call("status")["daemon"]["connections"] == 256 + 1
    with daemon.connect(daemon.token("operator", "ta")) as other:
        assert other.call("ping")["pong"]
        assert other.call("status")["you"]["tenant"] == "ta"


def test_follows_are_capped_per_token_and_per_tenant(peers: Peers) -> None:
    daemon = peers.start(token_follows=2, tenant_follows=3)
    one, two = daemon.token("operator", "tb"), daemon.token("operator", "tb")
    assert [peers.open(one, FOLLOW)[1]["ok"] for _ in range(2)] == [True, True]
    message = busy(peers.open(one, FOLLOW)[1])  # let in, its follow refused
    assert "has 2 ledger follows" in message and "server.token_follows" in message
    assert peers.open(two, FOLLOW)[1]["ok"]
    message = busy(peers.open(two, FOLLOW)[1])
    assert "tenant tb's tokens have 3 ledger follows" in message
    assert "server.tenant_follows" in message
    # A refused follow is only that: the connection still reads the ledger and pings.
    replies = peers.open(two, {"cmd": "ledger"}, FOLLOW, {"cmd": "ping"})
    assert replies[1]["ok"] and not replies[2]["ok"] and replies[3]["pong"]
    assert peers.open(daemon.token("operator", "ta"), FOLLOW)[1]["ok"]
    with daemon.client() as owner:  # the owner follows whatever the tokens hold
        assert owner.call("ledger", after="end", follow=True)["entries"] == []


def test_an_agent_tokens_256_waits_leave_the_owner_and_other_tenants_in(peers: Peers) -> None:
    """An agent token waiting on its own pending task over 256 connections (which locked out
    the owner and everyone before): 128 wait, 128 are told busy naming
    server.token_connections; the owner and another tenant are served, and the waits are
    answered when the task ends."""
    daemon = peers.start(max_connections=4)
    task = daemon.submit("t", tenant="tb", capabilities=["x"])["id"]
    agent = daemon.token("agent", "tb", agent="a1")
    outcomes = [peers.pipeline(agent, {"cmd": "wait", "task": task}) for _ in range(256)]
    waiting = [reader for auth, reader in outcomes if auth["ok"]]
    refused = [busy(auth) for auth, _ in outcomes if not auth["ok"]]
    assert (len(waiting), len(refused)) == (128, 128)
    assert "has 128 connections open" in refused[0]
    assert "server.token_connections" in refused[0]
    assert daemon.call("status")["daemon"]["connections"] == 128 + 1
    with daemon.connect(daemon.token("operator", "ta")) as other:
        assert other.call("ping")["pong"]
    daemon.call("cancel", task=task)
    assert {json.loads(reader.readline())["task"]["state"] for reader in waiting} == {"cancelled"}


def test_an_agent_tokens_waits_are_capped_and_others_wait_as_before(peers: Peers) -> None:
    """Waits pipelined on one connection: the token's share of waits stops it at 5, the
    tenant's at 8; another tenant and the owner wait as before."""
    daemon = peers.start(token_waits=5, tenant_waits=8)
    tasks = [daemon.submit(f"t{n}", tenant="tb", capabilities=["x"])["id"] for n in range(4)]
    agent = daemon.token("agent", "tb", agent="a1")

    waits = [{"cmd": "wait", "task": tasks[n % 4]} for n in range(7)]
    auth, reader = peers.pipeline(agent, *waits, {"cmd": "ping"})
    assert auth["ok"]
    replies = [json.loads(reader.readline()) for _ in range(3)]
    assert [r["id"] for r in replies] == [6, 7, 8]  # waits 1-5 wait; 6 and 7 are refused
    assert "has 5 waits unanswered" in busy(replies[0])
    assert "server.token_waits" in busy(replies[0])
    # The tenant's other token has the tenant's 3 left, then busy naming the tenant's share.
    auth, theirs = peers.pipeline(
        daemon.token("operator", "tb"), *[{"cmd": "wait", "task": t} for t in tasks]
    )
    refusal = json.loads(theirs.readline())
    assert refusal["id"] == 4 and "server.tenant_waits" in busy(refusal)
    # Another tenant waits, and the owner waits, whatever tb holds.
    mine = daemon.submit("ta's", tenant="ta", capabilities=["x"])["id"]
    with daemon.connect(daemon.token("operator", "ta")) as ta, daemon.client() as owner:
        ta.send("wait", task=mine)
        owner.send("wait", task=mine)
        daemon.call("cancel", task=mine)
        assert ta.read()["task"]["state"] == "cancelled"
        assert owner.read()["task"]["state"] == "cancelled"
    daemon.call("cancel", task=tasks[1])
    assert json.loads(reader.readline())["task"]["id"] == tasks[1]  # waits are answered
    # An answered wait gives its place back: the agent token may wait once more.
    auth, again = peers.pipeline(agent, {"cmd": "wait", "task": tasks[2]}, {"cmd": "ping"})
    assert json.loads(again.readline())["id"] == 2  # the ping: the wait waits


def test_one_tenant_never_fills_the_tcp_room(peers: Peers) -> None:
    """Each tenant's tokens together hold at most tenant_connections (kept below
    remote_connections; a token's share, left unset, shrinks to fit it), so one tenant always
    leaves room for another; past remote_connections a newcomer is told so."""
    daemon = peers.start(remote_connections=6, tenant_connections=3, max_connections=1)
    tb = [daemon.token("operator", "tb") for _ in range(2)]
    outcomes = [peers.open(tb[n % 2], {"cmd": "ping"}) for n in range(6)]
    assert [o[0]["ok"] for o in outcomes] == [True] * 3 + [False] * 3
    assert "server.tenant_connections" in busy(outcomes[3][0])
    tc = daemon.token("operator", "tc")
    assert [peers.open(tc, {"cmd": "ping"})[0]["ok"] for _ in range(3)] == [True] * 3
    message = busy(peers.open(daemon.token("operator", "td"), {"cmd": "ping"})[0])
    assert "server.remote_connections" in message
    assert daemon.call("ping")["pong"]  # the Unix socket's one place is its own


def test_tcp_handshakes_are_bounded_by_the_tcp_room_not_the_unix_sockets(peers: Peers) -> None:
    """Peers still in their TLS handshake count against server.remote_connections: with one
    place on the Unix socket, three silent TCP peers do not turn a token away."""
    daemon = peers.start(max_connections=1)
    silent = [socket.create_connection(("127.0.0.1", daemon.port)) for _ in range(3)]
    try:
        token = daemon.token("operator", "tb")
        assert peers.open(token, {"cmd": "ping"})[1]["pong"]
    finally:
        for sock in silent:
            sock.close()
