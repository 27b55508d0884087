"""Several daemons on one PostgreSQL board: one serves by its lease, the others stand by and
take over when it lapses; a daemon that lost its lease cannot write a row (the fence)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import tempfile
import threading
import time
from pathlib import Path

import pytest

from colibri.core.errors import ColibriError, LeaseLost
from colibri.core.model import LedgerEntry
from colibri.store.postgres import BoardLease, PostgresStore
from tests.helpers import colibri, one_line, wait_until
from tests.postgres.fence_race import writes_racing_takeovers
from tests.postgres.hive import Member, Relay, tcp_agent


def test_a_standby_takes_over_when_the_owner_dies_and_the_agent_follows(
    tmp_path: Path, board: str
) -> None:
    first, second = Member(tmp_path / "a", board), Member(tmp_path / "b", board)
    first.start()
    state = tempfile.mkdtemp(prefix="cr-", dir="/tmp")
    agent = None
    try:
        second.stand_by()
        # Its root's socket says it stands by, and who serves; it listens on no TCP port yet.
        with pytest.raises(ColibriError) as caught:
            second.call("status")
        assert caught.value.code == "standby" and first.address in caught.value.message
        told = colibri(second.root, "status")
        assert told.returncode == 1 and "this daemon stands by" in one_line(told.stderr)
        with pytest.raises(OSError):
            socket.create_connection(("127.0.0.1", second.port), timeout=2).close()
        token = first.call("token-create", role="agent", tenant="default", agent="far")["secret"]
        agent = tcp_agent(f"{first.address},{second.address}", token, state)
        before = first.submit("before", capabilities=["far"])
        assert first.wait_closed(before["id"])["output"] == "before"
        waiting = [first.submit(f"pending {n}", capabilities=["nobody"]) for n in range(5)]
        first.kill()
        killed = time.monotonic()
        wait_until(second.serving, timeout=15)
        took = time.monotonic() - killed
        assert took < 6  # the 2 s lease, a standby's poll, and its start
        assert "took the board's lease (epoch 2)" in second.log()
        listed = colibri(None, "hive", "list", "--store", board, "--json")
        assert listed.returncode == 0, listed.stderr
        hives = {h["id"]: h for h in json.loads(listed.stdout)}
        assert len(hives) == 2
        serving = [h for h in hives.values() if h["lease_epoch"] is not None]
        assert [h["address"] for h in serving] == [second.address]
        assert serving[0]["lease_epoch"] == 2 and serving[0]["lease_left_s"] > 0
        table = colibri(None, "hive", "list", "--store", board)
        assert "serving (epoch 2" in table.stdout, table.stdout
        assert [second.task(t["id"])["state"] for t in waiting] == ["pending"] * 5
        after = second.submit("after", capabilities=["far"])
        assert second.wait_closed(after["id"], timeout=20)["output"] == "after"
        seqs = [row["seq"] for row in second.ledger()]
        assert seqs == list(range(1, len(seqs) + 1))
    finally:
        if agent is not None:
            agent.send_signal(signal.SIGTERM)
            agent.wait(timeout=20)
        shutil.rmtree(state, ignore_errors=True)
        first.stop_with(second)


def test_run_detach_of_a_standby_says_it_stands_by(tmp_path: Path, board: str) -> None:
    """``run --detach`` on a board another daemon serves returns once its own daemon stands
    by, saying so with its pid (its root's socket answers ``standby`` for it)."""
    from colibri.client import daemon_pid

    first = Member(tmp_path / "a", board)
    first.start()
    other = tmp_path / "b"
    try:
        started = colibri(other, "run", "--detach", "--store", board, "--lease-ttl", "2s")
        assert started.returncode == 0, started.stderr
        pid = daemon_pid(other)
        assert started.stdout.startswith(f"daemon pid {pid} stands by for {other}: ")
        told = colibri(other, "status")
        assert told.returncode == 1 and "this daemon stands by" in one_line(told.stderr)
        stopped = colibri(other, "stop")
        assert stopped.returncode == 0 and f"(pid {pid})" in stopped.stdout, stopped.stderr
    finally:
        left = daemon_pid(other)
        if left is not None:
            os.kill(left, signal.SIGKILL)
        first.stop()


def test_an_owner_stopped_past_its_lease_writes_nothing_when_it_wakes(
    tmp_path: Path, board: str
) -> None:
    first, second = Member(tmp_path / "a", board), Member(tmp_path / "b", board)
    first.start()
    try:
        first.submit("first's", capabilities=["nobody"])
        second.stand_by()
        first.process.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
        wait_until(second.serving, timeout=15)
        mine = second.submit("second's", capabilities=["nobody"])
        rows = second.ledger()
        first.process.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        # Woken past its own deadline it stops at once (or a renewal finds the lease gone, or
        # a write meets the fence).
        assert first.process.wait(timeout=15) == 1  # type: ignore[union-attr]
        assert any(
            why in first.log()
            for why in ("passed to another daemon", "could not be renewed within its ttl")
        ), first.log()
        assert second.ledger() == rows  # not a row from the woken one
        assert second.task(mine["id"])["state"] == "pending"
    finally:
        if first.process is not None and first.process.poll() is None:
            first.process.send_signal(signal.SIGCONT)
        first.stop_with(second)


def test_writes_racing_takeovers_never_commit_under_a_stale_epoch(board: str) -> None:
    """A writer keeps writing under the lease it took while another takes the lease from it
    again and again; each takeover then writes a marker row. In the ledger's order, no row of
    an epoch may follow the marker of a later one (``fence_race.py``; 10,000 writes in
    ``bench/chaos.py --only F1``)."""
    figures = writes_racing_takeovers(board, writes=100, takeovers=30)
    assert figures["writes"] >= 100 and figures["markers"] >= 10, figures
    assert figures["refused_lease_lost"] >= 10, figures
    assert figures["stale"] == 0, figures


def test_a_renewal_never_waits_behind_a_batch_and_a_takeover_always_does(board: str) -> None:
    """The fence holds the lease row FOR KEY SHARE: the serving daemon's renewal (its expiry
    only) goes through while a batch of its own is open — back-to-back batches under load once
    starved it past its ttl — and a takeover (a new owner and epoch) still waits for the batch."""
    import psycopg

    lease = BoardLease(board, ttl=30)
    thief = BoardLease(board, ttl=30)
    store = PostgresStore(board)
    try:
        assert lease.take()
        store.fence = lease.fence
        row = LedgerEntry(at="2026-01-01T00:00:00.000Z", to_state="x", epoch=lease.epoch)
        store.append_ledger(row)
        # A read sends the batch: it is open, the fence held.
        assert sum(store.ledger_heads().values()) == 1
        renewed: list[bool] = []
        renewal = threading.Thread(target=lambda: renewed.append(lease.renew()))
        renewal.start()
        renewal.join(5)
        assert renewed == [True], "the renewal waited for the serving daemon's own batch"
        store.commit()

        store.append_ledger(row)
        assert sum(store.ledger_heads().values()) == 2  # another batch open
        with psycopg.connect(board, autocommit=True) as admin:  # the lease lapses ...
            admin.execute("UPDATE leases SET expires_at = now() - interval '1 ms'")
        took: list[bool] = []
        takeover = threading.Thread(target=lambda: took.append(thief.take()))
        takeover.start()
        takeover.join(1.0)
        assert takeover.is_alive() and took == []  # ... but the batch still holds it
        store.commit()  # the batch ends: its write stands, under the epoch it began with
        takeover.join(10)
        assert took == [True] and thief.epoch == lease.epoch + 1
        store.append_ledger(row)  # held: the fence is checked as the batch is sent
        with pytest.raises(LeaseLost):
            store.commit()
        with pytest.raises(LeaseLost):  # the batch stays lost until it is rolled back
            store.append_ledger(row)
        store.rollback()
        assert sum(store.ledger_heads().values()) == 2  # nothing of it was written
    finally:
        lease.close()
        thief.close()
        store.close()


def test_a_renewal_never_waits_behind_another_daemons_taking(board: str) -> None:
    """Takings queue on a lock of their own, not the ``leases`` table's: a renewal's UPDATE
    queued behind every other daemon's taking, and sharing daemons far from PostgreSQL,
    taking tenants one after another, starved each other's renewals past their ttl. Here a
    taking of beta waits inside its transaction (for a batch still holding the whole board's
    expired row, as a stalled daemon's would) while acme's owner renews."""
    import psycopg

    PostgresStore(board).close()
    whole = BoardLease(board, ttl=30)
    assert whole.take()
    whole.release()  # the board's row, expired: a tenant's taking locks it FOR UPDATE
    acme = BoardLease(board, 30, tenants=("acme",))
    thief = BoardLease(board, 30, sharing=True)
    try:
        assert acme.take()
        with psycopg.connect(board) as stalled:  # a batch under the board's row
            stalled.execute("SELECT 1 FROM leases WHERE name = 'board' FOR KEY SHARE")
            took: list[list[str]] = []
            taking = threading.Thread(target=lambda: took.append(thief.take_tenants(("beta",))))
            taking.start()
            taking.join(0.5)
            assert taking.is_alive()  # waiting inside its transaction
            renewed: list[bool] = []
            renewal = threading.Thread(target=lambda: renewed.append(acme.renew()))
            renewal.start()
            renewal.join(5)
            assert renewed == [True], "the renewal waited for another daemon's taking"
            assert taking.is_alive()
            stalled.rollback()
        taking.join(10)
        assert took == [["beta"]]
    finally:
        for lease in (acme, thief, whole):
            lease.close()


def test_an_owner_cut_off_for_a_third_of_its_lease_keeps_it_and_serves_again(
    tmp_path: Path, board: str, relayed_board: tuple[Relay, str]
) -> None:
    """PostgreSQL out of the owner's reach for less than its lease (a third of it) while a
    standby watches: by PostgreSQL's clock the lease never lapses, so there is no takeover;
    the owner refuses meanwhile and serves again by itself, under the same epoch."""
    import psycopg

    relay, through = relayed_board
    ttl = 6.0
    owner = Member(tmp_path / "a", through, ttl=f"{ttl:g}s")
    standby = Member(tmp_path / "b", board, ttl=f"{ttl:g}s")
    owner.start()
    try:
        standby.stand_by()
        before = owner.submit("before the cut", capabilities=["nobody"])
        with psycopg.connect(board, autocommit=True) as db:
            held = db.execute("SELECT expires_at FROM leases").fetchone()
        assert held is not None
        relay.cut()
        time.sleep(ttl / 3)
        with pytest.raises(ColibriError) as refused:
            owner.submit("during", capabilities=["nobody"])
        assert refused.value.code == "storage_unavailable"
        relay.restore()
        wait_until(lambda: "the store answers again" in owner.log(), timeout=ttl)
        after = owner.submit("after", capabilities=["nobody"])

        def past_the_lease_held_at_the_cut() -> tuple[int, bool] | None:
            with psycopg.connect(board, autocommit=True) as db:
                return db.execute(
                    "SELECT epoch, expires_at > now() AS live FROM leases WHERE now() > %s",
                    held,
                ).fetchone()

        # By PostgreSQL's clock, past the end of the lease as it was at the cut, and still
        # live: renewed before it lapsed (a renewal takes only a live lease), never lapsed.
        row = wait_until(past_the_lease_held_at_the_cut, timeout=3 * ttl)
        assert row == (1, True), row
        assert "took the board's lease" not in standby.log()
        assert owner.process is not None and owner.process.poll() is None
        assert {t["id"] for t in owner.call("list", state="pending")["tasks"]} == {
            before["id"],
            after["id"],
        }
    finally:
        owner.stop_with(standby)


def test_a_board_that_takes_longer_than_the_lease_to_build_is_kept(
    tmp_path: Path, board: str
) -> None:
    """Building the board (every open task read back) runs on the loop's thread, where the
    lease's renewals cannot: a thread of its own renews the lease meanwhile. Before, a daemon
    whose board took longer than the ttl to build stopped by its own deadline as it began to
    serve — and so would every standby after it."""
    import psycopg

    PostgresStore(board).close()
    with psycopg.connect(board, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO tasks (id, tenant, text, capabilities, labels, state, created_at, "
            "updated_at) SELECT '01a2b3c4-0000-7000-8000-' || lpad(to_hex(g), 12, '0'), "
            "'default', 'task ' || g, '[\"nobody\"]', '[]', 'pending', "
            "'2026-12-03T08:00:00.000Z', '2026-12-03T08:00:00.000Z' "
            "FROM generate_series(1, 300000) g"
        )
    # (A 1 s lease with 200,000 tasks: a loaded suite once held the loop up longer than its
    # 0.1 s margin just after the build, and the daemon stopped by its deadline.)
    member = Member(tmp_path / "big", board, ttl="2s")
    started = time.monotonic()
    member.start(timeout=60)
    try:
        built_s = time.monotonic() - started
        with psycopg.connect(board) as conn:
            held = conn.execute("SELECT expires_at FROM leases").fetchone()

        def past_the_lease_held_once_built() -> tuple[int, bool] | None:
            with psycopg.connect(board) as conn:
                return conn.execute(
                    "SELECT epoch, expires_at > now() FROM leases WHERE now() > %s", held
                ).fetchone()

        # By PostgreSQL's clock, past the end of the lease it held once built, and still live
        # under epoch 1: renewed since, before it lapsed (a renewal takes only a live lease).
        assert wait_until(past_the_lease_held_once_built, timeout=20) == (1, True)
        assert member.process is not None and member.process.poll() is None, member.log()
        assert "could not be renewed" not in member.log()
        assert member.call("status")["tasks"]["pending"] == 300_000
        assert built_s > 2.0, f"the board was built in {built_s:.2f}s: within the ttl, no proof"
    finally:
        member.stop()
