"""Two daemons of one board whose wall clocks are two minutes apart (one 60 s ahead of the
machine, one 60 s behind, by libfaketime): the lease is judged by PostgreSQL's clock alone, so
the standby ahead never takes it early, and the owner behind still stops by its own monotonic
deadline when PostgreSQL is cut off."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from colibri.core.model import parse_rfc3339
from tests.helpers import wait_until
from tests.postgres.hive import Member, Relay
from tests.reliability.test_clock_jumps import LIBFAKETIME, Jumps

pytestmark = pytest.mark.skipif(
    not LIBFAKETIME.is_file(), reason="needs libfaketime (Debian package libfaketime)"
)

SKEW = 60


def lease(board: str) -> tuple[int, float]:
    """The lease's epoch and its seconds left, by PostgreSQL's clock (0, 0 with none)."""
    import psycopg

    with psycopg.connect(board, autocommit=True) as conn:
        row = conn.execute(
            "SELECT epoch, EXTRACT(EPOCH FROM expires_at - now())::float8 FROM leases"
        ).fetchone()
    return (0, 0.0) if row is None else (int(row[0]), float(row[1]))


def skewed(root: Path, board: str, offset: int, ttl: str) -> Member:
    clock = Jumps(root.parent / f"{root.name}.faketime")
    clock.set(offset)
    return Member(root, board, ttl=ttl, env=clock.env)


def until_epoch(board: str, epoch: int, timeout: float) -> float:
    """Poll the lease every 10 ms until its epoch is ``epoch``; the monotonic time it was seen."""
    deadline = time.monotonic() + timeout
    while lease(board)[0] != epoch:
        assert time.monotonic() < deadline, f"epoch {epoch} not taken within {timeout}s"
        time.sleep(0.01)
    return time.monotonic()


def test_a_standby_whose_clock_runs_ahead_takes_the_lease_only_when_postgresql_says(
    tmp_path: Path, board: str
) -> None:
    # Long enough that the owner's renewals (every third of it, under libfaketime on a busy
    # host) keep it through the watch: the test is about the standby, not the owner's speed.
    ttl = 6.0
    owner = skewed(tmp_path / "behind", board, -SKEW, f"{ttl:g}s")
    standby = skewed(tmp_path / "ahead", board, +SKEW, f"{ttl:g}s")
    owner.start()
    try:
        standby.stand_by()
        before = owner.submit("under the owner", capabilities=["nobody"])
        # A ttl and more while the owner lives: by the standby's clock its lease expired long
        # ago (its clock is two minutes ahead of the owner's).
        watched = time.monotonic()
        while time.monotonic() - watched < 1.5 * ttl:
            assert lease(board)[0] == 1
            assert owner.serving() and "took the board's lease" not in standby.log()
            time.sleep(0.1)
        owner.kill()
        # The lease left after the kill (a renewal in flight has landed or never will).
        epoch, left = lease(board)
        asked = time.monotonic()
        assert epoch == 1 and 0 < left <= ttl
        took = until_epoch(board, 2, timeout=ttl + 10)
        expired = asked + left
        # Not before PostgreSQL's expiry (a standby trusting its own clock would have taken
        # it at once), and soon after it (the standby polls when the lease is due): well over
        # half the ttl after the kill — renewals come every third of it, later on a busy host.
        assert took >= expired - 0.05, (took - asked, left)
        assert took - expired < 2.0, (took - asked, left)
        assert took - asked > ttl / 2, (took - asked, left)
        # Then it serves: built and listening, which a loaded machine may take a while to do (the
        # lease's timing, the promise, is asserted above).
        wait_until(standby.serving, timeout=60)
        after = standby.submit("under the standby", capabilities=["nobody"])
        # The skew is real: the two daemons' clocks stamped the tasks two minutes apart.
        apart = parse_rfc3339(after["created_at"]) - parse_rfc3339(before["created_at"])
        assert 2 * SKEW - 5 < apart < 2 * SKEW + 60, apart
        assert standby.task(before["id"])["state"] == "pending"
    finally:
        owner.stop_with(standby)


def test_an_owner_whose_clock_runs_behind_stops_by_its_own_deadline_when_cut_off(
    tmp_path: Path, board: str, relayed_board: tuple[Relay, str]
) -> None:
    relay, through = relayed_board
    # (Shorter ttls lost the lease before the cut, and 8 s saw the owner stop up to 2.3 s past
    # its deadline, while libfaketime made its threads spin for the GIL: see ``Jumps.env``.
    # Since, beside two busy loops, it stops 0.78-0.80 s before its lease expires: the margin.)
    ttl = 8.0
    owner = skewed(tmp_path / "behind", through, -SKEW, f"{ttl:g}s")
    standby = skewed(tmp_path / "ahead", board, +SKEW, f"{ttl:g}s")
    owner.start()
    try:
        standby.stand_by()
        owner.submit("under the owner", capabilities=["nobody"])
        time.sleep(ttl)  # a few renewals through the relay
        relay.cut()
        cut = time.monotonic()
        epoch, left = lease(board)
        expires = time.monotonic() + left
        assert epoch == 1 and 0 < left <= ttl

        def stopped() -> bool:
            return "could not be renewed within its ttl" in owner.log()

        stopped_at = wait_until(lambda: stopped() and time.monotonic(), timeout=3 * ttl)
        took = until_epoch(board, 2, timeout=3 * ttl)
        assert owner.process is not None and owner.process.wait(timeout=15) == 1
        # It stopped serving before its lease could pass to anyone, by PostgreSQL's clock …
        assert stopped_at < expires, (stopped_at - cut, expires - cut)
        assert stopped_at < took, (stopped_at - cut, took - cut)
        # … and within a ttl of the cut: a clock behind does not lengthen its deadline.
        assert stopped_at - cut < ttl, stopped_at - cut
        # Then it serves: built and listening, which a loaded machine may take a while to do (the
        # lease's timing, the promise, is asserted above).
        wait_until(standby.serving, timeout=60)
    finally:
        owner.stop_with(standby)


#: How far the serving daemon's wall clock runs from the machine's (and PostgreSQL's).
SCHEDULE_SKEW = 120


def board_time(board: str) -> float:
    """PostgreSQL's clock now, as seconds since the epoch."""
    import psycopg

    with psycopg.connect(board, autocommit=True) as conn:
        row = conn.execute("SELECT EXTRACT(EPOCH FROM clock_timestamp())::float8").fetchone()
    assert row is not None
    return float(row[0])


