"""PostgreSQL away under a running daemon: refusals while it is, no acknowledged task lost,
the agents kept, and serving again on its own once it is back.

The daemon reaches the server through a TCP relay of the test's, which is cut (every
connection dropped, new ones refused) and restored: the network or the server gone, as far as
the daemon can tell, without stopping the server other tests use.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import psycopg
import pytest

from colibri.core.errors import ColibriError, StorageUnavailable
from colibri.store.postgres import PostgresStore
from tests.helpers import Daemon, FakeAgent, error_code, wait_until, write_config
from tests.postgres.cluster import PrivateServer
from tests.postgres.hive import Member, Relay
from tests.store.conftest import PG_DSN
from tests.store.values import add, make_task


def test_postgresql_away_for_a_while_loses_nothing_and_the_daemon_comes_back_by_itself(
    tmp_path: Path, relayed_board: tuple[Relay, str]
) -> None:
    relay, dsn = relayed_board
    root = tmp_path / "pgfault"
    root.mkdir()
    write_config(root, tick="1s", agent_ttl="2s")
    daemon = Daemon(root, "--store", dsn, "--lease-ttl", "5s")
    daemon.start()
    try:
        agent = FakeAgent(daemon, "steady", ["py"])
        acknowledged = [daemon.submit(f"before {n}", capabilities=["gpu"]) for n in range(10)]
        held = daemon.submit("held by the agent", capabilities=["py"])
        assign = agent.next_event("assign")
        relay.cut()
        # Away: new work is refused (nothing is acknowledged that is not stored); the daemon
        # and its agent's connection stay up.
        assert error_code(lambda: daemon.submit("during", capabilities=["gpu"])) == (
            "storage_unavailable"
        )
        assert error_code(lambda: daemon.call("status")) == "storage_unavailable"
        assert daemon.call("ping")["pong"]
        with pytest.raises(Exception):  # noqa: B017 - any refusal: the heartbeat is not taken
            agent.client.call("heartbeat")
        wait_until(lambda: "refusing every request until it is back" in daemon.log())
        # Longer than the agent's TTL: once back, its silence meanwhile must not count.
        time.sleep(3)
        relay.restore()
        wait_until(lambda: "the store answers again" in daemon.log(), timeout=15)
        assert [daemon.task(t["id"])["state"] for t in acknowledged] == ["pending"] * 10
        after = daemon.submit("after", capabilities=["gpu"])
        assert daemon.task(after["id"])["state"] == "pending"
        agent.client.call("heartbeat")
        agent.client.call("out", task=held["id"], epoch=assign["epoch"], output="done anyway")
        assert daemon.wait_closed(held["id"])["output"] == "done anyway"
        seqs = [row["seq"] for row in daemon.ledger()]
        assert seqs == list(range(1, len(seqs) + 1))
        agent.client.close()
    finally:
        daemon.stop()


def test_connections_killed_and_cut_during_a_submit_storm_lose_and_double_nothing(
    tmp_path: Path, relayed_board: tuple[Relay, str]
) -> None:
    """A7 at the suite's scale: submits, each retried with its idempotency key until it is
    acknowledged, while the daemon's server connections are killed (pg_terminate_backend)
    five times and the network cut twice; the storm goes on from before the first fault to a
    hundred submits after the last."""
    import threading
    import time

    import psycopg

    from colibri.core.errors import ColibriError

    relay, dsn = relayed_board
    name = f"colibri-a7-{relay.port}"
    dsn = f"{dsn}&application_name={name}"
    root = tmp_path / "a7"
    root.mkdir()
    write_config(root, tick="1s")
    daemon = Daemon(root, "--store", dsn, "--lease-ttl", "5s", log_level="info")
    daemon.start()
    acknowledged: dict[str, str] = {}
    refusals = 0
    faulted = threading.Event()  # every fault has been made
    done = threading.Event()

    def submit_all() -> None:
        nonlocal refusals
        after_faults = 0
        n = 0
        while after_faults < 100 and not done.is_set():
            after_faults += faulted.is_set()
            key = f"k{n}"
            while True:
                try:
                    task = daemon.call("submit", text=f"t{n}", capabilities=["none"],
                                       idempotency_key=key)["task"]  # fmt: skip
                except ColibriError as exc:
                    assert exc.code in ("storage_unavailable", "closed"), exc
                    refusals += 1
                    time.sleep(0.05)
                    continue
                acknowledged[key] = task["id"]
                break
            n += 1
        done.set()

    submitter = threading.Thread(target=submit_all)
    submitter.start()
    try:
        wait_until(lambda: len(acknowledged) >= 50 or done.is_set())  # the storm is on
        for round_ in range(7):
            time.sleep(0.4)
            if round_ in (2, 5):
                relay.cut()
                time.sleep(1.0)
                relay.restore()
            else:
                with psycopg.connect(PG_DSN, autocommit=True) as admin:
                    admin.execute(
                        "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                        "WHERE application_name = %s", (name,),
                    )  # fmt: skip
        faulted.set()
        submitter.join(120)
        assert done.is_set()
        submitted = len(acknowledged)
        assert 150 <= submitted < 10_000, submitted  # begun before the faults, ended after
        assert len(set(acknowledged.values())) == submitted
        listed = daemon.call("list", limit=10_000, state="pending")["tasks"]
        assert sorted(t["id"] for t in listed) == sorted(acknowledged.values())
        seqs = [row["seq"] for row in daemon.ledger()]
        assert seqs == list(range(1, submitted + 1))
        assert refusals > 0  # the faults did land
    finally:
        done.set()
        submitter.join(120)
        daemon.stop()


def _answers_lost_then(relay: Relay, after: float, *, restore: bool) -> threading.Thread:
    """From now on the server's answers are dropped; ``after`` seconds later every connection
    is broken, and new ones are let through (``restore``) or refused."""

    def later() -> None:
        time.sleep(after)
        relay.deaf = False
        if restore:
            relay.drop()
        else:
            relay.cut()

    relay.deaf = True
    thread = threading.Thread(target=later, daemon=True)
    thread.start()
    return thread


def _present(board: str, task_id: str) -> bool:
    import psycopg

    with psycopg.connect(board) as db:
        return db.execute("SELECT 1 FROM tasks WHERE id = %s", (task_id,)).fetchone() is not None


def test_a_commit_whose_answer_was_lost_is_asked_of_postgresql_and_counts_as_committed(
    board: str, relayed_board: tuple[Relay, str]
) -> None:
    """The COMMIT reaches the server and commits; its answer never comes back and the
    connection breaks. The store asks PostgreSQL (``pg_xact_status``) over a new connection
    and reports the batch committed, as it was, rather than "nothing was changed"."""
    relay, through = relayed_board
    store = PostgresStore(through)
    try:
        add(store, make_task("lost-answer"))
        sum(store.ledger_heads().values())  # the batch's ledger rows sent: only the COMMIT is left
        cutter = _answers_lost_then(relay, 0.5, restore=True)
        store.commit()  # no exception: it committed
        cutter.join(5)
        assert _present(board, "lost-answer")
        assert [e.task for e in store.ledger({}, 10)] == ["lost-answer"]
        add(store, make_task("next"))  # the store writes on, on its new connection
        store.commit()
        assert _present(board, "next")
    finally:
        store.close()


def test_a_commit_whose_outcome_cannot_be_known_says_so_and_never_nothing_was_changed(
    board: str, relayed_board: tuple[Relay, str]
) -> None:
    relay, through = relayed_board
    store = PostgresStore(through)
    try:
        add(store, make_task("unknown-outcome"))
        sum(store.ledger_heads().values())  # the batch's ledger rows sent: only the COMMIT is left
        cutter = _answers_lost_then(relay, 0.5, restore=False)
        with pytest.raises(StorageUnavailable) as refused:
            store.commit()
        cutter.join(5)
        message = str(refused.value)
        assert "whether it was written is not known" in message, message
        assert "nothing was changed" not in message
        assert _present(board, "unknown-outcome")  # it had committed: the message was right
        # Until the server can say, the board must not be read again (rebuilt from before a
        # commit that may land later, it would be wrong): the rollback refuses.
        with pytest.raises(StorageUnavailable, match="cannot say yet"):
            store.rollback()
        relay.restore()
        store.rollback()  # the daemon's next step after a failed batch: connect again
        assert store.get_task("unknown-outcome") is not None
    finally:
        store.close()


def test_a_connection_lost_before_the_commit_was_sent_changed_nothing(
    board: str, relayed_board: tuple[Relay, str]
) -> None:
    relay, through = relayed_board
    store = PostgresStore(through)
    try:
        add(store, make_task("never-committed"))
        relay.cut()
        relay.restore()
        with pytest.raises(StorageUnavailable, match="nothing was changed"):
            store.commit()
        assert not _present(board, "never-committed")
        store.rollback()
        add(store, make_task("after"))
        store.commit()
        assert _present(board, "after")
    finally:
        store.close()


def _claim_whose_commit_answer_is_lost(
    tmp_path: Path, relayed_board: tuple[Relay, str], *, server_back: bool
) -> tuple[Daemon, FakeAgent, Relay, dict[str, Any]]:
    """A daemon and an agent; a submit whose batch claims the task for the agent, and whose
    COMMIT reaches the server and commits while its answer is lost; then every connection is
    broken — with ``server_back``, new ones let through at once, else refused until the caller
    restores the relay. The submit's reply (ok or not) is returned."""
    relay, dsn = relayed_board
    root = tmp_path / "r"
    root.mkdir()
    write_config(root, tick="1s")
    daemon = Daemon(root, "--store", dsn, "--lease-ttl", "5s")
    daemon.start()
    agent = FakeAgent(daemon, "a1", ["py"])
    relay.deaf_after = b"COMMIT"
    replies: list[dict[str, Any]] = []

    def submit() -> None:
        with daemon.client() as client:
            client.send("submit", text="claimed in the lost commit", capabilities=["py"])
            replies.append(client.read())

    submitter = threading.Thread(target=submit, daemon=True)
    submitter.start()
    assert relay.deafened.wait(10), replies
    time.sleep(0.3)  # the COMMIT has committed on the server by now; its answer is dropped
    relay.deaf = False
    if server_back:
        relay.drop()
    else:
        relay.cut()
    submitter.join(15)
    assert replies, "the submit was never answered"
    return daemon, agent, relay, replies[0]


