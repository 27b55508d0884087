"""The sessions a killed harness left behind, found and stopped.

A harness notes each session's process group in a marker, ``.colibri/sessions/AGENT.PGID.pgid``
(its leader's pid and start time), and every session inherits ``COLIBRI_HARNESS`` (the
harness's pid and start time). Once a harness is killed outright nobody else will stop what
its sessions run, so whoever knows it is gone does: the harness that replaces it
(``agent.reaping``), and the daemon that had to SIGKILL it at a clean stop
(``daemon.supervisor``).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
from pathlib import Path

from colibri.core.errors import RootError
from colibri.host import alive, environ_of, processes_with, start_time
from colibri.layout import RootLayout
from colibri.privatefiles import open_private, private_dir, write_private

log = logging.getLogger(__name__)


def sessions_dir(root: Path) -> Path:
    """``.colibri/sessions``: task files and markers (made private if it is not yet)."""
    return private_dir(RootLayout(root).sessions)


def process_name(pid: int) -> str:
    """``pid:start time``: one process, even once its pid is reused."""
    return f"{pid}:{start_time(pid)}"


def mark_group(root: Path, agent: str, pgid: int) -> None:
    """Note a session's process group: its leader's pid and start time, which together name
    that one process."""
    sessions_dir(root)
    write_private(
        RootLayout(root).group_marker(agent, pgid), f"{pgid} {start_time(pgid)}\n".encode()
    )


def unmark_group(root: Path, agent: str, pgid: int) -> None:
    RootLayout(root).group_marker(agent, pgid).unlink(missing_ok=True)


def stop_leftover_sessions(root: Path, agent: str) -> None:
    """Kill the sessions of ``agent``'s harness, which was killed (their tasks are already
    lost, or will be, with their agent): the process groups its markers name — only where
    the group's leader is still the process the marker was written for (a pid is reused; a
    marker may be planted) — and, found by their environment, whatever its sessions left
    running outside those groups, unless their harness is alive (one started by hand under
    the same name)."""
    try:
        folder = sessions_dir(root)
    except RootError as exc:  # each session will fail, saying so; the caller carries on
        log.error("cannot look for leftover sessions: %s", exc, extra={"event": "unsafe"})
        return
    for marker in folder.glob(f"{agent}.*.pgid"):
        name = marker.name.removeprefix(f"{agent}.").removesuffix(".pgid")
        pgid = int(name) if name.isdigit() else 0
        try:
            fd = open_private(marker, os.O_RDONLY)
            with os.fdopen(fd, "rb") as handle:
                written = handle.read(64).split()
        except (OSError, RootError):
            written = []
        started = start_time(pgid) if pgid > 1 else None
        if started is not None and written == [str(pgid).encode(), str(started).encode()]:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pgid, signal.SIGKILL)
                log.warning(
                    "killed a session left by a harness that was killed",
                    extra={"event": "leftover_killed", "agent": agent, "pgid": pgid},
                )
        with contextlib.suppress(FileNotFoundError, IsADirectoryError):
            marker.unlink()
    for pid in processes_with(COLIBRI_ROOT=str(root), COLIBRI_AGENT=agent):
        harness = environ_of(pid, "COLIBRI_HARNESS") or ""
        owner = harness.partition(":")[0]
        if owner.isdigit() and harness == process_name(int(owner)) and alive(int(owner)):
            continue  # its harness is alive (a zombie's pid and start time still read so)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
            log.warning(
                "killed a process a killed harness's session left",
                extra={"event": "leftover_killed", "agent": agent, "pid": pid},
            )
