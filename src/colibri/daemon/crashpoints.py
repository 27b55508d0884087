"""Named crash points, for the crash tests: the daemon kills itself at a chosen instant.

``COLIBRI_CRASHPOINT=name:n`` (read once by ``colibri.config.load_config``, armed by ``serve``)
makes the daemon SIGKILL itself on the n-th hit of the named point — no cleanup, no flush, as a
power cut or an OOM kill would. Unset, ``hit`` is one comparison with ``None``.

The points, in the order a request meets them (docs/RELIABILITY.md says what each must leave):

- ``before-commit`` (K1): a request was handled into the open transaction, not committed.
- ``after-commit`` (K2): a batch that changed something committed; no reply written yet.
- ``before-mirror`` (K3): committed and replies written; ``ledger.jsonl`` not yet appended.
- ``mid-mirror-write`` (K4): half of the bytes of a ``ledger.jsonl`` append are written.
- ``mid-rotate``: ``ledger.jsonl`` was renamed ``ledger.jsonl.1``; no new ``ledger.jsonl`` yet.
- ``before-assign`` (K5): a claim committed; its ``assign`` not yet written to the agent.
  (K6, between a claim and its ``running`` commit, does not exist: they are one transaction.)
- ``mid-cancel`` (K7): a cancel cascade cancelled the task and a descendant, not the rest.
- ``mid-fire`` (K8): a schedule fire inserted its task; the schedule's next fire not updated.
"""

from __future__ import annotations

import os
import signal

from colibri.core.errors import ConfigError

POINTS = (
    "before-commit",
    "after-commit",
    "before-mirror",
    "mid-mirror-write",
    "mid-rotate",
    "before-assign",
    "mid-cancel",
    "mid-fire",
)

#: The armed point, or None (the normal case: every ``hit`` returns at once).
armed: str | None = None
_at = 0
_hits = 0


def arm(spec: str | None) -> None:
    """Arm ``name:n`` (``n`` defaults to 1); ``None`` or empty disarms."""
    global armed, _at, _hits
    armed, _at, _hits = None, 0, 0
    if not spec:
        return
    name, _, count = spec.partition(":")
    if name not in POINTS:
        raise ConfigError(
            f"COLIBRI_CRASHPOINT: unknown crash point {name!r}; known: {', '.join(POINTS)}"
        )
    try:
        at = int(count or "1")
    except ValueError:
        at = 0
    if at < 1:
        raise ConfigError(f"COLIBRI_CRASHPOINT: {spec!r}: the count after ':' must be 1 or more")
    armed, _at = name, at


def hit(name: str) -> None:
    """Count a pass through ``name``; on the armed n-th pass, die at once."""
    if armed is not None and due(name):
        crash()


def due(name: str) -> bool:
    """Count a pass through ``name``; True on the armed n-th one (the caller then crashes)."""
    global _hits
    if armed != name:
        return False
    _hits += 1
    return _hits == _at


def torn(data: bytes | bytearray) -> bytes:
    """About the first half of ``data``, ending inside a line (never just after a newline)."""
    half = len(data) // 2
    if data[half - 1 : half] == b"\n":
        half -= 1
    return bytes(data[:half])


def crash() -> None:
    """SIGKILL ourselves, after one line on stderr saying where."""
    try:
        os.write(2, f"colibri: crash point {armed}:{_at} hit; SIGKILL\n".encode())
    except OSError:
        pass
    os.kill(os.getpid(), signal.SIGKILL)
