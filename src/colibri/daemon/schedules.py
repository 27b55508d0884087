"""Firing schedules: wake at the next due time, fire durably, record every outcome.

A fire writes, in the daemon's open transaction: the ``schedule_fires`` row for its nominal time
(unique: a second fire of the same time is refused by the store), the task and its ledger row,
and the schedule's new ``next_fire_at``. The server commits them together, so a crash at any
point neither fires a due time twice nor loses it: after a restart the stored ``next_fire_at``
is still the unfired time, and the catch-up policy decides.
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import time
from collections.abc import Callable

import msgspec

from colibri.core import schedules as math
from colibri.core.backoff import Backoff
from colibri.core.errors import (
    BadRequest,
    ColibriError,
    Internal,
    ScheduleExists,
    StorageUnavailable,
    UnknownSchedule,
)
from colibri.core.events import ScheduleNoted
from colibri.core.model import LedgerEntry, Task, parse_rfc3339, rfc3339
from colibri.core.plans import fire_of
from colibri.core.schedules import Schedule, ScheduleSpec
from colibri.core.states import OPEN
from colibri.daemon import crashpoints
from colibri.daemon.board import Batch, Board, new_task_id
from colibri.daemon.clock import Clock
from colibri.store import StoreConflict

log = logging.getLogger(__name__)

#: Sleep at most this long, so a wall-clock jump is noticed within it.
MAX_SLEEP = 60.0
#: Missed fires get a ledger row each up to this many per check; the rest one summary row.
LEDGER_MISSED_MAX = 100
#: How long one batch may spend firing (seconds) before the runner lets the loop turn: what
#: is still due waits for the next batch, so that one batch's transaction stays short —
#: requests are answered, the lease is renewed, the fires commit in between — however many
#: fall due together. (One schedule's catch-up is never split.)
FIRE_BATCH_S = 0.05


class ScheduleRunner:
    def __init__(
        self, board: Board, batch: Batch, default_tz: str, clock: Clock | None = None
    ) -> None:
        self.board = board
        #: The batch its fires and notes belong to (their ledger rows, and who asked).
        self.batch = batch
        self.store = board.store
        #: What due times are judged by: the board's clock (on PostgreSQL, its server's:
        #: ``BoardClock``), the daemon's own by default.
        self.clock = clock or board.clock
        self.default_tz = default_tz
        self.schedules: dict[str, Schedule] = {}
        self._heap: list[tuple[float, str]] = []
        self.changed = asyncio.Event()

    # -- loading and editing -----------------------------------------------------------------

    def load(self, configured: dict[str, ScheduleSpec]) -> None:
        """Read stored schedules; bring colibri.jsonc's ``schedules`` section in."""
        now = self.clock.time()
        stored = {s.name: s for s in self.store.schedules()}
        for name, spec in configured.items():
            fresh = math.build(name, spec, now=now, default_tz=self.default_tz, source="config")
            old = stored.get(name)
            if old is not None and _same_definition(old, fresh):
                continue  # keep its runtime state: next fire, counters
            if old is not None:
                fresh.fires, fresh.skipped, fresh.missed = old.fires, old.skipped, old.missed
                fresh.refused = old.refused
                fresh.last_task, fresh.last_fire_at = old.last_task, old.last_fire_at
                fresh.last_fire_tasks = old.last_fire_tasks
            try:
                self.store.upsert_schedule(fresh)
            except StoreConflict as conflict:
                # (A PostgreSQL board: the name is a schedule's of a tenant another daemon
                # serves. Said, and left to that one; the rest of the file is loaded.)
                log.error(
                    f"schedule {name!r} of colibri.jsonc not loaded: {conflict}",
                    extra={"event": "schedule_not_loaded", "schedule": name},
                )
                continue
            stored[name] = fresh
        for name, old in list(stored.items()):
            if old.source == "config" and name not in configured:
                self.store.delete_schedule(name)
                del stored[name]
        self.schedules = stored
        self._rebuild_heap()

    def reload(self) -> None:
        """Re-read every schedule from the store (after a batch that did not commit)."""
        self.schedules = {s.name: s for s in self.store.schedules()}
        self._rebuild_heap()

    def _rebuild_heap(self) -> None:
        self._heap = [
            (self._wake_at(s), s.name) for s in self.schedules.values() if self._active(s)
        ]
        heapq.heapify(self._heap)
        self.changed.set()

    @staticmethod
    def _active(schedule: Schedule) -> bool:
        return not schedule.paused and not schedule.finished and schedule.next_fire_at is not None

    @staticmethod
    def _wake_at(schedule: Schedule) -> float:
        assert schedule.next_fire_at is not None
        return math.wake_at(schedule, parse_rfc3339(schedule.next_fire_at))

    def _save(self, schedule: Schedule) -> None:
        schedule.updated_at = rfc3339(self.clock.time())
        try:
            self.store.upsert_schedule(schedule)
        except StoreConflict:
            # Its name is a schedule's of another tenant of a PostgreSQL board.
            raise ScheduleExists(schedule.name) from None
        self.schedules[schedule.name] = schedule
        if self._active(schedule):
            heapq.heappush(self._heap, (self._wake_at(schedule), schedule.name))
        self.changed.set()

    def get(self, name: str) -> Schedule:
        schedule = self.schedules.get(name)
        if schedule is None:
            raise UnknownSchedule(name)
        return schedule

    def add(self, name: str, spec: ScheduleSpec, replace: bool) -> Schedule:
        if name in self.schedules and not replace:
            raise ScheduleExists(name)
        if self.schedules.get(name) is not None and self.schedules[name].source == "config":
            raise BadRequest(f"schedule {name!r} comes from colibri.jsonc; change it there")
        schedule = math.build(name, spec, now=self.clock.time(), default_tz=self.default_tz)
        self._save(schedule)
        return schedule

    def remove(self, name: str) -> Schedule:
        schedule = self.get(name)
        if schedule.source == "config":
            raise BadRequest(f"schedule {name!r} comes from colibri.jsonc; remove it there")
        self.store.delete_schedule(name)
        del self.schedules[name]
        return schedule

    def set_paused(self, name: str, paused: bool) -> Schedule:
        schedule = msgspec.structs.replace(self.get(name), paused=paused)
        if not paused and schedule.next_fire_at is not None and not schedule.finished:
            # Resuming does not fire what was skipped while paused: start from now.
            nxt = math.next_after(schedule, self.clock.time())
            schedule.next_fire_at = None if nxt is None else rfc3339(nxt)
        self._save(schedule)
        return schedule

    def upcoming(self, name: str, count: int) -> list[str]:
        schedule = self.get(name)
        if schedule.finished or schedule.next_fire_at is None:
            return []
        first = parse_rfc3339(schedule.next_fire_at)
        rest = math.upcoming(schedule, first, count - 1) if count > 1 else []
        return [rfc3339(t) for t in [first, *rest]]

    # -- firing ------------------------------------------------------------------------------

    def next_wake(self) -> float | None:
        while self._heap:
            wake, name = self._heap[0]
            schedule = self.schedules.get(name)
            if schedule is not None and self._active(schedule) and self._wake_at(schedule) == wake:
                return wake
            heapq.heappop(self._heap)
        return None

    def fire_due(self, budget_s: float = FIRE_BATCH_S) -> int:
        """Fire the schedules whose time has come, the most overdue first, for about
        ``budget_s`` (one at least); return how many tasks were submitted."""
        now = self.clock.time()
        until = time.monotonic() + budget_s
        submitted = 0
        while (wake := self.next_wake()) is not None and wake <= now:
            _, name = heapq.heappop(self._heap)
            submitted += self._fire(self.schedules[name], now)
            if time.monotonic() >= until:
                break
        return submitted

    def _fire(self, schedule: Schedule, now: float) -> int:
        plan = math.plan(schedule, now)
        schedule = msgspec.structs.replace(schedule)
        stamp = rfc3339(now)
        for n, nominal in enumerate(plan.missed):
            if self.store.record_fire(schedule.name, rfc3339(nominal), "missed", None, stamp):
                schedule.missed += 1
                if n < LEDGER_MISSED_MAX:
                    self._note(
                        schedule, "missed", nominal, f"missed (catch_up {schedule.catch_up})"
                    )
        hidden = len(plan.missed) - LEDGER_MISSED_MAX
        if hidden > 0 or plan.missed_uncounted:
            more = f"{hidden} more" if hidden > 0 else "more"
            self._note(schedule, "missed", now, f"{more} missed fires not listed one by one")
        submitted = 0
        try:
            for nominal in plan.fire:
                submitted += self._fire_one(schedule, nominal, stamp)
        finally:  # a failed submit must not stop the timetable
            schedule.next_fire_at = (
                None if plan.next_fire_at is None else rfc3339(plan.next_fire_at)
            )
            if schedule.kind == "once" and plan.next_fire_at is None:
                schedule.finished = True
            self._save(schedule)
        return submitted

    def _fire_one(
        self, schedule: Schedule, nominal: float, stamp: str, manual: bool = False
    ) -> int:
        previous = self._open_of_last_fire(schedule)
        if previous is not None and not manual:
            if schedule.overlap == "skip":
                if self.store.record_fire(schedule.name, rfc3339(nominal), "skipped", None, stamp):
                    schedule.skipped += 1
                    self._note(
                        schedule,
                        "skipped",
                        nominal,
                        f"skipped: previous task {previous.id} is still {previous.state}",
                    )
                return 0
            if schedule.overlap == "replace":
                why = f"replaced by the next fire of {schedule.name}"
                while previous is not None:  # (a cancel may end the ones after it too)
                    self.board.cancel(previous.id, why)
                    previous = self._open_of_last_fire(schedule)
        task_id = last_id = new_task_id()
        ids = [task_id]
        key = rfc3339(nominal)
        if self.store.fire_recorded(schedule.name, key):
            if manual:
                raise BadRequest(f"schedule {schedule.name!r} was fired by hand this very "
                                 "millisecond; retry")  # fmt: skip
            log.warning(
                "fire already recorded; not firing again",
                extra={"event": "schedule_duplicate", "schedule": schedule.name, "nominal": key},
            )
            return 0
        why = "run by hand" if manual else f"for {key}"
        try:
            # Intake refuses before it writes anything (quotas, names, budgets).
            reason = f"fired by schedule {schedule.name} {why}"
            if schedule.then:  # a pipeline: the task and its steps, all or none
                specs, names = fire_of(schedule.task, schedule.then)
                ids = [task_id, *(new_task_id() for _ in schedule.then)]
                self.board.submit_all([(s, None) for s in specs], names, schedule=schedule.name,
                                      task_ids=ids, reason=reason)  # fmt: skip
                last_id = ids[-1]
            else:
                self.board.submit(
                    schedule.task, schedule=schedule.name, task_id=task_id, reason=reason
                )
        except ColibriError as exc:
            if manual or isinstance(exc, StorageUnavailable):
                # The operator who asked sees why (nothing is recorded); a store that failed
                # has rolled the batch back, which must fail as a whole.
                raise
            refusal = f"{exc.code}: {exc.message}"
            self.store.record_fire(schedule.name, key, "refused", None, stamp, refusal)
            schedule.refused += 1
            self._note(schedule, "refused", nominal, f"refused by intake ({refusal})")
            log.warning(
                "schedule fire refused by intake",
                extra={"event": "schedule_refused", "schedule": schedule.name, "nominal": key,
                       "error": exc.message},
            )  # fmt: skip
            return 0
        if not self.store.record_fire(schedule.name, key, "fired", task_id, stamp):
            raise Internal(f"fire {schedule.name} {key} recorded twice in one batch")
        crashpoints.hit("mid-fire")  # the task is in; the schedule's next fire not yet
        schedule.fires += 1
        schedule.last_task = last_id  # a pipeline's: its last step
        schedule.last_fire_tasks = ids if schedule.then else []
        schedule.last_fire_at = key
        self.board.broadcast(
            ScheduleNoted(schedule=schedule.name, what="fired", nominal=key, task=task_id)
        )
        return 1

    def _open_of_last_fire(self, schedule: Schedule) -> Task | None:
        """The first task of the schedule's last fire that is still open (pending or running),
        if any: a pipeline's fire is open while any of its steps is."""
        for task_id in schedule.last_fire_tasks or [schedule.last_task or ""]:
            task = self.board.open_task(task_id)
            if task is not None and task.state in OPEN:
                return task
        return None

    def run_now(self, name: str) -> str:
        """Fire once now, outside the timetable; the next scheduled fire is unchanged."""
        schedule = msgspec.structs.replace(self.get(name))
        now = self.clock.time()
        self._fire_one(schedule, now, rfc3339(now), manual=True)
        self._save(schedule)
        assert schedule.last_task is not None
        return schedule.last_task

    def _note(self, schedule: Schedule, what: str, nominal: float, reason: str) -> None:
        entry = LedgerEntry(
            at=rfc3339(self.clock.time()),
            schedule=schedule.name,
            to_state=what,
            reason=f"{reason}; nominal {rfc3339(nominal)}",
            uid=self.batch.uid,
            pid=self.batch.pid,
        )
        self.batch.ledger_rows.append(self.store.append_ledger(entry))
        self.board.broadcast(
            ScheduleNoted(schedule=schedule.name, what=what, nominal=rfc3339(nominal))
        )

    async def run(
        self, on_fired: Callable[[], None], on_failed: Callable[[ColibriError], None]
    ) -> None:
        """Sleep until the next due time (or a change), fire, hand the batch to the server;
        a fire that fails half-way fails the batch (``on_failed``): nothing of it commits."""
        failing = Backoff(1.0, MAX_SLEEP)  # after a fire that failed: 1 s, doubling
        pause = 0.0
        while True:
            self.changed.clear()
            wake = self.next_wake()
            delay = (
                MAX_SLEEP if wake is None else min(MAX_SLEEP, max(0.0, wake - self.clock.time()))
            )
            if pause:
                # The batch was rolled back and reloaded, so the same fire is due again at
                # once: wait (1 s, doubling, at most a minute) rather than fail, roll back
                # and rebuild the whole board in a hot loop while the store is down.
                await asyncio.sleep(pause)
                delay = 0.0
            if delay > 0:
                try:
                    async with asyncio.timeout(delay):
                        await self.changed.wait()
                    continue
                except TimeoutError:
                    pass
            else:
                await asyncio.sleep(0)  # the last batch's commit, and requests, go first
            try:
                self.fire_due()
                failing.reset()
                pause = 0.0
            except Exception as exc:
                pause = failing.next()
                log.exception(
                    "schedule fire failed; its batch is rolled back",
                    extra={"event": "schedule_failed", "error": str(exc)},
                )
                on_failed(exc if isinstance(exc, ColibriError) else Internal(repr(exc)))
            on_fired()


def _same_definition(a: Schedule, b: Schedule) -> bool:
    keys = (
        "kind",
        "cron",
        "tz",
        "every",
        "catch_up",
        "catch_up_max",
        "grace",
        "overlap",
        "jitter",
        "task",
        "then",
        "paused",
    )
    return all(getattr(a, k) == getattr(b, k) for k in keys) and (a.kind != "once" or a.at == b.at)
