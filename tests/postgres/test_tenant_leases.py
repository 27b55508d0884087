"""Daemons serving some tenants of one PostgreSQL board each, side by side: a lease per tenant,
taken and fenced like the whole board's, and clients sent to the daemon serving their tenant
(``not_owner``, followed by ``colibri.client``)."""

from __future__ import annotations

import json
import shutil
import signal
import tempfile
from pathlib import Path

import psycopg
import pytest

from colibri.client import (
    MAX_HOPS,
    Client,
    Remote,
    Takeover,
    may_send_again,
    takeover_patience,
)
from colibri.core.errors import (
    ColibriError,
    ConnectionClosed,
    DaemonNotRunning,
    LeaseLost,
    NotOwner,
    from_wire,
)
from colibri.core.model import LedgerEntry
from colibri.store.postgres import BoardLease, PostgresStore
from tests.helpers import colibri, one_line, wait_until
from tests.postgres.hive import Member, tcp_agent
from tests.store.conftest import as_app_role


def _entry(task: str, tenant: str) -> LedgerEntry:
    return LedgerEntry(seq=0, at="2026-12-03T00:00:00.000Z", task=task, from_state=None,
                       to_state="pending", tenant=tenant)  # fmt: skip


def test_leases_of_tenants_and_of_the_whole_board_exclude_each_other(board: str) -> None:
    PostgresStore(board).close()  # the board's tables
    acme, beta = BoardLease(board, 30, tenants=("acme",)), BoardLease(board, 30, tenants=("beta",))
    whole = BoardLease(board, 30)
    both = BoardLease(board, 30, tenants=("acme", "beta"))
    second_acme, gamma = (
        BoardLease(board, 30, tenants=("acme",)),
        BoardLease(board, 30, tenants=("gamma",)),
    )
    try:
        assert acme.take() and beta.take()  # side by side
        assert (acme.epoch, beta.epoch) == (1, 1)
        assert not whole.take()  # the whole board's overlaps every tenant's
        held = whole.holder()
        assert held is not None and held["name"] in ("tenant/acme", "tenant/beta")
        assert not both.take() and not second_acme.take()
        acme.release()
        assert not whole.take()  # beta's is still live
        assert not both.take()  # all or none: acme is free, beta is not
        beta.release()
        assert whole.take() and whole.epoch == 1  # its own row's first taking
        assert not gamma.take()  # a tenant never seen, and the whole board's is live
        whole.release()
        # A taking of several rows gives each an epoch beyond any it had.
        assert both.take() and both.epoch == 2
        assert not acme.renew()  # acme's rows are another's now
        with psycopg.connect(board) as conn:
            rows = conn.execute(
                "SELECT name, owner, epoch FROM leases WHERE expires_at > now() ORDER BY name"
            ).fetchall()
        assert rows == [("tenant/acme", both.owner, 2), ("tenant/beta", both.owner, 2)]
    finally:
        for lease in (acme, beta, whole, both, second_acme, gamma):
            lease.release()


def test_a_lease_taken_over_fences_its_tenant_and_not_the_others(board: str) -> None:
    PostgresStore(board).close()
    acme, beta = BoardLease(board, 30, tenants=("acme",)), BoardLease(board, 30, tenants=("beta",))
    thief = BoardLease(board, 30, tenants=("acme",))
    acme_store, beta_store = PostgresStore(board), PostgresStore(board)
    try:
        assert acme.take() and beta.take()
        for store, lease in ((acme_store, acme), (beta_store, beta)):
            store.fence, store.tenants = lease.fence, lease.named
        acme_store.append_ledger(_entry("t-acme-1", "acme"))
        acme_store.commit()
        # acme's lease lapses and is taken by another daemon; beta's owner writes on.
        with psycopg.connect(board, autocommit=True) as conn:
            conn.execute("UPDATE leases SET expires_at = now() WHERE name = 'tenant/acme'")
        assert thief.take() and thief.epoch == 2
        acme_store.append_ledger(_entry("t-acme-2", "acme"))
        with pytest.raises(LeaseLost) as lost:  # refused by the fence as the batch is sent
            acme_store.commit()
        # It says which lease: a sharing daemon holds one per tenant, none "on the board".
        assert lost.value.message == (
            "this daemon's lease of tenant acme (epoch 1) passed to another daemon (or expired); "
            "nothing was written"
        )
        beta_store.append_ledger(_entry("t-beta-1", "beta"))
        beta_store.commit()
        with psycopg.connect(board) as conn:
            tasks = [r[0] for r in conn.execute("SELECT task FROM ledger ORDER BY seq")]
        assert tasks == ["t-acme-1", "t-beta-1"]
    finally:
        acme_store.close()
        beta_store.close()
        for lease in (acme, beta, thief):
            lease.release()


