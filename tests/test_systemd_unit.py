"""S10: the shipped systemd unit is hardened, and the daemon it starts really runs."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import Daemon

UNIT = Path(__file__).parent.parent / "contrib" / "systemd" / "colibri.service"


def service() -> dict[str, list[str]]:
    """The [Service] section; a key given twice (as systemd allows) keeps every value."""
    values: dict[str, list[str]] = {}
    section = ""
    for line in UNIT.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("["):
            section = line.strip("[]")
        elif section == "Service":
            key, _, value = line.partition("=")
            values.setdefault(key, []).append(value)
    return values


def test_unit_sets_the_hardening_the_reliability_plan_asks_for() -> None:
    unit = service()
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
    # A crash must leave the harnesses (and their sessions) to the restarted daemon to adopt.
    assert unit["KillMode"] == ["process"]
    assert unit["Restart"] == ["on-failure"]
    assert unit["User"] == ["colibri"]


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="needs systemd-analyze")
def test_systemd_rates_the_unit_ok_or_better() -> None:
    result = subprocess.run(
        ["systemd-analyze", "security", "--offline=yes", "--no-pager", str(UNIT)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    found = re.search(r"Overall exposure level for \S+: ([\d.]+) (\w+)", result.stdout)
    assert found, result.stdout[-2000:] + result.stderr
    exposure, rating = float(found.group(1)), found.group(2)
    assert rating in ("PERFECT", "SAFE", "OK"), (exposure, rating)


def test_the_units_command_starts_a_daemon_that_serves(tmp_path: Path) -> None:
    """ExecStart's arguments, with this environment's colibri and a scratch root."""
    (exec_start,) = service()["ExecStart"]
    argv = shlex.split(exec_start)
    assert argv[0].endswith("/colibri") and argv[1:3] == ["--root", "/var/lib/colibri"]
    args = argv[3:]

    class UnitDaemon(Daemon):
        def command(self) -> list[str]:
            return [sys.executable, "-m", "colibri", "--root", str(self.root), *args]

    daemon = UnitDaemon(tmp_path)
    daemon.start()
    try:
        assert daemon.call("ping")["pong"] is True
    finally:
        daemon.stop()
    assert '"event"' in daemon.log()  # --log-format json: one JSON object per line
