"""Every number that enters at the edge of its range, followed downstream: sums in SQL, the
daily budgets, JSON, the ledger, time arithmetic. Past its bound a value is refused with
``bad_request`` and nothing changes; at its bound it works all the way through.
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from colibri.core.errors import ColibriError
from colibri.core.model import MAX_TOKENS, MAX_USD
from tests.daemon.conftest import Spawn
from tests.helpers import Daemon, RawConnection, colibri, error_code, pong, sqlite_only
from tests.sessions.support import ECHO

INT64_MAX = 2**63 - 1


def refused_code(daemon: Daemon, cmd: str, **fields: Any) -> str:
    with pytest.raises(ColibriError) as caught:
        daemon.call(cmd, **fields)
    return caught.value.code


def seqs(daemon: Daemon) -> int:
    """The ledger rows of the board (each tenant's highest seq, summed)."""
    position = daemon.call("status")["ledger_at"]
    return sum(int(part.rpartition(":")[2]) for part in position.split(",") if part)


@pytest.mark.parametrize(
    "cost",
    [
        {"tokens_in": INT64_MAX},
        {"tokens_in": MAX_TOKENS + 1},
        {"tokens_out": 2**64},
        {"tokens_in": -1},
        {"usd": 1e308},
        {"usd": MAX_USD * 1.000001},
        {"usd": -0.01},
        {"model": "m" * 201},
    ],
)
def test_a_reported_cost_past_its_bounds_is_refused_and_changes_nothing(
    daemon: Daemon, spawn: Spawn, cost: dict[str, Any]
) -> None:
    agent = spawn(daemon, "a1")
    task = daemon.call("submit", text="report a cost")["task"]
    assign = agent.next_assign()
    before = seqs(daemon)
    with pytest.raises(ColibriError) as caught:
        agent.out(assign, cost=cost)
    assert caught.value.code == "bad_request", caught.value.message
    assert "cost" in caught.value.message
    assert seqs(daemon) == before
    assert daemon.call("get", task=task["id"])["task"]["state"] == "running"
    agent.out(assign, cost={"usd": 0.5})  # the same report, in range, is taken
    assert daemon.call("get", task=task["id"])["task"]["outcome"] == "done"


def test_a_nul_in_a_report_is_refused_and_the_batch_around_it_stands(daemon: Daemon) -> None:
    """An agent's report with a NUL in its output is refused in one line and changes nothing;
    a submit that came in the same turn is taken. (On PostgreSQL, whose text holds no NUL, the
    report reached the store and lost its whole batch, the other requests with it.)"""
    agent = RawConnection(daemon.socket)
    try:
        agent.send(json.dumps({"cmd": "register-agent", "id": 1, "name": "a1",
                               "capabilities": [], "slots": 1}).encode() + b"\n")  # fmt: skip
        assert agent.reply()["ok"] is True
        task = daemon.submit("print a NUL")
        assign = next(m for m in iter(agent.reply, None) if m.get("event") == "assign")
        before = seqs(daemon)
        with_nul = {"cmd": "out", "id": 2, "task": task["id"], "epoch": assign["epoch"],
                    "output": "before\x00after"}  # fmt: skip
        beside = {"cmd": "submit", "id": 3, "text": "submitted beside it"}
        agent.send(f"{json.dumps(with_nul)}\n{json.dumps(beside)}\n".encode())
        replies = {m["id"]: m for m in (agent.reply(), agent.reply())}
        refusal, taken = replies[2], replies[3]
        assert refusal["error"]["code"] == "bad_request" and "NUL" in refusal["error"]["message"]
        assert taken["ok"] is True, taken
        assert seqs(daemon) == before + 1  # the submit's row alone
        assert daemon.task(task["id"])["state"] == "running"
        # The same report as a harness sends it (``text.storable``) is taken.
        kept = {**with_nul, "id": 4, "output": "before\ufffdafter"}
        agent.send(json.dumps(kept).encode() + b"\n")
        assert agent.reply()["ok"] is True
        assert daemon.task(task["id"])["output"] == "before\ufffdafter"
    finally:
        agent.close()


def test_costs_at_their_bounds_sum_without_overflow_in_every_view(
    daemon: Daemon, spawn: Spawn
) -> None:
    """Three sessions each at the largest cost a session may report: the sums are exact, and
    the `cost` command and the CLI show them (SQLite's SUM of integers would overflow at
    2**63; 1e308 dollars twice would be infinite, which JSON cannot carry)."""
    agent = spawn(daemon, "a1")
    for n in range(3):
        daemon.call("submit", text=f"expensive {n}")
        agent.out(agent.next_assign(), cost={"tokens_in": MAX_TOKENS, "tokens_out": MAX_TOKENS,
                                             "usd": MAX_USD})  # fmt: skip
    for by in ("agent", "workspace", "tenant", "day"):
        totals = daemon.call("cost", by=by)["totals"]
        assert len(totals) == 1, totals
        assert totals[0]["sessions"] == 3
        assert totals[0]["tokens_in"] == totals[0]["tokens_out"] == 3 * MAX_TOKENS
        assert totals[0]["usd"] == 3 * MAX_USD
    shown = colibri(daemon.root, "cost", "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)[0]["tokens_in"] == 3 * MAX_TOKENS
    table = colibri(daemon.root, "cost")
    assert table.returncode == 0 and "3000000.0000" in table.stdout, table.stdout + table.stderr


@sqlite_only
def test_stored_costs_that_would_overflow_a_sum_do_not_stop_the_daemon(root: Path) -> None:
    """Costs written before the bounds existed (or by another program): integers at 2**63 - 1
    and dollars at 1e308. The daily budgets read them at every start; the daemon starts, and
    `cost` answers with finite numbers."""
    (root / "colibri.jsonc").write_text(json.dumps({
        "workspaces": {"ws": {"session": {"command": ECHO}, "budget_usd_daily": 5}},
    }))  # fmt: skip
    daemon = Daemon(root)
    daemon.start()
    daemon.stop()
    db = sqlite3.connect(root / ".colibri" / "colibri.sqlite")
    with db:
        for seq in (1, 2):
            db.execute(
                "INSERT INTO ledger (seq, at, task, tenant, to_state, agent, epoch, cost) "
                "VALUES (?, strftime('%Y-%m-%dT%H:%M:%fZ', 'now'), NULL, 'default', 'done', "
                "'ws', 1, ?)",
                (seq, json.dumps({"tokens_in": INT64_MAX, "tokens_out": INT64_MAX, "usd": 1e308})),
            )
        db.execute("INSERT INTO ledger_heads (tenant, seq) VALUES ('default', 2)")
    db.close()
    daemon.start()
    try:
        totals = daemon.call("cost", by="agent")["totals"]
        assert totals[0]["sessions"] == 2
        assert totals[0]["tokens_in"] >= 2 * INT64_MAX - 2**12  # a float sum, not an overflow
        assert daemon.call("ping")["pong"] is True
    finally:
        daemon.stop()


@pytest.mark.parametrize(
    ("cmd", "fields"),
    [
        ("ledger", {"after": 2**63}),
        ("ledger", {"after": -1}),
        ("ledger", {"after": "default:9223372036854775808"}),
        ("ledger", {"after": "default:-1"}),
        ("ledger", {"after": "default"}),
        ("ledger", {"after": 7}),
        ("out", {"task": "t", "epoch": 2**62 + 1}),
        ("register-agent", {"name": "big", "running": [{"task": "t", "epoch": 2**64}]}),
        ("register-agent", {"name": "small-ttl", "ttl": 1e-300}),
        ("submit", {"text": "x", "budget_usd": 1e308}),
        ("submit", {"text": "x", "priority": 10**6 + 1}),
        ("consumed", {"message": 2**63}),
        ("ping", {"id": 2**63}),
    ],
)
def test_integers_and_floats_past_their_bounds_are_bad_requests(
    daemon: Daemon, cmd: str, fields: dict[str, Any]
) -> None:
    conn = RawConnection(daemon.socket)
    try:
        conn.send(json.dumps({"cmd": cmd, "id": 7, **fields}).encode() + b"\n")
        reply = conn.reply()
        assert reply["ok"] is False and reply["error"]["code"] == "bad_request", reply
        conn.send(b'{"cmd":"ping","id":8}\n')
        assert conn.reply() == pong(8)
    finally:
        conn.close()


def test_the_largest_ledger_position_is_an_empty_page(daemon: Daemon) -> None:
    daemon.submit("one row")
    at = f"acme:{INT64_MAX},default:{INT64_MAX}"
    reply = daemon.call("ledger", after=at)
    assert reply["entries"] == [] and reply["next"] == at


@sqlite_only
def test_a_read_that_fails_does_not_roll_back_the_write_pipelined_before_it(
    daemon: Daemon,
) -> None:
    """`submit` then a `get` that fails inside the daemon (a task row another program made
    unreadable), written in one go so that they share a batch: the submission stands."""
    broken = daemon.call("submit", text="to be damaged")["task"]["id"]
    daemon.call("cancel", task=broken)  # closed: `get` reads it from the store
    db = sqlite3.connect(daemon.root / ".colibri" / "colibri.sqlite", timeout=10)
    with db:
        db.execute("UPDATE tasks SET capabilities = '[1,' WHERE id = ?", (broken,))
    db.close()
    conn = RawConnection(daemon.socket)
    try:
        conn.send(
            b'{"cmd":"submit","id":1,"text":"valid, pipelined"}\n'
            + json.dumps({"cmd": "get", "id": 2, "task": broken}).encode()
            + b"\n"
        )
        first, second = conn.reply(), conn.reply()
    finally:
        conn.close()
    assert first["ok"] is True, first
    assert second["ok"] is False and second["error"]["code"] == "internal", second
    kept = daemon.call("get", task=first["task"]["id"])["task"]
    assert kept["text"] == "valid, pipelined"


def test_a_hundred_failed_attempts_keep_every_retry_within_a_day(tmp_path: Path) -> None:
    """retry_backoff doubles per attempt: 2**98 times the backoff is past any calendar. The
    wait is capped at a day, so the timestamps written for the retries stay valid."""
    from colibri.config import SchedulerSettings
    from colibri.core.model import TaskSpec, parse_rfc3339
    from colibri.core.protocol import RegisterAgent
    from colibri.daemon.board import MAX_RETRY_DELAY, Board
    from colibri.store import open_store
    from tests.inprocess import ManualClock, Peer

    clock = ManualClock()
    store = open_store(str(tmp_path / "board.sqlite"), durability="relaxed")
    board = Board(store, SchedulerSettings(retry_backoff=86_400.0), clock)
    board.rebuild()
    peer = Peer("a1")
    agent, _, _ = board.register(RegisterAgent(name="a1", ttl=86_400.0 * 400), peer)
    task, _ = board.submit(TaskSpec(text="fails every time", max_attempts=100))
    for attempt in range(1, 101):
        board.dispatch()
        store.commit()
        current = board.tasks[task.id]
        assert current.state == "running" and current.attempts == attempt
        ended = board.fail(agent, task.id, current.epoch, f"boom {attempt}")
        store.commit()
        if attempt < 100:
            assert ended.not_before is not None
            wait = parse_rfc3339(ended.not_before) - clock.time()
            assert 0 < wait <= MAX_RETRY_DELAY
            clock.advance(wait + 1)
            board.heartbeat(agent)
            board.sweep()  # the first pass after a long gap only notes the stall
            board.sweep()
    assert store.get_task(task.id).outcome == "failed"  # type: ignore[union-attr]
    store.close()


def test_a_sessions_report_sent_again_after_a_lost_reply_is_taken_once(
    daemon: Daemon, spawn: Spawn
) -> None:
    """A session's `colibri out` retries when the daemon restarts under it; if the first one
    committed, the second (the same output, the same claim) is answered as done, not refused —
    and changes nothing. Another output is still refused."""
    agent = spawn(daemon, "a1")
    task = daemon.call("submit", text="report twice")["task"]
    assign = agent.next_assign()
    report = {"task": task["id"], "epoch": assign["epoch"], "claim": assign["claim"],
              "from_session": True, "session_ended": False}  # fmt: skip
    first = daemon.call("out", output="the result", **report)["task"]
    rows = seqs(daemon)
    again = daemon.call("out", output="the result", **report)["task"]
    assert first["state"] == again["state"] == "done" and seqs(daemon) == rows
    assert refused_code(daemon, "out", output="another result", **report) == "illegal_transition"
    closed = agent.out(assign, "the result")["task"]  # the harness, once the session ended
    assert (closed["state"], closed["outcome"]) == ("closed", "done")
    assert closed["output"] == "the result"


def test_a_harness_report_sent_again_after_its_task_closed_is_answered_as_taken(
    daemon: Daemon, spawn: Spawn
) -> None:
    """The harness keeps a report until the daemon has taken it: one whose reply was lost (the
    store's answer to its commit, a takeover) is sent again after the task closed. The same
    out, or the same fail, under the same claim is answered as taken and changes nothing;
    another output, another error or another epoch is still refused."""
    agent = spawn(daemon, "a1")
    done = daemon.call("submit", text="out twice")["task"]
    assign = agent.next_assign()
    first = agent.out(assign, "the result")["task"]
    assert (first["state"], first["outcome"]) == ("closed", "done")
    rows = seqs(daemon)
    again = agent.out(assign, "the result")["task"]
    assert again == first and seqs(daemon) == rows
    assert error_code(lambda: agent.out(assign, "another result")) == "illegal_transition"
    assert error_code(lambda: agent.fail(assign, "the result")) == "illegal_transition"
    assert error_code(lambda: agent.out({**assign, "epoch": 2}, "the result")) == "stale_claim"

    failed = daemon.call("submit", text="fail twice")["task"]
    assign = agent.next_assign()
    first = agent.fail(assign, "it broke")["task"]
    assert (first["id"], first["state"], first["outcome"]) == (failed["id"], "closed", "failed")
    rows = seqs(daemon)
    assert agent.fail(assign, "it broke")["task"] == first and seqs(daemon) == rows
    assert error_code(lambda: agent.fail(assign, "it broke otherwise")) == "illegal_transition"
    assert daemon.task(done["id"])["output"] == "the result" and seqs(daemon) == rows


def test_ledger_follow_pages_through_a_long_backlog_without_a_gap(
    daemon: Daemon, spawn: Spawn
) -> None:
    """Rows with 60 KiB reasons (failures): the backlog passes one reply's 8 MiB, so the first
    page is cut. `colibri ledger --follow` reads on, page by page, then prints new rows as
    they come: every seq once, in order."""
    import subprocess
    import sys

    agent = spawn(daemon, "a1")
    for n in range(150):
        daemon.call("submit", text=f"fails {n}")
        agent.fail(agent.next_assign(), error=f"{n} " + "e" * 60_000)
    first = daemon.call("ledger", limit=10_000)
    assert first["more"] is True and len(first["entries"]) < 10_000
    command = [sys.executable, "-m", "colibri", "--root", str(daemon.root), "ledger", "-f"]
    follow = subprocess.Popen([*command, "--json"], stdout=subprocess.PIPE, text=True)
    try:
        seen: list[int] = []
        assert follow.stdout is not None
        while len(seen) < 450:  # three rows per task: pending, running, failed (+ closed)
            seen.append(json.loads(follow.stdout.readline())["seq"])
        daemon.call("submit", text="one more")
        last = seqs(daemon)
        while seen[-1] < last:
            seen.append(json.loads(follow.stdout.readline())["seq"])
        assert seen == list(range(1, last + 1))
    finally:
        follow.kill()
        follow.communicate()
