"""Expensive reads pipelined by one tenant do not hold up anyone else: each principal has a
share of every loop turn, and the owner's ping is answered within a turn or two whatever a
tenant has queued. Asserted on the order in which replies come, never on how long they took.

Real TLS on loopback; the tenant's large ledger is written into the board's SQLite file while
the daemon is stopped, as a board that grew for months would hold it.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import uuid
from collections.abc import Iterator
from contextlib import closing
from pathlib import Path

import pytest

from colibri.certs import Pki
from tests.helpers import STORE_BACKEND
from tests.remote.conftest import TlsDaemon
from tests.remote.test_refusals import tls_socket

#: The tenant's own ledger rows with a cost: each ``cost`` it asks for sums them all.
COST_ROWS = 40_000
#: Tenant tb's tasks: one family, a root and its children.
FAMILY = 5_000
#: Flooding connections, and the requests each pipelines at once.
FLOODERS, EACH = 3, 40


def task_id(n: int) -> str:
    return str(uuid.UUID(int=n + 1))


@pytest.fixture
def grown(tmp_path: Path, pki: Pki) -> Iterator[TlsDaemon]:
    """A TLS daemon whose board holds COST_ROWS ledger rows with a cost, of tenant tb."""
    if STORE_BACKEND != "sqlite":
        pytest.skip("the board is grown by writing its SQLite file")
    root = tmp_path / "board"
    root.mkdir()
    daemon = TlsDaemon(root, pki)
    daemon.start()
    try:
        board = daemon.call("status")["daemon"]["store"]
        daemon.stop()
        cost = '{"usd": 0.01, "tokens_in": 100, "tokens_out": 10}'
        with closing(sqlite3.connect(board)) as conn, conn:
            # Tenant tb's ledger is numbered on its own, from 1, its head kept beside it.
            conn.executemany(
                "INSERT INTO ledger (seq, at, task, tenant, from_state, to_state, agent, epoch, "
                "cost) VALUES (?, '2026-01-01T00:00:00.000Z', ?, 'tb', 'running', 'done', 'a1', "
                "1, ?)",
                ((n + 1, f"task-{n}", cost) for n in range(COST_ROWS)),
            )
            conn.execute("INSERT INTO ledger_heads (tenant, seq) VALUES ('tb', ?)", (COST_ROWS,))
            # A family of FAMILY tasks (the root, the rest its children), ended long ago.
            conn.executemany(
                "INSERT INTO tasks (id, tenant, text, capabilities, parent, state, outcome, "
                "labels, created_at, updated_at) VALUES (?, 'tb', ?, '[]', ?, 'closed', 'done', "
                "'[]', '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:00.000Z')",
                ((task_id(n), "x" * 300, None if n == 0 else task_id(0)) for n in range(FAMILY)),
            )
        daemon.start()
        yield daemon
    finally:
        daemon.stop()


@pytest.mark.parametrize(
    "request_",
    [
        {"cmd": "cost", "by": "agent"},
        {"cmd": "ledger", "after": "", "limit": 10_000},
        {"cmd": "list", "count": True, "limit": 10_000},
        {"cmd": "family", "task": task_id(0)},
    ],
    ids=["cost", "ledger", "list", "family"],
)
def test_a_tenants_pipelined_expensive_reads_do_not_hold_up_the_owners_ping(
    grown: TlsDaemon, request_: dict[str, object]
) -> None:
    """Three connections of tenant tb's token each pipeline 40 reads of its own large ledger
    or family (``cost`` sums 40,000 rows). Before, the daemon took 64 lines of each
    connection per loop turn, so the owner's ping, sent after them, came back after all 120.
    Now the tenant has a share of each turn and the owner its own: the ping is answered
    before a third of them are."""
    token = grown.token("operator", "tb")
    socks = [tls_socket(grown) for _ in range(FLOODERS)]
    replies = 0
    lock = threading.Lock()

    def read_all(reader: object) -> None:
        nonlocal replies
        try:
            for line in reader:  # type: ignore[attr-defined]
                assert json.loads(line)["ok"], line
                with lock:
                    replies += 1
        except (OSError, ValueError):
            pass  # closed by the test

    try:
        readers = []
        for sock in socks:
            reader = sock.makefile("rb")
            sock.sendall(json.dumps({"cmd": "auth", "id": 0, "token": token}).encode() + b"\n")
            assert json.loads(reader.readline())["ok"]
            readers.append(reader)
        threads = [threading.Thread(target=read_all, args=(r,), daemon=True) for r in readers]
        for thread in threads:
            thread.start()
        batch = b"".join(
            json.dumps({"id": n, **request_}).encode() + b"\n" for n in range(1, EACH + 1)
        )
        for sock in socks:
            sock.sendall(batch)
        with grown.client(timeout=120) as owner:
            assert owner.call("ping")["pong"]
            with lock:
                before_the_ping = replies
        assert before_the_ping < FLOODERS * EACH / 3, before_the_ping
    finally:
        for sock in socks:
            sock.close()


def test_an_empty_tenants_reads_of_a_large_board_cost_it_nothing(grown: TlsDaemon) -> None:
    """The finding's flood: an empty tenant's token reading the ledger of a board whose rows
    are all another tenant's. Its reads go by its own rows (none), so each is answered with
    nothing to scan, ``next`` where it asked from (of its own tenant only: nothing of how far
    tb's runs), and no row of tb's."""
    with grown.connect(grown.token("operator", "ta")) as client:
        for after, at in [("", ""), ("ta:1000", "ta:1000"), ("tb:5,ta:1000", "ta:1000"),
                          ("end", "")]:  # fmt: skip
            reply = client.call("ledger", after=after, limit=10_000)
            assert (reply["entries"], reply["next"], reply["more"]) == ([], at, False), after
        assert client.call("cost", by="agent")["totals"] == []
        assert client.call("list", count=True)["tasks"] == []
    with grown.connect(grown.token("operator", "tb")) as client:
        # tb's own: 500 rows at most per request, the rest from ``next``.
        reply = client.call("ledger", after="", limit=10_000)
        assert len(reply["entries"]) == 500 and reply["more"]
        assert reply["next"] == f"tb:{reply['entries'][-1]['seq']}" == "tb:500"
        reply = client.call("ledger", after=reply["next"], limit=10_000)
        assert [r["seq"] for r in reply["entries"]] == list(range(501, 1001))
        (total,) = client.call("cost", by="tenant")["totals"]
        assert (total["key"], total["sessions"]) == ("tb", COST_ROWS)


def test_a_tokens_list_and_family_read_a_bounded_part_of_its_own_rows(grown: TlsDaemon) -> None:
    """A token's ``list`` holds 500 tasks at most, its ``family`` about 1 MiB: the rest from
    ``next``, or by ``list`` and ``parent``. The owner's are as before."""
    with grown.connect(grown.token("operator", "tb")) as client:
        page = client.call("list", limit=10_000, count=True)
        assert len(page["tasks"]) == 500 and page["next"] == page["tasks"][-1]["id"]
        assert page["remaining"] == FAMILY - 500
        family = client.call("family", task=task_id(7))
        assert family["root"] == task_id(0) and not family["complete"]
        assert 1_000 < len(family["tasks"]) < FAMILY
    family = grown.call("family", task=task_id(7))
    assert family["complete"] and len(family["tasks"]) == FAMILY
    assert len(grown.call("list", tenant="tb", limit=10_000)["tasks"]) == FAMILY
