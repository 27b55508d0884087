"""What ties a harness process to its root: the locks it holds while it runs, and its end once
no daemon has held the root for long."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from pathlib import Path

from colibri import host
from colibri.agent.spec import AgentSpec
from colibri.client import Remote, daemon_pid
from colibri.core.absence import Absence
from colibri.core.errors import LockHeld
from colibri.layout import RootLayout
from colibri.locks import hold_lock

# What it logs is the harness's, under the harness's name.
log = logging.getLogger("colibri.agent.harness")

#: How often a harness a daemon started looks whether a daemon holds its root (seconds; a
#: quarter of ``orphan_after`` if that is less).
ORPHAN_CHECK = 5.0


def hold_harness_locks(spec: AgentSpec, daemon: Path | Remote, root: Path) -> None:
    """Take the locks a harness holds until its process ends. A workspace's harness
    (``spec.exclusive``) takes the workspace's harness lock and makes its folder; one on another
    machine takes its agent's lock in its state folder (the relay's socket and its sessions'
    files are its alone)."""
    if isinstance(daemon, Remote):
        # The token is in this process's environment and memory: not for its sessions' eyes.
        host.hide_from_own_user()
        try:
            hold_lock(RootLayout(root).harness_lock(spec.name))
        except LockHeld as held:
            raise LockHeld(
                held.holder, f"agent {spec.name}: another harness (pid {held.holder}) runs it "
                f"from {root}"
            ) from None  # fmt: skip
    if spec.exclusive:
        assert spec.workspace is not None
        try:
            hold_lock(RootLayout(root).harness_lock(spec.workspace))
        except LockHeld as held:
            serving = f"another harness (pid {held.holder}) already serves it"
            raise LockHeld(held.holder, f"workspace {spec.workspace}: {serving}") from None
        if spec.cwd is not None:
            spec.cwd.mkdir(parents=True, exist_ok=True)


async def stop_once_orphaned(root: Path, after: float, stopping: asyncio.Event) -> None:
    """A harness a daemon started stops, its sessions with it, once no daemon has held its
    root for ``after`` seconds without a break: its daemon is gone for good, and nobody
    would ever stop it. A daemon started again meanwhile (after a crash, say) or standing
    by for the board holds the root, and adopts it: the wait starts over. The root's pid
    file is read, never its lock taken (``daemon_pid``)."""
    absence = Absence(after)
    while not absence.gone(daemon_pid(root) is not None, time.monotonic()):
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(after / 4, ORPHAN_CHECK)):
                await stopping.wait()
        if stopping.is_set():
            return  # stopped otherwise: its sessions are being stopped
    log.warning(
        "no daemon has run for this root for %gs: stopping the sessions and exiting",
        after,
        extra={"event": "orphaned", "orphan_after": after},
    )
    stopping.set()


async def first_of(timeout: float, *events: asyncio.Event) -> None:
    """Wait until one of ``events`` is set, or ``timeout`` seconds have passed."""
    waits = [asyncio.ensure_future(event.wait()) for event in events]
    try:
        await asyncio.wait(waits, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
