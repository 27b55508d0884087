"""``colibri tls``: certificates for Colibri over TCP with TLS."""

from __future__ import annotations

from pathlib import Path

import click

from colibri.cli.main import cli, json_option
from colibri.cli.output import print_json, print_line

#: The port the docs use for ``colibri run --listen``.
DOCS_PORT = 7433


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
    print_line(
        f"on the daemon:   colibri run --listen tcp://0.0.0.0:{DOCS_PORT} "
        f"--tls-cert {cert} --tls-key {key}"
    )
    print_line(f"on each client:  --tls-ca {ca}   (or COLIBRI_TLS_CA={ca})")
    print_line("keep ca.key private (it signs certificates); it is needed only to make new ones")
