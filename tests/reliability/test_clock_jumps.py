"""C2: the wall clock jumps under a live daemon; nothing expires, times out or fires twice.

The daemon runs under libfaketime, which moves the process's wall clock (``time.time``) by the
offset in a file it re-reads on every call, and leaves the monotonic clock alone — as the system
clock moving under NTP or ``date -s`` does. TTLs, timeouts and back-offs must follow the
monotonic clock; schedules follow the wall clock, so a forward jump is a stretch of missed fires
(the catch-up policy fires at most one) and a backward jump repeats no fire.
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from colibri.core.model import parse_rfc3339
from tests.helpers import PYTHON, Daemon, FakeAgent, wait_until, write_config
from tests.reliability.crash_scenarios import store_path

LIBFAKETIME = next(iter(sorted(Path("/usr/lib").glob("*/faketime/libfaketime.so.1"))), Path())
HOUR = 3600
DAY = 86400
EVERY = 2.0  # seconds between fires of the test schedules

pytestmark = pytest.mark.skipif(
    not LIBFAKETIME.is_file(), reason="needs libfaketime (Debian package libfaketime)"
)


class Jumps:
    """The daemon's wall-clock offset, in whole seconds, changed while it runs."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.set(0)

    def set(self, offset: int) -> None:
        self.offset = offset
        self.path.write_text(f"{offset:+d}\n")

    @property
    def env(self) -> dict[str, str]:
        return {
            "LD_PRELOAD": str(LIBFAKETIME),
            "FAKETIME_TIMESTAMP_FILE": str(self.path),
            "FAKETIME_NO_CACHE": "1",
            "FAKETIME_DONT_FAKE_MONOTONIC": "1",
            # libfaketime's "monotonic fix" (on by default with this glibc) times the waits on
            # a condition variable of the monotonic clock its own way — CPython waits for the
            # GIL on one — and a thread waiting for the GIL then spins instead of sleeping:
            # beside a second thread (each lease call runs on one) the loop ran 12 to several
            # hundred times slower, and a daemon's deadline check came 0.24-2.3 s late under
            # load. The monotonic clock is not faked here: there is nothing for it to fix.
            "FAKETIME_FORCE_MONOTONIC_FIX": "0",
        }


#: Main-thread CPU for a fixed loop, alone and then beside a thread that wants the GIL too: the
#: ratio of the two (about 1 when the GIL's waits sleep; 12 to 700 with them spinning).
_GIL_SHARE = """
import threading, time

def work():
    started = time.thread_time()
    for _ in range(300_000):
        pass
    return time.thread_time() - started

alone = work()
running, stop = threading.Event(), threading.Event()

def busy():
    running.set()
    while not stop.is_set():
        pass

other = threading.Thread(target=busy)
other.start()
running.wait()
shared = work()
stop.set()
other.join()
print(shared / alone)
"""


def test_the_faked_clock_leaves_a_threaded_process_its_speed(tmp_path: Path) -> None:
    """A daemon under libfaketime runs its lease calls on threads: sharing the GIL with one
    must not cost its loop more CPU than running alone does (it cost 12 to 700 times as much, and
    the loop's deadline checks came seconds late on a busy host)."""
    env = {**os.environ, **Jumps(tmp_path / "faketime").env}
    done = subprocess.run([PYTHON, "-c", _GIL_SHARE], env=env, capture_output=True, text=True,
                          timeout=120, check=True)  # fmt: skip
    assert float(done.stdout) < 4, done.stdout


@pytest.fixture
def jumps(root: Path) -> Jumps:
    return Jumps(root / "faketime")


@pytest.fixture
def daemon(root: Path, jumps: Jumps) -> Iterator[Daemon]:
    write_config(root, tick="1s", agent_ttl="3s")
    d = Daemon(root, env=jumps.env)
    d.start()
    yield d
    d.stop()


def fires(root: Path, schedule: str) -> list[tuple[float, str, str]]:
    """(nominal time, outcome, when) of every recorded fire of ``schedule``, oldest first."""
    db = sqlite3.connect(f"file:{store_path(root)}?mode=ro", uri=True, timeout=10)
    try:
        rows = db.execute(
            "SELECT nominal, outcome, at FROM schedule_fires WHERE schedule = ? ORDER BY nominal",
            (schedule,),
        ).fetchall()
    finally:
        db.close()
    return [(parse_rfc3339(nominal), outcome, at) for nominal, outcome, at in rows]


def missed(root: Path, schedule: str) -> int:
    return sum(1 for _, outcome, _ in fires(root, schedule) if outcome == "missed")


def fired(root: Path, schedule: str) -> list[float]:
    return [nominal for nominal, outcome, _ in fires(root, schedule) if outcome == "fired"]


