"""The session backend contract, the same tests on both backends: real processes, real tmux."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from colibri.agent.backends import backend_for
from colibri.agent.backends.base import SessionBackend, StartFailed
from colibri.agent.reaping import Reaper
from colibri.agent.spec import AgentSpec
from colibri.host import alive
from tests.helpers import wait_until

#: Starts a `sleep 1000` in its group (its pid to ./child), shows a prompt, takes one line
#: (stdin, or typed in), writes it to ./got, prints it, and exits.
SESSION = (
    "import subprocess\n"
    "child = subprocess.Popen(['sleep', '1000'], stdout=subprocess.DEVNULL,\n"
    "                         stderr=subprocess.DEVNULL)\n"
    "open('child', 'w').write(str(child.pid))\n"
    "print('PROMPT>', flush=True)\n"
    "line = input()\n"
    "open('got', 'w').write(line)\n"
    "print('got', line)\n"
)

BACKENDS = [
    "subprocess",
    pytest.param(
        "tmux",
        marks=pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed"),
    ),
]


@pytest.fixture(params=BACKENDS)
def backend(
    request: pytest.FixtureRequest, root: Path
) -> Iterator[tuple[str, SessionBackend, Reaper]]:
    spec = AgentSpec(
        name="b", command=[sys.executable, "-c", SESSION], cwd=root, backend=request.param,
        ready_pattern="PROMPT>",
    )  # fmt: skip
    reaper = Reaper(root, spec.name)
    yield request.param, backend_for(spec, root, reaper), reaper
    for sock in (root / ".colibri" / "tmux").glob("*.sock"):
        subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True)


def environment(root: Path) -> dict[str, str]:
    return {"PATH": "/usr/bin:/bin", "COLIBRI_ROOT": str(root), "COLIBRI_AGENT": "b"}


def test_a_session_takes_its_text_and_its_end_gives_the_report(
    backend: tuple[str, SessionBackend, Reaper], root: Path
) -> None:
    kind, sessions, reaper = backend

    async def scenario() -> None:
        running = await sessions.start("t1", environment(root), root / "t1.task")
        assert reaper.groups == {running} and running.alive()
        assert list((root / ".colibri" / "sessions").glob("b.*.pgid"))
        async with asyncio.timeout(10):
            assert await sessions.wait_ready(running, asyncio.Event())
        await sessions.hand_over(running, "hello $(touch pwned)")
        async with asyncio.timeout(10):
            report = await sessions.wait_end(running)
        assert (root / "got").read_text() == "hello $(touch pwned)"
        assert not list(root.rglob("pwned"))
        # a one-shot command's exit says how it went; an interactive session reports itself
        out = ("out", {"output": "PROMPT>\ngot hello $(touch pwned)\n", "cost": None})
        assert report == (out if kind == "subprocess" else None)
        child = int((root / "child").read_text())
        reaper.reclaim(running)
        assert running.ended and not reaper.groups
        assert not list((root / ".colibri" / "sessions").glob("b.*.pgid"))
        wait_until(lambda: not alive(running.pgid) and not alive(child))

    asyncio.run(scenario())


def test_kill_stops_the_whole_group(
    backend: tuple[str, SessionBackend, Reaper], root: Path
) -> None:
    _, sessions, reaper = backend

    async def scenario() -> None:
        running = await sessions.start("t2", environment(root), root / "t2.task")
        child = int(wait_until(lambda: (root / "child").exists() and (root / "child").read_text()))
        for grace in (0.5, 0.0):
            await sessions.kill(running, grace=grace)
        assert not running.alive()
        wait_until(lambda: not alive(running.pgid) and not alive(child))
        reaper.reclaim(running)

    asyncio.run(scenario())


def test_a_command_that_cannot_start_is_start_failed(root: Path) -> None:
    spec = AgentSpec(name="b", command=[str(root / "no-such-command")], cwd=root)
    sessions = backend_for(spec, root, Reaper(root, spec.name))

    async def scenario() -> None:
        with pytest.raises(StartFailed, match="could not start .*no-such-command"):
            await sessions.start("t3", environment(root), root / "t3.task")

    asyncio.run(scenario())
