"""The board as one identity sees it, kept live: a connection to the daemon (the owner's on
the Unix socket, or a token's over TLS), one load, then the events, as the TUI's live board
does (``tui/live.py``). Every page open in a browser under that identity listens to the same
feed (``Listener``): a thousand tabs cost the daemon one connection.

It outlives the daemon: when the connection ends it says so (``lost``), connects again and
loads the board afresh.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from colibri.client import AsyncClient, Remote
from colibri.core import events
from colibri.core import protocol as p
from colibri.core.errors import ColibriError, DaemonNotRunning, NoHive
from colibri.core.model import LedgerEntry
from colibri.core.protocol import LEDGER_END
from colibri.core.request_fields import R
from colibri.tui.board import Board, Filter, moves_a_session

#: How often what changed is passed on to the pages, and the agents, status and schedules read
#: again when an event said they changed: a browser gets at most this many updates a second.
TICK = 0.25
#: Passings-on kept for pages whose stream opens after them (a minute's, at four a second).
RECENT = 240
RECONNECT_EVERY = 0.5


@dataclass(eq=False)
class Listener:
    """One open page's share of the feed: what changed since it last drew."""

    changed: set[str] = field(default_factory=set)
    #: The agents, schedules, pause or connection changed.
    others: bool = False
    wake: asyncio.Event = field(default_factory=asyncio.Event)

    def tasks(self, ids: set[str]) -> None:
        self.changed |= ids
        self.wake.set()

    def other(self) -> None:
        self.others = True
        self.wake.set()

    def take(self) -> tuple[set[str], bool]:
        changed, others = self.changed, self.others
        self.changed, self.others = set(), False
        self.wake.clear()
        return changed, others


