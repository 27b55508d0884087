"""``colibri tls init DIR``: the files it writes, and that Python's own TLS, client and server,
accepts them in a real handshake on loopback, for the names in the certificate only."""

from __future__ import annotations

import shlex
import socket
import ssl
import stat
import threading
from datetime import UTC, datetime, timedelta
from ipaddress import ip_address
from pathlib import Path

import pytest
from cryptography import x509

from colibri.certs import default_names
from colibri.client import Client, Remote
from colibri.endpoints import parse_connect
from tests.cli.test_cli import as_json, colibri, error_line, json_error, ok
from tests.helpers import Daemon

FILES = ("ca.pem", "ca.key", "server.pem", "server.key")
MODES = {"ca.pem": 0o644, "ca.key": 0o600, "server.pem": 0o644, "server.key": 0o600}


def contents(directory: Path) -> dict[str, bytes]:
    return {name: (directory / name).read_bytes() for name in FILES}


def handshake(pki: Path, server_hostname: str, cafile: Path) -> None:
    """A TLS connection over loopback from a client trusting ``cafile`` to a server presenting
    ``pki``'s pair; raises what the client's handshake raises. Data goes both ways, so a
    return means the connection really works."""
    server = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server.load_cert_chain(pki / "server.pem", pki / "server.key")
    client = ssl.create_default_context(cafile=str(cafile))
    client.verify_flags |= ssl.VERIFY_X509_STRICT  # the default from Python 3.13 on

    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.settimeout(10)

        def serve() -> None:
            try:
                conn, _ = listener.accept()
                conn.settimeout(10)
                with server.wrap_socket(conn, server_side=True) as tls:
                    tls.sendall(tls.recv(5))
            except (OSError, ssl.SSLError):
                pass  # the client's side says what went wrong

        thread = threading.Thread(target=serve)
        thread.start()
        try:
            with socket.create_connection(listener.getsockname(), timeout=10) as raw:
                with client.wrap_socket(raw, server_hostname=server_hostname) as tls:
                    tls.sendall(b"hello")
                    assert tls.recv(5) == b"hello"
        finally:
            thread.join(15)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A set made with the default names."""
    directory = tmp_path_factory.mktemp("tls") / "pki"
    ok(colibri("tls", "init", str(directory)))
    return directory


def test_it_writes_the_four_files_keys_private(tmp_path: Path) -> None:
    directory = tmp_path / "made" / "pki"
    out = ok(colibri("tls", "init", str(directory)))
    assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    for name, mode in MODES.items():
        info = (directory / name).lstat()
        assert stat.S_ISREG(info.st_mode) and stat.S_IMODE(info.st_mode) == mode, name
    assert f"wrote {directory / 'ca.pem'}, ca.key, server.pem, server.key" in out
    assert f"--tls-cert {directory / 'server.pem'} --tls-key {directory / 'server.key'}" in out
    assert f"--tls-ca {directory / 'ca.pem'}" in out


@pytest.mark.parametrize("server_hostname", ["localhost", "127.0.0.1"])
def test_a_client_trusting_the_ca_completes_a_handshake(pki: Path, server_hostname: str) -> None:
    handshake(pki, server_hostname, pki / "ca.pem")


def test_a_name_not_in_the_certificate_fails_the_handshake(pki: Path) -> None:
    with pytest.raises(ssl.SSLCertVerificationError, match="mismatch"):
        handshake(pki, "not-in-the-cert.test", pki / "ca.pem")


def test_a_client_trusting_another_ca_fails_the_handshake(pki: Path, tmp_path: Path) -> None:
    other = tmp_path / "other"
    ok(colibri("tls", "init", str(other)))
    with pytest.raises(ssl.SSLCertVerificationError, match="unable to get local issuer"):
        handshake(pki, "localhost", other / "ca.pem")


def test_names_given_replace_the_defaults(tmp_path: Path) -> None:
    ok(colibri("tls", "init", str(tmp_path / "pki"), "--name", "only.test"))
    handshake(tmp_path / "pki", "only.test", tmp_path / "pki" / "ca.pem")
    with pytest.raises(ssl.SSLCertVerificationError):
        handshake(tmp_path / "pki", "localhost", tmp_path / "pki" / "ca.pem")


def daemon_line(out: str) -> list[str]:
    """The arguments of ``colibri run`` that ``tls init`` suggests."""
    (line,) = [line for line in out.splitlines() if line.startswith("on the daemon:")]
    words = shlex.split(line.removeprefix("on the daemon:"))
    assert words[:2] == ["colibri", "run"]
    return words[2:]


def test_the_daemon_it_suggests_listens_where_the_certificate_says_not_everywhere(
    tmp_path: Path, root: Path
) -> None:
    """The ``colibri run`` line ``tls init`` prints starts a daemon (its port made free for
    the test) that a client trusting ca.pem reaches by the address suggested; it is one the
    certificate names, never every interface (before: ``tcp://0.0.0.0:7433``, which a hive's
    clients are refused to follow). Names given: the first of them."""
    out = ok(colibri("tls", "init", str(tmp_path / "pki")))
    args = daemon_line(out)
    (listen,) = parse_connect(args[args.index("--listen") + 1])
    assert listen.port == 7433 and listen.host in default_names() and not listen.unspecified
    assert "0.0.0.0" not in out
    assert ("this machine only" in out) == listen.loopback  # (then: how to be reached)
    daemon = Daemon(root, *(a.replace(":7433", ":0") for a in args))
    daemon.start()
    try:
        (bound,) = daemon.call("status")["daemon"]["listen"]
        assert bound.startswith(f"{str(listen).removesuffix('7433')}")
        token = daemon.call("token-create", role="operator", tenant="default")["secret"]
        remote = Remote.parse(bound, token=token, ca=str(tmp_path / "pki" / "ca.pem"))
        with Client.remote(remote, timeout=10) as client:
            assert client.call("ping")["pong"]
    finally:
        daemon.stop()
    given = ok(colibri("tls", "init", str(tmp_path / "named"), "--name", "0.0.0.0",
                       "--name", "board.test", "--name", "10.1.2.3"))  # fmt: skip
    assert daemon_line(given)[:2] == ["--listen", "tcp://board.test:7433"]
    assert "this machine only" not in given


def test_json_names_the_files_and_the_expiry(tmp_path: Path) -> None:
    args = ["--name", "a.test", "--name", "10.1.2.3", "--days", "30", "--json"]
    doc = as_json(colibri("tls", "init", str(tmp_path / "pki"), *args))
    assert doc.keys() == {"ca", "ca_key", "cert", "key", "names", "expires"}
    for key in ("ca", "ca_key", "cert", "key"):
        assert Path(doc[key]).is_file(), key
    assert doc["names"] == ["a.test", "10.1.2.3"]
    expires = datetime.fromisoformat(doc["expires"])
    assert abs(expires - (datetime.now(UTC) + timedelta(days=30))) < timedelta(minutes=1)
    cert = x509.load_pem_x509_certificate(Path(doc["cert"]).read_bytes())
    assert cert.not_valid_after_utc == expires
    san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    assert san.get_values_for_type(x509.DNSName) == ["a.test"]
    assert san.get_values_for_type(x509.IPAddress) == [ip_address("10.1.2.3")]


def test_a_second_init_needs_force(tmp_path: Path) -> None:
    directory = tmp_path / "pki"
    ok(colibri("tls", "init", str(directory)))
    first = contents(directory)
    line = error_line(colibri("tls", "init", str(directory)))
    assert str(directory / "ca.pem") in line and "--force" in line
    assert contents(directory) == first

    ok(colibri("tls", "init", str(directory), "--force"))
    second = contents(directory)
    assert all(second[name] != first[name] for name in FILES)
    for name, mode in MODES.items():
        assert stat.S_IMODE((directory / name).stat().st_mode) == mode, name
    assert sorted(p.name for p in directory.iterdir()) == sorted(FILES)  # no partial files left
    handshake(directory, "localhost", directory / "ca.pem")


@pytest.mark.parametrize("force", [False, True])
def test_a_link_at_a_file_is_refused_and_its_target_untouched(tmp_path: Path, force: bool) -> None:
    directory = tmp_path / "pki"
    directory.mkdir(mode=0o700)
    target = tmp_path / "precious"
    target.write_text("not a key\n")
    (directory / "server.key").symlink_to(target)

    line = error_line(colibri("tls", "init", str(directory), *(["--force"] if force else [])))
    assert str(directory / "server.key") in line and "symbolic link" in line
    assert target.read_text() == "not a key\n"
    assert [p.name for p in directory.iterdir()] == ["server.key"]  # nothing else written


def test_force_refuses_a_link_planted_in_an_earlier_set(tmp_path: Path) -> None:
    directory = tmp_path / "pki"
    ok(colibri("tls", "init", str(directory)))
    target = tmp_path / "precious"
    target.write_text("not a key\n")
    (directory / "server.key").unlink()
    (directory / "server.key").symlink_to(target)
    before = contents(directory)

    line = error_line(colibri("tls", "init", str(directory), "--force"))
    assert str(directory / "server.key") in line and "symbolic link" in line
    assert target.read_text() == "not a key\n"
    assert contents(directory) == before and (directory / "server.key").is_symlink()


@pytest.mark.parametrize("days", ["0", "5000"])
def test_days_out_of_range_are_refused(tmp_path: Path, days: str) -> None:
    line = error_line(colibri("tls", "init", str(tmp_path / "pki"), "--days", days))
    assert "1 to 3650 days" in line
    error = json_error(colibri("tls", "init", str(tmp_path / "pki"), "--days", days, "--json"))
    assert error["code"] == "bad_request"
    assert not (tmp_path / "pki").exists()


def test_a_name_that_is_no_host_name_is_refused(tmp_path: Path) -> None:
    line = error_line(colibri("tls", "init", str(tmp_path / "pki"), "--name", "two words"))
    assert "'two words' is neither a host name nor an IP address" in line


def test_default_names_are_this_hosts() -> None:
    names = default_names()
    assert names[0] == socket.gethostname()
    assert {"localhost", "127.0.0.1", "::1"} <= set(names)
    assert len(names) == len(set(names))


def test_default_names_survive_failed_lookups(monkeypatch: pytest.MonkeyPatch) -> None:
    def fail(*args: object, **kwargs: object) -> str:
        raise OSError("no network here")

    for name in ("gethostname", "getfqdn", "getaddrinfo"):
        monkeypatch.setattr(socket, name, fail)
    assert default_names() == ["localhost", "127.0.0.1", "::1"]
