"""Schedules through a real daemon: the commands, config, overlap, once, crashes at fires."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from colibri.core.errors import ColibriError
from colibri.core.model import parse_rfc3339, rfc3339
from tests.helpers import Daemon, FakeAgent, set_next_fire, sqlite_only, wait_until


def add(daemon: Daemon, name: str, **spec: Any) -> dict[str, Any]:
    spec.setdefault("task", {"text": f"task of {name}"})
    return daemon.call("schedule-add", name=name, schedule=spec)


def fires(daemon: Daemon, name: str) -> list[dict[str, Any]]:
    return daemon.call("schedule-get", name=name, next=0, fires=1000)["fires"]


def test_add_show_list_pause_resume_remove(daemon: Daemon) -> None:
    reply = add(
        daemon,
        "nightly",
        cron="0 0 * * *",
        tz="Europe/Ljubljana",
        task={"text": "nightly build", "capabilities": ["FreeBSD"]},
    )
    schedule = reply["schedule"]
    assert schedule["kind"] == "cron" and schedule["tz"] == "Europe/Ljubljana"
    shown = daemon.call("schedule-get", name="nightly", next=10)
    assert len(shown["next"]) == 10
    instants = [parse_rfc3339(t) for t in shown["next"]]
    assert instants == sorted(instants) and len(set(instants)) == 10
    # midnight in Ljubljana is 23:00 UTC in winter, 22:00 UTC in summer
    assert all(t.endswith(("T23:00:00.000Z", "T22:00:00.000Z")) for t in shown["next"])
    assert [s["name"] for s in daemon.call("schedule-list")["schedules"]] == ["nightly"]
    paused = daemon.call("schedule-pause", name="nightly")["schedule"]
    assert paused["paused"] is True
    resumed = daemon.call("schedule-resume", name="nightly")["schedule"]
    assert resumed["paused"] is False and resumed["next_fire_at"] == shown["next"][0]
    daemon.call("schedule-rm", name="nightly")
    assert daemon.call("schedule-list")["schedules"] == []
    with pytest.raises(ColibriError) as err:
        daemon.call("schedule-get", name="nightly")
    assert err.value.code == "unknown_schedule"


def test_bad_definitions_are_refused_and_store_nothing(daemon: Daemon) -> None:
    before = daemon.call("status")["ledger_at"]
    # A duration that is not one, or out of range, has its own code (a kind of bad_request).
    #: (the schedule, words of the message, its code when not bad_request)
    cases: list[tuple[Any, ...]] = [
        ({"cron": "61 * * * *"}, "cron"),
        ({"cron": "* * *"}, "five fields"),
        ({"cron": "@daily", "tz": "Mars/Olympus"}, "time zone"),
        # a folder of the zone database, and a name too long for a file name: not zones either
        ({"cron": "@daily", "tz": "Europe"}, "time zone"),
        ({"cron": "@daily", "tz": "Europe/" + "x" * 300}, "time zone"),
        ({"at": "2001-01-01T00:00:00Z"}, "past"),
        ({"every": "soon"}, "duration", "bad_duration"),
        ({"cron": "@daily", "every": "1m"}, "exactly one"),
        # accepted values followed downstream: none may reach the calendar's end
        ({"every": "300000000000s"}, "must be from 1s to 3650d", "bad_duration"),
        ({"every": "100000w"}, "must be from 1s to 3650d", "bad_duration"),
        ({"at": "9999-12-31T23:59:59-12:00"}, "too far ahead"),
        ({"every": "2s", "jitter": "10s"}, "shorter than every"),
    ]
    for spec, words, *code in cases:
        with pytest.raises(ColibriError) as err:
            add(daemon, "bad", **spec)
        assert err.value.code == (code[0] if code else "bad_request")
        assert words in err.value.message
    assert daemon.call("schedule-list")["schedules"] == []
    assert daemon.call("status")["ledger_at"] == before
    add(daemon, "dup", cron="@hourly")
    with pytest.raises(ColibriError) as err:
        add(daemon, "dup", cron="@daily")
    assert err.value.code == "schedule_exists"


def test_interval_fires_tasks_carrying_the_schedule_name(daemon: Daemon) -> None:
    agent = FakeAgent(daemon, "runner", slots=10)
    add(daemon, "tick", every="1s", task={"text": "tick work"})
    assigns = []
    for _ in range(2):  # answer each before the next fire: overlap "skip" is the default
        assign = agent.next_assign(timeout=10)
        assert assign["task"]["schedule"] == "tick"
        agent.out(assign)
        assigns.append(assign)
    first, second = (parse_rfc3339(a["task"]["created_at"]) for a in assigns)
    assert second > first
    rows = daemon.call("ledger", task=assigns[0]["task"]["id"])["entries"]
    assert "fired by schedule tick" in rows[0]["reason"]
    agent.close()


def test_overlap_skip_counts_and_records(daemon: Daemon) -> None:
    add(daemon, "busy", every="1s")  # nobody takes the task: it stays pending
    wait_until(lambda: daemon.call("schedule-get", name="busy")["schedule"]["skipped"] >= 2)
    schedule = daemon.call("schedule-get", name="busy")["schedule"]
    assert schedule["fires"] == 1
    pending = daemon.call("list", state="pending")["tasks"]
    assert len(pending) == 1
    outcomes = {f["outcome"] for f in fires(daemon, "busy")}
    assert outcomes == {"fired", "skipped"}
    skipped_rows = [r for r in daemon.call("ledger")["entries"] if r.get("to_state") == "skipped"]
    assert skipped_rows and all(r["schedule"] == "busy" for r in skipped_rows)


def test_overlap_replace_cancels_the_previous_task(daemon: Daemon) -> None:
    add(daemon, "fresh", every="1s", overlap="replace")
    wait_until(lambda: daemon.call("schedule-get", name="fresh")["schedule"]["fires"] >= 3)
    tasks = daemon.call("list")["tasks"]
    cancelled = [t for t in tasks if t.get("outcome") == "cancelled"]
    assert len(cancelled) >= 2
    assert len([t for t in tasks if t["state"] == "pending"]) == 1


def test_run_now_fires_once_without_moving_the_timetable(daemon: Daemon) -> None:
    add(daemon, "later", cron="0 0 1 1 *")
    before = daemon.call("schedule-get", name="later")["schedule"]["next_fire_at"]
    task = daemon.call("schedule-run", name="later")["task"]
    assert task["schedule"] == "later" and task["state"] == "pending"
    after = daemon.call("schedule-get", name="later")["schedule"]
    assert after["next_fire_at"] == before and after["fires"] == 1


def test_once_fires_exactly_once_and_finishes_across_a_restart(daemon: Daemon) -> None:
    at = time.time() + 1.5
    add(daemon, "one", at=rfc3339(at))
    wait_until(lambda: daemon.call("schedule-get", name="one")["schedule"]["finished"])
    daemon.restart()
    time.sleep(1.0)
    schedule = daemon.call("schedule-get", name="one")["schedule"]
    assert schedule["fires"] == 1 and schedule["finished"] and schedule["next_fire_at"] is None
    assert len([t for t in daemon.call("list")["tasks"] if t.get("schedule") == "one"]) == 1


def test_config_schedules_load_and_errors_name_the_line(root: Path) -> None:
    (root / "colibri.jsonc").write_text(
        "{\n  // a schedule from the file\n  schedules: {\n    nightly: {\n"
        '      cron: "30 2 * * *", tz: "Europe/Ljubljana",\n'
        '      task: { text: "nightly build", capabilities: ["freebsd"] },\n    },\n  },\n}\n'
    )
    daemon = Daemon(root)
    daemon.start()
    try:
        listed = daemon.call("schedule-list")["schedules"]
        assert [(s["name"], s["source"], s["cron"]) for s in listed] == [
            ("nightly", "config", "30 2 * * *")
        ]
        with pytest.raises(ColibriError) as err:
            daemon.call("schedule-rm", name="nightly")
        assert "colibri.jsonc" in err.value.message
    finally:
        daemon.stop()
    (root / "colibri.jsonc").write_text(
        '{\n  "schedules": {\n    "broken": {\n      "cron": "99 * * * *",\n'
        '      "task": {"text": "x"}\n    }\n  }\n}\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "colibri", "--root", str(root), "run"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1
    assert f"{root / 'colibri.jsonc'}:3:" in result.stderr and "broken" in result.stderr


def test_kill_at_fires_never_fires_a_time_twice_nor_loses_one(root: Path) -> None:
    """SIGKILL the daemon repeatedly around the fires of an every-second schedule.

    Each nominal time from the first to the last must be recorded exactly once (fired, or
    missed under catch_up all with its cap), and no two tasks may come from one nominal time.
    """
    daemon = Daemon(root)
    daemon.start()
    try:
        add(daemon, "beat", every="1s", catch_up="all", overlap="allow")
        for n in range(6):
            time.sleep(0.7 + 0.3 * (n % 3))
            daemon.kill()
            time.sleep(0.4)
            daemon.start()
        time.sleep(1.2)
        daemon.call("schedule-pause", name="beat")  # so the two reads below see the same fires
        records = fires(daemon, "beat")
        nominals = sorted(parse_rfc3339(r["nominal"]) for r in records)
        assert len(nominals) == len(set(nominals)), "a nominal time was recorded twice"
        steps = {round(b - a, 3) for a, b in zip(nominals, nominals[1:], strict=False)}
        assert steps == {1.0}, f"nominal times skipped or doubled: gaps {steps}"
        fired = [r for r in records if r["outcome"] == "fired"]
        listed = daemon.call("list", limit=10_000)["tasks"]
        tasks = [t for t in listed if t.get("schedule") == "beat"]
        assert sorted(t["id"] for t in tasks) == sorted(r["task"] for r in fired)
        reasons = [daemon.call("ledger", task=t["id"])["entries"][0]["reason"] for t in tasks]
        assert len(reasons) == len(set(reasons))
    finally:
        daemon.stop()
    json.dumps(records)  # the records are plain JSON (what `schedule show --json` prints)


@sqlite_only
def test_three_days_down_gives_one_catch_up_task_and_loud_missed_fires(root: Path) -> None:
    """E3: an every-minute schedule and a daemon down for three days: one task, not 4,320."""
    daemon = Daemon(root)
    daemon.start()
    add(daemon, "minutely", cron="* * * * *")
    daemon.stop()
    set_next_fire(root, 3 * 86400)
    daemon.start()
    try:
        schedule = wait_until(
            lambda: (s := daemon.call("schedule-get", name="minutely")["schedule"])["fires"] and s
        )
        assert schedule["fires"] == 1
        assert 4_300 <= schedule["missed"] <= 4_322
        tasks = [t for t in daemon.call("list")["tasks"] if t.get("schedule") == "minutely"]
        assert len(tasks) == 1
        missed_rows = [
            r
            for r in daemon.call("ledger", limit=10_000)["entries"]
            if r.get("to_state") == "missed"
        ]
        assert 100 <= len(missed_rows) <= 101  # one each up to 100, then one summary row
        assert any("not listed one by one" in (r.get("reason") or "") for r in missed_rows)
        assert parse_rfc3339(schedule["next_fire_at"]) > time.time()
    finally:
        daemon.stop()


def test_fires_that_intake_refuses_are_recorded_as_refused_and_the_rest_still_fire(
    root: Path,
) -> None:
    """max_pending 2 and a schedule every second, with no agent: two fires make tasks, the
    next ones are refused by the quota. Each refusal is recorded as refused, with its
    reason, a ledger row and the schedule's count — no fire record names a task that does not
    exist. After a downtime, a catch_up "all" batch is refused fire by fire, not abandoned at
    the first."""
    (root / "colibri.jsonc").write_text(json.dumps({"scheduler": {"max_pending": 2}}))
    daemon = Daemon(root)
    daemon.start()
    try:
        add(daemon, "often", every="1s", catch_up="all", overlap="allow")
        wait_until(lambda: sum(f["outcome"] == "refused" for f in fires(daemon, "often")) >= 2)
        records = fires(daemon, "often")
        fired = [f for f in records if f["outcome"] == "fired"]
        refused = [f for f in records if f["outcome"] == "refused"]
        assert len(fired) == 2
        for record in fired:
            assert daemon.call("get", task=record["task"])["task"]["schedule"] == "often"
        assert all(f["task"] is None and "quota_exceeded" in f["reason"] for f in refused)
        schedule = daemon.call("schedule-get", name="often", next=0)["schedule"]
        assert schedule["fires"] == 2 and schedule["refused"] >= len(refused)
        rows = [e for e in daemon.call("ledger", limit=10_000)["entries"]
                if e.get("schedule") == "often" and e["to_state"] == "refused"]  # fmt: skip
        assert len(rows) >= len(refused) and all("quota_exceeded" in r["reason"] for r in rows)
        daemon.stop()
        down = time.time()
        time.sleep(2.5)  # two or three fire times pass while it is down
        up = time.time()
        daemon.start()

        def while_down() -> list[dict[str, Any]] | None:
            """The records of the downtime's fire times, once there are two."""
            nominal = [(parse_rfc3339(f["nominal"]), f) for f in fires(daemon, "often")]
            missed = [f for at, f in nominal if down <= at <= up]
            return missed if len(missed) >= 2 else None

        # The catch-up batch: the downtime's fire times (two at least), each refused.
        batch = wait_until(while_down)
        assert {f["outcome"] for f in batch} == {"refused"}
        caught_up = [f for f in fires(daemon, "often") if f not in records]
        assert {f["outcome"] for f in caught_up} == {"refused"}
        assert len(daemon.call("list", limit=100)["tasks"]) == 2
    finally:
        daemon.stop()