def test_a_claim_whose_commit_answer_was_lost_is_confirmed_and_its_agent_told(
    tmp_path: Path, relayed_board: tuple[Relay, str]
) -> None:
    daemon, agent, _, reply = _claim_whose_commit_answer_is_lost(
        tmp_path, relayed_board, server_back=True
    )
    try:
        assert reply["ok"], reply  # committed, and the daemon found out from PostgreSQL
        assign = agent.next_assign()
        assert assign["task"]["id"] == reply["task"]["id"]
        agent.out(assign, "ran once")
        assert daemon.wait_closed(reply["task"]["id"])["output"] == "ran once"
        agent.close()
    finally:
        daemon.stop()


def test_a_claim_committed_while_the_daemon_could_not_tell_reaches_its_agent_once_back(
    tmp_path: Path, relayed_board: tuple[Relay, str]
) -> None:
    """The commit's outcome cannot be known (the server unreachable): the submit is refused
    saying so, and the board waits for the server. Once back, the board rebuilt from it holds
    the task running on the agent — which was never sent the assign, its batch having failed
    as far as the daemon knew. The daemon sends it then, on the agent's same connection;
    without that the task would stay running with nobody running it."""
    daemon, agent, relay, reply = _claim_whose_commit_answer_is_lost(
        tmp_path, relayed_board, server_back=False
    )
    try:
        assert not reply["ok"] and reply["error"]["code"] == "storage_unavailable", reply
        assert "whether it was written is not known" in reply["error"]["message"]
        relay.restore()
        wait_until(lambda: "the store answers again" in daemon.log(), timeout=15)
        assign = agent.next_assign()
        assert "claims committed after all" in daemon.log()
        task_id = assign["task"]["id"]
        assert daemon.task(task_id)["text"] == "claimed in the lost commit"
        agent.out(assign, "ran once")
        assert daemon.wait_closed(task_id)["output"] == "ran once"
        starts = [e for e in daemon.ledger(task_id) if e["to_state"] == "running"]
        assert len(starts) == 1, starts  # one claim: the one committed, told late
        agent.close()
    finally:
        daemon.stop()