class Feed:
    """The live board of one identity (``target``: the daemon's socket, or a ``Remote`` with a
    token)."""

    def __init__(self, target: Path | Remote, label: str) -> None:
        self.target = target
        #: Who the pages say is signed in: ``owner``, or the token's role and tenant.
        self.label = label
        self.board = Board()
        self.client: AsyncClient | None = None
        self.loaded = asyncio.Event()
        self.lost = False
        #: Why the last connection failed or ended (shown while there is none).
        self.why = ""
        self.listeners: set[Listener] = set()
        self._changed: set[str] = set()
        self._others = False
        self._status_due = self._agents_due = self._schedules_due = False
        self._tasks: list[asyncio.Task[None]] = []
        self._reads: set[asyncio.Task[None]] = set()
        #: How many times the board was loaded (a page drawn before the last load is
        #: made again).
        self.loads = 0
        self._counts: dict[str, tuple[int, dict[str, int]]] = {}
        #: Counts the passings-on of changed tasks (what was counted for one stays good).
        self.version = 0
        #: The last passings-on, (version, the tasks changed): what a page drawn at an earlier
        #: version is sent when its stream opens, so that nothing between is missed.
        self.recent: deque[tuple[int, set[str]]] = deque(maxlen=RECENT)
        #: The daemon serves a PostgreSQL board and this is its owner: the hive page is shown.
        self.hive = False

    @property
    def remote(self) -> bool:
        """Over TCP a token may not subscribe: the ledger's rows say which tasks changed."""
        return isinstance(self.target, Remote)

    def start(self) -> None:
        if not self._tasks:
            self._tasks = [
                asyncio.create_task(self._follow(), name="web-feed"),
                asyncio.create_task(self._tick(), name="web-feed-tick"),
            ]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        self._tasks = []

    def listen(self) -> Listener:
        listener = Listener()
        self.listeners.add(listener)
        return listener

    def since(self, version: int) -> set[str] | None:
        """The tasks changed after ``version`` (a page drawn then); None if that is too long
        ago to tell (the page is made again)."""
        if version >= self.version:
            return set()
        if not self.recent or self.recent[0][0] > version + 1:
            return None
        return set().union(*(ids for seen, ids in self.recent if seen > version))

    def forget(self, listener: Listener) -> None:
        self.listeners.discard(listener)

    async def request(self, req: p.Request[R]) -> R:
        """A request on the feed's connection (raises the daemon's error, as ColibriError)."""
        if self.client is None:
            raise DaemonNotRunning(f"not connected to the daemon ({self.why or 'connecting'})")
        return await self.client.request(req)

    # -- the daemon -----------------------------------------------------------------------

    async def _follow(self) -> None:
        while True:
            try:
                client = await AsyncClient(self.target).connect()
            except (ColibriError, OSError) as exc:
                self._went(str(getattr(exc, "message", exc)))
                await asyncio.sleep(RECONNECT_EVERY)
                continue
            try:
                if self.remote:
                    await client.request(p.Ledger(after=LEDGER_END, limit=1, follow=True))
                else:
                    await client.request(p.Subscribe(name="web", messages=False))
                await self._load(client)
                self.client = client
                async for event in client.events():
                    self._take(client, event)
            except (ColibriError, OSError) as exc:
                self.why = str(getattr(exc, "message", exc))
            finally:
                self.client = None
                await client.close()
            self._went(self.why or "the daemon closed the connection")

    def _went(self, why: str) -> None:
        self.why = why
        if not self.lost:
            self.lost = True
            self._others = True

    def _take(self, client: AsyncClient, event: events.AnyEvent) -> None:
        if isinstance(event, events.LedgerAppended):
            self._ledger_row(client, event.entry)
            return
        if self.board.apply(event):
            self._changed.add(_task_id(event))
        kind = type(event).__name__
        self._others |= kind in ("AgentChanged", "BreakerOpened", "SwarmToggled")
        self._status_due |= kind in ("AgentChanged", "HarnessExited", "SessionNotReady")
        self._schedules_due |= kind == "ScheduleNoted"
        if isinstance(event, events.TaskChanged):
            moved = (event.from_state, event.to_state, event.task.agent)
            self._agents_due |= moves_a_session(*moved)

    def _ledger_row(self, client: AsyncClient, entry: LedgerEntry) -> None:
        """Over TCP: the task of a row read again (in order: a later row's read is queued on
        the same connection after an earlier one's)."""
        if entry.task is None:
            self._schedules_due = True
            return
        read = asyncio.create_task(self._read_again(client, entry))
        self._reads.add(read)  # (held: a task only the loop knows of may be collected)
        read.add_done_callback(self._reads.discard)

    async def _read_again(self, client: AsyncClient, entry: LedgerEntry) -> None:
        assert entry.task is not None
        try:
            task = await client.get(entry.task)
        except (ColibriError, OSError):
            return  # gone, or never this token's to see
        self.board.put(task)
        self._changed.add(task.id)
        self._status_due = self._agents_due = True
        self._schedules_due |= entry.schedule is not None

    async def _load(self, client: AsyncClient) -> None:
        tasks = await client.all_tasks()
        status = await client.request(p.Status())
        agents = (await client.request(p.Agents())).agents
        schedules = await client.schedules()
        # (Never asked with a token: refused over TCP, the connection would be closed.)
        self.hive = not self.remote and await _has_hive(client)
        self.board.load(tasks, status, agents, schedules)
        self.lost = False
        self.why = ""
        self.loads += 1
        self._others = True
        self.loaded.set()

    # -- passing it on --------------------------------------------------------------------

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(TICK)
            await self._refresh()
            if self._changed:
                changed, self._changed = self._changed, set()
                self.version += 1
                self.recent.append((self.version, changed))
                for listener in self.listeners:
                    listener.tasks(changed)
            if self._others:
                self._others = False
                for listener in self.listeners:
                    listener.other()

    async def _refresh(self) -> None:
        """What an event said changed, read again: the harnesses and pause (``status``), the
        agents' slots and sessions, the schedules' next fires."""
        client = self.client
        if client is None:
            return
        try:
            if self._status_due:
                self._status_due = False
                self.board.take_status(await client.request(p.Status()))
                self._others = True
            if self._agents_due:
                self._agents_due = False
                self.board.agents = {a.name: a for a in (await client.request(p.Agents())).agents}
                self._others = True
            if self._schedules_due:
                self._schedules_due = False
                self.board.schedules = {s.name: s for s in await client.schedules()}
                self._others = True
        except (ColibriError, OSError):
            pass  # the connection's end is the follower's to see

    def column_counts(self, spec: Filter, key: str) -> dict[str, int]:
        """How many tasks each column of the board holds under a filter (``key``: its text),
        counted once per passing-on of changes however many pages ask."""
        counted = self._counts.get(key)
        if counted is not None and counted[0] == self.version:
            return counted[1]
        from colibri.web.views import column_of

        board = self.board
        counts: dict[str, int] = {}
        for task in board.tasks.values():
            if not spec or spec.matches(task):
                column = column_of(task, board.held(task))
                counts[column] = counts.get(column, 0) + 1
        if len(self._counts) > 100:
            self._counts.clear()
        self._counts[key] = (self.version, counts)
        return counts

    def paused(self, paused: bool) -> None:
        """An answer of ``toggle-swarm``: shown at once, before its event comes."""
        self.board.paused = paused
        self._others = True


async def _has_hive(client: AsyncClient) -> bool:
    try:
        await client.request(p.Hive())
    except NoHive:
        return False
    return True


def _task_id(event: Any) -> str:
    task = event.task
    return task if isinstance(task, str) else str(task.id)