@pytest.mark.parametrize(("stalled", "taker"), [((), ("acme",)), (("acme",), ())])
def test_a_batch_open_under_an_expired_lease_holds_back_a_taking_it_overlaps(
    board: str, stalled: tuple[str, ...], taker: tuple[str, ...]
) -> None:
    """A daemon stalled mid-batch past its lease: a daemon taking a lease that overlaps it —
    a tenant's, under the whole board's, or the whole board's, under a tenant's — waits for
    the batch to end rather than serve beside it (the rows are not the same: the key update of
    a takeover does not do it by itself)."""
    import threading

    PostgresStore(board).close()
    old, new = BoardLease(board, 30, tenants=stalled), BoardLease(board, 30, tenants=taker)
    store = PostgresStore(board)
    try:
        assert old.take()
        store.fence, store.tenants = old.fence, old.named
        store.append_ledger(_entry("t-stalled", "acme"))
        store.ledger({}, 1)  # a read sends the batch: it is open, the fence held
        with psycopg.connect(board, autocommit=True) as admin:
            admin.execute("UPDATE leases SET expires_at = now() - interval '1 ms'")
        took: list[bool] = []
        taking = threading.Thread(target=lambda: took.append(new.take()))
        taking.start()
        taking.join(1.0)
        assert taking.is_alive() and not took  # held back by the open batch
        store.commit()  # the stalled batch ends (here: it commits, its fence was valid)
        taking.join(10)
        assert took == [True]
        store.append_ledger(_entry("t-late", "acme"))
        with pytest.raises(LeaseLost):  # and nothing of the old lease is written after
            store.commit()
    finally:
        store.close()
        old.release()
        new.release()


def test_a_store_naming_some_tenants_reads_only_theirs_also_as_a_superuser(board: str) -> None:
    """The queries say which tenants they read, not only the policies: a superuser (whom
    row-level security never binds) connected store still builds only its tenants' board."""
    store = PostgresStore(board)
    try:
        for n, tenant in enumerate(["acme", "beta", "acme"]):
            store.append_ledger(_entry(f"t{n}", tenant))
        store.commit()
        store.tenants = "acme"
        assert [e.task for e in store.ledger({}, 100)] == ["t0", "t2"]
        store.tenants = "beta"
        assert [e.task for e in store.ledger({}, 100)] == ["t1"]
        # Each tenant's seq is its own: beta's second row, whatever acme has.
        entry = store.append_ledger(_entry("t3", "beta"))
        store.commit()
        assert entry.seq == 2
        store.tenants = "*"
        assert store.ledger_heads() == {"acme": 2, "beta": 2}
    finally:
        store.close()