@pytest.mark.parametrize("then", ["a1", "a2"])
def test_a_claim_committed_while_the_daemon_could_not_tell_is_requeued_if_its_agent_left(
    tmp_path: Path, relayed_board: tuple[Relay, str], then: str
) -> None:
    """As above, but the agent's connection closes while the server is away (a harness whose
    heartbeat was refused reconnects). The assign was never sent to anyone, so the session
    never started: the task goes back to the queue, its attempt given back, and runs once on
    the agent registered again (``a1``; it used to fail, `session lost: agent a1 registered
    again without it`) or on another (``a2``, the first never back)."""
    daemon, agent, relay, reply = _claim_whose_commit_answer_is_lost(
        tmp_path, relayed_board, server_back=False
    )
    again = None
    try:
        assert not reply["ok"] and reply["error"]["code"] == "storage_unavailable", reply
        agent.close()
        relay.restore()
        wait_until(lambda: "the store answers again" in daemon.log(), timeout=15)
        assert "0 told to their agents now, 1 requeued" in daemon.log()
        again = FakeAgent(daemon, then, ["py"])
        assign = again.next_assign()
        task_id = assign["task"]["id"]
        assert daemon.task(task_id)["text"] == "claimed in the lost commit"
        again.out(assign, "ran once")
        closed = daemon.wait_closed(task_id)
        assert closed["output"] == "ran once" and closed["attempts"] == 1, closed
        moves = [(e["from_state"], e["to_state"], e["epoch"]) for e in daemon.ledger(task_id)]
        assert moves == [
            (None, "pending", 0), ("pending", "running", 1), ("running", "pending", 1),
            ("pending", "running", 2), ("running", "done", 2), ("done", "closed", 2),
        ], moves  # fmt: skip
    finally:
        if again is not None:
            again.close()
        daemon.stop()


