"""Every way in that is not allowed: one error line, no secret repeated, the connection closed.

Real TLS on loopback; the attacker speaks raw bytes where a client would not.
"""

from __future__ import annotations

import json
import socket
import ssl
import time
from pathlib import Path
from typing import Any

import pytest

from colibri.client import Client, Remote
from colibri.core.errors import ColibriError
from tests.helpers import Daemon, colibri, one_line, sqlite_only, wait_until
from tests.remote.conftest import TlsDaemon


def tls_socket(daemon: TlsDaemon, source: str = "127.0.0.1") -> ssl.SSLSocket:
    raw = socket.create_connection(("127.0.0.1", daemon.port), timeout=10,
                                   source_address=(source, 0))  # fmt: skip
    context = ssl.create_default_context(cafile=str(daemon.pki.ca_cert))
    return context.wrap_socket(raw, server_hostname="127.0.0.1")


def exchange(sock: ssl.SSLSocket | socket.socket, *requests: dict[str, Any]) -> list[Any]:
    """Send the requests; every line the daemon writes until it closes the connection."""
    for request in requests:
        sock.sendall(json.dumps(request).encode() + b"\n")
    lines, buffer = [], b""
    try:
        while chunk := sock.recv(65536):
            buffer += chunk
    except (ConnectionResetError, ssl.SSLError):
        pass
    for line in buffer.splitlines():
        lines.append(json.loads(line))
    sock.close()
    return lines


def refused(daemon: TlsDaemon, token: str, request: dict[str, Any]) -> dict[str, Any]:
    """Authenticate with ``token``, send ``request``: the one error, after which it closed."""
    replies = exchange(tls_socket(daemon), {"cmd": "auth", "id": 1, "token": token},
                       {"id": 2, **request})  # fmt: skip
    errors = [r for r in replies if not r.get("ok")]
    assert len(errors) == 1, replies
    return errors[0]["error"]


SECRET_FREE = "colibri_0123456789ab_" + "x" * 43


def _connect_from(monkeypatch: pytest.MonkeyPatch, remote: Remote, source: str) -> Client:
    """``Client.remote`` from another loopback address: the client binds none of its own, so
    the standard library's ``create_connection`` is given one."""
    real = socket.create_connection

    def bound(address: Any, *args: Any, **kwargs: Any) -> socket.socket:
        return real(address, *args, **{**kwargs, "source_address": (source, 0)})

    with monkeypatch.context() as patch:
        patch.setattr(socket, "create_connection", bound)
        return Client.remote(remote)


@pytest.mark.parametrize(
    ("token", "says"),
    [
        (SECRET_FREE, "not known here, or its secret is wrong"),
        ("hunter2-not-a-token", "not a Colibri token"),
        ("", "not a Colibri token"),
    ],
)
def test_a_bad_token_is_unauthorized_and_not_repeated(
    tls_daemon: TlsDaemon, token: str, says: str
) -> None:
    replies = exchange(tls_socket(tls_daemon), {"cmd": "auth", "id": 1, "token": token},
                       {"cmd": "ping", "id": 2})  # fmt: skip
    assert len(replies) == 1  # the ping never got an answer: the connection was closed
    error = replies[0]["error"]
    assert error["code"] == "unauthorized" and says in error["message"]
    if token:
        assert token not in error["message"] and token not in tls_daemon.log()


def test_a_real_tokens_wrong_secret_is_unauthorized(tls_daemon: TlsDaemon) -> None:
    real = tls_daemon.token()
    forged = real[:-5] + ("AAAAA" if not real.endswith("AAAAA") else "BBBBB")
    with pytest.raises(ColibriError) as caught:
        tls_daemon.connect(forged)
    assert caught.value.code == "unauthorized"
    assert forged.split("_", 2)[2] not in caught.value.message + tls_daemon.log()


