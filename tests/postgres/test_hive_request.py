"""The ``hive`` request: the daemons of a PostgreSQL board, their leases and tenants, told the
daemon's owner by the daemon; a token is refused; a daemon on SQLite says there is no hive."""

from __future__ import annotations

from pathlib import Path

import pytest

from colibri.client import Client, Remote
from colibri.core.errors import ColibriError
from tests.helpers import Daemon, wait_until, write_config
from tests.postgres.hive import Member


def test_the_owner_is_told_the_daemons_their_leases_and_tenants(
    tmp_path: Path, board: str
) -> None:
    acme = Member(tmp_path / "a", board, tenants="acme")
    beta = Member(tmp_path / "b", board, tenants="beta")
    acme.start()
    beta.start()
    try:
        acme.call("register-agent", name="a1", tenant="acme")

        def both_beat() -> list[dict[str, object]] | None:
            daemons = acme.call("hive")["daemons"]
            ids = {d["pid"] for d in daemons}
            counted = any(d["pid"] == acme.pid and d["agents"] == 1 for d in daemons)
            return daemons if ids == {acme.pid, beta.pid} and counted else None

        daemons = wait_until(both_beat, timeout=15)
        by_pid = {d["pid"]: d for d in daemons}
        mine, other = by_pid[acme.pid], by_pid[beta.pid]
        assert (mine["role"], mine["tenants"], mine["leases"]) == (
            "serving", ["acme"], ["tenant/acme"]
        )
        assert (other["role"], other["tenants"]) == ("serving", ["beta"])
        assert (mine["this"], other["this"]) == (True, False)
        assert (mine["address"], other["address"]) == (acme.address, beta.address)
        assert mine["lease_epoch"] >= 1 and 0 < mine["lease_left_s"] <= 2
        assert 0 <= mine["beat_ago_s"] < 2 and mine["ttl"] == 2
        assert other["agents"] == 0
        # beta's daemon tells the same hive, marking itself.
        told = {d["pid"]: d["this"] for d in beta.call("hive")["daemons"]}
        assert told == {acme.pid: False, beta.pid: True}

        # A token, of either role, is refused: the hive is every tenant's.
        secret = acme.call("token-create", role="operator", tenant="acme")["secret"]
        with Client.remote(Remote.parse(acme.address, token=secret,
                                        insecure_loopback=True)) as client:  # fmt: skip
            with pytest.raises(ColibriError) as refused:
                client.call("hive")
        assert refused.value.code == "forbidden"
        assert "only the daemon's owner may" in refused.value.message

        # A daemon stopped is gone from the hive (it leaves the board as it stops).
        beta.stop()
        wait_until(lambda: [d["pid"] for d in acme.call("hive")["daemons"]] == [acme.pid],
                   timeout=15)  # fmt: skip
    finally:
        acme.stop_with(beta)


def test_a_daemon_on_sqlite_says_there_is_no_hive(tmp_path: Path) -> None:
    root = tmp_path / "root"
    from colibri.config import init_root

    init_root(root)
    write_config(root)
    daemon = Daemon(root, "--store", str(root / "board.db"))
    daemon.start()
    try:
        with pytest.raises(ColibriError) as told:
            daemon.call("hive")
    finally:
        daemon.stop()
    assert told.value.code == "no_hive"
    assert "\n" not in told.value.message and "SQLite" in told.value.message


def test_the_web_shows_the_owner_the_hive_page(tmp_path: Path, board: str) -> None:
    from tests.web.conftest import WebServer

    acme = Member(tmp_path / "a", board, tenants="acme")
    beta = Member(tmp_path / "b", board, tenants="beta")
    acme.start()
    beta.start()
    web = WebServer(acme.root)
    try:
        wait_until(lambda: len(acme.call("hive")["daemons"]) == 2, timeout=15)
        web.start()
        cookie, _ = web.sign_in()
        status, _, body = web.request("GET", "/", cookie=cookie)
        assert status == 200 and 'href="/hive"' in body  # linked on a PostgreSQL board
        status, _, body = web.request("GET", "/hive", cookie=cookie)
        assert status == 200, body
        for member, tenant in ((acme, "acme"), (beta, "beta")):
            assert f"<td>{member.pid}</td>" in body
            assert f'class="daemon-tenants">{tenant}</td>' in body
            assert f"tenant/{tenant} (epoch " in body
        assert body.count('class="daemon-role">serving</td>') == 2
        assert "(this)" in body
    finally:
        web.stop()
        acme.stop_with(beta)