def test_a_wait_answered_in_a_commit_whose_outcome_was_unknown_is_answered_once_back(
    tmp_path: Path, relayed_board: tuple[Relay, str]
) -> None:
    """The agent's ``out`` closes the task in a batch whose COMMIT commits while its answer is
    lost and the server cannot be reached: the ``wait`` it answered is put back with the
    batch. Once the server is back and the board rebuilt, the task is closed in it: the wait
    is answered then, instead of waiting for an end that has come."""
    relay, dsn = relayed_board
    root = tmp_path / "r"
    root.mkdir()
    write_config(root, tick="1s")
    daemon = Daemon(root, "--store", dsn, "--lease-ttl", "5s")
    daemon.start()
    try:
        agent = FakeAgent(daemon, "a1", ["py"])
        task = daemon.submit("waited for", capabilities=["py"])
        assign = agent.next_assign()
        waiter = daemon.client(timeout=30)
        wait_id = waiter.send("wait", task=task["id"])
        time.sleep(0.2)  # the wait is registered
        relay.deaf_after = b"COMMIT"
        agent_id = agent.client.send("out", task=task["id"], epoch=assign["epoch"], output="r")
        assert relay.deafened.wait(10)
        time.sleep(0.3)
        relay.deaf = False
        relay.cut()
        out_reply = agent.client.read()
        assert out_reply["id"] == agent_id and not out_reply["ok"], out_reply
        assert "not known" in out_reply["error"]["message"]
        relay.restore()
        reply = waiter.read()
        assert reply["id"] == wait_id and reply["ok"], reply
        assert reply["task"]["state"] == "closed" and reply["task"]["output"] == "r"
        waiter.close()
        agent.close()
    finally:
        daemon.stop()


