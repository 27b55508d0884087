"""docs/HIVE.md's walk-through on one machine, pasted after the README's as a reader follows
them: the README's blocks, then HIVE.md's first block, in one bash. Its board is a schema of
the test's own in place of the block's ``team``, on the test server in place of the machine's
own. Before, its ``tls init`` was refused (the README's had made the folder), and pasted as a
whole it raced its own daemons' start and the taking of its new tenant."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.cli.test_readme import REPOSITORY, home, walk_through_blocks  # noqa: F401 (fixture)
from tests.helpers import COVERAGE_ENV
from tests.store.conftest import PG_DSN, pg_schema

HIVE = REPOSITORY / "docs" / "HIVE.md"
#: What the block names the machine's own PostgreSQL by, and its schema.
DOCS_DSN = "postgresql://postgres@127.0.0.1:5432/test"


def on_one_machine() -> str:
    """The first ``sh`` block of "On one machine"."""
    text = HIVE.read_text(encoding="utf-8")
    section = text[text.index("## On one machine") :]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None
    assert DOCS_DSN in block[1] and "search_path%3Dteam" in block[1]
    assert "CREATE SCHEMA team" in block[1]
    return block[1]


@pytest.mark.timeout(300)
def test_the_walk_through_on_one_machine_runs_after_the_readmes(home: Path) -> None:  # noqa: F811
    colibri = Path(sys.executable).with_name("colibri")
    if not colibri.exists():
        pytest.skip(f"no colibri command beside {sys.executable} (pip install -e . there)")
    if shutil.which("psql") is None:
        pytest.skip("no psql on PATH: the walk-through makes its schema with it")
    dsn, drop = pg_schema()
    schema = dsn.rsplit("%3D", 1)[1]
    drop()  # the block makes it, with psql
    hive = (
        on_one_machine()
        .replace(DOCS_DSN, PG_DSN)
        .replace("search_path%3Dteam", f"search_path%3D{schema}")
        .replace("CREATE SCHEMA team", f"CREATE SCHEMA {schema}")
    )
    script = "\n".join(
        [
            "set -euo pipefail",
            "trap '{ jobs -p | xargs -r kill; } 2>/dev/null || :; for r in ~/hive-a ~/hive-b .; "
            "do colibri --root $r stop >/dev/null 2>&1 || :; done' EXIT",
            f"cd {REPOSITORY}",
            *(f"echo '## block {n}' >&2\n{block}" for n, block in enumerate(walk_through_blocks())),
            "echo '## HIVE.md, on one machine' >&2",
            hive,
        ]
    )
    env = {
        **COVERAGE_ENV,
        "HOME": str(home),
        "PATH": f"{colibri.parent}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
        "LANG": "C.UTF-8",
    }
    try:
        done = subprocess.run(
            ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=280,
            check=False,
        )  # fmt: skip
    finally:
        drop()
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    hive_out = done.stdout.split("did: scrub the pool")[-1]  # after the README's last output
    assert "exists already" not in done.stderr
    # far-1 ran both (cat's output), the second on the daemon that took acme over.
    assert re.findall(r"^(hello|still here)$", hive_out, re.M) == ["hello", "still here"]
    assert re.search(r"serving \(epoch 1, [\d.]+s left\)\s+acme\s", hive_out), hive_out
    assert "stopped the daemon" in hive_out
