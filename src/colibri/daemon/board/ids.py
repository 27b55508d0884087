"""Task ids: UUIDv7 (RFC 9562), made unique and sorting first in, first out — within one
millisecond, across a restart, and when the clock is set back."""

from __future__ import annotations

import os
import time

#: Random bytes for task ids, read from the system's CSPRNG a page at a time: one ``os.urandom``
#: call per id cost a system call on every submit.
_RANDOM_PAGE = 4096
_random = b""
_random_at = 0
#: The millisecond and the 74 random bits of the last id made.
_last_ms = 0
_last_random = 0
_RANDOM_BITS = 74
_RAND_B_BITS = 62


def _random_int(size: int) -> int:
    global _random, _random_at
    if _random_at + size > len(_random):
        _random, _random_at = os.urandom(_RANDOM_PAGE), 0
    _random_at += size
    return int.from_bytes(_random[_random_at - size : _random_at])


def continue_after(task_id: str) -> None:
    """Make every id from now on sort after ``task_id`` (the board's newest, at start-up):
    ids stay first in, first out across a restart, also when the clock was set back, or ids
    of an older Colibri ran ahead of it."""
    global _last_ms, _last_random
    try:
        n = int(task_id.replace("-", ""), 16)
    except ValueError:
        return  # not a UUID (a board's own ids always are): nothing to follow
    ms = n >> 80
    bits = ((n >> 64) & 0xFFF) << _RAND_B_BITS | (n & ((1 << _RAND_B_BITS) - 1))
    if (ms, bits) > (_last_ms, _last_random):
        _last_ms, _last_random = ms, bits


def new_task_id() -> str:
    """A UUIDv7 (RFC 9562): 48 bits of Unix milliseconds, then 74 random bits. Ids sort first
    in, first out: within one millisecond (or while the clock is set back) each id's random
    bits are the last one's plus a random step of up to 2**32 (the RFC's monotonic random
    method), so the time in an id never runs ahead of the clock however many are made."""
    global _last_ms, _last_random
    ms = time.time_ns() // 1_000_000
    if ms > _last_ms:
        bits = _random_int(10) >> (80 - _RANDOM_BITS)
    else:
        ms, bits = _last_ms, _last_random + 1 + _random_int(4)
        if bits >> _RANDOM_BITS:  # 2**42 ids in one millisecond at the least: the next one
            ms, bits = ms + 1, _random_int(10) >> (80 - _RANDOM_BITS)
    _last_ms, _last_random = ms, bits
    n = (
        (ms & 0xFFFFFFFFFFFF) << 80
        | 7 << 76  # version
        | (bits >> _RAND_B_BITS) << 64  # rand_a: 12 bits
        | 0b10 << 62  # variant
        | (bits & ((1 << _RAND_B_BITS) - 1))  # rand_b: 62 bits
    )
    h = f"{n:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"
