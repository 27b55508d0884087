"""Daemons sharing a PostgreSQL board's tenants out (``run --share``): they divide the tenants
among themselves, a daemon joining gets its share and one dying leaves its tenants to the
others, ``hive move`` hands a tenant to a chosen daemon, and clients and agents follow."""

from __future__ import annotations

import json
import shutil
import signal
import tempfile
from pathlib import Path
from typing import Any

import psycopg
import pytest

from colibri.client import Client, Remote
from colibri.core.errors import NotOwner
from tests.helpers import colibri, one_line, wait_until
from tests.postgres.hive import Member, tcp_agent
from tests.store.conftest import as_app_role

TENANTS = ["acme", "beta", "gamma", "delta", "default"]


def _served(board: str) -> dict[str, str]:
    """tenant → the id of the daemon whose live lease holds it."""
    with psycopg.connect(board) as conn:
        rows = conn.execute(
            "SELECT substr(name, 8), owner FROM leases "
            "WHERE name LIKE 'tenant/%' AND expires_at > now()"
        ).fetchall()
    return dict(rows)


def _ids(board: str) -> dict[str, str]:
    """daemon address → its id."""
    listed = colibri(None, "hive", "list", "--store", board, "--json")
    assert listed.returncode == 0, listed.stderr
    return {h["address"]: h["id"] for h in json.loads(listed.stdout)}


def _shares(board: str, members: list[Member]) -> list[int]:
    ids, served = _ids(board), _served(board)
    return [sum(1 for o in served.values() if o == ids.get(m.address)) for m in members]


def _fair(board: str, members: list[Member], tenants: int = len(TENANTS)) -> bool:
    shares = _shares(board, members)
    return sum(shares) == tenants and max(shares) - min(shares) <= 1


def _start(member: Member) -> Member:
    member.start()
    return member


def _submit(address: str, token: str, text: str, **fields: Any) -> Any:
    with Client.remote(Remote.parse(address, token=token, insecure_loopback=True)) as client:
        return client.submit(text, **fields)


def test_sharing_daemons_divide_the_tenants_and_follow_joins_deaths_and_moves(
    tmp_path: Path, board: str
) -> None:
    app = as_app_role(board)
    with psycopg.connect(board, autocommit=True) as admin:
        for tenant in TENANTS[:4]:
            admin.execute("INSERT INTO tenants (name, created_at) VALUES (%s, 'x')", (tenant,))
    members = [Member(tmp_path / name, app, share=True) for name in ("a", "b", "c")]
    a, b, c = members
    state = tempfile.mkdtemp(prefix="cr-", dir="/tmp")
    agent = None
    try:
        _start(a)
        _start(b)
        wait_until(lambda: _fair(board, [a, b]), timeout=20)
        assert sorted(_shares(board, [a, b])) == [2, 3]
        # Tokens are made by each tenant's daemon; a client given any address is sent on.
        served, ids = _served(board), _ids(board)
        by_id = {ids[m.address]: m for m in (a, b)}
        tokens = {
            t: by_id[served[t]].call("token-create", role="operator", tenant=t)["secret"]
            for t in TENANTS[:4]
        }
        worker = by_id[served["acme"]].call(
            "token-create", role="agent", tenant="acme", agent="far"
        )["secret"]
        pending = {t: _submit(a.address, tokens[t], f"for {t}", capabilities=["nobody"]).id
                   for t in TENANTS[:4]}  # fmt: skip
        agent = tcp_agent(f"{a.address},{b.address}", worker, state)
        ran = _submit(b.address, tokens["acme"], "acme's work", capabilities=["far"])
        wait_until(lambda: _closed(board, ran.id), timeout=20)
        # hive list counts it with the daemon serving acme, at that daemon's next beat.
        wait_until(lambda: _agents(board).get(_served(board)["acme"]) == 1, timeout=10)

        # A third joins: the two give tenants back until it has its share.
        _start(c)
        wait_until(lambda: _fair(board, members), timeout=30)
        assert sorted(_shares(board, members)) == [1, 2, 2]
        assert "gave back tenant" in a.log() + b.log() and "took tenant" in c.log()

        # hive move: acme to a daemon that does not serve it (its agent follows).
        served, ids = _served(board), _ids(board)
        target = next(m for m in members if ids[m.address] != served["acme"])
        moved = colibri(None, "hive", "move", "acme", "--to", ids[target.address][:8],
                        "--store", board, "--json")  # fmt: skip
        assert moved.returncode == 0, moved.stderr
        said = json.loads(moved.stdout)
        assert said["to"] == ids[target.address] and said["from"] == served["acme"]
        assert _served(board)["acme"] == ids[target.address]
        again = _submit(a.address, tokens["acme"], "acme again", capabilities=["far"])
        wait_until(lambda: _closed(board, again.id), timeout=30)
        assert target.task(again.id)["output"] == "acme again"
        wait_until(lambda: _fair(board, members), timeout=30)
        assert _served(board)["acme"] == ids[target.address]  # a moved tenant stays

        # The daemon serving beta dies: the other two take its tenants; nothing is lost.
        victim = next(m for m in members if ids[m.address] == _served(board)["beta"])
        victim.kill()
        survivors = [m for m in members if m is not victim]
        wait_until(lambda: _fair(board, survivors), timeout=30)
        for tenant, task_id in pending.items():
            owner = next(m for m in survivors if ids[m.address] == _served(board)[tenant])
            assert owner.task(task_id)["state"] == "pending", tenant
        listed = colibri(None, "hive", "list", "--store", board)
        assert "sharing" in listed.stdout or "serving" in listed.stdout
    finally:
        if agent is not None:
            agent.send_signal(signal.SIGTERM)
            agent.wait(timeout=20)
        shutil.rmtree(state, ignore_errors=True)
        a.stop_with(b, c)


