"""A daemon on PostgreSQL commits each batch aside, on the store's own thread, and handles the
next batch's requests meanwhile (``GroupCommit``). What it acknowledges is still only what is
committed: a batch whose commit fails takes the batch written meanwhile with it."""

from __future__ import annotations

import json
import socket
import threading
from pathlib import Path
from typing import Any

import psycopg

from tests.helpers import Daemon, wait_until


def _lines(sock: socket.socket, count: int) -> list[dict[str, Any]]:
    """The next ``count`` lines the daemon sends on ``sock``, parsed."""
    data = b""
    while data.count(b"\n") < count:
        chunk = sock.recv(65536)
        assert chunk, f"the daemon closed the connection after {data!r}"
        data += chunk
    return [json.loads(line) for line in data.splitlines()[:count]]


def _stored(board: str) -> list[str]:
    with psycopg.connect(board) as db:
        return sorted(row[0] for row in db.execute("SELECT text FROM tasks").fetchall())


def test_a_batch_whose_commit_fails_aside_takes_the_batch_written_meanwhile_with_it(
    tmp_path: Path, board: str
) -> None:
    """Batch 1 (a submit) waits on the server for the tenant's ledger head, which the test
    holds, until the batch's lock timeout (a third of the 6 s lease) ends it. Meanwhile a
    second client's submit is handled into batch 2, its writes held in memory. Batch 1's commit
    fails: both submits are refused, nothing of either is stored, and the daemon reads the
    board again and serves the next submit."""
    root = tmp_path / "r"
    root.mkdir()
    daemon = Daemon(root, "--store", board, "--lease-ttl", "6s")
    daemon.start()
    holder = psycopg.connect(board)
    first: list[dict[str, Any]] = []
    try:
        daemon.submit("before")
        holder.execute("SELECT seq FROM ledger_heads WHERE tenant = 'default' FOR UPDATE")
        submitting = threading.Thread(
            target=lambda: first.append(_reply_of(daemon, "submit", text="first")), daemon=True
        )
        submitting.start()

        def first_waits_for_the_head() -> bool:
            with psycopg.connect(board, autocommit=True) as admin:
                row = admin.execute(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' "
                    "AND query LIKE '%%ledger_heads%%'"
                ).fetchone()
            return row is not None and row[0] == 1

        wait_until(first_waits_for_the_head, timeout=30)
        # (Handled at once, the loop being free: batch 1 waits on the server for seconds.)
        meanwhile = _reply_of(daemon, "submit", text="meanwhile")
        submitting.join(30)
        assert len(first) == 1 and first[0]["ok"] is False, first
        assert first[0]["error"]["code"] == "storage_unavailable", first
        # Built on batch 1 in memory, refused with it (its own writes were never sent).
        assert meanwhile["ok"] is False, meanwhile
        assert meanwhile["error"]["code"] == "storage_unavailable", meanwhile
        holder.rollback()
        assert _stored(board) == ["before"]
        after = daemon.submit("after")
        assert after["state"] == "pending"
        assert _stored(board) == ["after", "before"]
        assert [t["text"] for t in daemon.call("list")["tasks"]] == ["before", "after"]
    finally:
        holder.close()
        daemon.stop()


def _reply_of(daemon: Daemon, cmd: str, **fields: Any) -> dict[str, Any]:
    """The daemon's reply line to one request, refusal or not."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(30)
        sock.connect(str(daemon.socket))
        sock.sendall(json.dumps({"id": 1, "cmd": cmd, **fields}).encode() + b"\n")
        return _lines(sock, 1)[0]
