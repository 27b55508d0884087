"""Watching a daemon on another machine: ``colibri attach`` and the TUI over TLS with a token."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys

from colibri.tui.app import ColibriApp
from tests.helpers import wait_until
from tests.remote.conftest import TlsDaemon
from tests.tui.test_tui import until


def test_attach_over_tls_follows_and_ends_with_the_daemon(tls_daemon: TlsDaemon) -> None:
    token = tls_daemon.token("operator")
    before = tls_daemon.submit("before attach", capabilities=["nobody-has-this"])
    attach = subprocess.Popen(
        [sys.executable, "-m", "colibri", "attach", "--json", "--since", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **tls_daemon.client_env(token)},
    )  # fmt: skip
    try:
        assert attach.stderr is not None
        assert attach.stderr.readline().startswith("attached to the daemon")
        later = tls_daemon.submit("after attach", capabilities=["nobody-has-this"])
        tls_daemon.call("cancel", task=later["id"])
        wait_until(lambda: tls_daemon.call("get", task=later["id"])["task"]["state"] == "closed")
    finally:
        tls_daemon.stop()
    out, err = attach.communicate(timeout=30)
    assert attach.returncode == 0, out + err
    assert before["id"] in out and later["id"] in out
    assert err.strip().splitlines()[-1] == "the daemon stopped; detached"


def test_the_tui_over_tls_follows_the_ledger(tls_daemon: TlsDaemon) -> None:
    """A token may not subscribe: the TUI follows the ledger and reads each changed task."""
    token = tls_daemon.token("operator")
    task = tls_daemon.submit("seen from afar", capabilities=["nobody-has-this"])

    async def main() -> None:
        app = ColibriApp(tls_daemon.remote(token))
        async with app.run_test(size=(120, 30)) as pilot:
            await until(pilot, lambda: task["id"] in app.rows)
            later = tls_daemon.submit("submitted meanwhile", capabilities=["nobody-has-this"])
            await until(pilot, lambda: later["id"] in app.rows)
            app.set_filter("meanwhile")
            await pilot.press("c")
            await pilot.press("y")
            await until(pilot, lambda: app.board.tasks[later["id"]].outcome == "cancelled")
            assert tls_daemon.call("get", task=later["id"])["task"]["outcome"] == "cancelled"
            # Pausing dispatch is the owner's: the TUI says so and goes on.
            await pilot.press("p")
            await pilot.pause(0.5)
            assert not tls_daemon.call("status")["paused"]
            assert app.client is not None

    asyncio.run(main())