def test_a_revoked_token_is_refused(tls_daemon: TlsDaemon) -> None:
    token = tls_daemon.token()
    with tls_daemon.connect(token) as client:
        assert client.call("ping")["pong"]
    tls_daemon.call("token-revoke", token=token.split("_")[1])
    with pytest.raises(ColibriError, match="was revoked at") as caught:
        tls_daemon.connect(token)
    assert caught.value.code == "unauthorized"


def test_an_expired_token_is_refused_and_its_live_connection_closed(tls_daemon: TlsDaemon) -> None:
    token = str(tls_daemon.call("token-create", role="operator", tenant="default",
                                expires_in=2)["secret"])  # fmt: skip
    client = tls_daemon.connect(token, timeout=15)
    started = time.monotonic()
    with pytest.raises(ColibriError) as caught:
        client.read()  # nothing comes: the sweep closes it once the token has expired
    assert caught.value.code == "closed" and time.monotonic() - started < 10
    client.close()
    with pytest.raises(ColibriError, match="expired at"):
        tls_daemon.connect(token)


def test_nothing_but_auth_comes_first(tls_daemon: TlsDaemon) -> None:
    replies = exchange(tls_socket(tls_daemon), {"cmd": "list", "id": 1}, {"cmd": "ping", "id": 2})
    assert [r["error"]["code"] for r in replies] == ["unauthorized"]
    assert "authenticate first" in replies[0]["error"]["message"]


@pytest.mark.parametrize(
    ("role", "fields", "request_", "says"),
    [
        ("operator", {}, {"cmd": "register-agent", "name": "sneaky"}, "agent token"),
        ("agent", {"agent": "a1"}, {"cmd": "register-agent", "name": "a2"}, "'a1' only"),
        ("agent", {"agent": "a1", "capabilities": ["zfs"]},
         {"cmd": "register-agent", "name": "a1", "capabilities": ["zfs", "gpu"]}, "gpu"),
        ("agent", {"agent": "a1"},
         {"cmd": "register-agent", "name": "a1", "tenant": "other"}, "tenant 'default' only"),
        ("agent", {"agent": "a1"},
         {"cmd": "register-agent", "name": "a1", "workspace": "api"}, "serves no workspace"),
        ("agent", {"agent": "a1"}, {"cmd": "cancel", "task": "t1"}, "operator token"),
        ("operator", {}, {"cmd": "submit", "text": "x", "tenant": "other"}, "'default' only"),
        ("operator", {}, {"cmd": "token-list"}, "daemon's owner"),
        ("operator", {}, {"cmd": "toggle-swarm", "paused": True}, "daemon's owner"),
        ("operator", {}, {"cmd": "subscribe"}, "daemon's owner"),
        ("operator", {}, {"cmd": "schedule-rm", "name": "x"}, "daemon's owner"),
    ],
)  # fmt: skip
def test_a_token_used_outside_its_role_tenant_name_or_capabilities_is_forbidden(
    tls_daemon: TlsDaemon, role: str, fields: dict[str, Any], request_: dict[str, Any], says: str
) -> None:
    token = tls_daemon.token(role, "default", **fields)
    error = refused(tls_daemon, token, request_)
    assert error["code"] == "forbidden" and says in error["message"], error
    assert token.split("_", 2)[2] not in json.dumps(error)
    assert not tls_daemon.call("status")["paused"]


def test_plain_text_on_the_tls_port_gets_one_line_in_plain_text(tls_daemon: TlsDaemon) -> None:
    raw = socket.create_connection(("127.0.0.1", tls_daemon.port), timeout=10)
    replies = exchange(raw, {"cmd": "ping", "id": 1})
    assert len(replies) == 1 and replies[0]["error"]["code"] == "tls_required"
    assert "speaks TLS" in replies[0]["error"]["message"]
    wait_until(lambda: "plain text on the TLS port refused" in tls_daemon.log())


