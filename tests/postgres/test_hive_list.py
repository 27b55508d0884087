"""``colibri hive list`` as an operator reads it: a daemon that died is shown ``gone`` for an
hour after its last beat, then only with ``--all``, and the board forgets it a day after."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.helpers import colibri, one_line, wait_until
from tests.postgres.hive import Member


def listed(board: str, *args: str) -> Any:
    done = colibri(None, "hive", "list", "--store", board, *args)
    assert done.returncode == 0, done.stderr
    return done


def beat_ago(board: str, daemon: str, interval: str) -> None:
    """The daemon's last beat moved back by ``interval``: as if that much time had passed."""
    import psycopg

    with psycopg.connect(board, autocommit=True) as conn:
        conn.execute(
            "UPDATE hives SET last_beat = now() - %s::interval WHERE id = %s", (interval, daemon)
        )


def test_a_gone_daemon_is_listed_for_an_hour_then_with_all_and_forgotten_after_a_day(
    tmp_path: Path, board: str
) -> None:
    dead, alive = Member(tmp_path / "a", board), Member(tmp_path / "b", board)
    dead.start()
    try:
        (row,) = json.loads(listed(board, "--json").stdout)
        assert row["pid"] == dead.pid
        dead.kill()
        short = row["id"][:8]

        def shown_gone() -> bool:
            return any(
                line.startswith(f"{short}  gone ") for line in listed(board).stdout.splitlines()
            )

        wait_until(shown_gone, timeout=15)  # silent past its 2 s ttl
        beat_ago(board, row["id"], "59 minutes")
        assert shown_gone()  # within the hour: shown
        beat_ago(board, row["id"], "61 minutes")
        table = listed(board)
        assert table.stdout == "no daemon beat within the hour\n"
        said = "1 daemon gone for over an hour not shown (colibri hive list --all)"
        assert one_line(table.stderr) == said
        assert json.loads(listed(board, "--json").stdout) == []
        everything = listed(board, "--all")
        assert everything.stderr == ""
        assert any(line.startswith(f"{short}  gone ") for line in everything.stdout.splitlines())
        assert [d["id"] for d in json.loads(listed(board, "--all", "--json").stdout)] == [
            row["id"]
        ]
        # A day after its last beat, the next beat of any daemon of the board forgets it.
        beat_ago(board, row["id"], "25 hours")
        alive.start()

        def ids() -> list[str]:
            return [d["id"] for d in json.loads(listed(board, "--all", "--json").stdout)]

        wait_until(lambda: row["id"] not in ids(), timeout=15)
        assert [d["pid"] for d in json.loads(listed(board, "--json").stdout)] == [alive.pid]
    finally:
        alive.stop_with(dead)