def test_the_runner_with_a_jitter_longer_than_the_gap_misses_nothing(tmp_path: Path) -> None:
    """The daemon's ScheduleRunner over a real store, its clock moved to each wake time it
    asks for, as its loop sleeps: an every-minute cron with a jitter of an hour fires every
    minute for 200 minutes and records no fire as missed, with each catch-up policy."""
    from colibri.config import SchedulerSettings
    from colibri.core.model import TaskSpec
    from colibri.core.schedules import ScheduleSpec
    from colibri.daemon.board import Board
    from colibri.daemon.schedules import ScheduleRunner
    from colibri.store import open_store
    from tests.inprocess import ManualClock

    for catch_up in ("one", "all", "none"):
        clock = ManualClock()
        store = open_store(str(tmp_path / f"{catch_up}.sqlite"), durability="relaxed")
        board = Board(store, SchedulerSettings(), clock)
        board.rebuild()
        runner = ScheduleRunner(board, board.batch, "UTC")
        spec = ScheduleSpec(cron="* * * * *", jitter="1h", catch_up=catch_up, overlap="allow",
                            task=TaskSpec(text="spread"))  # fmt: skip
        runner.add("spread", spec, replace=False)
        store.commit()
        wakes: list[float] = []
        for _ in range(200):
            wake = runner.next_wake()
            assert wake is not None and wake >= clock.time()
            clock.wall = wake
            wakes.append(wake)
            assert runner.fire_due() == 1
            store.commit()
        schedule = runner.get("spread")
        assert (schedule.fires, schedule.missed, schedule.skipped) == (200, 0, 0), catch_up
        assert wakes == sorted(wakes)
        store.close()


