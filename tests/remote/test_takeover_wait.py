"""What a client over TCP says while it waits out a takeover: the tenant a refusal named, even
when the address it was sent to, or the last one tried, is a daemon that is gone."""

from __future__ import annotations

import contextlib
import json
import socket
import threading
from collections.abc import Iterator

import msgspec
import pytest

from colibri.client import Client, Remote
from colibri.core.errors import ColibriError, NotOwner
from colibri.core.replies import refusal
from tests.helpers import free_port


@contextlib.contextmanager
def refusing(gone: int) -> Iterator[int]:
    """A daemon on a port of its own that answers every first request ``not_owner``: tenant
    acme is served at ``gone``, where nobody listens."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    said = NotOwner("tenant acme is another daemon's", address=f"tcp://127.0.0.1:{gone}",
                    tenant="acme", ttl=2.0)  # fmt: skip

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                line = conn.makefile("rb").readline()
                request_id = json.loads(line).get("id") if line else None
                with contextlib.suppress(OSError):
                    conn.sendall(msgspec.json.encode(refusal(request_id, said)) + b"\n")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield int(listener.getsockname()[1])
    finally:
        with contextlib.suppress(OSError):
            listener.shutdown(socket.SHUT_RDWR)  # wakes the accept
        listener.close()
        thread.join(timeout=10)


@pytest.mark.parametrize("first", ["refusing", "gone"])
def test_the_wait_names_the_tenant_a_refusal_named_whichever_address_fails_last(
    first: str,
) -> None:
    gone = free_port()  # held, never listening: connecting there is refused
    with refusing(gone) as port:
        order = [port, gone] if first == "refusing" else [gone, port]
        remote = Remote.parse(
            ",".join(f"tcp://127.0.0.1:{p}" for p in order), token="x", insecure_loopback=True
        )
        said: list[str] = []
        with pytest.raises(ColibriError):
            Client.remote(remote, patience=0.2, on_wait=said.append)
    assert said == ["waiting for a daemon to take over tenant 'acme' (up to 0.2 s)"]


def test_with_no_daemon_answering_the_wait_is_for_the_board() -> None:
    """No address answers and no refusal named a tenant: the client cannot know whose takeover
    it waits for, and says the board's (what the first submit after a kill may say when the
    other daemon is busy taking the tenant over: test_clients_through_a_takeover.py)."""
    remote = Remote.parse(
        f"tcp://127.0.0.1:{free_port()},tcp://127.0.0.1:{free_port()}", token="x",
        insecure_loopback=True,
    )  # fmt: skip
    said: list[str] = []
    with pytest.raises(ColibriError):
        Client.remote(remote, patience=0.2, on_wait=said.append)
    assert said == ["waiting for a daemon to take over the board (up to 0.2 s)"]
