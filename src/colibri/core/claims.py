"""The secret of a claim: what proves that a report comes from the session doing the work.

Each claim of a task (its ``epoch``) has a secret derived from the board's key, given to the
agent in the ``assign`` and by its harness to the session (``COLIBRI_CLAIM``, and the task
file's header). A report the session sends itself (``colibri out``, ``fail``, ``ask``,
``ready``), a hand-off it makes, and a harness that registers again with the sessions it still
runs, each show it. Derived, not stored: nothing per claim is written, and a daemon restarted
on the same board gives the same secrets.
"""

from __future__ import annotations

import hashlib
import hmac

#: Hex digits of a secret: 128 bits.
LENGTH = 32


def claim_secret(key: bytes, task_id: str, epoch: int) -> str:
    # Keyed BLAKE2b is a MAC by design (no HMAC construction needed), and a fifth of the
    # cost of HMAC-SHA256 on the dispatch path, where every claim gets one.
    message = f"{task_id}:{epoch}".encode()
    return hashlib.blake2b(message, key=key, digest_size=LENGTH // 2).hexdigest()


def is_claim(key: bytes, task_id: str, epoch: int, shown: str | None) -> bool:
    """Whether ``shown`` is the secret of claim ``epoch`` of the task (in constant time)."""
    if shown is None:
        return False
    return hmac.compare_digest(shown.encode(), claim_secret(key, task_id, epoch).encode())


class Claims:
    """The claims of one board (its key)."""

    __slots__ = ("_key",)

    def __init__(self, key: bytes) -> None:
        self._key = key

    def secret(self, task_id: str, epoch: int) -> str:
        return claim_secret(self._key, task_id, epoch)

    def valid(self, task_id: str, epoch: int, shown: str | None) -> bool:
        return is_claim(self._key, task_id, epoch, shown)
