"""Shared pieces of the workspace tests: configs, the CLI as a subprocess, the process table."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tests.helpers import Daemon

PY = sys.executable

#: A harmless session: prints its task text.
ECHO = [PY, "-c", "import sys; print(sys.stdin.read())"]


def gated(root: Path) -> list[str]:
    """A session that writes ROOT/started-TASK (its pid), waits for ROOT/go-TASK, then prints.

    The root is on its command line, so a scan of the process table finds it.
    """
    return [
        PY,
        "-c",
        "import os, sys, time\n"
        "root, task = sys.argv[1], os.environ['COLIBRI_TASK_ID']\n"
        # Written whole, then renamed: a reader never sees the file empty.
        "partial = os.path.join(root, 'starting-' + task)\n"
        "open(partial, 'w').write(str(os.getpid()))\n"
        "os.replace(partial, os.path.join(root, 'started-' + task))\n"
        "while not os.path.exists(os.path.join(root, 'go-' + task)):\n"
        "    time.sleep(0.02)\n"
        "print('released', task)\n",
        str(root),
    ]


def write_workspaces(
    root: Path,
    workspaces: dict[str, Any],
    *,
    templates: dict[str, Any] | None = None,
    supervisor: dict[str, Any] | None = None,
    **scheduler: Any,
) -> None:
    """colibri.jsonc with short scheduler settings and the given workspaces."""
    config: dict[str, Any] = {
        "scheduler": {"tick": "30s", "agent_ttl": "5s", **scheduler},
        "workspaces": workspaces,
    }
    if templates is not None:
        config["templates"] = templates
    if supervisor is not None:
        config["supervisor"] = supervisor
    (root / "colibri.jsonc").write_text(json.dumps(config, indent=2))


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, process group) of ``pid``, or None when it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return None
    return fields[0], int(fields[2])


def alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie counts as gone."""
    stat = _stat(pid)
    return stat is not None and stat[0] != "Z"


def pgid_of(pid: int) -> int | None:
    stat = _stat(pid)
    return stat[1] if stat is not None else None


def processes() -> Iterator[tuple[int, list[str]]]:
    """Every live (not zombie) process and its argv."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        pid = int(entry.name)
        try:
            raw = (entry / "cmdline").read_bytes()
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        if raw and alive(pid):
            yield pid, [arg.decode(errors="replace") for arg in raw.split(b"\0")[:-1]]


def mentioning(root: Path) -> list[int]:
    """Live processes whose command line names ``root``: daemon, harnesses, our sessions."""
    return [pid for pid, argv in processes() if any(str(root) in arg for arg in argv)]


def harnesses(root: Path) -> dict[str, list[int]]:
    """Live ``colibri agent --workspace NAME`` processes of ``root``, per workspace."""
    found: dict[str, list[int]] = {}
    for pid, argv in processes():
        if "agent" in argv and "--workspace" in argv and str(root) in argv:
            workspace = argv[argv.index("--workspace") + 1]
            found.setdefault(workspace, []).append(pid)
    return found


def one_each(root: Path, workspaces: list[str]) -> dict[str, int] | None:
    """The harness pid per workspace once there is exactly one per workspace, else None."""
    found = harnesses(root)
    if sorted(found) != sorted(workspaces) or any(len(p) != 1 for p in found.values()):
        return None
    return {name: pids[0] for name, pids in found.items()}


def sweep(root: Path, daemon: Daemon | None = None) -> None:
    """Stop whatever of ``root`` still runs: the daemon (SIGTERM), then every process group
    naming the root (SIGKILL). Only processes this test started can name its fresh root."""
    if daemon is not None and daemon.process is not None and daemon.process.poll() is None:
        daemon.process.send_signal(signal.SIGTERM)
        try:
            daemon.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            daemon.process.kill()
            daemon.process.wait(timeout=5)
    own = os.getpgrp()
    for pid in mentioning(root):
        pgid = pgid_of(pid)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if pgid is not None and pgid != own:
                os.killpg(pgid, signal.SIGKILL)
            else:
                os.kill(pid, signal.SIGKILL)
