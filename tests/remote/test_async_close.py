"""An ``AsyncClient`` over TLS lets its socket go when it closes, however the close ends: a
socket left open is found by the garbage collector later, in whatever code runs then."""

from __future__ import annotations

import asyncio
import gc
import warnings

import pytest

from colibri.client import AsyncClient
from tests.remote.conftest import TlsDaemon


def _left_open() -> list[str]:
    """What the garbage collector finds still open now (as ResourceWarnings)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gc.collect()
    return [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]


def test_a_close_cancelled_while_it_waits_for_the_daemon_still_closes_the_socket(
    tls_daemon: TlsDaemon,
) -> None:
    """The close of a TLS connection waits for the daemon's answer to close_notify; a close
    cancelled meanwhile (an app shutting its loop down), while the daemon is slow to answer
    (here: stopped), cuts the socket rather than leave it to asyncio's own 30-second timer,
    which a closed loop never runs."""
    import signal

    remote = tls_daemon.remote(tls_daemon.token("operator"))
    process = tls_daemon.process
    assert process is not None

    async def main() -> None:
        client = await AsyncClient(remote).connect()
        assert (await client.call("ping"))["pong"]
        process.send_signal(signal.SIGSTOP)
        try:
            closing = asyncio.create_task(client.close())
            await asyncio.sleep(0.2)  # it has sent close_notify and waits for the answer
            closing.cancel()
            with pytest.raises(asyncio.CancelledError):
                await closing
        finally:
            process.send_signal(signal.SIGCONT)

    _left_open()  # whatever earlier code left is not this test's
    asyncio.run(main())
    assert _left_open() == []


def test_a_close_whose_answer_never_comes_ends_within_close_wait(tls_daemon: TlsDaemon) -> None:
    """A daemon stopped (SIGSTOP) while the client closes never answers: the close gives up
    after ``CLOSE_WAIT`` and cuts the socket."""
    import signal
    import time

    from colibri.client import CLOSE_WAIT

    remote = tls_daemon.remote(tls_daemon.token("operator"))
    took = 0.0

    async def main() -> None:
        nonlocal took
        client = await AsyncClient(remote).connect()
        assert (await client.call("ping"))["pong"]
        assert tls_daemon.process is not None
        tls_daemon.process.send_signal(signal.SIGSTOP)
        try:
            started = time.monotonic()
            await client.close()
            took = time.monotonic() - started
        finally:
            tls_daemon.process.send_signal(signal.SIGCONT)

    _left_open()
    asyncio.run(main())
    assert CLOSE_WAIT - 0.1 <= took < CLOSE_WAIT + 3
    assert _left_open() == []
