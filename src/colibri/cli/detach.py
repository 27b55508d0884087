"""``colibri run --detach``: the daemon started in a session of its own, and its word on how
its start went, said on a pipe of its own (``Started``, ``--started-fd``) and read by the
starter, which returns once that daemon serves (or stands by) and answers with its own pid."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from subprocess import Popen

    from colibri.core.errors import ColibriError


class Started:
    """The pipe ``run --detach`` gives its daemon (``--started-fd``): one JSON line says how
    its start went — ``{"state": "serving"}``, ``{"state": "standby"}`` or ``{"state":
    "failed", "error": {…}}`` — and the pipe is closed. The starter reads this daemon's own
    word, never the log another daemon of the root writes to as well."""

    def __init__(self, fd: int | None) -> None:
        self.fd = fd

    def say(self, state: str, **fields: object) -> None:
        if self.fd is None:
            return
        import msgspec

        try:
            os.write(self.fd, msgspec.json.encode({"state": state, **fields}) + b"\n")
        except OSError:
            pass  # the starter is gone (interrupted): nobody to tell
        self.close()

    def failed(self, error: ColibriError) -> None:
        self.say("failed", error=error.to_wire())

    def close(self) -> None:
        if self.fd is not None:
            fd, self.fd = self.fd, None
            with contextlib.suppress(OSError):  # not a pipe given to it (run by hand)
                os.close(fd)


#: How long ``run --detach`` waits for the daemon to serve, and ``stop`` for it to be gone.
DETACH_PATIENCE = 60.0


def option_again(name: str, value: object) -> list[str]:
    """A ``run`` option given again, for the detached daemon's own command line."""
    option = "--" + name.replace("_", "-")
    if name in ("detach", "started_fd") or value is None or value is False or value == ():
        return []
    if value is True:
        return [option]
    if isinstance(value, tuple):
        return [part for item in value for part in (option, str(item))]
    return [option, str(value)]


def start_detached(root: Path, arguments: list[str]) -> None:
    """Start ``colibri run`` in a session of its own, its output in the root's daemon log,
    and return once it says it serves and answers with its own pid; or say, in one line, why
    it stopped, in its own words (``Started``): another ``run --detach`` of the root may be
    starting its daemon at the same moment, and what the root's socket or log says may be
    that one's."""
    import subprocess
    import sys

    from colibri.client import daemon_pid
    from colibri.core.errors import DaemonNotRunning, LockHeld, from_wire
    from colibri.layout import RootLayout
    from colibri.privatefiles import open_private

    layout = RootLayout(root)
    running = daemon_pid(root)
    if running is not None:
        raise LockHeld(
            str(running), f"another daemon (pid {running}) is already running for {root}"
        )
    log = open_private(layout.daemon_log, os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    said, told = os.pipe()
    try:
        daemon = subprocess.Popen(
            [sys.executable, "-m", "colibri", "--root", str(root), "run", *arguments,
             "--started-fd", str(told)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True,
            pass_fds=(told,),
        )  # fmt: skip
    finally:
        os.close(log)
        os.close(told)
    try:
        word = read_word(said, DETACH_PATIENCE)
    finally:
        os.close(said)
    if word is None:
        raise DaemonNotRunning.at(
            str(root),
            f"the daemon (pid {daemon.pid}) did not answer within {DETACH_PATIENCE:.0f}s; "
            f"see {layout.daemon_log}",
        )
    state = word.get("state")
    if state == "failed":
        error = from_wire(word.get("error"))
        daemon.wait()
        if isinstance(error, LockHeld):
            raise error  # another daemon serves the root: said as when one ran before
        raise DaemonNotRunning.at(str(root), f"it stopped as it started: {error.message}")
    if state not in ("serving", "standby"):
        code = daemon.wait()
        raise DaemonNotRunning.at(
            str(root), f"it stopped as it started (exit code {code}); see {layout.daemon_log}"
        )
    if state == "serving":
        check_serving(root, daemon, layout.daemon_log)
        click.echo(
            f"daemon pid {daemon.pid} serves {root} (log: {layout.daemon_log}; stop it with: "
            "colibri stop)"
        )
    else:
        click.echo(
            f"daemon pid {daemon.pid} stands by for {root}: another daemon holds the board, "
            f"and it takes over when that one's lease expires (log: {layout.daemon_log}; stop "
            "it with: colibri stop)"
        )


def read_word(fd: int, patience: float) -> dict[str, Any] | None:
    """The one line a starting daemon says on its pipe (``Started``), as a dict: ``{}`` if it
    closed the pipe without a word (it exited), None if it said nothing within ``patience``."""
    import select
    import time

    import msgspec

    data = b""
    give_up = time.monotonic() + patience
    while b"\n" not in data:
        left = give_up - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    try:
        word = msgspec.json.decode(data.partition(b"\n")[0])
    except msgspec.DecodeError:
        return {}
    return word if isinstance(word, dict) else {}


def check_serving(root: Path, daemon: Popen[bytes], log: Path) -> None:
    """The root's socket answers, and with the pid of ``daemon``: the daemon just started is
    the one that serves."""
    import subprocess

    from colibri.client import Client
    from colibri.core import protocol as p
    from colibri.core.errors import ColibriError, DaemonNotRunning

    try:
        with Client.for_root(root, timeout=10.0) as client:
            answering = client.request(p.Status()).daemon.get("pid")
    except ColibriError:
        try:  # its connection closed as it exited, or the error is for it to say
            code = daemon.wait(timeout=5.0)
        except subprocess.TimeoutExpired:
            raise
        raise DaemonNotRunning.at(
            str(root), f"it stopped just after it started (exit code {code}); see {log}"
        ) from None
    if answering != daemon.pid:
        raise DaemonNotRunning.at(
            str(root), f"the daemon started (pid {daemon.pid}) said it serves, but pid "
            f"{answering} answers",
        )  # fmt: skip
