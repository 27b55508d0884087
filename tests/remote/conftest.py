"""A daemon listening on TLS over loopback, certificates made by ``colibri.certs``, and tokens."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from colibri.certs import Pki, make_pki
from colibri.client import Client, Remote
from tests.helpers import Daemon


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"), ["localhost", "127.0.0.1"], days=2)


class TlsDaemon(Daemon):
    """A daemon with a TLS listener on an ephemeral loopback port."""

    def __init__(
        self,
        root: Path,
        pki: Pki,
        *extra: str,
        server: dict[str, Any] | None = None,
        listen: str = "tcp://127.0.0.1:0",
    ) -> None:
        settings = {"handshake_timeout": "2s", "auth_failures": 20, **(server or {})}
        (root / "colibri.jsonc").write_text(
            json.dumps({"scheduler": {"tick": "1s", "agent_ttl": "5s"}, "server": settings})
        )
        super().__init__(
            root, "--listen", listen, "--tls-cert", str(pki.server_cert),
            "--tls-key", str(pki.server_key), *extra,
        )  # fmt: skip
        self.pki = pki
        self.address = ""

    def start(self, timeout: float = 15.0) -> None:
        super().start(timeout)
        self.address = self.call("status")["daemon"]["listen"][0]
        self.port = int(self.address.rsplit(":", 1)[1])

    def token(self, role: str = "operator", tenant: str = "default", **fields: Any) -> str:
        """A new token's text (made on the Unix socket, as its owner)."""
        return str(self.call("token-create", role=role, tenant=tenant, **fields)["secret"])

    def remote(self, token: str) -> Remote:
        return Remote.parse(self.address, token=token, ca=str(self.pki.ca_cert))

    def connect(self, token: str, timeout: float = 10.0) -> Client:
        return Client.remote(self.remote(token), timeout=timeout)

    def client_env(self, token: str) -> dict[str, str]:
        """What a client on another machine sets to reach this daemon."""
        return {
            "COLIBRI_CONNECT": self.address,
            "COLIBRI_TOKEN": token,
            "COLIBRI_TLS_CA": str(self.pki.ca_cert),
        }


@pytest.fixture
def tls_daemon(tmp_path: Path, pki: Pki) -> Iterator[TlsDaemon]:
    root = tmp_path / "board"
    root.mkdir()
    daemon = TlsDaemon(root, pki)
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()
