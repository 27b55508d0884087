"""A root or a daemon of another user is never trusted by the CLI (as git's safe.directory):
folders planted by uid 65534 where root walks up from its working directory, a lock naming a
process of root's for ``colibri stop`` to signal, a socket where another user listens for what
root sends. Run as root: the planted files are uid 65534's, the fake daemon a real process of
that uid."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from colibri.client import AsyncClient
from colibri.core.errors import RootError
from tests.helpers import NOBODY, colibri, one_line

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="another user's files need root")

ALLOW = "COLIBRI_TRUSTED_ROOTS"


@pytest.fixture
def planted() -> Iterator[Path]:
    """``/tmp/…/X`` as uid 65534 would leave it: X, X/work and X/.colibri all theirs."""
    top = Path(tempfile.mkdtemp(prefix="cbt", dir="/tmp"))
    (top / "work").mkdir()
    (top / ".colibri").mkdir(mode=0o700)
    for path in (top, top / "work", top / ".colibri"):
        os.chown(path, NOBODY, NOBODY)
    yield top
    shutil.rmtree(top, ignore_errors=True)


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    """A process of root's that no ``colibri stop`` may signal."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield process
    process.kill()
    process.wait()


def plant_lock(state: Path, pid: int, owner: int = NOBODY) -> None:
    lock = state / "daemon.lock"
    lock.write_text(f"{pid}\n")  # written after the victim started: its start time fits
    os.chown(lock, owner, owner)


def assert_refused(done: subprocess.CompletedProcess[str], path: Path, root: Path) -> None:
    assert done.returncode == 1, done.stdout + done.stderr
    line = one_line(done.stderr)
    assert line.startswith(f"colibri: {path} belongs to nobody (uid {NOBODY}), not to you"), line
    assert line.endswith(f"allow it with {ALLOW}={root}"), line


@pytest.mark.parametrize(
    "args", [["stop"], ["status"], ["submit", "the root password is hunter2"], ["agent", "--help"]]
)
def test_a_root_planted_above_the_working_directory_is_refused(
    planted: Path, victim: subprocess.Popen[bytes], args: list[str]
) -> None:
    plant_lock(planted / ".colibri", victim.pid)
    done = colibri(None, *args, cwd=planted / "work")
    if args == ["agent", "--help"]:
        assert done.returncode == 0  # help needs no root
        return
    assert_refused(done, planted, planted)
    assert victim.poll() is None


def test_each_part_of_a_root_of_ours_owned_by_another_is_refused(root: Path) -> None:
    """The root itself, colibri.jsonc, .colibri, daemon.lock, colibri.sock: any of them
    another user's, the root is theirs to steer."""
    import socket

    with socket.socket(socket.AF_UNIX) as listener:
        listener.bind(str(root / ".colibri" / "colibri.sock"))
        (root / ".colibri" / "daemon.lock").write_text("1\n")
        state = root / ".colibri"
        parts = [root, root / "colibri.jsonc", state, state / "daemon.lock", state / "colibri.sock"]
        for path in parts:
            os.chown(path, NOBODY, NOBODY, follow_symlinks=False)
            assert_refused(colibri(root, "status"), path, root)
            os.chown(path, 0, 0, follow_symlinks=False)


def test_allowed_by_name_a_planted_lock_still_signals_nothing(
    planted: Path, victim: subprocess.Popen[bytes]
) -> None:
    """Trusted by ``COLIBRI_TRUSTED_ROOTS``, the lock's pid is still believed only from the
    process that holds the lock."""
    plant_lock(planted / ".colibri", victim.pid)
    done = colibri(None, "stop", cwd=planted / "work", env={ALLOW: str(planted)})
    assert done.returncode == 1
    assert one_line(done.stderr) == (
        f"colibri: no daemon is running for {planted} (start one with: colibri run)"
    )
    assert victim.poll() is None


def test_a_pid_in_our_own_lock_that_does_not_hold_it_is_not_signalled(
    root: Path, victim: subprocess.Popen[bytes]
) -> None:
    """The sibling with nobody else involved: a stale or forged number in our own lock."""
    plant_lock(root / ".colibri", victim.pid, owner=0)
    done = colibri(root, "stop")
    assert done.returncode == 1 and "no daemon is running" in one_line(done.stderr)
    assert victim.poll() is None


def test_init_and_run_refuse_a_folder_with_another_users_colibri_jsonc(
    planted: Path,
) -> None:
    """A colibri.jsonc planted where root would make a root: its workspaces would run as
    root. Nothing is made."""
    shutil.rmtree(planted / ".colibri")
    config = planted / "work" / "colibri.jsonc"
    config.write_text(json.dumps({"workspaces": {"w": {"session": {"command": ["id"]}}}}))
    os.chown(config, NOBODY, NOBODY)
    for args in (["init", str(planted / "work")], ["--root", str(planted / "work"), "run"]):
        done = colibri(None, *args, cwd=planted)
        assert_refused(done, planted / "work", planted / "work")
        assert not (planted / "work" / ".colibri").exists()


# A daemon's socket with someone else listening: uid 65534 binds and listens, then root makes
# the socket file its own, so that only the peer's credentials tell.
LISTENER = """
import json, select, socket, sys
listener = socket.socket(socket.AF_UNIX)
listener.bind(sys.argv[1])
listener.listen()
print("ready", flush=True)
heard = b""
while True:
    readable, _, _ = select.select([listener, sys.stdin], [], [])
    if sys.stdin in readable:
        break
    conn, _ = listener.accept()
    conn.settimeout(5)
    try:
        heard += conn.recv(65536)
    except OSError:
        pass
    conn.close()
print(json.dumps(heard.decode(errors="replace")), flush=True)
"""