def test_a_commit_that_never_reached_the_server_is_settled_by_ending_its_backend(
    board: str, relayed_board: tuple[Relay, str]
) -> None:
    """The connection is lost on the store's side only: the server's backend waits on, idle
    in the batch's transaction (its locks held). Asked, the server says "in progress" — for
    as long as it has not noticed. The store ends that backend (``pg_terminate_backend``),
    and the transaction, which never got its COMMIT, is aborted: nothing was changed."""
    relay, through = relayed_board
    store = PostgresStore(through)
    try:
        add(store, make_task("stranded"))
        sum(store.ledger_heads().values())
        relay.strand()
        with pytest.raises(StorageUnavailable, match="nothing was changed"):
            store.commit()
        assert not _present(board, "stranded")
        store.rollback()
        add(store, make_task("after"))  # the writers' lock is free again: not held by it
        store.commit()
        assert _present(board, "after")
    finally:
        store.close()


def test_a_transaction_id_handed_out_again_after_a_crash_is_not_taken_for_the_batch(
    private_server: PrivateServer,
) -> None:
    """The batch's transaction has its id, and the server crashes before any of it reached
    its disk (the WAL writer held back): started again, it hands the same id to the next
    transaction, which commits. The id's status now says "committed" — of another
    transaction. The store sees the server started again since the batch began and looks
    for the batch's own ledger row instead: absent, so nothing of it was written."""
    import psycopg

    server = private_server
    server.restart("fast", "wal_writer_delay=10000ms", "wal_writer_flush_after=0")
    store = PostgresStore(server.dsn)
    try:
        # The batch's records at the start of a WAL segment: on a page the board's making left
        # nearly full, they would fill it, and a full page is written out (to the OS, which an
        # immediate stop of the server does not undo) — with the batch's id in it.
        with psycopg.connect(server.dsn, autocommit=True) as switch:
            switch.execute("SELECT pg_switch_wal()")
        add(store, make_task("lost-in-the-crash"))
        sum(store.ledger_heads().values())
        with psycopg.connect(server.dsn, autocommit=True) as probe:
            xid = probe.execute(
                "SELECT backend_xid::text::bigint FROM pg_stat_activity "
                "WHERE backend_xid IS NOT NULL AND pid <> pg_backend_pid()"
            ).fetchone()
        assert xid is not None
        server.stop("immediate")
        server.start("wal_writer_delay=10000ms", "wal_writer_flush_after=0")
        with psycopg.connect(server.dsn, autocommit=True) as other:
            reused = False
            for _ in range(50):  # transactions of its own (each takes an id), to the batch's id
                mine = other.execute("SELECT txid_current() % 4294967296").fetchone()
                assert mine is not None
                if mine[0] >= xid[0]:
                    reused = mine[0] == xid[0]
                    break
        with pytest.raises(StorageUnavailable, match="nothing was changed"):
            store.commit()
        assert store.get_task("lost-in-the-crash") is None
        assert reused, "the id was not handed out again: this run did not test it"
    finally:
        store.close()


def test_a_batch_without_ledger_rows_lost_in_a_crash_does_not_wedge_the_store(
    private_server: PrivateServer,
) -> None:
    """A batch that wrote no ledger row (an agent's registration, say), its COMMIT's answer
    lost in a server crash: after the restart nothing tells it from another transaction, so
    its outcome is not known — but no backend can hold it any more, so whatever it was is
    settled in the data. The store says "not known" once, then reads and writes again (a
    store that waited for an outcome nobody can give would refuse every request for ever)."""
    server = private_server
    store = PostgresStore(server.dsn)
    try:
        store.ensure_tenant("acme", "2026-01-02T03:04:05.678Z")  # no ledger row
        assert store.get_task("nothing") is None  # a read sends the batch: it is open there
        server.stop("immediate")
        server.start()
        with pytest.raises(StorageUnavailable, match="not known"):
            store.commit()
        store.rollback()  # no refusal: the board may be read again
        assert store.get_task("nothing") is None
        add(store, make_task("after-the-crash"))
        store.commit()
        assert store.get_task("after-the-crash") is not None
    finally:
        store.close()


