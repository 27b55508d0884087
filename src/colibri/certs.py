"""A certificate authority of its own and a server certificate it signs, for a test setup of
Colibri over TCP with TLS (``colibri tls init DIR``): the daemon presents the server pair, each
client trusts the CA's certificate.

``cryptography`` is imported inside the functions that make the certificates, so that loading
this module (and ``colibri --help``) stays fast.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import stat
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from colibri.core.errors import BadRequest, FileExists, shown
from colibri.privatefiles import open_private, private_dir, what, write_private

if TYPE_CHECKING:
    from cryptography import x509
    from cryptography.hazmat.primitives.asymmetric import ec

MAX_DAYS = 3650
#: A client whose clock is a little behind ours still accepts a certificate made just now.
BACKDATE = timedelta(minutes=5)
#: X.509 caps a common name at 64 characters.
COMMON_NAME_LIMIT = 64
_HOST_NAME = re.compile(r"[A-Za-z0-9*_.-]{1,253}")

CERT_MODE = 0o644
KEY_MODE = 0o600


@dataclass(frozen=True)
class Pki:
    """What ``make_pki`` wrote: the four files, the names in the server certificate, and when
    both certificates expire."""

    ca_cert: Path
    ca_key: Path
    server_cert: Path
    server_key: Path
    names: tuple[str, ...]
    expires: datetime


def default_names() -> list[str]:
    """The names and addresses a client may reach this host by: its host name, its fully
    qualified name, localhost and the loopback addresses, then the addresses its host name
    resolves to. A lookup that fails adds nothing."""
    names: list[str] = []

    def add(name: str) -> None:
        if name not in names and _usable(name):
            names.append(name)

    hostname = _hostname()
    add(hostname)
    try:
        add(socket.getfqdn())
    except (OSError, ValueError):
        pass
    for name in ("localhost", "127.0.0.1", "::1"):
        add(name)
    if hostname:
        try:
            found = socket.getaddrinfo(hostname, None, type=socket.SOCK_STREAM)
        except (OSError, ValueError):
            found = []
        for *_, address in found:
            add(str(address[0]))
    return names


def make_pki(directory: Path, names: list[str], *, days: int = 365, force: bool = False) -> Pki:
    """Write ``ca.pem``, ``ca.key``, ``server.pem`` and ``server.key`` into ``directory``
    (made 0700 if missing, its parents as by ``mkdir -p``): a new CA, and a server certificate
    it signs for ``names`` (host names and IP addresses), both valid for ``days``. Keys are
    0600, certificates 0644.

    Nothing is written if one of the four is there already, unless ``force``; then each is
    replaced by a rename. A link or other non-file at one of the paths is refused even with
    ``force``, and never written through."""
    # Normalised (``..`` folded), not resolved: a link the user named stays as named.
    directory = Path(os.path.abspath(directory.expanduser()))
    if not 1 <= days <= MAX_DAYS:
        raise BadRequest(
            f"the certificates' validity must be from 1 to {MAX_DAYS} days, not {days}"
        )
    names = list(dict.fromkeys(names))
    if not names:
        raise BadRequest("the server certificate needs at least one host name or IP address")
    for name in names:
        if not _usable(name):
            raise BadRequest(
                f"{shown(name)} is neither a host name nor an IP address "
                "(a name in another script goes in its xn-- form)"
            )
    pki = Pki(
        ca_cert=directory / "ca.pem",
        ca_key=directory / "ca.key",
        server_cert=directory / "server.pem",
        server_key=directory / "server.key",
        names=tuple(names),
        expires=datetime.now(UTC).replace(microsecond=0) + timedelta(days=days),
    )
    if not os.path.lexists(directory):
        directory.parent.mkdir(parents=True, exist_ok=True)
        private_dir(directory)
    files = (pki.ca_cert, pki.ca_key, pki.server_cert, pki.server_key)
    for path in files:
        _check_free(path, force)

    ca_key, ca_cert = _make_ca(pki.expires)
    server_key, server_cert = _make_server(ca_key, ca_cert, names, pki.expires)
    contents = (_cert_pem(ca_cert), _key_pem(ca_key), _cert_pem(server_cert), _key_pem(server_key))
    for path, data, mode in zip(files, contents, (CERT_MODE, KEY_MODE) * 2, strict=True):
        _write(path, data, mode, force)
    return pki


def _hostname() -> str:
    try:
        name = socket.gethostname()
    except OSError:
        return ""
    return name if _usable(name) else ""


def _usable(name: str) -> bool:
    """Whether ``name`` can go into a certificate: an IP address, or a host name in ASCII."""
    try:
        address = ipaddress.ip_address(name)
    except ValueError:
        return _HOST_NAME.fullmatch(name) is not None
    # A zone (fe80::1%eth0) is this host's business only; a certificate cannot carry one.
    return not (isinstance(address, ipaddress.IPv6Address) and address.scope_id)


def _exists_message(path: Path) -> str:
    return f"{path} exists already; pass --force to replace it and the other files of the set"


def _check_free(path: Path, force: bool) -> None:
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISREG(info.st_mode):
        raise FileExists(f"{path} is {what(info)}, not a file; it is not replaced, even with "
                         "--force: move it away")  # fmt: skip
    if not force:
        raise FileExists(_exists_message(path))


def _write(path: Path, data: bytes, mode: int, force: bool) -> None:
    """Write one file of the set. A link planted at ``path`` since ``_check_free`` is never
    followed: without ``force`` the exclusive create fails on it, with ``force`` the rename
    replaces the link itself."""
    if force:
        write_private(path, data, mode=mode)
        return
    try:
        fd = open_private(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
    except FileExistsError:
        raise FileExists(_exists_message(path)) from None
    with open(fd, "wb") as file:
        if mode != KEY_MODE:
            os.fchmod(fd, mode)  # open_private made it 0600; a certificate is for anyone
        file.write(data)


def _common_name(text: str) -> x509.Name:
    from cryptography import x509
    from cryptography.x509.oid import NameOID

    return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, text[:COMMON_NAME_LIMIT])])


def _builder(
    subject: x509.Name, issuer: x509.Name, key: ec.EllipticCurvePrivateKey, expires: datetime
) -> x509.CertificateBuilder:
    from cryptography import x509

    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(datetime.now(UTC) - BACKDATE)
        .not_valid_after(expires)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )


def _key_usage(*, digital_signature: bool = False, cert_sign: bool = False) -> x509.KeyUsage:
    from cryptography import x509

    return x509.KeyUsage(
        digital_signature=digital_signature,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=False,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def _make_ca(expires: datetime) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec

    # P-256 rather than Ed25519, which not every TLS stack accepts in a certificate.
    key = ec.generate_private_key(ec.SECP256R1())
    hostname = _hostname()
    name = _common_name(f"Colibri test CA ({hostname})" if hostname else "Colibri test CA")
    cert = (
        _builder(name, name, key, expires)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .sign(key, hashes.SHA256())
    )
    return key, cert


def _make_server(
    ca_key: ec.EllipticCurvePrivateKey,
    ca_cert: x509.Certificate,
    names: list[str],
    expires: datetime,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID

    key = ec.generate_private_key(ec.SECP256R1())
    ca_key_id = ca_cert.extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
    cert = (
        _builder(_common_name(names[0]), ca_cert.subject, key, expires)
        .add_extension(
            x509.SubjectAlternativeName([_general_name(n) for n in names]), critical=False
        )
        .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH]), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(digital_signature=True), critical=True)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ca_key_id),
            critical=False,
        )
        .sign(ca_key, hashes.SHA256())
    )
    return key, cert


def _general_name(name: str) -> x509.GeneralName:
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(name))
    except ValueError:
        return x509.DNSName(name)


def _cert_pem(cert: x509.Certificate) -> bytes:
    from cryptography.hazmat.primitives.serialization import Encoding

    return cert.public_bytes(Encoding.PEM)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