@pytest.fixture
def impostor(root: Path) -> Iterator[tuple[Path, subprocess.Popen[str]]]:
    state = root / ".colibri"
    os.chmod(root, 0o755)
    os.chmod(state, 0o777)
    path = state / "colibri.sock"
    found = [os.path.realpath(sys.executable), "/usr/bin/python3", shutil.which("python3") or ""]
    for python in dict.fromkeys(p for p in found if p and os.path.exists(p)):
        try:
            process = subprocess.Popen(
                [python, "-I", "-c", LISTENER, str(path)], user=NOBODY, group=NOBODY,
                extra_groups=[], cwd="/", stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                text=True,
            )  # fmt: skip
            break
        except PermissionError:
            continue
    else:
        pytest.skip(f"no Python interpreter that uid {NOBODY} may run")
    try:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        os.chown(path, 0, 0)
        os.chmod(state, 0o700)
        yield path, process
    finally:
        process.kill()
        process.wait()


def heard(process: subprocess.Popen[str]) -> str:
    """What the impostor received, once it is told to stop."""
    out, _ = process.communicate(input="", timeout=30)
    text: str = json.loads(out)
    return text


def test_a_socket_answered_by_another_user_is_told_nothing(
    root: Path, impostor: tuple[Path, subprocess.Popen[str]]
) -> None:
    path, process = impostor
    done = colibri(root, "submit", "the root password is hunter2", timeout=30)
    assert done.returncode == 1
    assert one_line(done.stderr) == (
        f"colibri: the daemon at {path} runs as nobody (uid {NOBODY}), not as you: nothing was "
        f"sent to it; if you trust nobody, allow it with {ALLOW}={root}"
    )

    async def connect() -> None:
        await AsyncClient.for_root(root).connect()

    with pytest.raises(RootError, match="runs as nobody"):
        asyncio.run(connect())
    assert heard(process) == ""


def nobodys_python() -> tuple[str, dict[str, str]]:
    """A Python uid 65534 may run, and the environment in which it imports this colibri and
    its dependencies."""
    import site

    src = str(Path(__file__).parents[2] / "src")
    env = {"PYTHONPATH": os.pathsep.join([src, *site.getsitepackages()])}
    for python in (os.path.realpath(sys.executable), "/usr/bin/python3"):
        try:
            done = subprocess.run(
                [python, "-c", "import colibri, msgspec, click"], user=NOBODY, group=NOBODY,
                extra_groups=[], cwd="/", env=env, capture_output=True, check=False,
            )  # fmt: skip
        except PermissionError:
            continue
        if done.returncode == 0:
            return python, env
    pytest.skip(f"no Python that uid {NOBODY} may run colibri with")


def test_a_root_allowed_by_name_is_served_by_its_owner(planted: Path) -> None:
    """The other side: uid 65534's own daemon on its own root, which root may use once it
    names the root in COLIBRI_TRUSTED_ROOTS (the peer is then the owner of the folder)."""
    from tests.helpers import wait_until

    root = planted
    os.chmod(planted, 0o755)
    # Shared with root's group, as a daemon of a service user is with its operators.
    config = root / "colibri.jsonc"
    config.write_text(json.dumps({"server": {"socket_group": "root"}}))
    os.chown(config, NOBODY, NOBODY)
    python, env = nobodys_python()
    daemon = subprocess.Popen(
        [python, "-m", "colibri", "--root", str(root), "run", "--log-level", "warning"],
        user=NOBODY, group=0, extra_groups=[], cwd="/", env=env,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        socket_path = root / ".colibri" / "colibri.sock"
        wait_until(lambda: socket_path.exists() or daemon.poll() is not None, timeout=30)
        assert daemon.poll() is None, "the daemon of uid 65534 did not start"
        refused = colibri(root, "status")
        assert_refused(refused, root, root)
        served = colibri(root, "submit", "for nobody's daemon", env={ALLOW: str(root)})
        assert served.returncode == 0, served.stderr
        stranger = colibri(root, "status", env={ALLOW: "/elsewhere"})
        assert stranger.returncode == 1 and f"{ALLOW}={root}" in stranger.stderr
    finally:
        daemon.terminate()
        daemon.communicate(timeout=30)


@pytest.mark.parametrize("mode", ["auto", "portable-processes"])
def test_a_lock_rewritten_under_a_running_daemon_signals_nothing_else(
    root: Path, victim: subprocess.Popen[bytes], mode: str
) -> None:
    """The lock's content rewritten to name another process of ours while the daemon holds
    it: natively the lock's holder tells (no daemon holds it with that pid); the portable way,
    which cannot ask the lock, the pid answering on the socket does."""
    from tests.helpers import Daemon

    daemon = Daemon(root)
    daemon.start()
    try:
        plant_lock(root / ".colibri", victim.pid, owner=0)
        done = colibri(root, "stop", env={"COLIBRI_HOST": mode})
        assert done.returncode == 1
        line = one_line(done.stderr)
        if mode == "auto":
            assert "no daemon is running" in line
        else:
            assert line == (
                f"colibri: {root}/.colibri/daemon.lock names pid {victim.pid}, but pid "
                f"{daemon.pid} answers on {root}/.colibri/colibri.sock: nothing was signalled"
            )
        assert victim.poll() is None and daemon.call("ping")["pong"] is True
    finally:
        daemon.stop()
