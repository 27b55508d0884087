"""Task ids: UUIDv7 as RFC 9562 lays them out, unique, and sorting first in, first out."""

from __future__ import annotations

import time
import uuid

from colibri.daemon.board import ids, new_task_id


def test_an_id_is_a_uuid7_of_this_millisecond() -> None:
    before = time.time_ns() // 1_000_000
    made = new_task_id()
    parsed = uuid.UUID(made)
    assert str(parsed) == made  # the canonical form: lower-case hex, dashes at 8-4-4-4-12
    assert parsed.version == 7
    assert parsed.variant == uuid.RFC_4122
    # The first 48 bits are the Unix millisecond of the call: never ahead of the clock, however
    # many ids this process made before.
    ms = parsed.int >> 80
    assert before <= ms <= time.time_ns() // 1_000_000


def test_ids_are_unique_and_in_the_order_they_were_made() -> None:
    start = time.time_ns() // 1_000_000
    ids = [new_task_id() for _ in range(100_000)]  # many per millisecond, many random pages
    end = time.time_ns() // 1_000_000
    assert len(set(ids)) == len(ids)
    assert ids == sorted(ids)
    # Many in one millisecond do not carry the ids' time past the clock.
    assert start <= uuid.UUID(ids[-1]).int >> 80 <= end


def fresh_millisecond_id() -> int:
    """An id that is the first of its millisecond: all 74 of its random bits drawn anew."""
    ms = time.time_ns() // 1_000_000
    while time.time_ns() // 1_000_000 == ms:
        pass
    return uuid.UUID(new_task_id()).int


def test_the_random_part_varies_in_every_bit() -> None:
    ids = [fresh_millisecond_id() for _ in range(200)]
    random_bits = ((1 << 62) - 1) | (((1 << 12) - 1) << 64)  # rand_b and rand_a
    ones = 0
    zeros = 0
    for n in ids:
        ones |= n & random_bits
        zeros |= ~n & random_bits
    # Each of the 74 random bits was 1 in some id and 0 in another: none is stuck.
    assert ones == random_bits
    assert zeros == random_bits


def test_ids_follow_the_newest_stored_one_even_ahead_of_the_clock() -> None:
    """At start-up the board has new ids follow its newest: one an hour ahead of the clock
    (the clock set back, or ids of an older Colibri that ran ahead) is still older than every
    id made after it."""
    kept = ids._last_ms, ids._last_random
    try:
        ahead = (time.time_ns() // 1_000_000 + 3_600_000) << 80 | 7 << 76 | 0b10 << 62 | 12345
        newest = str(uuid.UUID(int=ahead))
        ids.continue_after(newest)
        made = [new_task_id() for _ in range(1_000)]
        assert newest < made[0] and made == sorted(made) and len(set(made)) == len(made)
        ids.continue_after("not-a-uuid")  # ignored
        ids.continue_after(str(uuid.UUID(int=1 << 80)))  # older: changes nothing
        assert new_task_id() > made[-1]
    finally:
        ids._last_ms, ids._last_random = kept
