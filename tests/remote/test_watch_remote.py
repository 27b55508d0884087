"""Watching a daemon on another machine: ``colibri attach`` and the TUI over TLS with a token."""

from __future__ import annotations

import asyncio
import json
import os
import select
import subprocess
import sys
from typing import Any

from colibri.tui.app import ColibriApp
from tests.helpers import wait_until
from tests.remote.conftest import TlsDaemon
from tests.tui.test_tui import until


def test_attach_over_tls_follows_and_ends_with_the_daemon(tls_daemon: TlsDaemon) -> None:
    """With ``--follow-for 0`` it does not look for another daemon of the board: the one
    stopping ends it."""
    token = tls_daemon.token("operator")
    before = tls_daemon.submit("before attach", capabilities=["nobody-has-this"])
    attach = subprocess.Popen(
        [sys.executable, "-m", "colibri", "attach", "--json", "--since", "0"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **tls_daemon.client_env(token), "COLIBRI_FOLLOW_FOR": "0"},
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


def test_attach_over_tls_from_now_on_shows_the_new_rows(tls_daemon: TlsDaemon) -> None:
    """Without ``--since`` only what happens from then on is shown (before, the position the
    daemon gave it was past every row, and no row was ever shown)."""
    token = tls_daemon.token("operator")
    tls_daemon.submit("before attach", capabilities=["nobody-has-this"])
    attach = subprocess.Popen(
        [sys.executable, "-m", "colibri", "attach", "--json"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **tls_daemon.client_env(token)},
    )  # fmt: skip
    try:
        assert attach.stderr is not None and attach.stdout is not None
        assert attach.stderr.readline().startswith("attached to the daemon")
        # Its follow is asked for just after it says so: a task submitted before that is
        # rightly not shown, so tasks are submitted until one is.
        later: list[dict[str, Any]] = []
        while not select.select([attach.stdout], [], [], 0.5)[0]:
            assert len(later) < 40, "no row shown"
            later.append(tls_daemon.submit("after attach", capabilities=["nobody-has-this"]))
        event = json.loads(attach.stdout.readline())
        assert event["entry"]["task"] in [t["id"] for t in later]
        assert event["entry"]["to_state"] == "pending"
    finally:
        attach.kill()
        attach.communicate(timeout=30)


def test_attach_over_tls_gives_up_when_no_daemon_answers_for_its_follow_for(
    tls_daemon: TlsDaemon,
) -> None:
    """Its daemon gone and none answering at the addresses it was given, an attach looks for
    one for ``--follow-for``, then ends in one line saying so (exit 1)."""
    token = tls_daemon.token("operator")
    attach = subprocess.Popen(
        [sys.executable, "-m", "colibri", "--follow-for", "1s", "attach"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **tls_daemon.client_env(token)},
    )  # fmt: skip
    try:
        assert attach.stdout is not None
        assert attach.stdout.readline().startswith("attached to the daemon")
    finally:
        tls_daemon.stop()
    _, err = attach.communicate(timeout=30)
    assert attach.returncode == 1, err
    (line,) = err.strip().splitlines()
    assert line.startswith(f"colibri: no daemon answers at {tls_daemon.address}: none answered "
                           f"within 1s after losing the daemon at {tls_daemon.address} "
                           "(the daemon closed the connection); last: "), line  # fmt: skip


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
