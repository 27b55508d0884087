"""The web server started: the address checked (TLS off loopback), the socket bound (port 0:
any free one), the sign-in URL said, uvicorn serving until told to stop."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from colibri.core.errors import ConfigError
from colibri.endpoints import TcpAddress

if TYPE_CHECKING:
    import uvicorn

    from colibri.client import Remote
    from colibri.web.app import Web


def make_web(
    address: TcpAddress,
    *,
    tls: tuple[str, str] | None,
    starter: Path | Remote | None,
    tokens: Remote | None,
    ttl: float,
    on_url: Callable[[str], None],
) -> Web:
    """The web server's state, once what it was given is known to make sense: off loopback,
    TLS and a daemon over TCP to check tokens with."""
    from colibri.web.app import Web, is_loopback

    loopback = is_loopback(address.host)
    if not loopback and tls is None:
        raise ConfigError(
            f"colibri web on {address.host} (not a loopback address) needs TLS: give --tls-cert "
            "and --tls-key (colibri tls init makes a test pair), or listen on 127.0.0.1"
        )
    if tls is not None:
        from colibri.endpoints import server_context

        server_context(*tls)  # a pair that cannot be used: said now, in one line
    if not loopback and tokens is None:
        raise ConfigError(
            "colibri web off loopback signs people in with operator tokens, checked with the "
            "daemon over TCP: give --daemon tcp://HOST:PORT (and --tls-ca), or run the daemon "
            "with --listen"
        )
    return Web(address.host, address.port, tls is not None,
               starter=starter if loopback else None,
               tokens=tokens if tls is not None else None, ttl=ttl, on_url=on_url)  # fmt: skip


def bind(web: Web) -> socket.socket:
    """The listening socket (its port then known, for the URL)."""
    family = socket.AF_INET6 if ":" in web.host else socket.AF_INET
    host = "localhost" if web.host == "localhost" else web.host
    try:
        sock = socket.create_server((host, web.port), family=family)
    except OSError as exc:
        raise ConfigError(
            f"colibri web cannot listen on {web.host}:{web.port}: {exc.strerror or exc}"
        ) from None
    web.port = sock.getsockname()[1]
    return sock


def server(web: Web, tls: tuple[str, str] | None) -> uvicorn.Server:
    import uvicorn

    from colibri.web.app import build

    class Server(uvicorn.Server):
        async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
            web.end_streams()  # (the pages' EventSource reconnects, to the next server)
            await super().shutdown(sockets)

    cert, key = tls if tls is not None else (None, None)
    config = uvicorn.Config(
        build(web), ssl_certfile=cert, ssl_keyfile=key, log_level="warning", lifespan="on",
        access_log=False, proxy_headers=False, server_header=False, timeout_graceful_shutdown=1,
    )  # fmt: skip
    return Server(config)


def say_ready(web: Web) -> None:
    if web.starter is not None:
        web.on_url(web.sign_in_url())
    if web.tokens is not None:
        web.on_url(f"{web.base_url}/login (sign in with an operator token)")
