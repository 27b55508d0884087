"""The Python client and the shell completion over TLS with a token: examples/client_remote.py
as it is, and Tab against a daemon reached with --connect."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from tests.cli.test_completion import complete
from tests.helpers import PYTHON, harness, online, stop_process, wait_until
from tests.remote.conftest import TlsDaemon

EXAMPLE = Path(__file__).parent.parent.parent / "examples" / "client_remote.py"
RUN_TASK = str(EXAMPLE.parent / "run-task.sh")


def _run_example(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("COLIBRI_")}
    return subprocess.run([PYTHON, str(EXAMPLE)], env={**clean, **env}, capture_output=True,
                          text=True, timeout=60, check=False)  # fmt: skip


def test_the_remote_example_submits_and_waits_over_tls(tls_daemon: TlsDaemon) -> None:
    agent = harness(tls_daemon.root, "py-1", ["python"], [RUN_TASK])
    try:
        wait_until(lambda: online(tls_daemon, "py-1"))
        done = _run_example(tls_daemon.client_env(tls_daemon.token()))
    finally:
        stop_process(agent)
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"done on {tls_daemon.address}\n"


def test_the_remote_example_with_a_bad_token_says_so_in_one_line(tls_daemon: TlsDaemon) -> None:
    done = _run_example(tls_daemon.client_env("not-a-token"))
    assert done.returncode == 1 and done.stdout == ""
    assert done.stderr.startswith("unauthorized: ") and done.stderr.count("\n") == 1
    no_ca = {**tls_daemon.client_env(tls_daemon.token()), "COLIBRI_TLS_CA": ""}
    del no_ca["COLIBRI_TLS_CA"]  # the system's CAs never signed the test one
    untrusted = _run_example(no_ca)
    assert untrusted.returncode == 1 and untrusted.stderr.startswith("tls_failed: ")


def test_tab_completes_from_a_daemon_reached_with_connect(tls_daemon: TlsDaemon) -> None:
    task = tls_daemon.submit()["id"]
    env = tls_daemon.client_env(tls_daemon.token())
    done = complete(["show", ""], env=env)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"plain,{task}\n", "")
    refused = complete(["show", ""], env={**env, "COLIBRI_TOKEN": "not-a-token"})
    assert (refused.returncode, refused.stdout, refused.stderr) == (0, "\n", "")