def test_a_fire_that_meets_a_full_disk_fails_its_batch_and_records_nothing(
    tmp_path: Path,
) -> None:
    """A full store is not a refusal by intake: the fire raises, so the server fails the
    whole batch (and a client's submit in it is not acknowledged) instead of recording the
    fire as refused on top of a transaction SQLite already rolled back."""
    import msgspec as ms

    from colibri.config import SchedulerSettings
    from colibri.core.errors import StorageUnavailable
    from colibri.core.model import TaskSpec
    from colibri.core.schedules import ScheduleSpec
    from colibri.daemon.board import Board
    from colibri.daemon.schedules import ScheduleRunner
    from colibri.store import open_store
    from colibri.store.sqlite import SqliteStore
    from tests.inprocess import ManualClock

    clock = ManualClock()
    store = open_store(str(tmp_path / "board.sqlite"), durability="relaxed")
    assert isinstance(store, SqliteStore)  # its file is filled up below, through SQLite
    board = Board(store, SchedulerSettings(), clock)
    board.rebuild()
    runner = ScheduleRunner(board, board.batch, "UTC")
    spec = ms.convert({"every": "1m", "task": {"text": "x" * 200_000}}, ScheduleSpec)
    runner.add("big", spec, replace=False)
    store.commit()
    board.submit(TaskSpec(text="a client's task in the same batch"))
    pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
    store._conn.execute(f"PRAGMA max_page_count={pages + 2}")  # the disk is all but full
    clock.advance(120)
    with pytest.raises(StorageUnavailable):
        runner.fire_due()
    with pytest.raises(StorageUnavailable):
        store.commit()  # what the server's flush does next: the batch is reported lost
    store.rollback()
    assert store.fires("big", 10) == []
    store.close()