def _agents(board: str) -> dict[str, int]:
    """daemon id → the agents it had connected at its last beat (hive list --json)."""
    listed = colibri(None, "hive", "list", "--store", board, "--json")
    assert listed.returncode == 0, listed.stderr
    return {h["id"]: h["agents"] for h in json.loads(listed.stdout)}


def _closed(board: str, task_id: str) -> bool:
    with psycopg.connect(board) as conn:
        row = conn.execute("SELECT state FROM tasks WHERE id = %s", (task_id,)).fetchone()
    return row is not None and row[0] == "closed"


def test_a_tenant_nobody_serves_is_taken_once_asked_for(tmp_path: Path, board: str) -> None:
    sharer = Member(tmp_path / "a", board, share=True)
    try:
        sharer.start()
        wait_until(lambda: _served(board).get("default") is not None, timeout=20)
        with pytest.raises(NotOwner) as refused:
            sharer.call("submit", text="x", tenant="newco")
        assert refused.value.address is None and "sharing daemon takes it" in str(
            refused.value.message
        )
        wait_until(lambda: "newco" in _served(board), timeout=20)
        assert sharer.submit("now", tenant="newco")["tenant"] == "newco"
    finally:
        sharer.stop()


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--share"], "share out the tenants of a PostgreSQL board"),
        (["--share", "--tenants", "a", "--store", "postgresql://x/y"], "not both"),
    ],
)
def test_share_is_refused_where_it_cannot_be(tmp_path: Path, args: list[str], said: str) -> None:
    assert colibri(None, "init", str(tmp_path)).returncode == 0
    ran = colibri(tmp_path, "run", *args)
    assert ran.returncode != 0 and said in one_line(ran.stderr), ran.stderr


def test_hive_move_refuses_what_it_cannot_move(tmp_path: Path, board: str) -> None:
    pinned = Member(tmp_path / "p", board, tenants="acme")
    sharer = Member(tmp_path / "s", board, share=True)
    try:
        pinned.start()
        sharer.start()
        wait_until(lambda: "default" in _served(board), timeout=20)
        ids = _ids(board)

        def refusal(*args: str) -> str:
            moved = colibri(None, "hive", "move", *args, "--store", board)
            return one_line(moved.stderr) if moved.returncode else "not refused"

        assert "serves it by --tenants" in refusal("acme", "--to", ids[sharer.address][:8])
        assert "started with --share" in refusal("default", "--to", ids[pinned.address][:8])
        assert "no daemon of the board" in refusal("default", "--to", "ffffffff")
        assert "not a daemon's id" in refusal("default", "--to", "%")
        assert "no daemon serves tenant nobody" in refusal("nobody", "--to", ids[sharer.address])
        with psycopg.connect(board) as conn:
            marked = conn.execute("SELECT count(*) FROM leases WHERE handover_to IS NOT NULL")
            assert marked.fetchone() == (0,)
    finally:
        sharer.stop_with(pinned)