def test_a_daemon_whose_server_goes_silent_stops_by_its_deadline_and_exits(
    tmp_path: Path, relayed_board: tuple[Relay, str]
) -> None:
    """The server goes silent — its connections open, nothing answered: the lease's renewal,
    or its beat, hangs on its thread. The daemon stops by its own deadline (the beat and the
    sharing step are bounded by it too: a hung beat once kept the keeper from ever checking
    it) and exits 1, held up neither by that thread (a daemon thread, not the loop's executor,
    whose threads are joined at exit) nor by giving its lease back (bounded: the lease
    expires by itself)."""
    relay, dsn = relayed_board
    root = tmp_path / "r"
    root.mkdir()
    write_config(root, tick="1s")
    daemon = Daemon(root, "--store", dsn, "--lease-ttl", "3s")
    daemon.start()
    try:
        daemon.submit("before")
        relay.deaf = True
        assert daemon.process is not None and daemon.process.wait(timeout=20) == 1
        assert "could not be renewed within its ttl" in daemon.log()
    finally:
        relay.deaf = False
        daemon.stop()


def test_a_standby_whose_server_goes_silent_still_stops_when_told(
    tmp_path: Path, board: str, relayed_board: tuple[Relay, str]
) -> None:
    """A standby polls the lease through a server that then goes silent: its poll hangs on
    its thread, and a SIGTERM still stops it at once, exit 0 (the poll is left to its thread),
    rather than wait for an answer that never comes."""
    relay, through = relayed_board
    owner = Member(tmp_path / "owner", board, ttl="3s")
    standby = Member(tmp_path / "standby", through, ttl="3s")
    owner.start()
    try:
        standby.stand_by()
        wait_until(lambda: "standby: daemon" in standby.log(), timeout=15)
        relay.deaf = True
        time.sleep(1.5)  # its next poll, a third of the ttl later, is sent and hangs
        standby.stop()  # SIGTERM: exit 0 within the helper's 15 s
    finally:
        relay.deaf = False
        owner.stop_with(standby)


def test_a_server_gone_silent_mid_batch_is_given_up_and_the_daemon_stops_by_its_deadline(
    tmp_path: Path, relayed_board: tuple[Relay, str]
) -> None:
    """The server goes silent while a submit's batch waits for its answer: the daemon's loop,
    which runs the batch's statements, gives the connection up after half the lease (it hung
    in the kernel's wait for many minutes before, answering nobody, SIGTERM included), answers
    the submit ``storage_unavailable``, and does not connect again on the loop (to a silent
    server that takes as long): it answers at once — ``ping``, refusals — asking off the loop
    whether the server answers, and stops by its deadline, exit 1."""
    relay, dsn = relayed_board
    root = tmp_path / "r"
    root.mkdir()
    write_config(root, tick="1s")
    daemon = Daemon(root, "--store", dsn, "--lease-ttl", "6s")
    daemon.start()
    try:
        daemon.submit("before")
        relay.deaf = True
        started = time.monotonic()
        assert error_code(lambda: daemon.submit("during")) == "storage_unavailable"
        refused = time.monotonic() - started
        assert daemon.call("ping")["pong"]  # before the deadline: the loop is free
        assert error_code(lambda: daemon.submit("after")) == "storage_unavailable"
        answered = time.monotonic() - started
        assert "PostgreSQL said nothing for 3 s" in daemon.log()
        assert daemon.process is not None and daemon.process.wait(timeout=20) == 1
        assert "could not be renewed within its ttl" in daemon.log()
        print(f"refused {refused:.2f} s into the silence, the next answers by {answered:.2f} s, "
              f"stopped {time.monotonic() - started:.2f} s after it")  # fmt: skip
    finally:
        relay.deaf = False
        daemon.stop()


