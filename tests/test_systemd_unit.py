"""The shipped systemd units are hardened and valid, and what they start really runs: the
daemon's, and a stand-alone agent's (whose run against a TLS daemon is in
``tests/remote/test_agent_unit.py``)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import Daemon

UNITS = Path(__file__).parent.parent / "contrib" / "systemd"
UNIT = UNITS / "colibri.service"
AGENT_UNIT = UNITS / "colibri-agent.service"


def service(unit: Path = UNIT) -> dict[str, list[str]]:
    """The [Service] section; a key given twice (as systemd allows) keeps every value."""
    values: dict[str, list[str]] = {}
    section = ""
    for line in unit.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service":
            key, _, value = line.partition("=")
            values.setdefault(key, []).append(value)
    return values


@pytest.mark.parametrize("path", [UNIT, AGENT_UNIT], ids=lambda p: p.name)
def test_unit_sets_the_hardening_the_reliability_plan_asks_for(path: Path) -> None:
    unit = service(path)
    expected = {
        "NoNewPrivileges": "yes",
        "ProtectSystem": "strict",
        "PrivateTmp": "yes",
        "UMask": "0077",
        "StateDirectoryMode": "0700",
        "CapabilityBoundingSet": "",
        "RestrictSUIDSGID": "yes",
    }
    for key, value in expected.items():
        assert unit.get(key) == [value], (key, unit.get(key))
    assert unit["Restart"] == ["on-failure"]


def test_the_daemon_unit_leaves_the_harnesses_to_the_next_daemon() -> None:
    unit = service()
    # A crash must leave the harnesses (and their sessions) to the restarted daemon to adopt.
    assert unit["KillMode"] == ["process"]
    assert unit["User"] == ["colibri"]


def test_the_agent_unit_keeps_its_token_off_the_command_line() -> None:
    """The token comes from a root-only environment file, never from ExecStart, which every
    user of the host can read (systemctl show, ps); the agent stops its sessions itself and
    what is left of its group goes with it."""
    unit = service(AGENT_UNIT)
    (exec_start,) = unit["ExecStart"]
    argv = shlex.split(exec_start)
    assert argv[0].endswith("/colibri") and argv[1] == "agent"
    assert not any(arg.startswith("--token") or "colibri_" in arg for arg in argv)
    assert not any(key == "Environment" for key in unit)
    assert unit["EnvironmentFile"] == ["/etc/colibri/agent.env"]  # no "-": missing is an error
    assert "COLIBRI_TOKEN=" in AGENT_UNIT.read_text()  # the file's lines, shown in a comment
    assert unit["User"] == ["colibri-agent"]
    assert unit["KillMode"] == ["mixed"]
    state = argv[argv.index("--state-dir") + 1]
    assert state == f"/var/lib/{unit['StateDirectory'][0]}" == unit["WorkingDirectory"][0]
    assert "--name" in argv and argv.index("--") < len(argv) - 1  # a name, and a command


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
@pytest.mark.parametrize("path", [UNIT, AGENT_UNIT], ids=lambda p: p.name)
def test_systemd_finds_nothing_wrong_in_the_unit(path: Path, tmp_path: Path) -> None:
    """``systemd-analyze verify`` on the unit with this environment's colibri (and a command
    that exists) in place of /usr/local/bin's: it complains of nothing."""
    text = path.read_text().replace(
        "/usr/local/bin/colibri", str(Path(sys.executable).parent / "colibri")
    )
    copy = tmp_path / path.name
    copy.write_text(text.replace("/usr/local/bin/run-task.sh", "/bin/cat"))
    result = subprocess.run(
        ["systemd-analyze", "verify", str(copy)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stderr == "", result.stderr


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
@pytest.mark.parametrize("path", [UNIT, AGENT_UNIT], ids=lambda p: p.name)
def test_systemd_rates_the_unit_ok_or_better(path: Path) -> None:
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", "--no-pager", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    found = re.search(r"Overall exposure level for \S+: ([\d.]+) (\w+)", result.stdout)
    assert found, result.stdout[-2000:] + result.stderr
    exposure, rating = float(found.group(1)), found.group(2)
    assert rating in ("PERFECT", "SAFE", "OK"), (exposure, rating)


def serves_on_a_scratch_root(root: Path, args: list[str]) -> None:
    """``colibri --root ROOT ARGS`` (a service's command, with this environment's colibri and
    a scratch root) starts a daemon that answers; SIGTERM stops it with exit 0."""

    class ServiceDaemon(Daemon):
        def command(self) -> list[str]:
            return [sys.executable, "-m", "colibri", "--root", str(self.root), *args]

    daemon = ServiceDaemon(root)
    daemon.start()
    try:
        assert daemon.call("ping")["pong"] is True
    finally:
        daemon.stop()
    assert '"event"' in daemon.log()  # --log-format json: one JSON object per line


def test_the_units_command_starts_a_daemon_that_serves(tmp_path: Path) -> None:
    """ExecStart's arguments, with this environment's colibri and a scratch root."""
    (exec_start,) = service()["ExecStart"]
    argv = shlex.split(exec_start)
    assert argv[0].endswith("/colibri") and argv[1:3] == ["--root", "/var/lib/colibri"]
    serves_on_a_scratch_root(tmp_path, argv[3:])


@pytest.mark.parametrize("path", [UNIT, AGENT_UNIT], ids=lambda p: p.name)
def test_the_units_documentation_is_this_projects_own(path: Path) -> None:
    """Documentation= names a page of this project where OPERATIONS.md installs its checkout,
    not a package index's page of some other project of the same name."""
    (line,) = [x for x in path.read_text().splitlines() if x.startswith("Documentation=")]
    checkout = "file:///usr/local/src/colibri/"
    assert line.removeprefix("Documentation=").startswith(checkout), line
    page = line.removeprefix(f"Documentation={checkout}")
    repository = UNITS.parent.parent
    assert (repository / page).is_file(), page
    assert "/usr/local/src/colibri" in (repository / "docs" / "OPERATIONS.md").read_text()
