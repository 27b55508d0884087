"""bench/peers.py's choice of peers: a wrong one is refused in one line, and the PostgreSQL
comparison is skipped in one line, not failed, when the server cannot be reached."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.helpers import PYTHON

PEERS = Path(__file__).resolve().parent.parent / "bench" / "peers.py"


def peers(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, str(PEERS), *args],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, **(env or {})},
    )


@pytest.mark.parametrize(
    ("given", "said"),
    [
        (["--peers", "rq"], "unknown: rq"),
        (["--peers", "huey,pgqueuer"], "unknown: huey"),
        (["--peers", ","], "unknown: none"),
        (["--peers", "celery,procrastinate"], "procrastinate alone"),
        (["--repeat", "0"], "--repeat at least 1"),
        (["--peers", "pgqueuer", "--daemons", "0"], "daemon counts from 1 to 9"),
        (["--peers", "pgqueuer", "--daemons", "1,x"], "daemon counts from 1 to 9"),
        (["--peers", "pgqueuer", "--pgqueuer-driver", "pg8000"], "invalid choice"),
        (["--peers", "pgqueuer", "--tasks", "1"], "--tasks must be at least 2"),
        (["--peers", "procrastinate", "--probes", "0"], "--probes at least 1"),
        (["--peers", "procrastinate", "--procrastinate-concurrency", "0"], "at least 1"),
    ],
)
def test_a_wrong_choice_is_refused_in_one_line(given: list[str], said: str) -> None:
    result = peers(*given)
    assert result.returncode == 2
    assert said in result.stderr.strip().splitlines()[-1]
    assert result.stdout == ""


def test_postgresql_out_of_reach_skips_the_comparison() -> None:
    # Port 1 on loopback: nothing listens there, the connection is refused at once.
    result = peers(
        "--peers", "pgqueuer,procrastinate",
        env={"COLIBRI_TEST_PG": "postgresql://postgres@127.0.0.1:1/test"},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    [line] = result.stderr.strip().splitlines()
    assert line.startswith("the PostgreSQL peer comparison is skipped: PostgreSQL at ")
    assert "unreachable" in line
    out = json.loads(result.stdout)
    assert out["bench"] == "peers-postgresql"
    assert "127.0.0.1:1" in out["skipped"]
