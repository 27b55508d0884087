"""What a client says when it waits for the daemon in vain: what it waited for, not a cause it
cannot know (a certificate, when the daemon is only slow)."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from colibri.client import Client, Remote
from colibri.core.errors import ColibriError


@pytest.fixture
def silent() -> Iterator[str]:
    """The address of something listening that takes connections and never says a word."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    try:
        yield f"tcp://127.0.0.1:{listener.getsockname()[1]}"
    finally:
        listener.close()


def test_a_tls_handshake_that_never_comes_is_told_as_slow_not_as_a_certificate_problem(
    silent: str,
) -> None:
    """A listener that takes the connection and never answers the TLS handshake (a daemon
    whose loop is held up looks so): the client says the handshake was not done in time, and
    tries the next address, instead of blaming --tls-ca."""
    import asyncio

    from colibri.client import AsyncClient

    address = silent
    token = "colibri_0123456789ab_" + "x" * 43
    remote = Remote.parse(address, token=token)
    with pytest.raises(ColibriError) as caught:
        Client.remote(remote, timeout=0.5)
    assert caught.value.code == "no_daemon"
    assert caught.value.message == (
        f"no daemon answers at {address}: {address}: connected, "
        "but the TLS handshake was not done within 0.5s: the daemon or the network is slow "
        "(not a certificate problem); try again"
    )
    assert "--tls-ca" not in caught.value.message

    async def connect() -> ColibriError:
        try:
            await AsyncClient(remote).connect()
        except ColibriError as exc:
            return exc
        raise AssertionError("connected to a silent listener")

    error = asyncio.run(asyncio.wait_for(connect(), 60))
    assert error.code == "no_daemon" and "TLS handshake within 10s" in error.message
    assert "--tls-ca" not in error.message
