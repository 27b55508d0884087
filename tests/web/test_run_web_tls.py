"""``colibri run --web`` beside a daemon with TLS: the web server serves HTTPS with the daemon's
certificate, and checks operator tokens over the daemon's own TLS listener, at the port it was
given (the config says port 0: any free one), read once the daemon serves. Off loopback without
TLS (or without a listener to check tokens on) the daemon refuses to start, in one line."""

from __future__ import annotations

import ipaddress
import re
import ssl
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from colibri.certs import Pki, make_pki
from colibri.client import socket_path
from tests.helpers import Daemon, one_line, run_refused, wait_until
from tests.remote.conftest import TlsDaemon
from tests.web.conftest import WebServer, cookie_of
from tests.web.test_tenants import sign_in


def off_loopback() -> str | None:
    """An IPv4 address of this machine that is not loopback (``hostname -I``), or None."""
    try:
        said = subprocess.run(["hostname", "-I"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    for word in said.stdout.split():
        try:
            address = ipaddress.ip_address(word)
        except ValueError:
            continue
        if address.version == 4 and not (address.is_loopback or address.is_link_local):
            return word
    return None


OFF_LOOPBACK = off_loopback()


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    # (tests/web/test_tenants.py's, with this machine's address off loopback too: a server
    # there presents a certificate for it)
    names = ["localhost", "127.0.0.1", *([OFF_LOOPBACK] if OFF_LOOPBACK else [])]
    return make_pki(tmp_path_factory.mktemp("pki"), names, days=2)


class WebBeside(TlsDaemon):
    """A daemon with a TLS listener (port 0 in its config), run with ``--web``. It trusts the
    test CA as a client does, by ``colibri --tls-ca`` (``tls_ca="option"``) or by
    ``COLIBRI_TLS_CA`` (``"env"``): its web server checks tokens over that listener."""

    def __init__(self, root: Path, pki: Pki, host: str, tls_ca: str, *extra: str) -> None:
        super().__init__(root, pki, "--web", f"{host}:0", *extra, listen=f"tcp://{host}:0")
        self.tls_ca = tls_ca
        if tls_ca == "env":
            self.env["COLIBRI_TLS_CA"] = str(pki.ca_cert)

    def command(self) -> list[str]:
        command = super().command()
        if self.tls_ca == "option":
            at = command.index("run")
            command[at:at] = ["--tls-ca", str(self.pki.ca_cert)]
        return command

    def said(self, pattern: str) -> re.Match[str]:
        """The first line of its log that matches (waited for)."""
        match = wait_until(lambda: re.search(pattern, self.log()))
        assert isinstance(match, re.Match)
        return match

    def web(self, base: str) -> WebServer:
        """A client of its web server (no process of its own: the daemon's), trusting the CA."""
        web = WebServer(self.root)
        web.base, web.ca = base, str(self.pki.ca_cert)
        return web


def beside(root: Path, pki: Pki, host: str, tls_ca: str, *extra: str) -> Iterator[WebBeside]:
    daemon = WebBeside(root, pki, host, tls_ca, *extra)
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


@pytest.fixture
def on_loopback(request: pytest.FixtureRequest, root: Path, pki: Pki) -> Iterator[WebBeside]:
    extra: tuple[str, ...] = getattr(request, "param", ())
    yield from beside(root, pki, "127.0.0.1", "option", *extra)


@pytest.fixture
def off_loopback_board(root: Path, pki: Pki) -> Iterator[WebBeside]:
    if OFF_LOOPBACK is None:
        pytest.skip("this machine has no IPv4 address off loopback (hostname -I) to serve on")
    yield from beside(root, pki, OFF_LOOPBACK, "env")


TOKEN_LINE = r"colibri web: (https://{host}:\d+)/login \(sign in with an operator token\)"


def login_error(body: str) -> str:
    """The sign-in page's error: one line."""
    match = re.search(r'<p class="error" id="login-error">([^<]*)</p>', body)
    assert match, body
    assert "\n" not in match.group(1)
    return match.group(1)


def test_on_loopback_it_serves_https_and_its_one_time_url_signs_in_secure(
    on_loopback: WebBeside,
) -> None:
    url = on_loopback.said(r"colibri web: (https://127\.0\.0\.1:\d+)(/login\?secret=\S+)")
    web = on_loopback.web(url.group(1))
    # The daemon's certificate: verified with the test CA, by nothing else.
    unverified = on_loopback.web(url.group(1))
    unverified.ca = None
    with pytest.raises(ssl.SSLCertVerificationError):
        unverified.request("GET", "/login")
    status, headers, _ = web.request("GET", url.group(2))
    assert status == 303, headers
    flags = [flag.strip() for flag in headers["set-cookie"].split(";")]
    assert "Secure" in flags and "HttpOnly" in flags, flags
    cookie = cookie_of(headers)
    status, _, body = web.request("GET", "/", cookie=cookie)
    assert status == 200 and '<span class="who">owner</span>' in body
    # Spent: the same URL again signs nobody in.
    status, headers, _ = web.request("GET", url.group(2))
    assert status == 403 and "set-cookie" not in headers


# With --insecure-loopback too, the listener speaks TLS (the daemon has a certificate), and so
# must the web server to it.
@pytest.mark.parametrize(
    "on_loopback", [(), ("--insecure-loopback",)], ids=["tls", "insecure-loopback-too"],
    indirect=True,
)  # fmt: skip
def test_on_loopback_tokens_are_checked_over_the_daemons_own_tls_listener(
    on_loopback: WebBeside,
) -> None:
    base = on_loopback.said(TOKEN_LINE.format(host=r"127\.0\.0\.1")).group(1)
    web = on_loopback.web(base)
    acme = on_loopback.submit("acme's secret plans", tenant="acme")
    on_loopback.submit("beta's own task", tenant="beta")
    cookie = sign_in(web, on_loopback.token("operator", "beta"))  # (its cookie Secure)
    status, _, body = web.request("GET", "/", cookie=cookie)
    assert status == 200 and "beta&#39;s own task" in body
    assert "operator of tenant beta" in body
    assert "secret plans" not in body and acme["id"] not in body
    # The daemon checked it, at the port its listener was given (its config says 0).
    login = on_loopback.said(r"authenticated .*")
    assert "beta" in login.group(0), login.group(0)
    status, headers, body = web.request("POST", "/login", form={"token": "colibri_nope"})
    assert status == 401 and "set-cookie" not in headers
    assert login_error(body).startswith("unauthorized: "), body
    on_loopback.said(r"failed login: ")


def test_off_loopback_it_signs_in_by_operator_tokens_only(off_loopback_board: WebBeside) -> None:
    host = re.escape(str(OFF_LOOPBACK))
    base = off_loopback_board.said(TOKEN_LINE.format(host=host)).group(1)
    # (said after the one-time URL, were there one)
    assert "secret=" not in off_loopback_board.log()
    web = off_loopback_board.web(base)
    status, _, body = web.request("GET", "/login")
    assert status == 200 and 'name="token"' in body and "one-time secret" not in body
    status, headers, _ = web.request("GET", "/login?secret=guessed")
    assert status == 403 and "set-cookie" not in headers
    acme = off_loopback_board.submit("acme's secret plans", tenant="acme")
    off_loopback_board.submit("beta's own task", tenant="beta")
    cookie = sign_in(web, off_loopback_board.token("operator", "beta"))
    status, _, body = web.request("GET", "/tasks", cookie=cookie)
    assert status == 200 and "beta&#39;s own task" in body
    assert "secret plans" not in body and acme["id"] not in body
    status, headers, body = web.request("POST", "/login", form={"token": "colibri_nope"})
    assert status == 401 and "set-cookie" not in headers
    assert login_error(body).startswith("unauthorized: "), body
    agent = off_loopback_board.token("agent", "beta", agent="build-1")
    status, headers, body = web.request("POST", "/login", form={"token": agent})
    assert status == 403 and "operator token" in login_error(body)


@pytest.mark.parametrize("detach", [False, True], ids=["foreground", "detach"])
@pytest.mark.parametrize(
    ("tls", "words"),
    [(False, "needs TLS: give --tls-cert and --tls-key"),
     (True, "checked over the daemon's own TLS listener: give --listen tcp://HOST:PORT")],
    ids=["without-tls", "without-a-listener"],
)  # fmt: skip
def test_off_loopback_the_daemon_refuses_to_start_in_one_line(
    root: Path, pki: Pki, tls: bool, words: str, detach: bool
) -> None:
    given = ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key)] if tls else []
    refused = run_refused(root, *given, *(["--detach"] if detach else []), "--web", "0.0.0.0:0")
    assert refused.returncode == 1
    line = one_line(refused.stderr)
    assert line.startswith("colibri: ") and words in line, line
    assert "--daemon" not in line  # (colibri web's option: run has none)
    # Refused before anything served, and nothing is left held: the next daemon starts.
    assert not socket_path(root).exists()
    daemon = Daemon(root)
    daemon.start()
    daemon.stop()
