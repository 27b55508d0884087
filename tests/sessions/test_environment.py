"""Sessions see an allow-list of the daemon's environment, never its secrets."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.helpers import Daemon

PRINTS_ENV = "import json, os; print(json.dumps(dict(os.environ)))"


def test_a_session_sees_only_the_allowed_environment(root: Path) -> None:
    (root / "colibri.jsonc").write_text(json.dumps({"workspaces": {"w": {"session": {
        "command": [sys.executable, "-c", PRINTS_ENV],
        "pass_env": ["ANTHROPIC_API_KEY"], "env": {"MODE": "test"},
    }}}}))  # fmt: skip
    env = {**os.environ, "DAEMON_SECRET_TOKEN": "s3cret", "ANTHROPIC_API_KEY": "sk-test",
           "LC_ALL": "C.UTF-8"}  # fmt: skip
    daemon = Daemon(root, env=env)
    daemon.start()
    try:
        task = daemon.call("submit", text="show me", workspace="w")["task"]
        final = daemon.wait_closed(task["id"])
        seen = json.loads(final["output"])
        assert "DAEMON_SECRET_TOKEN" not in seen
        assert "s3cret" not in final["output"]
        assert seen["ANTHROPIC_API_KEY"] == "sk-test"  # passed on by name
        assert seen["MODE"] == "test" and seen["LC_ALL"] == "C.UTF-8"
        assert seen["PATH"] == env["PATH"]
        assert seen["COLIBRI_TASK_ID"] == task["id"]
    finally:
        daemon.stop()