def test_a_fire_failing_on_a_full_disk_backs_off_instead_of_spinning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Each failed fire rolls the batch back and reloads the board; the reloaded schedule is
    due again at once. The runner waits (1 s, doubling) before firing again: about two
    rollbacks in three seconds, not one per loop turn (78 before)."""
    import asyncio
    import logging

    import msgspec as ms

    from colibri.config import init_root, load_config
    from colibri.core.schedules import ScheduleSpec
    from colibri.daemon.app import compose
    from colibri.daemon.clock import SystemClock
    from colibri.daemon.mirrors import LedgerMirrors
    from colibri.store import open_store
    from colibri.store.sqlite import SqliteStore

    async def scenario() -> None:
        root = tmp_path / "root"
        init_root(root)
        config = load_config(root)
        store = open_store(str(root / "board.sqlite"), durability="relaxed")
        assert isinstance(store, SqliteStore)  # its file is filled up below, through SQLite
        mirror = LedgerMirrors(root / "ledger.jsonl")
        mirror.open(store)
        daemon = compose(config, store, mirror, SystemClock())
        daemon.board.rebuild()
        server, schedules = daemon.server, daemon.schedules
        schedules.add("s", ms.convert({"every": "1s", "task": {"text": "t" * 100_000}},
                                             ScheduleSpec), replace=False)  # fmt: skip
        server.flush()
        pages = store._conn.execute("PRAGMA page_count").fetchone()[0]
        store._conn.execute(f"PRAGMA max_page_count={pages}")  # the disk is full from now on
        runner = asyncio.create_task(schedules.run(server.schedule_flush, server.fail_batch))
        await asyncio.sleep(3.2)
        runner.cancel()
        mirror.close()
        store.close()

    server_log = logging.getLogger("colibri.daemon.server")
    server_log.addHandler(caplog.handler)  # (the colibri logger may not propagate to the root)
    try:
        with caplog.at_level(logging.ERROR, logger="colibri.daemon.server"):
            asyncio.run(scenario())
    finally:
        server_log.removeHandler(caplog.handler)
    rollbacks = sum(1 for r in caplog.records if r.getMessage() == "batch rolled back")
    assert 1 <= rollbacks <= 4, rollbacks


def test_a_schedule_task_is_a_task_spec_budget_and_pin_included(daemon: Daemon) -> None:
    """A fire submits the schedule's task as it is: every field a submission could carry
    (its budget too); a parent it cannot have."""
    task = {"text": "bounded", "budget_usd": 1.5, "max_attempts": 2, "agent": "a1",
            "labels": ["nightly"], "priority": 4}  # fmt: skip
    add(daemon, "bounded", every="1h", task=task)
    fired = daemon.call("schedule-run", name="bounded")["task"]
    got = daemon.call("get", task=fired["id"])["task"]
    assert {k: got[k] for k in task} == {**task, "agent": "a1"}
    assert got["pinned"] is True and got["schedule"] == "bounded"
    with pytest.raises(ColibriError) as caught:
        add(daemon, "child", every="1h", task={"text": "x", "parent": got["id"]})
    assert caught.value.code == "bad_request" and "no parent" in caught.value.message
    with pytest.raises(ColibriError) as caught:
        add(daemon, "wild", every="1h", task={"text": "x", "budget_usd": -1})
    assert caught.value.code == "bad_request" and "budget_usd" in caught.value.message


def test_a_schedule_fires_a_pipeline_that_runs_step_by_step(daemon: Daemon) -> None:
    add(daemon, "nightly-review", cron="0 3 * * *",
        task={"text": "plan the night's work", "capabilities": ["ci"]},
        then=[{"text": "implement it", "capabilities": ["ci"]},
              {"name": "test", "text": "test it", "capabilities": ["ci"]},
              {"text": "report", "capabilities": ["ci"], "after": ["task", "test"]}])  # fmt: skip
    last = daemon.call("schedule-run", name="nightly-review")["task"]
    tasks = daemon.call("list", limit=10)["tasks"]
    assert [t["text"] for t in tasks] == ["plan the night's work", "implement it", "test it",
                                          "report"]  # fmt: skip
    first, build, test, report = (t["id"] for t in tasks)
    assert last["id"] == report  # the last step stands for the fire
    assert [t["after"] for t in tasks] == [[], [first], [build], [first, test]]
    assert all(t["schedule"] == "nightly-review" for t in tasks)
    assert daemon.call("status")["blocked"] == 3
    agent = FakeAgent(daemon, "runner", ["ci"])
    try:
        ran = []
        for _ in range(4):
            assign = agent.next_assign()
            ran.append(assign["task"]["id"])
            agent.out(assign)
        assert ran == [first, build, test, report]
    finally:
        agent.close()


def test_a_pipeline_that_waits_out_of_order_is_refused(daemon: Daemon) -> None:
    for then, says in [
        ([{"text": "b", "after": ["c"]}, {"name": "c", "text": "c"}], "after names 'c'"),
        ([{"name": "x", "text": "a"}, {"name": "x", "text": "b"}], "the name 'x' is taken"),
        ([{"name": "task", "text": "a"}], "the name 'task' is taken"),
        ([{"text": "   "}], "then[0]: text is empty"),
    ]:
        with pytest.raises(ColibriError, match=re.escape(says)):
            add(daemon, "bad", every="1h", then=then)
    with pytest.raises(ColibriError, match="its task waits for nothing"):
        add(daemon, "bad", every="1h", task={"text": "x", "after": ["abcd1234"]})
    assert daemon.call("schedule-list")["schedules"] == []


def test_overlap_replace_cancels_the_whole_previous_pipeline(daemon: Daemon) -> None:
    add(daemon, "line", every="1s", overlap="replace",
        task={"text": "first", "capabilities": ["nobody"]},
        then=[{"text": "second", "capabilities": ["nobody"]}])  # fmt: skip
    wait_until(lambda: daemon.call("schedule-get", name="line")["schedule"]["fires"] >= 3)
    schedule = daemon.call("schedule-get", name="line")["schedule"]
    tasks = daemon.call("list", limit=100)["tasks"]
    open_ = [t for t in tasks if t["state"] == "pending"]
    assert sorted(t["id"] for t in open_) == sorted(schedule["last_fire_tasks"])
    assert [t["text"] for t in open_] == ["first", "second"]
    assert len([t for t in tasks if t.get("outcome") == "cancelled"]) >= 4


def test_overlap_skip_waits_for_every_step_of_the_last_fire(daemon: Daemon) -> None:
    """The last step may be done while another is still open: the fire is open till all are."""
    add(daemon, "fan", every="1s",
        task={"text": "root", "capabilities": ["x"]},
        then=[{"name": "slow", "text": "slow", "capabilities": ["nobody"]},
              {"text": "quick", "capabilities": ["x"], "after": ["task"]}])  # fmt: skip
    agent = FakeAgent(daemon, "runner", ["x"])
    try:
        for _ in range(2):  # the root, then the quick step (the slow one nobody takes)
            agent.out(agent.next_assign())
        wait_until(lambda: daemon.call("schedule-get", name="fan")["schedule"]["skipped"] >= 2)
        assert daemon.call("schedule-get", name="fan")["schedule"]["fires"] == 1
    finally:
        agent.close()