def test_a_sharing_daemon_stopped_past_its_leases_writes_nothing_when_it_wakes(
    tmp_path: Path, board: str
) -> None:
    """SIGSTOP past its leases: the other sharing daemon takes its tenants (a new epoch each);
    on SIGCONT the stopped one exits 1 by its own deadline (or its renewal or a write meets the
    fence), and no ledger row after the takeover carries its old epochs."""
    from colibri.store.postgres import PostgresStore

    PostgresStore(board).close()  # the board's tables
    with psycopg.connect(board, autocommit=True) as admin:
        for tenant in ("acme", "beta", "gamma"):
            admin.execute("INSERT INTO tenants (name, created_at) VALUES (%s, 'x')", (tenant,))
    first, second = (Member(tmp_path / n, board, share=True) for n in ("a", "b"))
    try:
        first.start()
        wait_until(lambda: len(_served(board)) == 4, timeout=20)  # 3 and default, all first's
        second.start()
        wait_until(lambda: _fair(board, [first, second], tenants=4), timeout=30)
        ids = _ids(board)
        stopped = {t for t, o in _served(board).items() if o == ids[first.address]}
        assert len(stopped) == 2
        pending = {t: first.submit(f"{t}'s", tenant=t, capabilities=["nobody"])["id"]
                   for t in sorted(stopped)}  # fmt: skip
        first.process.send_signal(signal.SIGSTOP)  # type: ignore[union-attr]
        wait_until(lambda: list(_served(board).values()) == [ids[second.address]] * 4, timeout=30)
        with psycopg.connect(board) as conn:
            epochs: dict[str, int] = dict(conn.execute(
                "SELECT substr(name, 8), epoch FROM leases WHERE name LIKE 'tenant/%%'"
            ).fetchall())  # fmt: skip
            top = conn.execute("SELECT max(seq) FROM ledger").fetchone()
        assert all(epochs[t] == 2 for t in stopped), epochs  # taken over: a new epoch each
        first.process.send_signal(signal.SIGCONT)  # type: ignore[union-attr]
        assert first.process.wait(timeout=15) == 1  # type: ignore[union-attr]
        assert any(
            why in first.log()
            for why in ("passed to another daemon", "could not be renewed within its ttl")
        ), first.log()
        with psycopg.connect(board) as conn:
            after = conn.execute(
                "SELECT count(*) FROM ledger WHERE seq > %s", (top[0] if top else 0,)
            ).fetchone()
        assert after == (0,)  # not a row from the woken one (nor any since)
        for tenant, task_id in pending.items():
            assert second.task(task_id)["state"] == "pending", tenant
    finally:
        if first.process is not None and first.process.poll() is None:
            first.process.send_signal(signal.SIGCONT)
        first.stop_with(second)


def test_a_tenant_whose_daemon_of_given_tenants_stands_by_is_left_to_it(
    tmp_path: Path, board: str
) -> None:
    """A sharing daemon beside a daemon of tenant acme and its standby: when acme's daemon dies
    its standby takes acme, not the sharing daemon, which shares the rest."""
    sharer = Member(tmp_path / "s", board, share=True)
    pinned, standby = (Member(tmp_path / n, board, tenants="acme") for n in ("p", "q"))
    try:
        pinned.start()
        sharer.start()
        standby.stand_by()
        wait_until(lambda: set(_served(board)) == {"acme", "default"}, timeout=20)
        ids = _ids(board)
        assert _served(board) == {"acme": ids[pinned.address], "default": ids[sharer.address]}
        pinned.kill()
        wait_until(lambda: _served(board).get("acme") == ids[standby.address], timeout=30)
        assert _served(board)["default"] == ids[sharer.address]
    finally:
        sharer.stop_with(standby, pinned)