def test_a_batch_begun_just_before_the_deadline_on_a_silent_server_stops_the_daemon_by_it(
    tmp_path: Path, board: str, relayed_board: tuple[Relay, str]
) -> None:
    """A partition (nothing passes either way) between the daemon and PostgreSQL, and a submit
    whose batch begins 1.6 s before the lease expires by PostgreSQL's clock: the batch's wait
    on the loop is given up by the daemon's deadline (its last renewal + ttl - 0.8 s), not
    after half the ttl of silence, and the daemon stops before its lease can pass to another.
    Before, the loop waited out the 4 s of silence, and the deadline was checked 2.4 s after
    the lease had expired."""
    from tests.postgres.test_clock_skew import lease

    relay, dsn = relayed_board
    root = tmp_path / "r"
    root.mkdir()
    write_config(root, tick="1s")
    daemon = Daemon(root, "--store", dsn, "--lease-ttl", "8s")
    daemon.start()
    submitting: threading.Thread | None = None
    try:
        daemon.submit("before")
        relay.silent = True
        silenced = time.monotonic()
        epoch, left = lease(board)  # (straight to the server, past the relay)
        assert epoch == 1 and 0 < left <= 8
        expires = silenced + left
        # The moment the batch begins is the scenario; what is asserted waits for events.
        time.sleep(max(0.0, expires - 1.6 - time.monotonic()))
        submitting = threading.Thread(
            target=lambda: error_code(lambda: daemon.submit("just before")), daemon=True
        )
        submitting.start()

        def stopped() -> float | bool:
            return "could not be renewed within its ttl" in daemon.log() and time.monotonic()

        stopped_at = float(wait_until(stopped, timeout=30))
        assert stopped_at < expires, (stopped_at - silenced, expires - silenced)
        assert daemon.process is not None and daemon.process.wait(timeout=20) == 1
        assert "had not answered by this daemon's lease deadline" in daemon.log()
    finally:
        relay.silent = False
        if submitting is not None:
            submitting.join(30)
        daemon.stop()


def _lease_past(board: str, instant: object) -> tuple[int, bool] | None:
    """The lease's (epoch, live) once PostgreSQL's clock is past ``instant``; None before."""
    with psycopg.connect(board) as db:
        row = db.execute(
            "SELECT epoch, expires_at > now() FROM leases WHERE now() > %s", (instant,)
        ).fetchone()
    return None if row is None else (row[0], row[1])


def _accepted(daemon: Daemon, text: str) -> dict[str, Any] | None:
    try:
        return daemon.submit(text)
    except ColibriError as exc:
        assert exc.code == "storage_unavailable", exc
        return None


def test_a_server_silent_for_less_than_the_lease_is_waited_out_and_served_again(
    tmp_path: Path, board: str, relayed_board: tuple[Relay, str]
) -> None:
    """The server's answers lost for 2 s of an 8 s lease, a submit and a renewal waiting for
    theirs: both connections are given up (the store's after half the lease, the lease's
    after a quarter) and made again once it answers; the daemon serves on under the same
    lease, the submit refused and the tasks before it kept."""
    relay, dsn = relayed_board
    root = tmp_path / "r"
    root.mkdir()
    write_config(root, tick="1s")
    daemon = Daemon(root, "--store", dsn, "--lease-ttl", "8s")
    daemon.start()
    try:
        before = [daemon.submit(f"before {n}") for n in range(3)]
        with psycopg.connect(board) as db:
            held = db.execute("SELECT expires_at FROM leases").fetchone()
        assert held is not None
        relay.deaf = True
        threading.Timer(2.0, lambda: setattr(relay, "deaf", False)).start()
        assert error_code(lambda: daemon.submit("during")) == "storage_unavailable"
        after = wait_until(lambda: _accepted(daemon, "after"), timeout=20)
        assert "said nothing for 4 s" in daemon.log()
        assert [daemon.task(t["id"])["state"] for t in [*before, after]] == ["pending"] * 4
        # Past the end of the lease as it was when the silence began, by PostgreSQL's clock:
        # still live, so renewed in time (a renewal takes only a live lease), never stopped.
        row = wait_until(lambda: _lease_past(board, held[0]), timeout=20)
        assert row == (1, True)
        assert daemon.process is not None and daemon.process.poll() is None
        assert "could not be renewed" not in daemon.log()
        seqs = [row["seq"] for row in daemon.ledger()]
        assert seqs == list(range(1, len(seqs) + 1))
    finally:
        relay.deaf = False
        daemon.stop()


