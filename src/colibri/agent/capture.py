"""What a session said: its output, kept within bounds as it is read, and how it ended."""

from __future__ import annotations

import asyncio
import signal
from collections import deque

#: stderr kept of a session (its tail), for its task's error.
STDERR_TAIL = 4096


class Capture:
    """What a pipe said, kept while it is read: its first ``head`` bytes and its last ``tail``
    bytes, and how many there were in all — so a session printing a gigabyte costs the harness
    ``head + tail`` of memory, not a gigabyte."""

    def __init__(self, head: int, tail: int) -> None:
        self.head_limit, self.tail_limit = head, tail
        self.head = bytearray()
        self.tail: deque[bytes] = deque()
        self.tail_size = 0
        self.total = 0

    async def read(self, stream: asyncio.StreamReader) -> None:
        while chunk := await stream.read(65536):
            self.add(chunk)

    def add(self, chunk: bytes) -> None:
        self.total += len(chunk)
        room = self.head_limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if not chunk or not self.tail_limit:
            return
        self.tail.append(chunk)
        self.tail_size += len(chunk)
        while self.tail_size - len(self.tail[0]) >= self.tail_limit:
            self.tail_size -= len(self.tail.popleft())

    def text(self) -> str:
        """What was kept; when something was cut, a line between head and tail says so."""
        tail = b"".join(self.tail)[-self.tail_limit :] if self.tail_limit else b""
        kept = len(self.head) + len(tail)
        if kept >= self.total:
            return (bytes(self.head) + tail).decode(errors="replace")
        cut = f"\n[output truncated: {self.total} bytes in all; the first {len(self.head)} and " \
              f"the last {len(tail)} are kept]\n"  # fmt: skip
        head_text = self.head.decode(errors="replace")
        return (head_text + cut if self.head else "") + tail.decode(errors="replace")


def ended_how(code: int | None) -> str:
    """How a session ended, for its task's error: ``exit 3``, or ``killed by SIGKILL`` when a
    signal ended it (asyncio gives those as negative codes, which read like exit codes)."""
    if code is None or code >= 0:
        return f"exit {code}"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        name = f"signal {-code}"
    return f"killed by {name}"
