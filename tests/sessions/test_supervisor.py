"""The supervisor: one harness per workspace, restarted, adopted across a daemon crash, stopped
on a clean stop, degraded when it crash-loops. Processes are read from /proc."""

from __future__ import annotations

import json
import os
import re
import signal
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

from colibri.daemon.supervisor import (
    FAILURE_LENGTH,
    FAILURE_TAIL,
    exit_reason,
    last_words,
    log_mark,
)
from tests.helpers import Daemon, colibri, online, wait_until
from tests.sessions.support import (
    ECHO,
    alive,
    gated,
    harnesses,
    mentioning,
    one_each,
    pgid_of,
)

Fleet = Callable[..., Daemon]


def two(fleet: Fleet, root: Path, **settings: Any) -> tuple[Daemon, dict[str, int]]:
    """A daemon with workspaces api (gated sessions) and web (echo), both harnesses online."""
    daemon = fleet(
        {"api": {"session": {"command": gated(root)}}, "web": {"session": {"command": ECHO}}},
        **settings,
    )
    pids = wait_until(lambda: one_each(root, ["api", "web"]))
    wait_until(lambda: online(daemon, "api", "web"))
    return daemon, pids


def status(daemon: Daemon) -> dict[str, dict[str, Any]]:
    return {h["workspace"]: h for h in daemon.call("status")["harnesses"]}


def test_one_harness_per_workspace_each_in_its_own_group(fleet: Fleet, root: Path) -> None:
    daemon, pids = two(fleet, root)
    assert daemon.process is not None
    daemon_group = pgid_of(daemon.process.pid)
    for pid in pids.values():
        assert pgid_of(pid) == pid != daemon_group
    assert os.getsid(pids["api"]) == pids["api"]
    assert {
        name: (h["pid"], h["restarts"], h["degraded"]) for name, h in status(daemon).items()
    } == {
        "api": (pids["api"], 0, False),
        "web": (pids["web"], 0, False),
    }
    printed = colibri(root, "status")
    assert f"harness  api: pid {pids['api']}, 0 restarts" in printed.stdout
    assert f"harness  web: pid {pids['web']}, 0 restarts" in printed.stdout


def test_a_killed_harness_is_started_again(fleet: Fleet, root: Path) -> None:
    daemon, pids = two(fleet, root)
    os.kill(pids["web"], signal.SIGKILL)
    now = wait_until(
        lambda: (p := one_each(root, ["api", "web"])) and p["web"] != pids["web"] and p
    )
    assert now["api"] == pids["api"]
    wait_until(lambda: status(daemon)["web"]["pid"] == now["web"])
    assert status(daemon)["web"]["restarts"] == 1
    # It could say nothing: the signal is its last failure.
    assert status(daemon)["web"]["last_failure"] == "killed by SIGKILL"
    assert status(daemon)["api"]["last_failure"] is None
    assert status(daemon)["api"]["restarts"] == 0
    # the new harness serves its workspace
    wait_until(lambda: online(daemon, "web"))
    task = daemon.call("submit", text="after the restart", workspace="web")["task"]
    assert daemon.wait_closed(task["id"])["output"] == "after the restart\n"
    assert one_each(root, ["api", "web"]) == now


def test_a_second_harness_for_a_workspace_refuses_to_start(fleet: Fleet, root: Path) -> None:
    _, pids = two(fleet, root)
    second = colibri(root, "agent", "--workspace", "api")
    assert second.returncode == 1
    assert f"another harness (pid {pids['api']}) already serves" in second.stderr
    assert one_each(root, ["api", "web"]) == pids


def test_harnesses_outlive_a_daemon_crash_and_are_adopted(fleet: Fleet, root: Path) -> None:
    daemon, pids = two(fleet, root)
    # a session is running when the daemon dies
    running = daemon.call("submit", text="long work", workspace="api")["task"]
    started = root / f"started-{running['id']}"
    wait_until(started.exists)
    session = int(started.read_text())

    daemon.kill()
    assert all(alive(pid) for pid in pids.values())
    assert alive(session)
    assert one_each(root, ["api", "web"]) == pids

    daemon.start()
    wait_until(lambda: online(daemon, "api", "web"))
    wait_until(lambda: {n: h["pid"] for n, h in status(daemon).items()} == pids)
    assert all(h["restarts"] == 0 for h in status(daemon).values())
    assert one_each(root, ["api", "web"]) == pids  # adopted, no duplicates
    assert daemon.call("get", task=running["id"])["task"]["state"] == "running"

    # a task submitted now still runs, on the adopted harness
    fresh = daemon.call("submit", text="after the crash", workspace="web")["task"]
    assert daemon.wait_closed(fresh["id"])["output"] == "after the crash\n"

    # the session that ran across the crash finishes, on its first attempt
    (root / f"go-{running['id']}").touch()
    ended = daemon.wait_closed(running["id"])
    assert ended["outcome"] == "done"
    assert ended["output"] == f"released {running['id']}\n"
    assert ended["attempts"] == 1
    assert one_each(root, ["api", "web"]) == pids