def test_a_wait_gives_up_on_silence_but_not_on_a_long_answer_that_keeps_coming(
    board: str,
) -> None:
    """A bounded connection (``silence``) gives up once the server has said nothing for that
    long, and is closed (the exchange was left half-way); an answer that takes longer but
    keeps arriving is read whole."""
    from colibri.store.postgres import _connect

    conn = _connect(board, 0.5)
    try:
        started = time.monotonic()
        rows = conn.execute(
            "SELECT repeat('x', 200000) AS chunk, pg_sleep(0.05) FROM generate_series(1, 30)"
        ).fetchall()
        took = time.monotonic() - started
        assert len(rows) == 30 and took > 1.0, took  # 1.5 s of answer, 0.05 s between chunks
        started = time.monotonic()
        with pytest.raises(psycopg.OperationalError, match="said nothing for 0.5 s"):
            conn.execute("SELECT pg_sleep(3)")
        assert time.monotonic() - started < 2.5
        assert conn.closed
    finally:
        conn.close()


def test_reachable_says_so_of_a_silent_server_without_touching_the_store(
    relayed_board: tuple[Relay, str],
) -> None:
    relay, dsn = relayed_board
    store = PostgresStore(dsn, lease_ttl=2.0)
    try:
        add(store, make_task("held"))
        store.reachable()
        relay.deaf = True
        started = time.monotonic()
        with pytest.raises(StorageUnavailable, match="cannot reach|does not answer"):
            store.reachable()
        assert time.monotonic() - started < 5
        relay.deaf = False
        store.reachable()
        store.commit()  # its own connection was never touched: the batch commits
        assert store.get_task("held") is not None
    finally:
        relay.deaf = False
        store.close()


def test_a_commit_cut_by_silence_is_settled_over_the_connection_reachable_made(
    board: str, relayed_board: tuple[Relay, str]
) -> None:
    """The COMMIT reaches the server and commits; its answer is lost and the server says
    nothing more: the wait gives up after the silence, and the store does not connect again
    in the caller's thread (a silent server would take as long) — whether the batch was
    written is not known, and ``rollback`` keeps saying so. Once ``reachable`` has made a
    connection (off the loop, in a daemon), ``rollback`` takes it, asks PostgreSQL, finds the
    batch committed, and the store writes on."""
    relay, through = relayed_board
    store = PostgresStore(through, lease_ttl=4.0)  # silent for 2 s: given up
    try:
        add(store, make_task("committed-in-silence"))
        sum(store.ledger_heads().values())  # the batch's writes sent: only the COMMIT is left
        relay.deaf_after = b"COMMIT"
        started = time.monotonic()
        with pytest.raises(StorageUnavailable, match="not known"):
            store.commit()
        assert time.monotonic() - started < 3.5  # the silence, and no connecting after it
        assert _present(board, "committed-in-silence")
        with pytest.raises(StorageUnavailable, match="said nothing for 2 s"):
            store.rollback()  # no connection to ask on yet
        relay.deaf = False
        store.reachable()
        store.rollback()  # settled: committed
        assert [e.task for e in store.ledger({}, 10)] == ["committed-in-silence"]
        add(store, make_task("next"))
        store.commit()
        assert _present(board, "next")
    finally:
        relay.deaf = False
        store.close()
