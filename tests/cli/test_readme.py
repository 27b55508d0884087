"""The README's walk-through, pasted as it is: every ``sh`` block from "A walk through" to
"More than one daemon", in order, in one bash, must run without an error.

The blocks are taken from the README itself, so a block that does not paste — a placeholder
path, two commands on one line, a command that never returns in the middle of a block — fails
here. HOME is a fresh folder, so ``~/fleet`` and the others are this test's own.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import COVERAGE_ENV

REPOSITORY = Path(__file__).parents[2]
README = REPOSITORY / "README.md"
#: The commands that run until stopped: in a block they must be backgrounded (``&``).
LONG_RUNNING = re.compile(r"\bcolibri (run|agent|demo|attach|tui)\b|--follow\b")


def walk_through_blocks() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## A walk through") : text.index("## More than one daemon")]
    return re.findall(r"```sh\n(.*?)```", section, re.S)


@pytest.fixture
def home() -> Iterator[Path]:
    """A home of its own for a walk-through of the docs, which listen on the ports they show
    (7433, 7434): held by one walk-through at a time, in this run or any other on the machine."""
    import fcntl

    with open(Path(tempfile.gettempdir()) / "colibri-tests-docs-ports.lock", "a") as ports:
        fcntl.flock(ports, fcntl.LOCK_EX)
        path = Path(tempfile.mkdtemp(prefix="cbh", dir="/tmp"))  # short: socket paths
        try:
            yield path
        finally:
            shutil.rmtree(path, ignore_errors=True)


def test_every_block_of_the_walk_through_can_be_pasted() -> None:
    blocks = walk_through_blocks()
    assert len(blocks) >= 8
    for block in blocks:
        lines = [ln for ln in block.replace("\\\n", " ").splitlines() if ln.strip()]
        for line in lines:
            command = line.split(" #", 1)[0]
            assert "/path/to" not in command and "…" not in command, line
            assert not re.search(r"\bcolibri \w+ / colibri\b", command), line
            if LONG_RUNNING.search(command) and "--detach" not in command:
                assert command.rstrip().endswith("&"), f"blocks the rest of its block: {line}"


@pytest.mark.timeout(300)
def test_the_walk_through_runs_as_written(home: Path) -> None:
    colibri = Path(sys.executable).with_name("colibri")
    if not colibri.exists():
        pytest.skip(f"no colibri command beside {sys.executable} (pip install -e . there)")
    script = "\n".join(
        [
            "set -euo pipefail",
            "trap 'jobs -p | xargs -r kill 2>/dev/null; colibri stop >/dev/null 2>&1 || :' EXIT",
            f"cd {REPOSITORY}",
            *(f"echo '## block {n}' >&2\n{block}" for n, block in enumerate(walk_through_blocks())),
        ]
    )
    env = {
        **COVERAGE_ENV,
        "HOME": str(home),
        "PATH": f"{colibri.parent}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
        "LANG": "C.UTF-8",
    }
    done = subprocess.run(
        ["bash", "-c", script], env=env, capture_output=True, text=True, timeout=280, check=False
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = done.stdout
    assert "did: run the test suite" in out  # submit --wait printed the session's output
    assert "did: scrub the pool" in out  # the remote agent ran it over TLS
    assert "waits: no agent has registered with arm" in done.stderr
    assert "cancelled 2 tasks" in out


def test_the_docs_agree_on_the_suites_size_and_time() -> None:
    """The README and RELIABILITY.md state the suite's size and time in one wording each; the
    figures must be the same (they once said four minutes and 2.5 minutes)."""
    readme = re.search(
        r"About ([\w.]+) minutes on two cores, quiet \(([\d,]+) tests", README.read_text()
    )
    reliability = re.search(
        r"the whole suite, ([\d,]+) tests, in about ([\w.]+) minutes",
        (REPOSITORY / "docs" / "RELIABILITY.md").read_text(),
    )
    assert readme is not None and reliability is not None
    words = {"two": "2", "three": "3", "four": "4", "five": "5", "six": "6", "seven": "7",
             "eight": "8", "nine": "9"}  # fmt: skip
    assert (words.get(readme[1], readme[1]), readme[2]) == (reliability[2], reliability[1])


def pipeline_blocks() -> list[str]:
    text = README.read_text(encoding="utf-8")
    section = text[text.index("## A pipeline of coding agents") : text.index("## Metrics")]
    return re.findall(r"```sh\n(.*?)```", section, re.S)


@pytest.mark.timeout(120)
def test_the_pipeline_section_runs_as_written(home: Path) -> None:
    """"A pipeline of coding agents", pasted as it is: four steps, a branch each, each on the
    one before; the checkout untouched and no worktree left behind."""
    colibri = Path(sys.executable).with_name("colibri")
    if not colibri.exists():
        pytest.skip(f"no colibri command beside {sys.executable} (pip install -e . there)")
    blocks = pipeline_blocks()
    assert len(blocks) == 2
    script = "\n".join(
        ["set -euo pipefail", "trap 'colibri stop >/dev/null 2>&1 || :' EXIT", *blocks]
    )
    who = {"GIT_AUTHOR_NAME": "a user", "GIT_AUTHOR_EMAIL": "user@example.com",
           "GIT_COMMITTER_NAME": "a user", "GIT_COMMITTER_EMAIL": "user@example.com"}  # fmt: skip
    env = {
        **COVERAGE_ENV, **who, "HOME": str(home), "LANG": "C.UTF-8",
        "PATH": f"{colibri.parent}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
    }  # fmt: skip
    done = subprocess.run(
        ["bash", "-c", script], cwd=home, env=env, capture_output=True, text=True, timeout=100,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    lines = done.stdout.splitlines()
    branches = [ln.strip() for ln in lines if ln.strip().startswith("colibri/")]
    assert len(branches) == 4 and any(b.endswith("-review-review-the-branch") for b in branches)
    change = next(ln for ln in lines if ln.startswith("change:"))
    assert "-review-review-the-branch at " in change and change.endswith(": 1 file, +1 -0")
    log = [ln.split(" ", 1)[1] for ln in lines if re.fullmatch(r"[0-9a-f]{7,} .+", ln)]
    assert log == ["review: review the branch", "test: add the tests",
                   "build: implement the plan", "plan: write the plan", "an empty repository"]
    worktrees = [ln for ln in lines if ln.startswith(str(home))]
    assert len(worktrees) == 1 and worktrees[0].startswith(f"{home}/pipeline/app ")
    app = home / "pipeline" / "app"
    assert (app / "NOTES.md").exists() is False  # the checkout never saw the sessions' notes
    assert list((home / "pipeline" / ".colibri" / "worktrees" / "app").iterdir()) == []
