"""The processes the tests fork from a pre-imported colibri (tests/prestarted.py) behave as
the same commands started afresh: output, exit status, input, session, signals, command
line; and a start that depends on how an interpreter starts is not forked."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from tests import prestarted
from tests.helpers import PYTHON, Daemon

COLIBRI = [PYTHON, "-m", "colibri"]


def test_a_forked_command_says_and_ends_as_the_same_command_started_afresh(
    scratch: Path,
) -> None:
    args = [*COLIBRI, "--root", str(scratch / "none"), "status"]
    forked = prestarted.run(args, timeout=30)
    fresh = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        fresh.returncode,
        fresh.stdout,
        fresh.stderr,
    )
    assert forked.returncode == 1 and "is not a Colibri root" in forked.stderr


def test_the_installed_script_is_forked_and_answers_as_when_started_afresh(scratch: Path) -> None:
    """``colibri`` as pip installed it (the program a shell runs, completions included)."""
    args = [prestarted.SCRIPT, "--root", str(scratch / "none"), "status"]
    assert prestarted.forkable(args, None)
    forked = prestarted.run(args, timeout=30)
    fresh = subprocess.run(args, capture_output=True, text=True, timeout=30, check=False)
    assert (forked.returncode, forked.stderr) == (fresh.returncode, fresh.stderr)
    assert forked.returncode == 1 and "is not a Colibri root" in forked.stderr
    # Click names the program from argv[0], as a shell's completion asks for it.
    env = {**os.environ, "_COLIBRI_COMPLETE": "bash_source"}
    source = prestarted.run([prestarted.SCRIPT], env=env, timeout=30)
    assert source.returncode == 0 and "_colibri_completion()" in source.stdout


def test_input_reaches_a_forked_command_and_its_usage_errors_exit_2(scratch: Path) -> None:
    """``submit --from -`` reads what it is given on stdin (and refuses it here, saying where);
    an unknown option is click's usage error, exit 2."""
    done = prestarted.run([*COLIBRI, "--no-such-option"], timeout=30)
    assert done.returncode == 2 and "No such option" in done.stderr
    given = prestarted.run(
        [*COLIBRI, "--root", str(scratch), "submit", "--from", "-"], timeout=30, input="{no\n"
    )
    assert given.returncode == 1
    assert given.stderr.startswith("colibri: stdin:1: JSON is malformed"), given.stderr


def test_a_forked_daemon_is_a_process_of_its_own_named_as_started(root: Path) -> None:
    daemon = Daemon(root)
    daemon.start()
    try:
        assert isinstance(daemon.process, prestarted.Forked)
        pid = daemon.pid
        assert os.getsid(pid) == pid  # a session of its own, as start_new_session gives
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        assert [arg.decode() for arg in argv[: len(daemon.command())]] == daemon.command()
        assert daemon.call("ping")["pong"] is True
    finally:
        daemon.kill()
    assert daemon.process.returncode == -signal.SIGKILL
    assert not daemon.socket.exists() or daemon.process.poll() is not None


def test_a_start_that_changes_how_an_interpreter_starts_is_not_forked(scratch: Path) -> None:
    """``LD_PRELOAD`` (libfaketime) and ``PYTHON*`` settings other than the forker's need a
    fresh interpreter; so does any program but ``python -m colibri``."""
    env = {**os.environ, "PYTHONHASHSEED": "7"}
    started = prestarted.start([*COLIBRI, "--help"], env=env, stdout=subprocess.DEVNULL)
    assert isinstance(started, subprocess.Popen)
    assert started.wait(timeout=30) == 0
    other = prestarted.start([sys.executable, "-c", "pass"])
    assert isinstance(other, subprocess.Popen)
    assert other.wait(timeout=30) == 0
    same = prestarted.start([*COLIBRI, "--help"], stdout=subprocess.DEVNULL)
    assert isinstance(same, prestarted.Forked)
    assert same.wait(timeout=30) == 0