@pytest.mark.parametrize("stage", ["before TLS", "after TLS, before auth"])
def test_a_peer_that_says_nothing_is_dropped_after_the_handshake_timeout(
    tls_daemon: TlsDaemon, stage: str
) -> None:
    if stage == "before TLS":
        sock: socket.socket = socket.create_connection(("127.0.0.1", tls_daemon.port), timeout=10)
    else:
        sock = tls_socket(tls_daemon)
    started = time.monotonic()
    try:
        assert sock.recv(1) == b""  # closed by the daemon: end of stream
    except (ConnectionResetError, ssl.SSLError):
        pass
    waited = time.monotonic() - started
    sock.close()
    assert 1.0 < waited < 9.0  # handshake_timeout is 2s here, the sweep runs every second
    with tls_daemon.connect(tls_daemon.token()) as client:  # and others still get in
        assert client.call("ping")["pong"]


def test_a_thousand_bad_tokens_from_one_address_are_throttled_and_logged(
    tls_daemon: TlsDaemon, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = tls_daemon.token()
    codes: dict[str, int] = {}
    for n in range(1000):
        bad = f"colibri_{n:012x}_{'y' * 43}"
        try:
            attacker = tls_socket(tls_daemon, "127.0.0.2")
        except (ssl.SSLError, ConnectionResetError):
            code = "closed before TLS"
        else:
            (reply,) = exchange(attacker, {"cmd": "auth", "id": 1, "token": bad})
            code = reply["error"]["code"]
        codes[code] = codes.get(code, 0) + 1
    # The limit is 20 a minute (the fixture's server.auth_failures): the rest are turned away
    # as they are accepted, before a TLS handshake or a token check costs the daemon anything.
    assert codes == {"unauthorized": 20, "closed before TLS": 980}
    # Another address is not held up by it.
    with tls_daemon.connect(good) as client:
        assert client.call("ping")["pong"]
    log = tls_daemon.log()
    assert log.count("event=login_failed peer=127.0.0.2") == 20
    assert log.count("127.0.0.2: 20 failed logins within a minute") == 1  # said once
    wait_until(lambda: "connections refused as throttled" in tls_daemon.log())
    # Even the right token is refused from there until the minute is over, and the client
    # says why.
    remote = Remote.parse(f"tcp://127.0.0.1:{tls_daemon.port}", token=good,
                          ca=str(tls_daemon.pki.ca_cert))  # fmt: skip
    with pytest.raises(ColibriError) as caught:
        _connect_from(monkeypatch, remote, "127.0.0.2")
    assert caught.value.code == "tls_failed" and "too many failed logins" in caught.value.message


def test_no_secret_is_kept_in_the_store(tls_daemon: TlsDaemon) -> None:
    made = [tls_daemon.token("operator", "default") for _ in range(3)]
    made += [tls_daemon.token("agent", "acme", agent=f"a{n}") for n in range(3)]
    for token in made:
        with tls_daemon.connect(token) as client:
            client.call("ping")
    board = tls_daemon.root / ".colibri"
    stored = b"".join(p.read_bytes() for p in board.glob("colibri.sqlite*"))
    # Every tenant's ledger mirror: ledger.jsonl, ledger.acme.jsonl, and their rotated files.
    stored += b"".join(p.read_bytes() for p in board.glob("ledger*.jsonl*"))
    for token in made:
        secret = token.split("_", 2)[2]
        assert secret.encode() not in stored
        assert token.encode() not in stored
    listed = json.dumps(tls_daemon.call("token-list")["tokens"])
    assert all(t.split("_", 2)[2] not in listed for t in made)
    assert "last_used_at" in listed


def test_the_cli_makes_lists_and_revokes_tokens(tls_daemon: TlsDaemon) -> None:
    made = colibri(tls_daemon.root, "token", "create", "--tenant", "acme", "--role", "agent",
                   "--agent", "b7", "--cap", "ZFS", "--expires", "30d", "--json")  # fmt: skip
    assert made.returncode == 0, made.stderr
    created = json.loads(made.stdout)
    assert set(created) == {"id", "token"} and created["token"].startswith(
        f"colibri_{created['id']}_"
    )
    listed = colibri(tls_daemon.root, "token", "list", "--json")
    (row,) = json.loads(listed.stdout)
    assert (row["id"], row["tenant"], row["role"], row["agent"], row["capabilities"]) == (
        created["id"], "acme", "agent", "b7", ["zfs"],
    )  # fmt: skip
    assert row["expires_at"] > row["created_at"] and "secret" not in json.dumps(row)
    assert created["token"].split("_", 2)[2] not in listed.stdout
    # Without --json the secret alone is on stdout (TOKEN=$(colibri token create …)).
    plain = colibri(tls_daemon.root, "token", "create", "--role", "operator")
    assert plain.returncode == 0, plain.stderr
    assert plain.stdout.strip().startswith("colibri_") and len(plain.stdout.splitlines()) == 1
    assert "operator in tenant default" in plain.stderr and "only time" in plain.stderr
    revoked = colibri(tls_daemon.root, "token", "revoke", created["id"])
    assert revoked.returncode == 0 and "revoked" in revoked.stdout
    again = colibri(tls_daemon.root, "token", "revoke", "ffffffffffff")
    assert again.returncode == 1 and "no token with id ffffffffffff" in one_line(again.stderr)
    wrong = colibri(tls_daemon.root, "token", "create", "--role", "operator", "--agent", "x")
    assert wrong.returncode == 1 and "registers no agent" in one_line(wrong.stderr)
    bad = colibri(tls_daemon.root, "token", "create", "--role", "operator", "--expires", "0s")
    assert bad.returncode == 1 and "duration" in one_line(bad.stderr)


@sqlite_only  # two tokens planted in the board's file, their ids sharing four characters
def test_token_revoke_takes_a_prefix_that_names_one_token(root: Path) -> None:
    """As a task's id, a token's is taken by any prefix of at least four characters (in any
    case) that starts no other token's id; one that starts several, revoked ones too, or none,
    is refused in one line, and nothing is revoked."""
    from colibri.config import load_config
    from colibri.core.tokens import Token
    from colibri.store import open_store

    planted = ["1eb4a0c51d2e", "1eb4b7730f01"]
    store = open_store(load_config(root).store)
    try:
        for token_id in planted:
            store.insert_token(Token(id=token_id, tenant="default", role="operator",
                                     created_at="2026-12-01T00:00:00.000Z"), "00" * 32)  # fmt: skip
        store.commit()
    finally:
        store.close()
    daemon = Daemon(root)
    daemon.start()
    try:

        def revoked() -> set[str]:
            return {t["id"] for t in daemon.call("token-list")["tokens"] if t.get("revoked_at")}

        made = json.loads(colibri(root, "token", "create", "--role", "operator", "--json").stdout)
        ambiguous = colibri(root, "token", "revoke", "1eb4")
        assert ambiguous.returncode == 1 and ambiguous.stdout == ""
        assert one_line(ambiguous.stderr) == (
            "colibri: id prefix 1eb4 names 2 tokens (1eb4a0c51d2e, 1eb4b7730f01); give more of "
            "the id"
        )
        as_json = colibri(root, "token", "revoke", "1eb4", "--json")
        assert json.loads(as_json.stdout)["error"]["code"] == "ambiguous_token"
        for given, says in [
            ("1eb", "'1eb' is too short to name a token: give at least 4 characters of its id"),
            ("1eb4c", "no token with id 1eb4c (list them with: colibri token list)"),
            ("zz12", "no token with id zz12"),
        ]:
            refused = colibri(root, "token", "revoke", given)
            assert refused.returncode == 1 and says in one_line(refused.stderr), refused.stderr
        assert revoked() == set()
        done = colibri(root, "token", "revoke", "1EB4A")
        assert done.returncode == 0, done.stderr
        assert done.stdout == "token 1eb4a0c51d2e revoked; 0 connections using it closed\n"
        assert revoked() == {"1eb4a0c51d2e"}
        again = colibri(root, "token", "revoke", "1eb4")  # a revoked one still counts
        assert again.returncode == 1 and "names 2 tokens" in one_line(again.stderr)
        mine = colibri(root, "token", "revoke", made["id"][:6])
        assert mine.returncode == 0 and mine.stdout.startswith(f"token {made['id']} revoked")
        assert revoked() == {"1eb4a0c51d2e", made["id"]}
    finally:
        daemon.stop()


def test_an_operator_cli_afar_with_a_bad_token_gets_one_line(tls_daemon: TlsDaemon) -> None:
    env = tls_daemon.client_env(SECRET_FREE)
    done = colibri(None, "list", env=env)
    assert done.returncode == 1
    assert "not known here" in one_line(done.stderr)
    no_token = colibri(None, "list", env={**env, "COLIBRI_TOKEN": ""})
    assert no_token.returncode == 2 and "needs a token" in no_token.stderr
    wrong_ca = str(tls_daemon.pki.server_cert)
    untrusted = colibri(None, "list", env={**env, "COLIBRI_TLS_CA": wrong_ca})
    assert untrusted.returncode == 1 and "TLS with" in one_line(untrusted.stderr)


def test_tcp_without_tls_only_on_loopback_and_only_when_asked(tmp_path: Path) -> None:
    root = tmp_path / "plain"
    assert colibri(None, "init", str(root)).returncode == 0
    exposed = colibri(root, "run", "--listen", "tcp://0.0.0.0:0", "--insecure-loopback")
    assert exposed.returncode == 1 and "needs TLS" in one_line(exposed.stderr)
    unasked = colibri(root, "run", "--listen", "tcp://127.0.0.1:0")
    assert unasked.returncode == 1 and "--tls-cert" in one_line(unasked.stderr)
    half = colibri(root, "run", "--listen", "tcp://127.0.0.1:0", "--tls-cert", "x.pem")
    assert half.returncode == 1 and "together" in one_line(half.stderr)
    bad = colibri(root, "run", "--listen", "127.0.0.1:7433")
    assert bad.returncode == 1 and "tcp://HOST:PORT" in one_line(bad.stderr)
    daemon = Daemon(root, "--listen", "tcp://127.0.0.1:0", "--insecure-loopback")
    daemon.start()
    try:
        address = daemon.call("status")["daemon"]["listen"][0]
        token = str(daemon.call("token-create", role="operator", tenant="default")["secret"])
        remote = Remote.parse(address, token=token, insecure_loopback=True)
        with Client.remote(remote) as client:
            assert client.call("ping")["pong"]
        with pytest.raises(ColibriError, match="loopback addresses only"):
            Remote.parse("tcp://10.0.0.1:7433", token=token, insecure_loopback=True)
        port = int(address.rsplit(":", 1)[1])
        answers = []
        for _ in range(21):  # without TLS a throttled address is told so in one line
            raw = socket.create_connection(("127.0.0.1", port), timeout=10,
                                           source_address=("127.0.0.2", 0))  # fmt: skip
            replies = exchange(raw, {"cmd": "auth", "id": 1, "token": SECRET_FREE})
            answers.append(replies[0]["error"]["code"])
        assert answers == ["unauthorized"] * 20 + ["throttled"]
    finally:
        daemon.stop()


def test_the_remote_options_go_before_or_after_the_command(tls_daemon: TlsDaemon) -> None:
    token = tls_daemon.token("operator", "default")
    options = ["--connect", tls_daemon.address, "--token", token,
               "--tls-ca", str(tls_daemon.pki.ca_cert)]  # fmt: skip
    before = colibri(None, *options, "submit", "before", "--json")
    after = colibri(None, "submit", "after", *options, "--json")
    nested = colibri(None, "schedule", "list", *options, "--json")
    assert (before.returncode, after.returncode, nested.returncode) == (0, 0, 0), after.stderr
    listed = colibri(None, "list", "--json", env=tls_daemon.client_env(token))
    texts = [t["text"] for t in json.loads(listed.stdout)]
    assert texts == ["before", "after"]
    assert json.loads(nested.stdout) == []


def test_before_auth_a_line_may_be_4_kib_after_it_the_servers_limit(tls_daemon: TlsDaemon) -> None:
    replies = exchange(tls_socket(tls_daemon), {"cmd": "auth", "id": 1, "token": "x" * 5000})
    assert [r["error"]["code"] for r in replies] == ["line_too_long"]
    with tls_daemon.connect(tls_daemon.token()) as client:
        task = client.call("submit", text="y" * 200_000)["task"]
        assert len(task["text"]) == 200_000


def test_one_address_cannot_hold_more_than_32_handshakes_open(tls_daemon: TlsDaemon) -> None:
    silent = []
    try:
        for _ in range(40):
            silent.append(socket.create_connection(("127.0.0.1", tls_daemon.port), timeout=10,
                                                   source_address=("127.0.0.3", 0)))  # fmt: skip
        turned_away = 0
        for sock in silent[32:]:  # past the cap: closed at once, before any handshake
            sock.settimeout(1.5)
            try:
                turned_away += sock.recv(1) == b""
            except (ConnectionResetError, TimeoutError):
                pass
        assert turned_away == 8
        with tls_daemon.connect(tls_daemon.token()) as client:  # another address gets in
            assert client.call("ping")["pong"]
        assert "too many TCP peers still in their handshake" in tls_daemon.log()
    finally:
        for sock in silent:
            sock.close()


def test_anonymous_tcp_peers_never_take_the_owners_place(tls_daemon: TlsDaemon) -> None:
    """Peers past TLS that never authenticate have a small pool of their own (8 an address,
    64 in all): they fill it, are told busy beyond it, and the owner and the others get in."""
    peers: list[ssl.SSLSocket] = []
    said: dict[ssl.SSLSocket, bytes] = {}
    closed: set[ssl.SSLSocket] = set()

    def told_busy() -> int:
        """What each peer has been told so far (read without waiting): how many heard busy."""
        for sock in peers:
            try:
                while sock not in closed and (chunk := sock.recv(65536)):
                    said[sock] += chunk
                closed.add(sock)  # an end of the stream: it was closed
            except (ssl.SSLWantReadError, BlockingIOError):
                pass  # nothing more yet
            except (ssl.SSLError, OSError):
                closed.add(sock)
        return sum(b'"busy"' in said[sock] for sock in peers)

    try:
        for address in range(10, 19):  # 9 addresses × 8 = 72 tries at the pool of 64
            for _ in range(8):
                sock = tls_socket(tls_daemon, f"127.0.0.{address}")
                sock.setblocking(False)
                peers.append(sock)
                said[sock] = b""
        wait_until(lambda: told_busy() >= 8, timeout=15)
        # The owner gets in; its answer comes after every word to the peers before it.
        assert tls_daemon.call("status")["daemon"]["connections"] >= 1
        assert told_busy() == 8
        held = [s for s in peers if not said[s] and s not in closed]  # each holds a place
        assert len(held) == 64
    finally:
        for sock in peers:
            sock.close()
    # Once they are gone (or dropped at handshake_timeout), a token gets in as before.
    with tls_daemon.connect(tls_daemon.token()) as client:
        assert client.call("ping")["pong"]


def test_nine_silent_peers_from_one_address_leave_the_ninth_busy(tls_daemon: TlsDaemon) -> None:
    held = [tls_socket(tls_daemon, "127.0.0.9") for _ in range(8)]
    try:
        ninth = tls_socket(tls_daemon, "127.0.0.9")
        (reply,) = exchange(ninth, {"cmd": "ping", "id": 1})
        assert reply["error"]["code"] == "busy"
    finally:
        for sock in held:
            sock.close()


def test_a_sweep_held_off_by_re_registrations_still_drops_silent_peers(
    tls_daemon: TlsDaemon,
) -> None:
    import threading

    token = tls_daemon.token("agent", "default", agent="churn")
    stop = threading.Event()

    def churn() -> None:
        with tls_daemon.connect(token) as client:
            while not stop.is_set():
                client.call("register-agent", name="churn")
                time.sleep(0.1)

    churner = threading.Thread(target=churn)
    churner.start()
    try:
        silent = tls_socket(tls_daemon, "127.0.0.3")
        started = time.monotonic()
        try:
            assert silent.recv(1) == b""
        except (ConnectionResetError, ssl.SSLError):
            pass
        assert time.monotonic() - started < 6  # handshake_timeout 2 s, a sweep each second
        silent.close()
    finally:
        stop.set()
        churner.join(10)


def test_connections_opened_before_the_limit_get_no_more_guesses(tls_daemon: TlsDaemon) -> None:
    def guess(sock: ssl.SSLSocket, n: int) -> str:
        bad = f"colibri_{n:012x}_{'z' * 43}"
        (reply,) = exchange(sock, {"cmd": "auth", "id": 1, "token": bad})
        return str(reply["error"]["code"])

    codes = [guess(tls_socket(tls_daemon, "127.0.0.5"), n) for n in range(18)]
    opened = [tls_socket(tls_daemon, "127.0.0.5") for _ in range(8)]  # before the limit
    codes += [guess(sock, 18 + n) for n, sock in enumerate(opened)]
    assert codes == ["unauthorized"] * 20 + ["throttled"] * 6


def test_plain_text_is_refused_but_does_not_throttle_the_address(tls_daemon: TlsDaemon) -> None:
    for _ in range(25):
        raw = socket.create_connection(("127.0.0.1", tls_daemon.port), timeout=10,
                                       source_address=("127.0.0.4", 0))  # fmt: skip
        (reply,) = exchange(raw, {"cmd": "ping", "id": 1})
        assert reply["error"]["code"] == "tls_required"
    sock = tls_socket(tls_daemon, "127.0.0.4")
    try:
        sock.sendall(json.dumps({"cmd": "auth", "id": 1, "token": tls_daemon.token()}).encode()
                     + b"\n")  # fmt: skip
        assert json.loads(sock.makefile("rb").readline())["ok"] is True
    finally:
        sock.close()


def test_an_agent_name_belongs_to_one_tenant(tls_daemon: TlsDaemon) -> None:
    tls_daemon.token("agent", "acme", agent="worker")
    with pytest.raises(ColibriError, match="belongs to tenant 'acme'"):
        tls_daemon.call("token-create", role="agent", tenant="beta", agent="worker")
    from tests.helpers import FakeAgent

    local = FakeAgent(tls_daemon, "shared-name", ["x"])  # the owner's, in tenant default
    try:
        token = tls_daemon.token("agent", "beta", agent="shared-name")
        error = refused(tls_daemon, token, {"cmd": "register-agent", "name": "shared-name"})
        assert error["code"] == "forbidden" and "is taken" in error["message"]
        assert "default" not in error["message"]  # it does not say whose
    finally:
        local.close()


def test_a_peer_that_takes_the_connection_and_says_nothing_does_not_hold_a_client(
    tmp_path: Path,
) -> None:
    """Something listening where a daemon should be, silent after the connection: the CLI and
    the client library give up on the answer to auth (no_daemon, one line), not hang. The two
    wait out their CONNECT_TIMEOUT side by side."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    from colibri.client import CONNECT_TIMEOUT, AsyncClient

    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    address = f"tcp://127.0.0.1:{silent.getsockname()[1]}"
    token = "colibri_0123456789ab_" + "x" * 43

    async def connect() -> str:
        remote = Remote.parse(address, token=token, insecure_loopback=True)
        try:
            await AsyncClient(remote).connect()
        except ColibriError as exc:
            return exc.code
        return "connected"

    try:
        with ThreadPoolExecutor(1) as cli:
            args = ("--connect", address, "--insecure-loopback", "--token", token, "status")
            running = cli.submit(colibri, None, *args, timeout=CONNECT_TIMEOUT + 30)
            assert asyncio.run(asyncio.wait_for(connect(), CONNECT_TIMEOUT + 20)) == "no_daemon"
            done = running.result()
        assert done.returncode == 1
        assert one_line(done.stderr) == (
            f"colibri: no daemon answers at {address}: no answer to auth within "
            f"{CONNECT_TIMEOUT:g}s"
        )
    finally:
        silent.close()