def fires(board: str) -> list[tuple[str, str, str, str]]:
    """Every fire recorded on the board: schedule, nominal time, outcome, stamp."""
    import psycopg

    with psycopg.connect(board, autocommit=True) as conn:
        return [
            (str(s), str(n), str(o), str(a))
            for s, n, o, a in conn.execute(
                "SELECT schedule, nominal, outcome, at FROM schedule_fires ORDER BY nominal"
            ).fetchall()
        ]


@pytest.mark.parametrize("offset", [+SCHEDULE_SKEW, -SCHEDULE_SKEW], ids=["ahead", "behind"])
def test_schedules_fire_by_the_boards_clock_not_the_serving_daemons(
    tmp_path: Path, board: str, offset: int
) -> None:
    """The serving daemon's wall clock two minutes ahead of PostgreSQL's, or behind: a once
    schedule fires at its time by the board's clock — not two minutes early (nor recorded
    missed), nor two minutes late — and an interval schedule's times are the board's, none
    fired before PostgreSQL's clock reached it, none missed. Before, ahead: fires up to 120 s
    early and future times recorded missed; behind: nothing fired for two minutes."""
    from colibri.core.model import rfc3339

    daemon = skewed(tmp_path / "skewed", board, offset, "6s")
    daemon.start()
    try:
        task = {"text": "on the board's time", "capabilities": ["nobody"]}
        due = board_time(board) + 4
        daemon.call("schedule-add", name="once", schedule={"at": rfc3339(due), "task": task})
        daemon.call(
            "schedule-add",
            name="every",
            schedule={"every": "1s", "overlap": "allow", "catch_up": "all", "task": task},
        )
        seen: list[tuple[float, list[tuple[str, str, str, str]]]] = []

        def once_and_every_fired() -> bool:
            recorded = fires(board)
            seen.append((board_time(board), recorded))
            names = [s for s, *_ in recorded]
            return "once" in names and names.count("every") >= 2

        # (Behind, it would fire two minutes late: far past this wait.)
        wait_until(once_and_every_fired, timeout=30)
        # Every fire seen was of a time PostgreSQL's clock had reached when it was seen.
        for observed, recorded in seen:
            for schedule, nominal, outcome, _ in recorded:
                assert parse_rfc3339(nominal) <= observed + 0.05, (schedule, nominal, observed)
                assert outcome == "fired", (schedule, nominal, outcome)
        (once,) = [f for f in seen[-1][1] if f[0] == "once"]
        assert once[1] == rfc3339(due)
        # Stamped by the board's clock: at or after its time, and not minutes after.
        assert due - 0.05 <= parse_rfc3339(once[3]) < due + 10, (once, due)
        every = [f for f in seen[-1][1] if f[0] == "every"]
        assert all(abs(parse_rfc3339(n) - due) < 30 for _, n, _, _ in every), every
    finally:
        daemon.stop()
