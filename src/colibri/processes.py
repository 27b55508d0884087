"""Whether a process runs, read from /proc (shared by the supervisor and the harness)."""

from __future__ import annotations

from pathlib import Path


def alive(pid: int) -> bool:
    """True while ``pid`` runs; a zombie counts as gone."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        # Gone before the open (FileNotFoundError) or between the open and the read
        # (ProcessLookupError): either way, not alive.
        return False
    return state != "Z"
