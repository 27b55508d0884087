"""``colibri demo`` left running: a living swarm, shown as lines when stdout is not a terminal;
tasks from another terminal show up; Ctrl+C, SIGTERM and a closed terminal (SIGHUP) stop
everything it started."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.cli.conftest import Demo
from tests.helpers import colibri, wait_until
from tests.sessions.support import mentioning, one_each, processes


def nothing_left(target: Path) -> None:
    """No process of the demo's root is left: daemon, agents, harnesses, sessions (a harness
    stopping its sessions takes a moment after the demo has exited)."""
    try:
        wait_until(lambda: mentioning(target) == [], timeout=60)
    except AssertionError:
        left = [" ".join(argv) for pid, argv in processes() if pid in mentioning(target)]
        raise AssertionError(f"left running: {left}\n{(target / 'demo.log').read_text()}") from None
    assert "event=harness_killed" not in (target / "demo.log").read_text()  # each in time
    status = colibri(target, "status")
    assert status.returncode == 1 and "no daemon is running" in status.stderr


def test_the_demo_keeps_the_swarm_busy_until_interrupted(demo: Callable[..., Demo]) -> None:
    running = demo(env={"COLUMNS": "200"})
    saw, target = running.saw, running.target
    wait_until(lambda: saw("running → done"), timeout=60)
    # Piped: the attach lines, not the TUI; it says what keeps running and how to stop it.
    assert saw("keep running while the demo does")
    assert saw("Ctrl+C")
    mine = colibri(target, "submit", "hello from another terminal", "--cap", "python")
    assert mine.returncode == 0, mine.stderr
    wait_until(lambda: saw("→ done") and saw("hello from another terminal"), timeout=60)
    # The id its line shows is the one to paste: it names the task.
    line = next(line for line in running.lines if "hello from another terminal" in line)
    shown = colibri(target, "show", line.split()[1], "--json")
    assert shown.returncode == 0, shown.stderr
    assert json.loads(shown.stdout)["id"] == mine.stdout.strip()
    # Tasks keep arriving, and the schedule fires.
    wait_until(lambda: saw("schedule mirror-check fired"), timeout=30)
    wait_until(lambda: saw("new → pending") and saw("a flaky integration test"), timeout=60)
    running.process.send_signal(signal.SIGINT)
    code = running.process.wait(timeout=60)
    assert running.process.stderr is not None
    assert code == 0, running.process.stderr.read()
    wait_until(lambda: running.lines and "nothing of it keeps running" in running.lines[-1])
    nothing_left(target)


@pytest.mark.parametrize("signum", [signal.SIGHUP, signal.SIGTERM], ids=["hangup", "term"])
def test_a_closed_terminal_or_sigterm_stops_everything_the_demo_started(
    demo: Callable[..., Demo], signum: int
) -> None:
    """Its terminal closed (SIGHUP to its process group, as a terminal sends it) or SIGTERM:
    the demo stops its daemon and agents as Ctrl+C does. Before, either killed the demo (and,
    a terminal closing, its daemon and agents) and left the workspace harnesses, in sessions
    of their own, waiting for a daemon for good."""
    running = demo(env={"COLUMNS": "200"})
    wait_until(lambda: running.saw("running → done"), timeout=60)
    wait_until(lambda: one_each(running.target, ["api", "web"]), timeout=30)
    if signum == signal.SIGHUP:
        os.killpg(running.process.pid, signum)
    else:
        running.process.send_signal(signum)
    assert running.process.wait(timeout=60) == 0
    nothing_left(running.target)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PR_SET_PDEATHSIG is Linux's")
def test_a_demo_killed_outright_takes_what_it_started_with_it(demo: Callable[..., Demo]) -> None:
    """SIGKILL (the OOM killer, say) gives the demo no chance to stop anything: its daemon and
    agents, each told SIGTERM when their parent dies, stop as if it had."""
    running = demo(env={"COLUMNS": "200"})
    wait_until(lambda: running.saw("running → done"), timeout=60)
    wait_until(lambda: one_each(running.target, ["api", "web"]), timeout=30)
    running.process.kill()
    assert running.process.wait(timeout=10) == -signal.SIGKILL
    nothing_left(running.target)


def test_the_demo_with_web_serves_the_board_by_the_url_it_prints(demo: Callable[..., Demo]) -> None:
    """``demo --web``: its daemon serves the board in a browser; the URL the demo prints
    signs a browser in once, the board then shows the demo's tasks, and the fresh URL is where
    the demo said (its log); ``--exit-when-done`` still ends, the web server with the daemon."""
    from tests.web.conftest import WebServer, cookie_of

    running = demo("--web", "127.0.0.1:0", "--exit-when-done")
    wait_until(lambda: running.saw("the board in a browser: "), timeout=60)
    said = next(line for line in running.lines if "the board in a browser: " in line)
    url = said.split("the board in a browser: ", 1)[1]
    browser = WebServer(running.target)
    browser.base = url.split("/login?", 1)[0]
    assert browser.base.startswith("http://127.0.0.1:") and not browser.base.endswith(":0")
    status, headers, _ = browser.request("GET", url[len(browser.base) :])
    assert status == 303 and headers["location"] == "/", (status, headers)
    cookie = cookie_of(headers)
    wait_until(lambda: running.saw("submitted "), timeout=60)
    status, _, board = browser.request("GET", "/", cookie=cookie)
    assert status == 200 and "upgrade zfs on the build hosts" in board, board[:500]
    status, _, _ = browser.request("GET", url[len(browser.base) :])
    assert status == 403  # spent
    assert running.process.wait(timeout=90) == 0
    assert "nothing of it keeps running" in running.lines[-1]
    urls = [line.split("colibri web: ", 1)[1] for line in
            (running.target / "demo.log").read_text().splitlines()
            if line.startswith("colibri web: ")]  # fmt: skip
    assert urls[0] == url and len(urls) == 2 and urls[1].startswith(browser.base + "/login?secret=")
    assert urls[1] != url
    assert any(f"grep 'colibri web: ' {running.target / 'demo.log'} | tail -1" in line
               for line in running.lines)  # fmt: skip
    nothing_left(running.target)


def test_demo_web_refuses_without_the_web_extra(tmp_path: Path) -> None:
    """Without Starlette (the web extra not installed), ``demo --web`` says how to install it,
    in one line, before starting or laying out anything."""
    target = tmp_path / "demo"
    blocked = (
        "import sys; sys.modules['starlette'] = None; from colibri.cli.main import main; main()"
    )
    done = subprocess.run(
        [sys.executable, "-c", blocked, "demo", str(target), "--web"],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 1, done
    assert done.stderr.strip().splitlines() == [
        "colibri: demo --web needs the web extra (starlette missing): pip install "
        "'colibri-board[web]' (from a checkout: pip install -e '.[web]')"
    ]
    assert not target.exists() and done.stdout == ""
