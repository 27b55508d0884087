"""``colibri web``: the board live in a browser (``colibri/web``); and what ``colibri run
--web`` starts beside its daemon (``WebBeside``)."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from colibri.cli.base import Context, cli, complete_paths, pass_ctx

if TYPE_CHECKING:
    from colibri.client import Remote

DEFAULT_LISTEN = "127.0.0.1:7480"


def say_url(url: str) -> None:
    click.echo(f"colibri web: {url}", err=True)


def ttl_of(text: str) -> float:
    from colibri.core.durations import DAY, parse_duration
    from colibri.core.errors import ColibriError

    try:
        return parse_duration(text, low=60, high=30 * DAY)
    except ColibriError as exc:
        raise click.BadParameter(exc.message, param_hint="--session-ttl") from None


def daemon_over_tcp(ctx: Context, daemon: str | None) -> Remote | None:
    """Where typed-in tokens are checked and used: ``--daemon``, else ``--connect``, else the
    first address this root's daemon listens on (None: it listens on none)."""
    from colibri.client import Remote

    if daemon is None and ctx.connect:
        daemon = ctx.connect
    if daemon is None:
        from colibri.client import Client

        with Client.for_root(ctx.root()) as client:
            listen = client.call("status").get("daemon", {}).get("listen") or []
        if not listen:
            return None
        daemon = str(listen[0])
    return Remote.parse(daemon, token="", ca=ctx.tls_ca, insecure_loopback=ctx.insecure_loopback)


@cli.command()
@click.option(
    "--listen",
    default=DEFAULT_LISTEN,
    show_default=True,
    metavar="HOST:PORT",
    help="Where to serve (port 0: any free port). Off loopback it needs TLS.",
)
@click.option(
    "--tls-cert",
    metavar="PEM",
    shell_complete=complete_paths("file"),
    help="Serve HTTPS with this certificate (chain); then operator tokens sign in.",
)
@click.option(
    "--tls-key",
    metavar="PEM",
    shell_complete=complete_paths("file"),
    help="The certificate's private key.",
)
@click.option(
    "--daemon",
    "daemon",
    metavar="tcp://HOST:PORT[,…]",
    help="The daemon over TCP that operator tokens are checked with and act through "
    "(default: --connect, else the first address this root's daemon listens on).",
)
@click.option(
    "--session-ttl",
    default="12h",
    show_default=True,
    metavar="DURATION",
    help="How long a sign-in lasts.",
)
@pass_ctx
def web(
    ctx: Context,
    listen: str,
    tls_cert: str | None,
    tls_key: str | None,
    daemon: str | None,
    session_ttl: str,
) -> None:
    """The board live in a browser: tasks by state and as a list, a task in full, agents and
    workspaces, schedules; submit, cancel, retry, answer, pause and resume.

    On loopback it prints a URL that signs you in once (a new one after each use). Over TLS
    (--tls-cert, --tls-key; required off loopback) people sign in with an operator token and
    see what it may see (docs/WEB.md).
    """
    import asyncio

    from colibri.client import socket_path
    from colibri.endpoints import WEB_PORT, parse_host_port
    from colibri.web.server import bind, make_web, say_ready, server

    address = parse_host_port(listen, "web", WEB_PORT)
    tls = _tls(tls_cert, tls_key)
    remote = ctx.remote()
    starter: Path | Remote = remote if remote is not None else socket_path(ctx.root())
    tokens = daemon_over_tcp(ctx, daemon) if tls is not None else None
    state = make_web(address, tls=tls, starter=starter, tokens=tokens,
                     ttl=ttl_of(session_ttl), on_url=say_url)  # fmt: skip
    sock = bind(state)
    say_ready(state)
    try:
        asyncio.run(server(state, tls).serve(sockets=[sock]))
    except KeyboardInterrupt:
        pass


def _tls(cert: str | None, key: str | None) -> tuple[str, str] | None:
    if (cert is None) != (key is None):
        raise click.UsageError("give --tls-cert and --tls-key together")
    return (cert, key) if cert is not None and key is not None else None


class WebBeside:
    """``colibri run --web``: the web server in a thread of the daemon's process, with a loop
    of its own, meeting the daemon on its socket as any client (the owner's pages), and over
    the daemon's own TLS listener for tokens, trusting ``ca`` as a client does (``colibri
    --tls-ca``, ``COLIBRI_TLS_CA``). Started once the daemon serves."""

    def __init__(self, root: Path, listen: str, config: Any, ca: str | None) -> None:
        from colibri.client import socket_path
        from colibri.core.errors import ConfigError
        from colibri.endpoints import WEB_PORT, parse_host_port
        from colibri.web.app import is_loopback
        from colibri.web.server import bind, make_web

        server_settings = config.server
        cert, key = server_settings.tls_cert, server_settings.tls_key
        tls = (str(cert), str(key)) if cert and key else None
        address = parse_host_port(listen, "web", WEB_PORT)
        tokens = None
        if tls is not None and server_settings.listen:
            tokens = self._listener(str(server_settings.listen[0]), ca)
        elif tls is not None and not is_loopback(address.host):
            raise ConfigError(
                f"colibri run --web on {address.host} (not a loopback address) signs people in "
                "with operator tokens, checked over the daemon's own TLS listener: give "
                "--listen tcp://HOST:PORT too"
            )
        self.root = root
        self.web = make_web(address, tls=tls, starter=socket_path(root), tokens=tokens,
                            ttl=12 * 3600.0, on_url=say_url)  # fmt: skip
        self.tls = tls
        self.sock = bind(self.web)
        self.server: Any = None
        self.thread: threading.Thread | None = None

    @staticmethod
    def _listener(address: str, ca: str | None) -> Remote:
        """The daemon's listener at ``address`` as a client reaches it: over TLS, which a
        daemon with a certificate speaks on every listener, loopback too (--insecure-loopback
        or not). Its port may be 0 until the daemon serves (``_bound``)."""
        from colibri.client import Remote
        from colibri.endpoints import parse_address

        return Remote((parse_address(address, listening=True),), "", ca)

    def begin(self) -> None:
        from colibri.web.server import server

        if self.thread is None:
            self.server = server(self.web, self.tls)
            self.thread = threading.Thread(target=self._serve, name="web", daemon=True)
            self.thread.start()

    def _serve(self) -> None:
        # In the thread: ``begin`` is called on the daemon's loop, which would wait for itself
        # on its own socket.
        import asyncio

        from colibri.web.server import say_ready

        if self.web.tokens is not None:
            self.web.tokens = self._bound(self.web.tokens)
        say_ready(self.web)
        asyncio.run(self.server.serve(sockets=[self.sock]))

    def _bound(self, listener: Remote) -> Remote:
        """The listener where the daemon says it listens (the config may say port 0)."""
        from colibri.client import Client
        from colibri.core.errors import ColibriError

        try:
            with Client.for_root(self.root, timeout=10) as client:
                listen = client.call("status").get("daemon", {}).get("listen") or []
        except (ColibriError, OSError):  # (stopping already)
            return listener
        return self._listener(str(listen[0]), listener.ca) if listen else listener

    def end(self) -> None:
        if self.server is not None:
            self.server.should_exit = True
        if self.thread is not None:
            self.thread.join(5)
        self.sock.close()
