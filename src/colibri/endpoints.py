"""Where a daemon listens and a client connects: ``tcp://HOST:PORT`` addresses, and the TLS
contexts both sides use on them.

TCP is TLS, always, except on a loopback address with ``--insecure-loopback`` (for tests on one
machine: nothing leaves it). The server presents ``--tls-cert``/``--tls-key``; a client checks
it against ``--tls-ca`` (or the system's trust store without one) and the address's host name.
TLS 1.2 is the oldest accepted.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from colibri.core.errors import ConfigError, shown

if TYPE_CHECKING:
    import ssl

SCHEME = "tcp://"
#: The port the docs use; nothing listens on it unless told to.
DEFAULT_PORT = 7433


@dataclass(frozen=True, slots=True)
class TcpAddress:
    host: str
    port: int

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{SCHEME}{host}:{self.port}"

    @property
    def unspecified(self) -> bool:
        """0.0.0.0 or ::, which a daemon listens on to listen on every interface."""
        try:
            return ipaddress.ip_address(self.host).is_unspecified
        except ValueError:
            return False

    @property
    def loopback(self) -> bool:
        if self.host == "localhost":
            return True
        try:
            return ipaddress.ip_address(self.host).is_loopback
        except ValueError:
            return False


def parse_address(text: str, *, listening: bool = False) -> TcpAddress:
    """``tcp://HOST:PORT`` (an IPv6 host in brackets: ``tcp://[::1]:7433``); to listen on,
    port 0 too (any free port: ``status`` says which)."""
    if not isinstance(text, str) or not text.startswith(SCHEME):
        raise ConfigError(f"{shown(text)} is not an address: write tcp://HOST:PORT")
    rest = text[len(SCHEME) :]
    if rest.startswith("["):
        host, close, tail = rest[1:].partition("]")
        if not close or not tail.startswith(":"):
            raise ConfigError(f"{shown(text)}: write an IPv6 address as tcp://[::1]:{DEFAULT_PORT}")
        port_text = tail[1:]
    else:
        host, colon, port_text = rest.rpartition(":")
        if not colon or ":" in host:
            raise ConfigError(
                f"{shown(text)}: give the port too, as tcp://{rest or 'HOST'}:{DEFAULT_PORT}"
            )
    if not host or any(c.isspace() or c in "/?#@" for c in host):
        raise ConfigError(f"{shown(text)}: the host is missing or not a host name")
    lowest = 0 if listening else 1
    if not port_text.isdigit() or not lowest <= int(port_text) <= 65535:
        raise ConfigError(f"{shown(text)}: the port must be a number from {lowest} to 65535")
    return TcpAddress(host, int(port_text))


#: The port the docs use for ``--metrics`` (Prometheus's registry of exporters' ports).
METRICS_PORT = 9464


def parse_metrics_address(text: str) -> TcpAddress:
    """``--metrics``' value: ``HOST:PORT`` (an IPv6 host in brackets: ``[::1]:9464``); port 0
    is any free port (the log and ``status`` say which). Plain HTTP: Prometheus scrapes it."""
    return parse_host_port(text, "metrics", METRICS_PORT)


#: The port the docs use for ``colibri web``.
WEB_PORT = 7480


def parse_host_port(text: str, what: str, example_port: int) -> TcpAddress:
    """``HOST:PORT`` (an IPv6 host in brackets: ``[::1]:7480``) of an HTTP server of ours
    (``what``: ``metrics``, ``web``); port 0 is any free port."""
    example = f"127.0.0.1:{example_port} (an IPv6 host as [::1]:{example_port})"
    hint = f"write HOST:PORT, as {example}"
    if not isinstance(text, str):
        raise ConfigError(f"{shown(text)} is not an address for {what}: {hint}")
    if text.startswith("["):
        host, close, tail = text[1:].partition("]")
        colon, port_text = tail[:1], tail[1:]
    else:
        host, colon, port_text = text.rpartition(":")
        close = "" if ":" in host else "]"
    if not close or not colon:
        raise ConfigError(f"{shown(text)} is not an address for {what}: {hint}")
    if not host or any(c.isspace() or c in "/?#@[]" for c in host):
        raise ConfigError(f"{shown(text)}: the host is missing or not a host name; {hint}")
    if not (port_text.isascii() and port_text.isdigit()) or int(port_text) > 65535:
        raise ConfigError(f"{shown(text)}: the port must be a number from 0 to 65535; {hint}")
    return TcpAddress(host, int(port_text))


def parse_connect(text: str) -> list[TcpAddress]:
    """``--connect``'s value: one address, or several separated by commas (tried in turn)."""
    parts = [p.strip() for p in text.split(",") if p.strip()]
    if not parts:
        raise ConfigError("--connect: give an address, as tcp://HOST:PORT")
    return [parse_address(p) for p in parts]


def check_listeners(
    addresses: tuple[str, ...], cert: str | None, key: str | None, insecure_loopback: bool
) -> None:
    """Refuse listeners that would speak plain text off this machine, or TLS without its
    files; each address must parse."""
    parsed = [parse_address(a, listening=True) for a in addresses]
    if (cert is None) != (key is None):
        raise ConfigError("give --tls-cert and --tls-key together (the certificate and its key)")
    if cert is None:
        exposed = [str(a) for a in parsed if not (insecure_loopback and a.loopback)]
        if exposed:
            hint = (
                " (--insecure-loopback allows plain TCP on loopback addresses only)"
                if insecure_loopback
                else ""
            )
            raise ConfigError(
                f"listening on {', '.join(exposed)} needs TLS: give --tls-cert and --tls-key "
                f"(make a test pair with: colibri tls init DIR){hint}"
            )
        return
    assert key is not None
    for what, path in (("certificate", cert), ("key", key)):
        if not Path(path).is_file():
            raise ConfigError(f"the TLS {what} {path} is not a readable file")


def server_context(cert: str, key: str) -> ssl.SSLContext:
    import ssl

    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    try:
        context.load_cert_chain(cert, key)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            f"cannot use the TLS certificate {cert} with key {key}: {exc}; "
            "check that they are PEM files of one pair"
        ) from None
    return context


def client_context(ca: str | None) -> ssl.SSLContext:
    import ssl

    try:
        context = ssl.create_default_context(cafile=ca)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot use {ca} as the TLS CA: {exc}") from None
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    return context