def test_daemons_serve_their_tenants_side_by_side_and_send_clients_to_the_owner(
    tmp_path: Path, board: str
) -> None:
    app = as_app_role(board)  # row-level security holds each daemon to its tenants too
    acme = Member(tmp_path / "acme", app, tenants="acme")
    beta = Member(tmp_path / "beta", app, tenants="beta")
    whole = Member(tmp_path / "whole", app)
    spare = Member(tmp_path / "spare", app, tenants="acme")
    state = tempfile.mkdtemp(prefix="cr-", dir="/tmp")
    agent = None
    try:
        acme.start()
        beta.start()
        assert "took the lease of tenant acme (epoch 1)" in acme.log()
        # Each daemon is told where the other's tenant is at its next renewal.
        wait_until(lambda: _refusal(acme, "submit", text="x", tenant="beta").address, timeout=10)
        refused = _refusal(acme, "submit", text="x", tenant="beta")
        assert refused.address == beta.address and beta.address in refused.message
        # A token of any tenant is made by any daemon; it is revoked where its tenant is served.
        made = beta.call("token-create", role="agent", tenant="acme", agent="a1")["token"]
        assert _refusal(beta, "token-revoke", token=made["id"]).address == acme.address
        assert acme.call("token-revoke", token=made["id"])["token"]["revoked_at"] is not None
        # The default tenant: nobody serves it.
        nobody = _refusal(beta, "submit", text="x")
        assert nobody.address is None and "no daemon serves tenant 'default'" in nobody.message
        told = colibri(acme.root, "submit", "x", "--tenant", "beta")
        assert told.returncode == 1 and f"at {beta.address}" in one_line(told.stderr)

        # A name that would name other tenants is no tenant's name.
        for crafted in ("*", "acme,beta", "ACME"):
            with pytest.raises(ColibriError) as bad:
                acme.call("submit", text="x", tenant=crafted)
            assert bad.value.code == "bad_request", crafted

        # Names of agents and schedules are the whole board's: another tenant's is not taken.
        def nightly(tenant: str) -> dict[str, object]:
            return {"cron": "0 3 * * *", "task": {"text": "n", "tenant": tenant}}

        acme.call("schedule-add", name="nightly", schedule=nightly("acme"))
        with pytest.raises(ColibriError) as taken:
            beta.call("schedule-add", name="nightly", schedule=nightly("beta"))
        assert taken.value.code == "schedule_exists"
        acme.call("register-agent", name="shared-name", tenant="acme")
        with pytest.raises(ColibriError) as hijack:
            beta.call("register-agent", name="shared-name", tenant="beta")
        assert hijack.value.code == "forbidden" and "another tenant" in hijack.value.message
        assert beta.call("status")["tasks"] is not None  # the daemon serves on

        operator = beta.call("token-create", role="operator", tenant="beta")["secret"]
        worker = beta.call("token-create", role="agent", tenant="beta", agent="far")["secret"]
        # A client given acme's daemon only, with beta's token, is sent on to beta's.
        with Client.remote(Remote.parse(acme.address, token=operator,
                                        insecure_loopback=True)) as client:  # fmt: skip
            assert client.path == beta.address
            task = client.submit("to beta", capabilities=["far"])
        assert task.tenant == "beta"
        # So is an agent (the harness's AsyncClient), which then runs it.
        agent = tcp_agent(acme.address, worker, state)
        assert beta.wait_closed(task.id, timeout=20)["output"] == "to beta"
        mine = acme.submit("acme's own", tenant="acme")
        # Each board holds its tenants' tasks only; each tenant's seqs are its own, gap-free.
        assert [t["id"] for t in acme.call("list")["tasks"]] == [mine["id"]]
        assert [t["id"] for t in beta.call("list")["tasks"]] == [task.id]
        with pytest.raises(ColibriError) as unknown:
            acme.call("get", task=task.id)
        assert unknown.value.code == "unknown_task"
        acme_rows = [(row["tenant"], row["seq"]) for row in acme.ledger()]
        beta_rows = [(row["tenant"], row["seq"]) for row in beta.ledger()]
        assert acme_rows == [("acme", n) for n in range(1, len(acme_rows) + 1)]
        assert beta_rows == [("beta", n) for n in range(1, len(beta_rows) + 1)]
        assert acme_rows and beta_rows

        # A daemon of the whole board stands by while any tenant is served; so does a second
        # one for acme, which takes acme over when its daemon dies — beta served throughout.
        whole.stand_by()
        assert "holds tenant" in whole.log()
        spare.stand_by()
        acme.kill()
        wait_until(spare.serving, timeout=15)
        assert "took the lease of tenant acme (epoch 2)" in spare.log()
        assert spare.task(mine["id"])["state"] == "pending"
        listed = colibri(None, "hive", "list", "--store", board, "--json")
        assert listed.returncode == 0, listed.stderr
        serving = {h["address"]: h["tenants"] for h in json.loads(listed.stdout) if h["tenants"]}
        assert serving == {spare.address: ["acme"], beta.address: ["beta"]}
        table = colibri(None, "hive", "list", "--store", board)
        assert "TENANTS" in table.stdout and "acme" in table.stdout
        assert beta.submit("still beta", tenant="beta")["tenant"] == "beta"
        assert not whole.serving()
    finally:
        if agent is not None:
            agent.send_signal(signal.SIGTERM)
            agent.wait(timeout=20)
        shutil.rmtree(state, ignore_errors=True)
        spare.stop_with(beta, whole, acme)


def _refusal(daemon: Member, cmd: str, **fields: object) -> NotOwner:
    try:
        daemon.call(cmd, **fields)
    except NotOwner as refusal:
        return refusal
    raise AssertionError(f"{cmd} was not refused not_owner")


