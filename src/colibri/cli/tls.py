"""``colibri tls``: certificates for Colibri over TCP with TLS."""

from __future__ import annotations

from pathlib import Path

import click

from colibri.cli.base import cli, json_option
from colibri.cli.output import print_json, print_line

#: The port the docs use for ``colibri run --listen``.
DOCS_PORT = 7433


def listen_host(names: tuple[str, ...], *, given: bool) -> str:
    """The host ``tls init`` suggests the daemon listen on: one the certificate names, never
    every interface (``0.0.0.0``: a hive's daemon gives its first ``--listen`` to clients as
    where it serves, and they cannot go there). The first of the names given with ``--name``;
    by default the first address of this host that is not loopback, else 127.0.0.1."""
    from ipaddress import ip_address

    from colibri.endpoints import TcpAddress

    def is_address(name: str) -> bool:
        try:
            ip_address(name)
        except ValueError:
            return False
        return True

    hosts = [TcpAddress(name, DOCS_PORT) for name in names]
    if given:
        return next((a.host for a in hosts if not a.unspecified), "127.0.0.1")
    external = (a for a in hosts if is_address(a.host) and not (a.loopback or a.unspecified))
    return next((a.host for a in external), "127.0.0.1")


@cli.group()
def tls() -> None:
    """TLS certificates for a daemon on TCP and its clients."""


@tls.command("init")
@click.argument("directory", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--name",
    "names",
    multiple=True,
    metavar="NAME",
    help="A host name or IP address clients reach the daemon by (repeatable). Given, it "
    "replaces the default: this host's names and addresses, localhost, 127.0.0.1 and ::1.",
)
@click.option(
    "--days",
    default=365,
    show_default=True,
    metavar="N",
    help="How many days the certificates are valid (1-3650).",
)
@click.option("--force", is_flag=True, help="Replace the files of an earlier init in DIR.")
@json_option
def init_tls(
    directory: Path, names: tuple[str, ...], days: int, force: bool, as_json: bool
) -> None:
    """Make a CA of its own in DIR and a server certificate it signs, for a test setup.

    \b
    Writes DIR/ca.pem and ca.key (the CA), server.pem and server.key (for the daemon);
    clients trust ca.pem. ca.key stays unencrypted on disk: keep it private.
    """
    import shlex

    from colibri.certs import default_names, make_pki
    from colibri.core.model import rfc3339

    pki = make_pki(directory, list(names) or default_names(), days=days, force=force)
    if as_json:
        print_json(
            {
                "ca": str(pki.ca_cert),
                "ca_key": str(pki.ca_key),
                "cert": str(pki.server_cert),
                "key": str(pki.server_key),
                "names": list(pki.names),
                "expires": rfc3339(pki.expires.timestamp()),
            }
        )
        return
    cert, key, ca = (shlex.quote(str(p)) for p in (pki.server_cert, pki.server_key, pki.ca_cert))
    print_line(
        f"wrote {pki.ca_cert}, {pki.ca_key.name}, {pki.server_cert.name}, {pki.server_key.name} "
        f"(names: {', '.join(pki.names)})"
    )
    from colibri.endpoints import TcpAddress

    listen = TcpAddress(listen_host(pki.names, given=bool(names)), DOCS_PORT)
    print_line(
        f"on the daemon:   colibri run --listen {shlex.quote(str(listen))} "
        f"--tls-cert {cert} --tls-key {key}"
    )
    if listen.loopback:
        print_line(
            "                 (this machine only; for other machines, make the certificate "
            "--name HOST, a name they reach this host by, and listen on that)"
        )
    print_line(f"on each client:  --tls-ca {ca}   (or COLIBRI_TLS_CA={ca})")
    print_line("keep ca.key private (it signs certificates); it is needed only to make new ones")