def test_harnesses_of_a_daemon_gone_for_good_stop_their_sessions_and_exit(
    fleet: Fleet, root: Path
) -> None:
    """supervisor.orphan_after: a daemon killed and not started again leaves its harnesses no
    one to stop them; they stop their sessions and exit once no daemon has held the root that
    long (a daemon started again within it adopts them: the test above)."""
    daemon, pids = two(fleet, root, supervisor={"orphan_after": "1s"})
    running = daemon.call("submit", text="long work", workspace="api")["task"]
    started = root / f"started-{running['id']}"
    wait_until(started.exists)
    session = int(started.read_text())

    daemon.kill()
    wait_until(lambda: not alive(session) and not any(alive(p) for p in pids.values()), 60)
    assert harnesses(root) == {}
    assert mentioning(root) == []
    log = (root / ".colibri" / "harness" / "api.log").read_text()
    assert "no daemon has run for this root for 1s: stopping the sessions and exiting" in log
    assert "Traceback" not in log


def test_a_clean_stop_leaves_no_harness_and_no_session(fleet: Fleet, root: Path) -> None:
    daemon, pids = two(fleet, root)
    running = daemon.call("submit", text="long work", workspace="api")["task"]
    started = root / f"started-{running['id']}"
    wait_until(started.exists)
    session = int(started.read_text())
    assert session in mentioning(root)

    daemon.stop()  # SIGTERM; asserts exit 0
    assert not alive(session)
    assert not any(alive(pid) for pid in pids.values())
    assert harnesses(root) == {}
    assert mentioning(root) == []
    assert "event=harness_killed" not in daemon.log()  # each stopped by itself, in time


def test_a_closed_terminal_stops_the_daemon_as_ctrl_c_does(fleet: Fleet, root: Path) -> None:
    """SIGHUP (the terminal of a foreground ``colibri run`` closed) is a clean stop: its default
    action killed the daemon alone, and the harnesses, in sessions of their own, waited for
    it for good."""
    daemon, pids = two(fleet, root)
    running = daemon.call("submit", text="long work", workspace="api")["task"]
    started = root / f"started-{running['id']}"
    wait_until(started.exists)
    session = int(started.read_text())
    assert daemon.process is not None
    daemon.process.send_signal(signal.SIGHUP)
    assert daemon.process.wait(timeout=30) == 0, daemon.log()
    wait_until(lambda: not alive(session) and not any(alive(p) for p in pids.values()), 30)
    assert harnesses(root) == {}
    assert mentioning(root) == []
    assert "event=harness_killed" not in daemon.log()


def test_a_harness_that_cannot_start_is_marked_degraded(fleet: Fleet, root: Path) -> None:
    (root / "broken").write_text("a file where the workspace's directory should be")
    daemon = fleet(
        {"web": {"session": {"command": ECHO}}, "broken": {"session": {"command": ECHO}}},
        supervisor={
            "crash_loop": 3,
            "crash_window": "1m",
            "cool_down": "1h",
            "max_backoff": "1s",  # the shortest allowed
        },
    )
    broken = wait_until(lambda: status(daemon)["broken"]["degraded"] and status(daemon)["broken"])
    assert broken["restarts"] == 2  # three starts, three exits: degraded
    assert broken["pid"] is None
    assert "broken" not in harnesses(root)
    log = (root / ".colibri" / "harness" / "broken.log").read_text()
    assert f"colibri: File exists: {root / 'broken'}\n" in log  # one line, no traceback
    assert "Traceback" not in log
    assert broken["state"] == "degraded"
    assert broken["last_failure"] == f"File exists: {root / 'broken'}"
    assert (
        f"harness  broken: DEGRADED, 2 restarts, last failure: File exists: {root / 'broken'}\n"
        in colibri(root, "status").stdout
    )
    # the other workspace is not disturbed
    web = status(daemon)["web"]
    assert (web["restarts"], web["degraded"]) == (0, False)
    assert one_each(root, ["web"]) == {"web": web["pid"]}


