"""Sessions see an allow-list of the daemon's environment, never its secrets."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

from tests.helpers import Daemon
from tests.sessions.support import sweep

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
        first, rest = seen["PATH"].split(os.pathsep, 1)
        assert rest == env["PATH"]  # after the folder of the harness's own colibri
        assert Path(first).parent == root / ".colibri" / "bin"
        assert seen["COLIBRI_TASK_ID"] == task["id"]
    finally:
        daemon.stop()


#: A session that reports, with `colibri out`, which colibri its PATH finds and the PATH.
REPORTS_ITS_COLIBRI = ["/bin/sh", "-c", 'colibri out "$(command -v colibri) $PATH"']


def test_a_session_runs_its_harness_colibri_whatever_the_daemons_path(root: Path) -> None:
    """A daemon started by absolute path, with no colibri on its PATH: its sessions find the
    very Colibri of their harness first on theirs, before a PATH their workspace sets too."""
    (root / "colibri.jsonc").write_text(json.dumps({"workspaces": {
        "inherits": {"session": {"command": REPORTS_ITS_COLIBRI}},
        "sets": {"session": {"command": REPORTS_ITS_COLIBRI, "env": {"PATH": "/bin"}}},
    }}))  # fmt: skip
    daemon_path = "/usr/bin:/bin"
    assert shutil.which("colibri", path=daemon_path) is None
    daemon = Daemon(root, env={"PATH": daemon_path})
    daemon.start()
    try:
        shown = {}
        for workspace in ("inherits", "sets"):
            task = daemon.call("submit", text="which colibri?", workspace=workspace)["task"]
            final = daemon.wait_closed(task["id"], timeout=30)
            assert final["outcome"] == "done", final
            shown[workspace] = final["output"].split(" ")
        (colibri, path), (colibri_too, path_too) = shown["inherits"], shown["sets"]
        assert colibri == colibri_too and Path(colibri).parent.parent == root / ".colibri" / "bin"
        assert path == f"{Path(colibri).parent}:{daemon_path}"
        assert path_too == f"{Path(colibri).parent}:/bin"
        daemon.stop()
    finally:
        sweep(root, daemon)