def test_a_client_follows_not_owner_a_bounded_number_of_times_and_only_where_it_may() -> None:
    remote = Remote.parse("tcp://127.0.0.1:7001,tcp://127.0.0.1:7002", token="t",
                          insecure_loopback=True)  # fmt: skip
    onward = remote.toward(NotOwner("elsewhere", "tcp://127.0.0.1:7002"), 0)
    assert onward is not None
    assert [str(a) for a in onward.addresses] == ["tcp://127.0.0.1:7002", "tcp://127.0.0.1:7001"]
    assert onward.token == "t" and onward.insecure_loopback
    # Nobody serves it now (a tenant between two daemons), or the daemon named does not answer
    # (the hops used up): nowhere to go at once — a takeover, waited out (Takeover).
    assert remote.toward(NotOwner("no daemon serves it", None), 0) is None
    assert remote.toward(NotOwner("round and round", "tcp://127.0.0.1:7001"), MAX_HOPS) is None
    for refusal in [
        NotOwner("plain text off this machine", "tcp://192.0.2.1:7001"),
        NotOwner("not an address", "http://x"),
    ]:
        with pytest.raises(NotOwner) as raised:
            remote.toward(refusal, 0)
        assert raised.value is refusal
    over_tls = Remote.parse("tcp://db.example:7001", token="t")
    sent_on = over_tls.toward(NotOwner("x", "tcp://10.0.0.2:7001"), 0)
    assert sent_on is not None
    assert [str(a) for a in sent_on.addresses] == ["tcp://10.0.0.2:7001", "tcp://db.example:7001"]
    every = NotOwner("a daemon listening on every interface", "tcp://0.0.0.0:7002")
    with pytest.raises(NotOwner):
        over_tls.toward(every, 0)


def test_only_what_is_safe_to_send_twice_is_sent_again_after_a_loss() -> None:
    cut, refused = ConnectionClosed("the daemon closed the connection"), NotOwner("elsewhere")
    keyed = {"idempotency_key": "k"}
    # Cut off, the request may have been done: a read, or a submit by its key, only.
    assert [may_send_again(cmd, fields, cut) for cmd, fields in [
        ("get", {}), ("list", {}), ("submit", keyed), ("create-task", keyed), ("submit", {}),
        ("cancel", {}), ("retry", {}), ("answer", {}), ("wait", {}), ("subscribe", {}),
    ]] == [True, True, True, True, False, False, False, False, False, False]  # fmt: skip
    # Refused as not served here (or by the fence), it was not done: a cancel, retry or
    # answer too; never a wait or a subscription, whose connection is its state.
    assert [may_send_again(cmd, {}, refused) for cmd in [
        "get", "cancel", "retry", "answer", "submit", "wait", "subscribe", "register-agent",
    ]] == [True, True, True, True, False, False, False, False]  # fmt: skip
    assert not may_send_again("get", {}, from_wire({"code": "unauthorized", "message": "no"}))


def test_a_takeover_is_waited_out_for_about_two_of_the_ttls_the_refusal_says() -> None:
    said: list[str] = []
    takeover = Takeover(on_wait=said.append)
    refusal = from_wire({"code": "not_owner", "message": "acme is at a", "address": "tcp://a:1",
                         "tenant": "acme", "ttl": 2})  # fmt: skip
    assert isinstance(refusal, NotOwner) and (refusal.tenant, refusal.ttl) == ("acme", 2.0)
    pauses = []
    with pytest.raises(NotOwner) as raised:
        while True:
            pauses.append(takeover.next_pause(refusal, "tenant 'acme'"))
            takeover.give_up = (takeover.give_up or 0) - pauses[-1]  # time passing, unslept
    assert raised.value is refusal and "after waiting 6 s for a takeover" in refusal.message
    assert said == [f"waiting for a daemon to take over tenant 'acme' (up to "
                    f"{takeover_patience(2):g} s)"]  # fmt: skip
    assert pauses[:4] == [0.1, 0.2, 0.4, 0.8] and set(pauses[4:]) == {1.0}
    assert takeover_patience(2) - 1 <= sum(pauses) <= takeover_patience(2)
    # Sent on by a refusal that said its ttl to the lost daemon, which refuses the connection
    # (no ttl said): the wait is bounded by the ttl heard.
    sent_on = Takeover(on_wait=said.append)
    sent_on.heard(refusal)
    sent_on.next_pause(DaemonNotRunning.at("tcp://a:1", "connection refused"), "tenant 'acme'")
    assert sent_on.bound == takeover_patience(2)
    # A refusal that says no ttl is bounded by the default one; 0 waits not at all.
    assert Takeover().next_pause(NotOwner("x"), "x") == 0.1
    with pytest.raises(NotOwner):
        Takeover(patience=0).next_pause(NotOwner("x"), "x")


@pytest.mark.parametrize(
    ("args", "said"),
    [
        (["--tenants", "acme"], "serves some tenants only of a PostgreSQL board"),
        (["--tenants", "Bad Name", "--store", "postgresql://x/y"], "--tenants: invalid tenant"),
        (["--tenants", ",", "--store", "postgresql://x/y"], "--tenants: invalid tenant"),
    ],
)
def test_tenants_that_cannot_be_served_are_refused_in_one_line(
    tmp_path: Path, args: list[str], said: str
) -> None:
    assert colibri(None, "init", str(tmp_path)).returncode == 0
    ran = colibri(tmp_path, "run", *args)
    assert ran.returncode != 0 and said in one_line(ran.stderr), ran.stderr