def test_a_harness_log_past_its_limit_is_renamed_and_no_line_is_lost(
    fleet: Fleet, root: Path
) -> None:
    """supervisor.harness_log_mib: the harness renames its log NAME.log.1 past the limit and
    goes on in a new NAME.log, 0600; read .1 then the log, every line is there, whole. The log
    holds an earlier harness's lines already, 358 bytes short of the limit (1 KiB, the least
    there is): a few crashes' lines take it past."""
    log = root / ".colibri" / "harness" / "web.log"
    older = log.with_name("web.log.1")
    log.parent.mkdir(mode=0o700)
    earlier = "".join(f"03:00:{n:02} info    an earlier harness's line {n:02}\n" for n in range(15))
    assert 500 < len(earlier) < 1024 - 300
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as prefill:
        prefill.write(earlier)
    daemon = fleet({"web": {"session": {"command": ECHO}}}, supervisor={"harness_log_mib": 0.001})
    (pid,) = wait_until(lambda: one_each(root, ["web"])).values()
    wait_until(lambda: online(daemon, "web"))
    # Each crash of the daemon makes the harness write a few lines: lost, waiting, registered.
    crashes = 0
    while not older.exists():
        assert crashes < 30, log.read_text()
        daemon.kill()
        daemon.start()
        wait_until(lambda: online(daemon, "web"))
        crashes += 1
    assert crashes >= 1  # the earlier lines alone were short of the limit
    assert one_each(root, ["web"]) == {"web": pid}  # one harness did it all, adopted each time
    assert older.stat().st_size >= 1024 > log.stat().st_size
    lines = older.read_text() + log.read_text()
    assert lines.startswith(earlier) and lines.endswith("\n")
    assert lines.count("event=registered") == crashes + 1
    assert lines.count("event=daemon_lost") == crashes
    for path in (log, older):
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # The harness writes on in the new file, and a second rotation replaces the older one.
    before = log.stat()
    daemon.kill()
    daemon.start()
    wait_until(lambda: online(daemon, "web"))
    after = log.stat()
    grew = after.st_ino == before.st_ino and after.st_size > before.st_size
    assert grew or older.stat().st_ino == before.st_ino  # written on, or itself renamed .1
    assert sorted(p.name for p in log.parent.glob("web.log*")) == ["web.log", "web.log.1"]


def test_a_harness_that_cannot_start_says_why_where_its_tasks_wait(
    fleet: Fleet, root: Path
) -> None:
    """A workspace whose session command is not installed: its harness refuses to start, in
    its log. status, why, workspace show and the submission say so too, in the harness's own
    words, made printable (the other workspace's command names an escape sequence)."""
    daemon = fleet({
        "alpha": {"session": {"command": ["no-such-agent-here", "-p"]}},
        "beta": {"session": {"command": ["/nonexistent/\x1b[2Jagent"]}},
    })  # fmt: skip
    said = "agent alpha: its command 'no-such-agent-here' is not found on PATH; give its " \
        "path, or install it"  # fmt: skip
    alpha = wait_until(lambda: status(daemon)["alpha"]["last_failure"] and status(daemon)["alpha"])
    assert alpha["last_failure"] == said
    assert alpha["state"] == "restarting" and alpha["last_failure_at"].endswith("Z")
    line = re.compile(
        rf"harness  alpha: restarting, \d+ restarts?, last failure: {re.escape(said)}\n"
    )
    assert line.search(colibri(root, "status").stdout)

    submitted = colibri(root, "submit", "fix the login page", "--workspace", "alpha")
    assert submitted.returncode == 0, submitted.stderr
    task = submitted.stdout.strip()
    assert f"colibri: task {task} waits: harness alpha: restarting" in submitted.stderr
    assert f"last failure: {said} (see: colibri why {task})" in submitted.stderr

    why = colibri(root, "why", task).stdout
    assert why.startswith(f"task {task} is pending: no agents are registered — harness alpha: ")
    assert said in why.splitlines()[0]
    explained = json.loads(colibri(root, "why", task, "--json").stdout)
    assert [h["workspace"] for h in explained["harnesses"]] == ["alpha"]
    assert explained["harnesses"][0]["last_failure"] == said

    shown = colibri(root, "workspace", "show", "alpha").stdout
    assert re.search(rf"^harness: +restarting, \d+ restarts?, last failure: {re.escape(said)}$",
                     shown, re.MULTILINE), shown  # fmt: skip
    as_json = json.loads(colibri(root, "workspace", "show", "alpha", "--json").stdout)
    assert as_json["harness"]["last_failure"] == said

    # A task of no workspace that nobody can take names every harness that is down.
    beta = wait_until(lambda: status(daemon)["beta"]["last_failure"])
    assert beta == "agent beta: its command /nonexistent/\\x1b[2Jagent does not exist"
    anywhere = colibri(root, "submit", "anything")
    assert "waits: harness alpha: " in anywhere.stderr and "; harness beta: " in anywhere.stderr
    printed = colibri(root, "status").stdout
    assert "\x1b" not in printed and "/nonexistent/\\x1b[2Jagent does not exist" in printed