def keep_alive(agent: FakeAgent, seconds: float, until: Callable[[], bool] | None = None) -> None:
    """Heartbeat every half second (well within the agent's ttl) for ``seconds``, or until
    ``until()``."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        assert agent.client.call("heartbeat")["ok"] is True
        if until is not None and until():
            return
        time.sleep(0.5)
    assert until is None, f"condition not met within {seconds}s: {until}"


def test_daemon_clock_follows_the_offset_file(daemon: Daemon, jumps: Jumps) -> None:
    """The fault is real: the daemon's idea of now moves with the file, the test's does not."""
    before = parse_rfc3339(
        daemon.call("submit", text="t0", capabilities=["none"])["task"]["created_at"]
    )
    jumps.set(DAY)
    after = parse_rfc3339(
        daemon.call("submit", text="t1", capabilities=["none"])["task"]["created_at"]
    )
    assert DAY - 60 < after - before < DAY + 60


def test_jumps_expire_no_agent_and_fire_no_schedule_twice(
    daemon: Daemon, jumps: Jumps, root: Path
) -> None:
    # A ttl of 10 s: a jump of a day (or back) would expire it at once on a wall-clock ttl; the
    # margin is for heartbeats late on a loaded machine (a loop reads the board between two).
    agent = FakeAgent(daemon, "steady", ["work"], ttl=10)
    try:
        task = daemon.call("submit", text="long job", capabilities=["work"])["task"]["id"]
        assign = agent.next_assign()
        assert assign["task"]["id"] == task
        for name, catch_up in (("one", "one"), ("none", "none")):
            added = daemon.call(
                "schedule-add",
                name=name,
                schedule={
                    "every": EVERY,
                    "catch_up": catch_up,
                    "overlap": "allow",
                    "task": {"text": f"tick {name}", "capabilities": ["nobody-has-this"]},
                },
            )
            assert added["ok"] is True, added
        keep_alive(
            agent, 20, until=lambda: len(fired(root, "one")) >= 2 and len(fired(root, "none")) >= 2
        )

        for offset in (HOUR, HOUR + DAY):  # forward: +1 h, then +1 d more
            before = {name: len(fired(root, name)) for name in ("one", "none")}
            missed_before = {name: missed(root, name) for name in ("one", "none")}
            jumped = time.monotonic()
            jumps.set(offset)

            # The runner wakes at its next due time (≤ EVERY away on the monotonic clock), finds
            # the whole jumped stretch due, and applies the catch-up policy to it.
            def past_the_stretch(enough: int = before["one"] + 100) -> bool:
                return len(fires(root, "one")) > enough

            keep_alive(agent, 20, until=past_the_stretch)
            keep_alive(agent, 2 * EVERY)
            elapsed = time.monotonic() - jumped
            for name in ("one", "none"):
                # No burst: every pass fired at most one nominal time of a schedule …
                passes = Counter(at for _, outcome, at in fires(root, name) if outcome == "fired")
                assert max(passes.values()) == 1, (name, offset, passes.most_common(3))
                # … so the jump added no fires beyond the timetable's own pace …
                more = len(fired(root, name)) - before[name]
                assert 1 <= more <= elapsed / EVERY + 2, (name, offset, more, elapsed)
                # … and the stretch it skipped is recorded as missed, not fired.
                newly_missed = missed(root, name) - missed_before[name]
                assert newly_missed >= 100, (name, offset, newly_missed)

        # Backward by a day: the next nominal time is a day ahead again; nothing re-fires. (A
        # fire the runner made just before it saw the jump is the timetable's next one: allowed.)
        before_back = {name: {(t, o) for t, o, _ in fires(root, name)} for name in ("one", "none")}
        # From the same snapshot: a fire recorded between two reads would look like a re-fire.
        last = {name: max(t for t, o in before_back[name] if o == "fired") for name in before_back}
        jumps.set(HOUR)
        keep_alive(agent, 3 * EVERY + 1)
        for name in ("one", "none"):
            new = {(t, o) for t, o, _ in fires(root, name)} - before_back[name]
            assert len(new) <= 1, (name, new)
            assert all(t > last[name] and o == "fired" for t, o in new), (name, new, last[name])
        ones = [t for t, _, _ in fires(root, "one")]
        assert len(ones) == len(set(ones))  # one row per nominal time (the store's key)

        # Through all of it the agent never expired and its task never timed out.
        shown = daemon.call("get", task=task)["task"]
        assert shown["state"] == "running", shown
        assert shown["epoch"] == assign["epoch"]
        agents = {a["name"]: a for a in daemon.call("agents")["agents"]}
        assert agents["steady"]["online"] is True, agents["steady"]
        done = agent.out(assign, "finished after three jumps")
        assert done["ok"] is True, done
        reasons = [row["reason"] for row in daemon.call("ledger", task=task)["entries"]]
        assert not any("lost" in (r or "") or "expired" in (r or "") for r in reasons), reasons
    finally:
        agent.close()


def test_silence_still_expires_an_agent_after_a_backward_jump(daemon: Daemon, jumps: Jumps) -> None:
    """The TTL is measured on the monotonic clock: a jump back does not lengthen it."""
    agent = FakeAgent(daemon, "quiet", ["work"])
    try:
        task = daemon.call("submit", text="job", capabilities=["work"])["task"]["id"]
        agent.next_assign()
        jumps.set(-DAY)

        # A wall-clock TTL would now wait a day; the monotonic one fails the task in ~3 s.
        def failed() -> list[str]:
            rows = daemon.call("ledger", task=task)["entries"]
            return [r["reason"] for r in rows if r["to_state"] == "failed"]

        reasons = wait_until(failed, timeout=20)
        assert reasons == ["session lost: agent quiet silent for more than 3s"], reasons
    finally:
        agent.close()


def test_a_retry_back_off_is_not_stretched_by_a_backward_jump(daemon: Daemon, jumps: Jumps) -> None:
    """The retry is due 5 s (``retry_backoff``) after the failure on the monotonic clock, not
    at a wall-clock instant that a jump back by a day would put a day away."""
    agent = FakeAgent(daemon, "retrier", ["work"], ttl=120)  # silent while it waits
    try:
        daemon.call("submit", text="flaky", capabilities=["work"], max_attempts=2)
        first = agent.next_assign()
        assert agent.fail(first, "transient")["ok"] is True
        jumps.set(-DAY)
        second = agent.next_assign(timeout=20)
        assert second["task"]["id"] == first["task"]["id"]
        assert second["epoch"] == first["epoch"] + 1
    finally:
        agent.close()