def test_a_tenant_given_back_leaves_nothing_of_it_in_the_daemons_memory(
    tmp_path: Path, board: str
) -> None:
    """A sharing daemon gives acme back (here by ``hive move``) while acme's agent is connected
    to it: the agent goes to the new owner, and the daemon that gave it back forgets it — its
    ``agents`` no longer list it. Before, it stayed in memory; once silent past its ttl the
    sweep wrote its row, which is another tenant's to that daemon now (``agent name … is
    another tenant's``), and the whole batch, other tenants' requests in it, rolled back."""
    app = as_app_role(board)
    with psycopg.connect(board, autocommit=True) as admin:
        admin.execute("INSERT INTO tenants (name, created_at) VALUES ('acme', 'x')")
    a, b = Member(tmp_path / "a", app, share=True), Member(tmp_path / "b", app, share=True)
    state = tempfile.mkdtemp(prefix="cr-", dir="/tmp")
    agent = None
    try:
        _start(a)
        wait_until(lambda: _shares(board, [a]) == [2], timeout=20)
        worker = a.call("token-create", role="agent", tenant="acme", agent="far")["secret"]
        agent = tcp_agent(f"{a.address},{b.address}", worker, state)
        wait_until(lambda: "far" in {x["name"] for x in a.call("agents")["agents"]}, timeout=20)
        _start(b)
        wait_until(lambda: _fair(board, [a, b], 2), timeout=30)
        ids = _ids(board)
        if _served(board)["acme"] == ids[a.address]:
            moved = colibri(None, "hive", "move", "acme", "--to", ids[b.address][:8],
                            "--store", board)  # fmt: skip
            assert moved.returncode == 0, moved.stderr
        wait_until(lambda: "gave back tenant acme" in a.log(), timeout=30)
        # The agent follows acme to b, and a has nothing of it left.
        wait_until(lambda: "far" in {x["name"] for x in b.call("agents")["agents"]}, timeout=30)
        assert "far" not in {x["name"] for x in a.call("agents")["agents"]}
        served_here = a.call("status")
        assert served_here["agents"] == {"online": 0, "known": 0}, served_here
        token = b.call("token-create", role="operator", tenant="acme")["secret"]
        ran = _submit(a.address, token, "acme on b", capabilities=["far"])
        wait_until(lambda: _closed(board, ran.id), timeout=30)
        assert "another tenant's" not in a.log() and "internal_error" not in a.log()
    finally:
        if agent is not None:
            agent.send_signal(signal.SIGTERM)
            agent.wait(timeout=20)
        shutil.rmtree(state, ignore_errors=True)
        a.stop_with(b)


def test_a_sweep_meeting_another_tenants_agent_row_fails_no_other_request(board: str) -> None:
    """The class behind the tenant given back: a board whose memory still holds an agent of a
    tenant its store no longer names (acme, moved on). The agent falls silent and the sweep
    writes its row, which is another tenant's to this store: refused alone, the agent
    forgotten, and the batch — beta's submit in it — commits. Before, the refusal failed the
    sweep and the whole batch with it."""
    from colibri.config import SchedulerSettings
    from colibri.core.model import TaskSpec
    from colibri.core.protocol import RegisterAgent
    from colibri.daemon.board import STALL, Board
    from colibri.store.postgres import PostgresStore
    from tests.inprocess import ManualClock, Peer

    store = PostgresStore(board)
    try:
        clock = ManualClock()
        memory = Board(store, SchedulerSettings(), clock)
        memory.rebuild()
        memory.register(RegisterAgent(name="far", tenant="acme", ttl=STALL), Peer("far"))
        store.commit()
        store.tenants = "beta"  # acme given back; its agent left in memory
        memory.tenancy.served = frozenset({"beta"})
        task, _ = memory.submit(TaskSpec(text="beta's", tenant="beta"))
        for _ in range(3):  # past the agent's ttl, one step under the stall's
            clock.mono += STALL * 0.9
            memory.sweep()
        store.commit()
        assert "far" not in memory.agents
        assert store.get_task(task.id) is not None
    finally:
        store.close()


#: The edge HIVE.md gives for sharing daemons: PostgreSQL a round trip of a twentieth of the
#: lease's ttl away (here 100 ms, 50 ms each way, for a 2 s lease).
FAR = 0.05


