"""A connection the daemon refuses (busy) or closes after a request it cannot take
(line_too_long) reaches the caller as that error code: from ``Client.call``, from
``AsyncClient.call``, and from the CLI as one line. A session's own commands wait out a busy
daemon."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from colibri.client import AsyncClient, Client
from colibri.core.errors import ColibriError
from tests.helpers import Daemon, RawConnection


def write_server_settings(root: Path, **server: int) -> None:
    settings = {"scheduler": {"tick": "30s", "agent_ttl": "30s"}, "server": server}
    (root / "colibri.jsonc").write_text(json.dumps(settings))


def colibri(root: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "colibri", "--root", str(root), *args],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **(env or {})},
    )  # fmt: skip


def one_error_line(process: subprocess.Popen[str]) -> str:
    out, err = process.communicate(timeout=90)
    assert process.returncode == 1, (out, err)
    assert out == ""
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def small_daemon(root: Path) -> Iterator[Daemon]:
    """A daemon that serves two connections at once and takes request lines up to 1 KiB."""
    write_server_settings(root, max_connections=2, max_line=1024)
    daemon = Daemon(root)
    daemon.start()
    yield daemon
    daemon.stop()


class Full:
    """Both of the daemon's connection slots held by subscribed connections (which, unlike
    anonymous idle ones, a newcomer never evicts)."""

    def __init__(self, daemon: Daemon) -> None:
        self.held: list[RawConnection] = []
        deadline = time.monotonic() + 10
        while len(self.held) < 2:  # the start-up ping's connection may hold a slot a moment
            assert time.monotonic() < deadline, "could not take both slots"
            conn = RawConnection(daemon.socket)
            conn.send(b'{"cmd":"subscribe","id":1}\n')
            try:
                served = conn.reply().get("ok") is True
            except (AssertionError, ConnectionResetError):
                served = False
            if served:
                self.held.append(conn)
            else:
                conn.close()
                time.sleep(0.02)

    def release_one(self) -> None:
        self.held.pop().close()

    def release(self) -> None:
        while self.held:
            self.release_one()


@pytest.fixture
def full(small_daemon: Daemon) -> Iterator[Full]:
    slots = Full(small_daemon)
    yield slots
    slots.release()


def test_client_call_raises_the_busy_refusal(small_daemon: Daemon, full: Full) -> None:
    for pause in (0.0, 0.2, 0.0, 0.2, 0.0):  # before and after the daemon has closed it
        with Client(small_daemon.socket, timeout=10) as client:
            time.sleep(pause)
            with pytest.raises(ColibriError) as refused:
                client.call("ping")
        assert refused.value.code == "busy"
        assert "too many connections" in refused.value.message


def test_the_cli_says_busy_in_one_line_and_does_not_wait(small_daemon: Daemon, full: Full) -> None:
    assert "busy" in one_error_line(colibri(small_daemon.root, "status"))
    started = time.monotonic()
    line = one_error_line(colibri(small_daemon.root, "submit", "not from a session"))
    assert line.startswith("colibri: the daemon is busy: too many connections")
    assert time.monotonic() - started < 10  # refused at once, not retried
    full.release()
    assert small_daemon.call("list")["tasks"] == []


def test_the_cli_with_json_says_busy_as_its_code(small_daemon: Daemon, full: Full) -> None:
    process = colibri(small_daemon.root, "status", "--json")
    out, err = process.communicate(timeout=90)
    assert process.returncode == 1 and err == ""
    assert json.loads(out) == {
        "ok": False,
        "error": {"code": "busy", "message": "the daemon is busy: too many connections; try "
                  "again later"},
    }  # fmt: skip


@pytest.mark.parametrize("size", [2_000, 4_000_000])  # sent whole; cut off mid-send (EPIPE)
def test_client_call_raises_line_too_long(small_daemon: Daemon, size: int) -> None:
    with Client(small_daemon.socket, timeout=10) as client:
        with pytest.raises(ColibriError) as refused:
            client.call("submit", text="x" * size)
    assert refused.value.code == "line_too_long"
    assert "server.max_line" in refused.value.message
    assert small_daemon.call("list")["tasks"] == []


def test_async_client_calls_fail_with_the_refusal(small_daemon: Daemon) -> None:
    async def busy() -> ColibriError:
        client = await AsyncClient(small_daemon.socket).connect()
        try:
            with pytest.raises(ColibriError) as refused:
                await client.call("ping")
            return refused.value
        finally:
            await client.close()

    async def too_long(size: int) -> list[BaseException | dict[str, object]]:
        client = await AsyncClient(small_daemon.socket).connect()
        try:
            # The daemon reads no further than the long line: the ping after it is never
            # answered, and fails with the same error.
            return await asyncio.gather(
                client.call("submit", text="x" * size), client.call("ping"),
                return_exceptions=True,
            )  # fmt: skip
        finally:
            await client.close()

    async def too_long_then_slow() -> list[BaseException | dict[str, object]]:
        client = await AsyncClient(small_daemon.socket).connect()
        try:
            first = asyncio.ensure_future(client.call("submit", text="x" * 2_000))
            await asyncio.sleep(0)  # its line is written
            # The loop stands still while the daemon refuses the line and closes, so the next
            # write meets the closed connection (EPIPE) before the refusal has been read.
            time.sleep(0.5)
            second = asyncio.ensure_future(client.call("ping"))
            return await asyncio.gather(first, second, return_exceptions=True)
        finally:
            await client.close()

    for size in (2_000, 4_000_000):
        results = asyncio.run(too_long(size))
        assert [getattr(r, "code", r) for r in results] == ["line_too_long", "line_too_long"]
    results = asyncio.run(too_long_then_slow())
    assert [getattr(r, "code", r) for r in results] == ["line_too_long", "line_too_long"]
    slots = Full(small_daemon)
    try:
        assert asyncio.run(busy()).code == "busy"
    finally:
        slots.release()


def test_a_sessions_report_waits_out_a_busy_daemon(small_daemon: Daemon, full: Full) -> None:
    started = time.monotonic()
    report = colibri(
        small_daemon.root, "out", "--task", "no-such-task", "--epoch", "1", "--claim", "c", "done"
    )
    time.sleep(0.5)
    assert report.poll() is None  # still trying
    full.release_one()
    line = one_error_line(report)
    # It got through: the daemon itself answered (there is no such task).
    assert "busy" not in line
    assert "no task with id no-such-task" in line
    assert time.monotonic() - started >= 0.5


def test_a_submit_from_inside_a_session_waits_out_a_busy_daemon(
    small_daemon: Daemon, full: Full
) -> None:
    session = {"COLIBRI_TASK_ID": "t-1", "COLIBRI_EPOCH": "1", "COLIBRI_CLAIM": "c"}
    handing_on = colibri(small_daemon.root, "submit", "a child", env=session)
    time.sleep(0.5)
    assert handing_on.poll() is None
    full.release_one()
    # It got through: the daemon itself answered (the session's task is not on this board).
    assert "parent task t-1 does not exist" in one_error_line(handing_on)
    assert small_daemon.call("list")["tasks"] == []


def test_an_os_error_is_one_line(tmp_path: Path) -> None:
    a_file = tmp_path / "file"
    a_file.write_text("")
    line = one_error_line(colibri(tmp_path, "init", str(a_file / "root")))
    assert line == f"colibri: cannot create a Colibri root at {a_file / 'root'}: Not a directory"


def test_a_hand_off_with_wait_sent_again_after_a_restart_makes_one_child(root: Path) -> None:
    """`colibri submit --wait` inside a session retries through a daemon restart: its wait is
    sent again, and its submit (with a key of its own) never makes a second child."""
    from tests.helpers import FakeAgent, wait_until, write_config

    write_config(root)
    daemon = Daemon(root)
    daemon.start()
    try:
        agent = FakeAgent(daemon, "a1")
        parent = daemon.call("submit", text="the session's task")["task"]["id"]
        assign = agent.next_assign()
        session = {"COLIBRI_TASK_ID": parent, "COLIBRI_EPOCH": str(assign["epoch"]),
                   "COLIBRI_CLAIM": assign["claim"]}  # fmt: skip
        cli = colibri(root, "submit", "--wait", "the child, handed off", env=session)

        def children() -> list[str]:
            return [t["id"] for t in daemon.call("list", parent=parent)["tasks"]]

        wait_until(lambda: len(children()) == 1)
        daemon.restart()  # the wait's connection is closed under it
        time.sleep(2)
        assert cli.poll() is None and len(children()) == 1
        daemon.call("cancel", task=children()[0])
        out, err = cli.communicate(timeout=60)
        assert cli.returncode == 1 and "cancelled" in err, err
        assert len(children()) == 1
        agent.close()
    finally:
        daemon.stop()