def test_a_harness_s_last_words_are_the_end_of_what_it_wrote_to_its_log(tmp_path: Path) -> None:
    """What the supervisor reads of a harness's log: the last line written since the harness
    started (a renamed log, a new file: from its start), at most FAILURE_TAIL bytes of it, one
    printable line of at most FAILURE_LENGTH characters; nothing written, nothing said."""
    log = tmp_path / "alpha.log"
    log.write_bytes(b"an earlier harness's line\n")
    log.chmod(0o600)
    mark = log_mark(log)
    assert last_words(log, mark) is None
    with log.open("ab") as out:
        out.write(b"10:00:00 info    registered\ncolibri: refused: \x1b[2J\xff\n\n")
    assert last_words(log, mark) == "refused: \\x1b[2J\ufffd"
    # The harness renamed its log: the new file is all its own.
    log.rename(tmp_path / "alpha.log.1")
    log.write_bytes(b"Traceback (most recent call last):\nRuntimeError: boom\n")
    log.chmod(0o600)
    assert last_words(log, mark) == "RuntimeError: boom"
    # A long last line is cut; only the log's end is read.
    with log.open("ab") as out:
        out.write(b"x" * (3 * FAILURE_TAIL) + b"\n" + b"y" * (2 * FAILURE_LENGTH) + b"\n")
    words = last_words(log, mark)
    assert words is not None and len(words) == FAILURE_LENGTH and words.startswith("yyy")
    assert exit_reason(-9, words) == "killed by SIGKILL"
    assert exit_reason(1, None) == "exit code 1, and nothing written to its log"


def test_a_harness_whose_pid_is_not_written_yet_is_never_reported_as_pid_minus_one(
    tmp_path: Path,
) -> None:
    """A harness takes its lock, then writes its pid: a look between the two finds the lock held
    and no pid. The supervisor names the process it started, and waits to name one it adopts."""
    import asyncio
    import fcntl
    import subprocess
    import sys

    from colibri.config import load_config
    from colibri.daemon.supervisor import Supervisor
    from tests.inprocess import ManualClock

    workspaces = {"w": {"path": ".", "session": {"command": ["true"]}}}
    (tmp_path / "colibri.jsonc").write_text(json.dumps({"workspaces": workspaces}))
    config = load_config(tmp_path)
    config.layout.state.mkdir(mode=0o700)
    supervisor = Supervisor(config, ManualClock())
    lock = config.layout.harness_lock("w")
    holder = os.open(lock, os.O_RDWR | os.O_CREAT, 0o600)
    fcntl.flock(holder, fcntl.LOCK_EX)  # held, nothing written
    started = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        harness = supervisor.harnesses["w"]
        harness.process = started
        asyncio.run(supervisor._tend(harness, 0.0))
        assert (harness.locked, harness.pid) == (True, started.pid)

        harness.process, harness.pid = None, None  # the same lock, seen by a daemon restarted
        asyncio.run(supervisor._tend(harness, 0.0))
        assert supervisor.status()[0].pid is None
        assert supervisor.status()[0].state == "running"
        os.pwrite(holder, str(started.pid).encode(), 0)
        asyncio.run(supervisor._tend(harness, 0.0))
        assert supervisor.status()[0].pid == started.pid
    finally:
        started.kill()
        started.wait()
        os.close(holder)


def test_a_harness_started_as_the_daemon_stops_is_stopped_with_the_others(tmp_path: Path) -> None:
    """The daemon stops (its supervisor's loop cancelled) while a harness's start is under way
    off the loop: the start is finished, not lost, and ``stop_all`` stops what it started."""
    import asyncio

    from colibri.config import load_config
    from colibri.daemon.supervisor import Supervisor
    from tests.inprocess import ManualClock

    workspaces = {"w": {"path": ".", "session": {"command": ["true"]}}}
    (tmp_path / "colibri.jsonc").write_text(json.dumps({"workspaces": workspaces}))
    config = load_config(tmp_path)
    config.layout.state.mkdir(mode=0o700)
    supervisor = Supervisor(config, ManualClock())
    harness = supervisor.harnesses["w"]

    async def stopped_while_starting() -> int:
        start = asyncio.ensure_future(supervisor._start(harness))
        while harness.starting is None:
            await asyncio.sleep(0)
        start.cancel()  # as the daemon's task group cancels the supervisor's loop
        await asyncio.gather(start, return_exceptions=True)
        await supervisor.stop_all()
        assert harness.process is not None, "the started harness was lost"
        return harness.process.pid

    pid = asyncio.run(stopped_while_starting())
    assert not alive(pid)
