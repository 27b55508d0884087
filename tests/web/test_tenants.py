"""``colibri web`` over TLS, signing people in with operator tokens: each sees what its token
may (its tenant's tasks, on the pages, in the stream, by guessed URL), acts as it, and an
agent's token or a bad one does not get in."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from colibri.certs import Pki, make_pki
from tests.remote.conftest import TlsDaemon
from tests.web.conftest import WebServer, cookie_of


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), ["localhost", "127.0.0.1"], days=2)


@pytest.fixture
def board(tmp_path: Path, pki: Pki) -> Iterator[TlsDaemon]:
    root = tmp_path / "board"
    root.mkdir()
    daemon = TlsDaemon(root, pki)
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture
def tls_web(board: TlsDaemon, pki: Pki) -> Iterator[WebServer]:
    server = WebServer(board.root, "--tls-cert", str(pki.server_cert), "--tls-key",
                       str(pki.server_key), "--daemon", board.address,
                       "--tls-ca", str(pki.ca_cert))  # fmt: skip
    server.start()
    server.ca = str(pki.ca_cert)
    try:
        yield server
    finally:
        server.stop()


def sign_in(web: WebServer, token: str) -> str:
    status, headers, body = web.request("POST", "/login", form={"token": token})
    assert status == 303, body
    assert "Secure" in headers["set-cookie"]
    return cookie_of(headers)


def test_a_tenants_token_sees_nothing_of_another_tenant(
    board: TlsDaemon, tls_web: WebServer
) -> None:
    acme = board.submit("acme's secret plans", tenant="acme")
    beta = board.submit("beta's own task", tenant="beta")
    cookie = sign_in(tls_web, board.token("operator", "beta"))
    for path in ("/", "/tasks", "/tasks?q=secret", "/agents", "/schedules"):
        status, _, body = tls_web.request("GET", path, cookie=cookie)
        assert status == 200, path
        assert "secret plans" not in body and acme["id"] not in body
    status, _, body = tls_web.request("GET", "/", cookie=cookie)
    assert "beta&#39;s own task" in body and "operator of tenant beta" in body
    # A URL guessed by id gets what an id that does not exist gets.
    status, _, guessed = tls_web.request("GET", f"/tasks/{acme['id']}", cookie=cookie)
    status2, _, missing = tls_web.request("GET", f"/tasks/{acme['id'][:-4]}ffff", cookie=cookie)
    assert status == status2 == 404
    assert "unknown_task" in guessed and "secret plans" not in guessed
    # Nor can it act on it.
    csrf = tls_web.csrf(cookie)
    status, _, body = tls_web.request("POST", f"/tasks/{acme['id']}/cancel", cookie=cookie,
                                      form={"csrf": csrf},
                                      headers={"X-Requested-With": "colibri"})  # fmt: skip
    assert status == 400 and "unknown_task" in body
    assert board.task(acme["id"])["state"] == "pending"
    # The hive (every tenant's daemons) is the owner's: not linked, and refused.
    status, _, body = tls_web.request("GET", "/", cookie=cookie)
    assert status == 200 and 'href="/hive"' not in body and 'href="/agents"' in body
    status, _, hive = tls_web.request("GET", "/hive", cookie=cookie)
    assert status == 404 and "forbidden: " in hive and "<table" not in hive
    # The stream passes on beta's tasks, never acme's (acme's submitted first).
    later_acme = board.submit("acme again", tenant="acme")

    def seen(updates: list[dict[str, object]]) -> bool:
        return later_beta["id"] in str(updates)

    import threading

    later_beta: dict[str, str] = {}

    def submit_beta() -> None:
        later_beta.update(board.submit("beta again", tenant="beta"))

    timer = threading.Timer(0.5, submit_beta)
    timer.start()
    try:
        updates = tls_web.events(cookie, "view=board", lambda u: bool(later_beta) and seen(u))
    finally:
        timer.join()
    assert later_acme["id"] not in str(updates) and "acme" not in str(updates)
    assert beta["id"] != later_beta["id"]


def test_tokens_act_as_themselves_and_pausing_is_the_owners(
    board: TlsDaemon, tls_web: WebServer
) -> None:
    cookie = sign_in(tls_web, board.token("operator", "beta"))
    csrf = tls_web.csrf(cookie)
    ajax = {"X-Requested-With": "colibri"}
    status, _, body = tls_web.request("POST", "/submit", cookie=cookie, headers=ajax,
                                      form={"csrf": csrf, "text": "from the web"})  # fmt: skip
    assert status == 200 and "submitted" in body
    submitted = [t for t in board.call("list")["tasks"] if t["text"] == "from the web"]
    assert [t["tenant"] for t in submitted] == ["beta"]
    status, _, body = tls_web.request("POST", "/pause", cookie=cookie, headers=ajax,
                                      form={"csrf": csrf, "paused": "1"})  # fmt: skip
    assert status == 400 and body.startswith('{"error":"forbidden: ')
    assert board.call("status")["paused"] is False


def test_a_bad_token_or_an_agents_is_refused_and_unsigned_over_tls_too(
    board: TlsDaemon, tls_web: WebServer
) -> None:
    status, headers, body = tls_web.request("POST", "/login", form={"token": "colibri_nope"})
    assert status == 401 and "set-cookie" not in headers and "unauthorized" in body
    agent = board.token("agent", "beta", agent="build-1")
    status, headers, body = tls_web.request("POST", "/login", form={"token": agent})
    assert status == 403 and "set-cookie" not in headers and "operator token" in body
    status, _, _ = tls_web.request("POST", "/login", form={"token": "x"},
                                   headers={"Origin": "https://attacker.example"})  # fmt: skip
    assert status == 403
    assert tls_web.request("GET", "/")[0] == 303
    assert tls_web.request("GET", "/events")[0] == 401
