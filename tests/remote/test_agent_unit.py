"""The shipped agent unit's command, run as systemd would run it: its token from the
environment file, against a daemon over TLS."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

from tests.helpers import PYTHON
from tests.remote.conftest import TlsDaemon
from tests.test_systemd_unit import AGENT_UNIT, service


def test_the_agent_units_command_runs_tasks_with_the_token_from_its_environment_file(
    tls_daemon: TlsDaemon, tmp_path: Path
) -> None:
    (exec_start,) = service(AGENT_UNIT)["ExecStart"]
    argv = shlex.split(exec_start)
    name = argv[argv.index("--name") + 1]
    caps = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--cap"]
    token = tls_daemon.token("agent", "default", agent=name, capabilities=caps)
    # agent.env as the unit's comment says to write it, with this daemon's address and CA.
    env_file = tmp_path / "agent.env"
    env_file.write_text(
        "".join(f"{key}={value}\n" for key, value in tls_daemon.client_env(token).items())
    )
    from_file = dict(line.split("=", 1) for line in env_file.read_text().splitlines())
    assert set(from_file) == {"COLIBRI_CONNECT", "COLIBRI_TLS_CA", "COLIBRI_TOKEN"}
    # This environment's colibri, a short state folder (a Unix socket lives there), and a
    # command that exists here in place of /usr/local/bin/run-task.sh.
    state = tempfile.mkdtemp(prefix="cu-", dir="/tmp")
    args = argv[1:]
    args[args.index("--state-dir") + 1] = state
    args = [*args[: args.index("--") + 1], "cat"]
    env = {k: v for k, v in os.environ.items() if not k.startswith("COLIBRI_")}
    log = tmp_path / "agent.log"
    with open(log, "wb") as out:
        agent = subprocess.Popen(
            [PYTHON, "-m", "colibri", *args], env={**env, **from_file}, cwd=tmp_path,
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, start_new_session=True,
        )  # fmt: skip
    try:
        task = tls_daemon.submit("scrub the pool", capabilities=caps)
        done = tls_daemon.wait_closed(task["id"], timeout=20)
        assert (done["outcome"], done["agent"], done["output"]) == ("done", name, "scrub the pool")
        assert token not in " ".join(agent.args)  # type: ignore[arg-type]
    finally:
        agent.send_signal(signal.SIGTERM)  # the unit's KillSignal
        code = agent.wait(timeout=30)
        shutil.rmtree(state, ignore_errors=True)
    assert code == 0, log.read_text(errors="replace")
