"""The daemon on a PostgreSQL board: the same board, acknowledged work survives a crash."""

from __future__ import annotations

from pathlib import Path

from tests.helpers import Daemon, FakeAgent, colibri, one_line, write_config


def test_a_daemon_runs_on_postgresql_and_keeps_acknowledged_work_through_a_crash(
    tmp_path: Path, board: str
) -> None:
    root = tmp_path / "pg"
    root.mkdir()
    write_config(root, tick="1s")
    daemon = Daemon(root, "--store", board, "--lease-ttl", "2s")
    daemon.start()
    try:
        status = daemon.call("status")["daemon"]
        assert status["store"].startswith("postgresql://postgres@127.0.0.1")
        assert "search_path" not in status["store"]  # the shown location is the server's
        agent = FakeAgent(daemon, "pg-1", ["py"])
        done = daemon.submit("run me", capabilities=["py"])
        assign = agent.next_event("assign")
        agent.client.call("out", task=done["id"], epoch=assign["epoch"], output="ok",
                          cost={"usd": 0.25})  # fmt: skip
        daemon.wait_closed(done["id"])
        waiting = [daemon.submit(f"later {n}", capabilities=["gpu"]) for n in range(20)]
        agent.client.close()
        daemon.kill()  # SIGKILL: nothing but what was committed survives
        daemon.start()
        assert daemon.task(done["id"])["output"] == "ok"
        assert [daemon.task(t["id"])["state"] for t in waiting] == ["pending"] * 20
        seqs = [row["seq"] for row in daemon.ledger()]
        assert seqs == list(range(1, len(seqs) + 1))  # gap-free across the crash
        assert daemon.call("cost", by="agent")["totals"][0]["usd"] == 0.25
    finally:
        daemon.stop()


def test_an_unreachable_postgresql_is_one_line(tmp_path: Path) -> None:
    root = tmp_path / "nowhere"
    assert colibri(None, "init", str(root)).returncode == 0
    done = colibri(root, "run", "--store", "postgresql://nobody:hunter2@127.0.0.1:1/none")
    assert done.returncode == 1
    line = one_line(done.stderr)
    assert "cannot reach the PostgreSQL board at postgresql://nobody@127.0.0.1:1/none" in line
    assert "hunter2" not in done.stderr


def test_a_write_refused_as_its_batch_is_sent_rolls_the_batch_back_and_the_daemon_serves_on(
    tmp_path: Path, board: str
) -> None:
    """The store sends a batch's task writes together, at its commit: a compare-and-set that
    finds the row moved is refused there, not at the call. Someone writes the task's row
    behind the daemon's back (its epoch); the agent's ``out``, under the epoch the daemon
    gave, is then refused as its batch is sent: the batch is rolled back whole, the request
    answered ``internal``, the board read again from the store — and the daemon serves on."""
    import psycopg

    from colibri.core.errors import ColibriError

    root = tmp_path / "pg"
    root.mkdir()
    write_config(root, tick="1s")
    daemon = Daemon(root, "--store", board, "--lease-ttl", "5s")
    daemon.start()
    try:
        agent = FakeAgent(daemon, "pg-1", ["py"])
        task = daemon.submit("run me", capabilities=["py"])
        assign = agent.next_event("assign")
        seqs_before = [row["seq"] for row in daemon.ledger()]
        with psycopg.connect(board, autocommit=True) as admin:
            admin.execute("UPDATE tasks SET epoch = epoch + 100 WHERE id = %s", (task["id"],))
        try:
            agent.client.call("out", task=task["id"], epoch=assign["epoch"], output="ok")
            raise AssertionError("the out was acknowledged though its write was refused")
        except ColibriError as refused:
            assert refused.code == "internal"
            assert "refused by the store" in refused.message
        assert daemon.call("ping")["ok"]
        # Read again from the store: the row as it is there, nothing of the refused batch.
        shown = daemon.task(task["id"])
        assert (shown["state"], shown["epoch"]) == ("running", assign["epoch"] + 100)
        assert [row["seq"] for row in daemon.ledger()] == seqs_before
        # And it serves on: a new task goes through, its ledger rows next in line.
        agent.client.close()
        other = FakeAgent(daemon, "pg-2", ["go"])
        later = daemon.submit("after", capabilities=["go"])
        again = other.next_event("assign")
        other.client.call("out", task=later["id"], epoch=again["epoch"], output="fine")
        assert daemon.wait_closed(later["id"])["output"] == "fine"
        other.client.close()
        seqs = [row["seq"] for row in daemon.ledger()]
        assert seqs == list(range(1, len(seqs) + 1))
    finally:
        daemon.stop()
