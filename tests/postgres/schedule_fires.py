"""Schedules firing once across the daemons of one board while the serving one is SIGKILLed
again and again (the test's short form and bench/chaos.py's H1).

Several daemons stand on one PostgreSQL board; interval schedules of every few seconds, spread
over tenants, are added to the one serving; it is SIGKILLed while fires flow, a standby takes
over, and the killed daemon is started again as a standby. Afterwards the board alone is judged
(``judge``): the tasks made per (schedule, nominal time), read from each task's first ledger row;
every nominal time due during the run against ``schedule_fires``; the catch-up policy of each.
"""

from __future__ import annotations

import json
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from colibri.core.model import parse_rfc3339, rfc3339
from tests.helpers import wait_until
from tests.postgres.hive import Member

#: How far before the end of the run a nominal time must have been fired or recorded: the
#: serving daemon fires a due time within a moment, and the last one may be stopped meanwhile.
END_SLACK_S = 1.5
FIRED_PREFIX = "fired by schedule "


def board_rows(board: str, query: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(board, autocommit=True) as conn:
        return conn.execute(query.encode(), args).fetchall()


def serving_pid(board: str) -> tuple[int, int] | None:
    """The lease's epoch and the pid of the daemon that holds it (by its hive row)."""
    rows = board_rows(
        board,
        "SELECT l.epoch, h.pid FROM leases l JOIN hives h ON h.id = l.owner"
        " WHERE l.expires_at > now()",
    )
    return (int(rows[0][0]), int(rows[0][1])) if rows else None


def fire_count(board: str) -> int:
    return int(board_rows(board, "SELECT count(*) FROM schedule_fires")[0][0])


def behind(board: str) -> int:
    """Schedules whose next fire time passed more than a second ago."""
    late = rfc3339(time.time() - 1.0)
    return int(board_rows(board, "SELECT count(*) FROM schedules WHERE next_fire_at < %s",
                          (late,))[0][0])  # fmt: skip


def firing(board: str) -> bool:
    """Fires are committing now: more of them within 50 ms."""
    before = fire_count(board)
    time.sleep(0.05)
    return fire_count(board) > before


@dataclass
class Judgement:
    """What the board shows after the run."""

    figures: dict[str, Any] = field(default_factory=dict)
    problems: list[str] = field(default_factory=list)


def judge(board: str, ended_at: float, stopped_at: float) -> Judgement:
    """Every schedule's fires and tasks against its timetable: each time due before
    ``ended_at`` (when the last daemon was told to stop) fired or recorded, none after
    ``stopped_at`` (when it had stopped), on the wall clock."""
    result = Judgement()
    problems = result.problems
    schedules = {
        name: json.loads(doc) for name, doc in board_rows(board, "SELECT name, doc FROM schedules")
    }
    fires: dict[str, dict[float, tuple[str, str | None]]] = {name: {} for name in schedules}
    late = 0
    for name, nominal, outcome, task, at in board_rows(
        board, "SELECT schedule, nominal, outcome, task, at FROM schedule_fires"
    ):
        fires.setdefault(name, {})[parse_rfc3339(nominal)] = (outcome, task)
        # Fired a second or more after its time: caught up by a daemon that took over.
        late += outcome == "fired" and parse_rfc3339(at) - parse_rfc3339(nominal) >= 1.0
    tasks = {
        task_id: (schedule, tenant)
        for task_id, schedule, tenant in board_rows(
            board, "SELECT id, schedule, tenant FROM tasks WHERE schedule IS NOT NULL"
        )
    }
    # Each task's first ledger row says which fire made it: the tasks per (schedule, nominal).
    made: Counter[tuple[str, float]] = Counter()
    made_by: dict[str, tuple[str, float]] = {}
    for task_id, reason in board_rows(
        board,
        "SELECT DISTINCT ON (task) task, reason FROM ledger"
        " WHERE task = ANY(%s) ORDER BY task, seq",
        (list(tasks),),
    ):
        name, _, nominal = str(reason).removeprefix(FIRED_PREFIX).rpartition(" for ")
        if not str(reason).startswith(FIRED_PREFIX) or not name:
            problems.append(f"task {task_id} of a schedule begins with {reason!r}")
            continue
        made[(name, parse_rfc3339(nominal))] += 1
        made_by[task_id] = (name, parse_rfc3339(nominal))
    duplicates = {key: n for key, n in made.items() if n > 1}
    problems += [f"{n} tasks for {name} at {nominal}" for (name, nominal), n in duplicates.items()]
    due = fired = missed = missed_all = unrecorded = off_timetable = 0
    tenants: Counter[str] = Counter()
    for name, doc in schedules.items():
        anchor, every, policy = parse_rfc3339(doc["at"]), float(doc["every"]), doc["catch_up"]
        tenant = doc["task"].get("tenant") or "default"
        rows = fires.get(name, {})
        times = [anchor + k * every for k in range(1, int((ended_at - anchor) / every) + 2)]
        expected = [t for t in times if t <= ended_at - END_SLACK_S]
        due += len(expected)
        for nominal, (outcome, task) in rows.items():
            k = round((nominal - anchor) / every)
            if k < 1 or abs(anchor + k * every - nominal) > 0.002 or nominal > stopped_at:
                off_timetable += 1
                problems.append(f"{name}: a fire at {nominal} is off its timetable")
            if outcome == "fired":
                fired += 1
                if task is None or task not in tasks or made_by.get(task) != (name, nominal):
                    problems.append(f"{name} at {nominal}: fired task {task} is not its own")
                elif tasks[task] != (name, tenant):
                    problems.append(f"{name}: task {task} is in tenant {tasks[task][1]}")
                else:
                    tenants[tenant] += 1
            elif outcome == "missed":
                missed += 1
                missed_all += policy == "all"
            else:
                problems.append(f"{name} at {nominal}: {outcome}")
        for nominal in expected:
            if not any(abs(nominal - t) <= 0.002 for t in rows):
                unrecorded += 1
                problems.append(f"{name}: due at {nominal}, neither fired nor recorded missed")
        if policy == "all" and any(o == "missed" for o, _ in rows.values()):
            problems.append(f"{name} (catch_up all): a time recorded missed")
        if policy == "one" and rows and rows[max(rows)][0] == "missed":
            # Each catch-up fires the latest time it finds due: a run of missed times ends
            # with a fire.
            problems.append(f"{name} (catch_up one): ends on a missed time, none fired")
    orphans = [t for t in tasks if t not in made_by]
    problems += [f"task {t} of a schedule with no fire" for t in orphans[:10]]
    result.figures = {
        "schedules": len(schedules),
        "due": due,
        "fires_fired": fired,
        "fires_missed": missed,
        "fired_late": late,
        "missed_under_catch_up_all": missed_all,
        "unrecorded": unrecorded,
        "off_timetable": off_timetable,
        "tasks": len(tasks),
        "duplicate_fires": len(duplicates),
        "tasks_per_tenant": dict(sorted(tenants.items())),
    }
    return result


def schedules_through_kills(
    workdir: Path,
    board: str,
    *,
    daemons: int = 3,
    schedules: int = 30,
    tenants: int = 3,
    every: tuple[float, float] = (1.0, 2.0),
    kills: int = 3,
    serve_s: tuple[float, float] = (0.5, 2.0),
    ttl: float = 2.0,
    seed: int = 1,
    log: Callable[[str], None] = lambda _: None,
) -> Judgement:
    """The run, then ``judge``; figures of the kills and takeovers are added to its own."""
    rng = random.Random(seed)
    members = [Member(workdir / f"d{n}", board, ttl=f"{ttl:g}s") for n in range(daemons)]
    took_over: list[float] = []
    killed_while_firing = 0
    catching_up_s = None
    started = time.monotonic()
    try:
        members[0].start()
        for member in members[1:]:
            member.stand_by()
        names = [f"t{n}" for n in range(tenants)]
        for n in range(schedules):
            # Half catch up every missed time, half only the latest: both policies, judged.
            step = round(rng.uniform(*every) * 2) / 2 if every[0] != every[1] else every[0]
            members[0].call("schedule-add", name=f"s{n:04d}", schedule={
                "every": step, "catch_up": "all" if n % 2 else "one", "overlap": "allow",
                "task": {"text": f"fire of s{n:04d}", "capabilities": ["nobody"],
                         "tenant": names[n % tenants]},
            })  # fmt: skip
        log(f"{schedules} schedules added in {time.monotonic() - started:.1f} s")
        attempts = 0
        while len(took_over) < kills and attempts < 2 * kills:
            attempts += 1
            holder = wait_until(lambda: serving_pid(board), timeout=ttl * 5 + 20)
            owner = next(m for m in members if m.process is not None and m.process.pid == holder[1])
            # It serves: let it fire for a while, then kill it while fires are flowing.
            time.sleep(rng.uniform(*serve_s))
            wait_until(lambda: firing(board), timeout=ttl * 5 + 20)
            if serving_pid(board) != holder:
                continue  # it lost the lease meanwhile (counted below): kill the next owner
            killed_while_firing += 1
            assert owner.process is not None
            owner.process.send_signal(signal.SIGKILL)
            owner.process.wait(timeout=10)
            killed = time.monotonic()

            def next_holder(epoch: int = holder[0]) -> tuple[int, int] | None:
                now = serving_pid(board)
                return now if now is not None and now[0] > epoch else None

            wait_until(next_holder, timeout=ttl * 5 + 20, interval=0.01)
            took_over.append(time.monotonic() - killed)
            log(f"kill {len(took_over)}/{kills}: taken over in {took_over[-1]:.2f} s")
            # The killed daemon comes back as a standby (a new owner on the same root).
            with open(owner.log_path, "ab") as out:
                owner.process = subprocess.Popen(owner.command(), stdin=subprocess.DEVNULL,
                                                 stdout=out, stderr=out,
                                                 start_new_session=True)  # fmt: skip
        time.sleep(serve_s[1])
        # The last owner catches up with what fell due while it took over (a backlog it works
        # through most overdue first); then the run ends.
        caught_up = time.monotonic()
        wait_until(lambda: behind(board) == 0, timeout=60, interval=0.1)
        catching_up_s = time.monotonic() - caught_up
    finally:
        # Standbys first, so that the last owner's clean stop hands the board to nobody; the
        # run ends as it is told to stop.
        holder = serving_pid(board)
        ended_at = time.time()
        for member in sorted(members, key=lambda m: m.process is not None and holder is not None
                             and m.process.pid == holder[1]):  # fmt: skip
            if member.process is not None and member.process.poll() is None:
                ended_at = time.time()
                member.process.send_signal(signal.SIGTERM)
                member.process.wait(timeout=30)
    result = judge(board, ended_at, time.time())
    epoch = int(board_rows(board, "SELECT max(epoch) FROM leases")[0][0])
    if len(took_over) < kills:
        result.problems.append(f"{len(took_over)} of {kills} kills done")
    result.figures.update(
        daemons=daemons,
        kills=len(took_over),
        killed_while_firing=killed_while_firing,
        takeover_s_median=round(sorted(took_over)[len(took_over) // 2], 2) if took_over else None,
        takeover_s_max=round(max(took_over), 2) if took_over else None,
        lease_ttl_s=ttl,
        lease_epoch=epoch,
        # Leases lost by a daemon that was not killed (overloaded past its ttl): 0 expected.
        takeovers_unforced=epoch - 1 - len(took_over),
        last_catch_up_s=None if catching_up_s is None else round(catching_up_s, 2),
        seconds=round(time.monotonic() - started, 1),
    )
    return result