@pytest.mark.slow  # a soak: ten ttls of renewals from 50 ms away
def test_sharing_daemons_a_twentieth_of_their_ttl_from_postgresql_keep_their_leases(
    tmp_path: Path, board: str
) -> None:
    """Three sharing daemons, a 2 s lease, 7 tenants, PostgreSQL 50 ms away each way: they
    divide the tenants and keep them, renewing every lease, for ten ttls by PostgreSQL's clock.
    Before, all three exited 1 (`could not be renewed within its ttl`) within seconds at 20 ms:
    a sharing step — tenants taken one at a time, each about ten round trips under the
    ``leases`` table's lock — ran up to the deadline, the next turn stopped without trying the
    renewal, and every other daemon's renewal waited behind that lock."""
    from tests.postgres.hive import relayed

    app = as_app_role(board)
    with psycopg.connect(board, autocommit=True) as admin:
        for n in range(6):
            admin.execute("INSERT INTO tenants (name, created_at) VALUES (%s, 'x')", (f"t{n}",))
    relay, far = relayed(app, FAR)
    members = [Member(tmp_path / name, far, share=True) for name in ("a", "b", "c")]
    try:
        for member in members:
            _start(member)
        wait_until(lambda: _fair(board, members, 7), timeout=60)
        with psycopg.connect(board) as conn:
            fair_at = conn.execute("SELECT now()").fetchone()[0]  # type: ignore[index]

        def renewed_past(instant: object) -> bool:
            with psycopg.connect(board) as conn:
                row = conn.execute(
                    "SELECT count(*), min(expires_at) FROM leases WHERE name LIKE 'tenant/%%' "
                    "AND expires_at > now()"
                ).fetchone()
            assert row is not None
            return bool(row[0] == 7 and row[1] > instant)

        # Every lease renewed until it runs out twenty seconds after the division.
        with psycopg.connect(board) as conn:
            later = conn.execute("SELECT %s + interval '20 seconds'", (fair_at,)).fetchone()
        assert later is not None
        wait_until(lambda: renewed_past(later[0]), timeout=60, interval=0.5)
        for member in members:
            assert member.process is not None and member.process.poll() is None, member.log()
            assert "could not be renewed" not in member.log()
        assert _fair(board, members, 7)
    finally:
        members[0].stop_with(*members[1:])
        relay.close()


def test_forgetting_a_tenant_given_back_drops_its_agents_indexes_and_questions(
    board: str,
) -> None:
    """What ``serve_tenants`` does once a tenant is given back, on a board in process: acme's
    agent runs acme's task, whose session waits for an answer on this daemon's socket. Built
    again for beta alone and told to forget the rest: no agent, no index of acme's, no question
    left, and the asker answered ``not_owner`` (its question belongs where acme is served)."""
    from colibri.config import SchedulerSettings
    from colibri.core.access import OWNER
    from colibri.core.model import TaskSpec
    from colibri.core.protocol import RegisterAgent
    from colibri.core.replies import ErrorReply, Reply
    from colibri.daemon.board import Board
    from colibri.store.postgres import PostgresStore
    from tests.inprocess import ManualClock, Peer, plain

    store = PostgresStore(board)
    try:
        memory = Board(store, SchedulerSettings(), ManualClock())
        memory.rebuild()
        memory.register(RegisterAgent(name="far", tenant="acme", capabilities=["x"]), Peer("far"))
        task, _ = memory.submit(TaskSpec(text="acme's", tenant="acme", capabilities=["x"]))
        memory.dispatch()
        store.commit()
        memory.take_effects()
        epoch = memory.tasks[task.id].epoch
        asker = Peer("session")
        claim = memory.claim_of(task.id, epoch)
        holder = memory.reporter(
            asker, OWNER, "ask", task.id, epoch, from_session=True, claim=claim
        )
        memory.ask(holder, asker, 7, task.id, epoch, "go on?")
        store.commit()
        memory.take_effects()
        assert task.id in memory.reports.askers and "acme" in memory.capacity.indexes

        store.tenants = "beta"  # acme given back
        memory.tenancy.served = frozenset({"beta"})
        store.rollback()
        memory.rebuild()
        memory.forget_unserved()
        store.commit()
        outbox = memory.take_effects().outbox
        assert memory.agents == {} and "acme" not in memory.capacity.indexes
        assert memory.reports.askers == {} and memory.reports.unasked == {}
        replies = [(p, plain(m)) for p, m in outbox if isinstance(m, (Reply, ErrorReply))]
        assert [(p, m["id"], m["error"]["code"]) for p, m in replies] == [(asker, 7, "not_owner")]
        assert len(replies) == len(outbox)
    finally:
        store.close()
