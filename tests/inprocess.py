"""The daemon's board in process, for tests of its logic: a clock the test moves, and peers
that keep what the board told them. A test builds a ``Board`` over a real store on a temporary
file (``board_on``) and drives it as the server does — a request, ``store.commit()``,
``board.take_effects()`` — stepping time with ``clock.advance`` instead of sleeping."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec

from colibri.config import SchedulerSettings
from colibri.core.events import Event
from colibri.daemon.board import Board
from colibri.store import open_store


class ManualClock:
    """Wall and monotonic time that move only when the test says so."""

    def __init__(self) -> None:
        self.wall = 1_900_000_000.0
        self.mono = 1_000.0

    def time(self) -> float:
        return self.wall

    def monotonic(self) -> float:
        return self.mono

    def advance(self, seconds: float) -> None:
        self.wall += seconds
        self.mono += seconds


def plain(message: Any) -> dict[str, Any]:
    """A message as the agent reads it: an event as a plain object named by its tag, a reply
    as its fields (those left unset are not sent)."""
    if isinstance(message, Event):
        return {"event": type(message).__struct_config__.tag, **msgspec.structs.asdict(message)}
    if isinstance(message, msgspec.Struct):
        fields = msgspec.structs.asdict(message).items()
        return {k: v for k, v in fields if v is not msgspec.UNSET}
    return dict(message)


class Peer:
    """An agent's connection as the board sees it; it keeps what the agent was told."""

    def __init__(self, name: str) -> None:
        self.agent_name: str | None = None
        self.closing = False
        self.name = name
        self.messages: list[dict[str, Any]] = []

    def send(self, message: Any) -> None:
        self.messages.append(plain(message))


@contextlib.contextmanager
def board_on(
    path: Path, settings: SchedulerSettings | None = None, clock: ManualClock | None = None
) -> Iterator[tuple[Board, ManualClock]]:
    """A board over a fresh SQLite store at ``path`` (relaxed durability: nothing here cuts the
    power), built as a starting daemon builds it; the store is closed afterwards."""
    store = open_store(str(path), durability="relaxed")
    try:
        clock = clock or ManualClock()
        board = Board(store, settings or SchedulerSettings(), clock)
        board.rebuild()
        yield board, clock
    finally:
        store.close()
