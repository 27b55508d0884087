"""The contract suite calls every method of the ``Store`` protocol.

A method the suite never calls has a contract nobody checks, and a second backend could get it
wrong unseen. This runs ``test_contract.py`` in a pytest of its own (one process: the names are
gathered in one place, whatever this run's workers) with every store behind ``conftest``'s
recording proxy, then compares the names it recorded with the protocol's methods.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.store.conftest import CALLS_FILE_VARIABLE, STORE_METHODS

CONTRACT = Path(__file__).with_name("test_contract.py")
REPOSITORY = Path(__file__).parents[2]


def test_the_protocol_is_what_the_proxy_records() -> None:
    """The introspection finds the methods (a protocol read wrongly would check nothing)."""
    assert {"commit", "insert_task", "update_task", "record_fire", "claim_key"} <= STORE_METHODS
    assert "location" not in STORE_METHODS


@pytest.mark.slow  # the whole contract suite again, in a pytest of its own
def test_the_contract_suite_calls_every_store_method(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider",
         "--basetemp", str(tmp_path / "run"), str(CONTRACT)],
        cwd=REPOSITORY,
        env={**os.environ, CALLS_FILE_VARIABLE: str(calls)},
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-2000:]
    called = set(calls.read_text().split())
    assert called <= STORE_METHODS
    missing = sorted(STORE_METHODS - called)
    assert missing == [], f"no contract test calls Store.{', Store.'.join(missing)}"


def test_the_proxy_refuses_what_is_not_in_the_protocol(tmp_path: Path) -> None:
    """So a contract test cannot pass by leaning on one backend's internals."""
    from colibri.store.sqlite import SqliteStore
    from tests.store.conftest import RecordingStore

    real = SqliteStore(str(tmp_path / "colibri.sqlite"))
    try:
        proxy = RecordingStore(real)
        assert proxy.location == real.location
        with pytest.raises(AttributeError, match="not part of the Store protocol"):
            proxy._conn  # noqa: B018
        with pytest.raises(AttributeError, match="not part of the Store protocol"):
            proxy.COST_KEYS  # noqa: B018
    finally:
        real.close()
