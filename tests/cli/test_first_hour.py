"""What a newcomer meets in the first hour: the newest tasks listed, outcomes that can be
found, ids by their start or by the end shown on screen, and no task accepted in silence when
nothing can run it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.cli.test_attach import Attached
from tests.cli.test_cli import as_json, colibri, error_line, json_error, ok
from tests.helpers import Daemon, FakeAgent, stop_process, wait_until


def _submit_many(daemon: Daemon, n: int) -> list[str]:
    return [daemon.submit(f"task {i}")["id"] for i in range(n)]


def _ids(table: str) -> list[str]:
    return [line.split()[0] for line in table.strip().splitlines()[1:]]


def test_list_shows_the_newest_tasks_with_the_latest_at_the_bottom(daemon: Daemon) -> None:
    ids = _submit_many(daemon, 105)
    shown = colibri("list", root=daemon.root)
    assert _ids(ok(shown)) == ids[5:]  # the newest 100, oldest of them first
    hint = shown.stderr.strip()
    assert hint == f"5 older tasks not shown: colibri list --before {ids[5]} (or --all)"
    older = colibri("list", "--before", ids[5], root=daemon.root)
    assert _ids(ok(older)) == ids[:5]
    assert older.stderr == ""
    assert [t["id"] for t in as_json(colibri("list", "--all", "--json", root=daemon.root))] == ids
    newest = as_json(colibri("list", "--limit", "3", "--json", root=daemon.root))
    assert [t["id"] for t in newest] == ids[-3:]
    # Forward from an id: oldest first, and how many follow.
    forward = colibri("list", "--after", ids[0], "--limit", "2", root=daemon.root)
    assert _ids(ok(forward)) == ids[1:3]
    assert forward.stderr.strip() == f"102 more: colibri list --after {ids[2]}"


def test_list_and_status_find_tasks_by_how_they_ended(daemon: Daemon) -> None:
    agent = FakeAgent(daemon, "w1", ["python"])
    try:
        done = daemon.submit("will work", capabilities=["python"])["id"]
        agent.out(agent.next_assign())
        failed = daemon.submit("will fail", capabilities=["python"])["id"]
        agent.fail(agent.next_assign())
        cancelled = daemon.submit("never runs", capabilities=["nobody-has-this"])["id"]
        daemon.call("cancel", task=cancelled)
        for task_id in (done, failed, cancelled):
            daemon.wait_closed(task_id)
    finally:
        agent.close()
    # Ended tasks are closed at once: the state filter finds none, and says where to look.
    by_state = colibri("list", "--state", "done", root=daemon.root)
    assert ok(by_state).strip() == "no tasks"
    assert "colibri list --outcome done" in by_state.stderr
    for outcome, task_id in (("done", done), ("failed", failed), ("cancelled", cancelled)):
        found = as_json(colibri("list", "--outcome", outcome, "--json", root=daemon.root))
        assert [t["id"] for t in found] == [task_id]
    status = ok(colibri("status", root=daemon.root))
    tasks_line = next(line for line in status.splitlines() if line.startswith("tasks"))
    assert tasks_line.split(None, 1)[1] == (
        "0 pending, 0 running; ended: 1 done, 1 failed, 1 cancelled (3 closed)"
    )
    outcomes = as_json(colibri("status", "--json", root=daemon.root))["outcomes"]
    assert outcomes == {"done": 1, "failed": 1, "cancelled": 1}


def test_a_unique_prefix_names_a_task_everywhere_an_id_is_taken(daemon: Daemon) -> None:
    first, second = _submit_many(daemon, 2)
    # UUIDv7 ids of one moment share their start: all but the last character is unique.
    prefix = first[:-1] if first[:-1] != second[:-1] else first
    assert as_json(colibri("show", prefix, "--json", root=daemon.root))["id"] == first
    assert ok(colibri("why", prefix, root=daemon.root)).startswith(f"task {first} is pending")
    child = ok(colibri("submit", "child", "--parent", prefix, root=daemon.root)).strip()
    assert daemon.task(child)["parent"] == first
    lines = ok(colibri("ledger", "--task", prefix, "--json", root=daemon.root)).splitlines()
    assert [json.loads(line)["task"] for line in lines] == [first]
    children = as_json(colibri("list", "--parent", prefix, "--json", root=daemon.root))
    assert [t["id"] for t in children] == [child]
    # attach-session names the tmux session by the whole id, whatever prefix it was given
    given = second[:-1] if second[:-1] != first[:-1] else second
    refused = error_line(colibri("attach-session", given, root=daemon.root))
    assert refused == f"colibri: task {second} is pending: no session to attach to"
    cancelled = ok(colibri("cancel", prefix.upper(), root=daemon.root))
    assert first in cancelled and child in cancelled
    assert daemon.task(first)["outcome"] == "cancelled"
    assert daemon.task(second)["state"] == "pending"


def test_an_ambiguous_prefix_is_refused_in_one_line_naming_some_of_them(daemon: Daemon) -> None:
    ids = _submit_many(daemon, 5)
    common = ids[0][:8]
    assert all(i.startswith(common) for i in ids)  # five ids of one moment
    line = error_line(colibri("cancel", common, root=daemon.root))
    assert line.startswith(
        f"colibri: {common} starts or ends the ids of 5 tasks ({ids[0]}, {ids[1]}, {ids[2]}, …)"
    )
    assert line.endswith("; give more of the id")
    assert json_error(colibri("show", common, "--json", root=daemon.root))["code"] == (
        "ambiguous_task"
    )
    assert all(daemon.task(i)["state"] == "pending" for i in ids)  # nothing was cancelled
    # Fewer than four characters name nothing: `cancel 0` must not take a family by chance.
    short = json_error(colibri("cancel", ids[0][:3], "--json", root=daemon.root))
    assert short["code"] == "bad_request" and "at least 4 characters" in short["message"]
    short = json_error(colibri("cancel", ids[0][-3:], "--json", root=daemon.root))
    assert short["code"] == "bad_request" and "at least 4 characters" in short["message"]
    assert all(daemon.task(i)["state"] == "pending" for i in ids)
    # A whole id in capitals is the id.
    assert as_json(colibri("show", ids[4].upper(), "--json", root=daemon.root))["id"] == ids[4]
    # What starts or ends no id, or is no id at all, is unknown as before.
    for unknown in ("ffffffff", "zz", "0%", "0_", "%933", "_933"):
        assert json_error(colibri("show", unknown, "--json", root=daemon.root))["code"] == (
            "unknown_task"
        )
    assert error_line(colibri("why", "ffffffff", root=daemon.root)) == (
        "colibri: no task with id ffffffff (list tasks with: colibri list)"
    )


def _shown(line: str) -> str:
    """The short id of a task's line of ``attach`` or the demo (``12:00:01 c874c933 …``)."""
    short = line.split()[1]
    assert len(short) == 8 and not short.strip("0123456789abcdef"), line
    return short


def test_the_short_id_attach_shows_names_its_task_wherever_an_id_is_taken(daemon: Daemon) -> None:
    """The lines show an id's end, the part that differs between tasks of one minute: that is
    what an operator copies, and every command takes it as it takes a whole id."""
    texts = [f"burst task {i}" for i in range(5)]
    attached = Attached(daemon.root)
    try:
        wait_until(lambda: attached.saw("attached to the daemon"))
        whole = {text: daemon.submit(text)["id"] for text in texts}
        wait_until(lambda: all(attached.saw(text) for text in texts))
    finally:
        attached.process.terminate()
        attached.end()
    shown = {text: _shown(line) for text in texts for line in attached.lines if line.endswith(text)}
    assert len(set(shown.values())) == 5  # one minute's ids, told apart by their ends
    for text, short in shown.items():
        assert as_json(colibri("show", short, "--json", root=daemon.root))["id"] == whole[text]
        assert ok(colibri("why", short.upper(), root=daemon.root)).startswith(
            f"task {whole[text]} is pending"
        )
    # What list prints (whole ids) and longer ends are taken too.
    listed = _ids(ok(colibri("list", root=daemon.root)))
    assert listed == [whole[text] for text in texts]
    assert as_json(colibri("show", listed[1][-17:], "--json", root=daemon.root))["id"] == listed[1]
    cancelled = ok(colibri("cancel", shown[texts[2]], root=daemon.root))
    assert whole[texts[2]] in cancelled
    states = [daemon.task(whole[t])["state"] for t in texts]
    assert states == ["pending", "pending", "closed", "pending", "pending"]
    child = ok(colibri("submit", "child", "--parent", shown[texts[3]], root=daemon.root)).strip()
    assert daemon.task(child)["parent"] == whole[texts[3]]
    waited = as_json(colibri("wait", shown[texts[2]], "--json", root=daemon.root))
    assert waited["id"] == whole[texts[2]] and waited["outcome"] == "cancelled"
    retried = ok(colibri("retry", shown[texts[2]], root=daemon.root)).strip()
    assert daemon.task(retried)["text"] == texts[2]


def test_an_end_two_tasks_share_is_refused_in_one_line_naming_them(daemon: Daemon) -> None:
    """The last four characters of 2,000 ids repeat (65,536 values: a repeat is all but
    certain); such an end names no task, and the error names the tasks it could be."""
    ids = [r["task"]["id"] for r in daemon.call(
        "submit-all", tasks=[{"text": f"t{i}"} for i in range(2000)])["tasks"]]  # fmt: skip
    by_end: dict[str, list[str]] = {}
    for task_id in ids:
        by_end.setdefault(task_id[-4:], []).append(task_id)
    end, alike = next(
        (end, alike)
        for end, alike in sorted(by_end.items())
        if len(alike) == 2 and not any(i.startswith(end) for i in ids)
    )
    line = error_line(colibri("cancel", end, root=daemon.root))
    assert line == (
        f"colibri: {end} starts or ends the ids of 2 tasks ({alike[0]}, {alike[1]}); "
        "give more of the id"
    )
    refused = json_error(colibri("show", end, "--json", root=daemon.root))
    assert refused["code"] == "ambiguous_task" and alike[1] in refused["message"]
    assert all(daemon.task(i)["state"] == "pending" for i in alike)  # nothing was cancelled
    # More of the end tells them apart.
    shown_alike = len({i[-8:] for i in alike}) == 2  # all but certain: 32 random bits each
    for task_id in alike:
        longer = task_id[-8:] if shown_alike else task_id[-13:]
        assert as_json(colibri("show", longer, "--json", root=daemon.root))["id"] == task_id


def _waits(result: Any) -> str:
    task_id = ok(result).strip()
    line = result.stderr.strip()
    assert line.startswith(f"colibri: task {task_id} waits: "), line
    assert line.endswith(f"(see: colibri why {task_id})")
    return str(line.split(" waits: ", 1)[1].rsplit(" (see:", 1)[0])


def test_a_task_nothing_can_run_is_not_accepted_in_silence(daemon: Daemon) -> None:
    root = daemon.root
    assert _waits(colibri("submit", "x", "--agent", "ghost", root=root)) == (
        "no agent named ghost has registered yet"
    )
    assert _waits(colibri("submit", "x", "--workspace", "ghost", root=root)) == (
        "no agent of workspace ghost has registered yet, and colibri.jsonc defines no such "
        "workspace"
    )
    assert _waits(colibri("submit", "x", "--cap", "zfs", root=root)) == (
        "no agent has registered with zfs yet"
    )
    assert _waits(colibri("submit", "x", "--capability", "zfs", "--cap", "arm", root=root)) == (
        "no agent has registered with any of arm, zfs yet"
    )
    agent = FakeAgent(daemon, "bsd-1", ["zfs"], slots=100, workspace="ops")
    try:
        for args in (["--cap", "zfs"], ["--agent", "bsd-1"], ["--workspace", "ops"], []):
            quiet = colibri("submit", "x", *args, root=root)
            assert ok(quiet) and quiet.stderr == "", args
        assert _waits(colibri("submit", "x", "--cap", "zfs", "--cap", "arm", "--min-score", "1",
                              root=root)) == (
            "no agent has registered with arm yet, and the task needs a score of 1"
        )  # fmt: skip
        ok(colibri("pause", root=root))
        assert _waits(colibri("submit", "x", "--cap", "zfs", root=root)) == (
            "dispatch is paused (resume with: colibri resume)"
        )
    finally:
        agent.close()
    # The daemon, started again, still knows what registered before.
    daemon.restart()
    ok(colibri("resume", root=root))
    quiet = colibri("submit", "x", "--cap", "zfs", root=root)
    assert ok(quiet) and quiet.stderr == ""


def test_a_task_for_a_workspace_nobody_serves_yet_is_taken_and_runs_once_one_does(
    daemon: Daemon,
) -> None:
    """A workspace is served by colibri.jsonc's harness or by any agent that registers naming
    it (``colibri agent --workspace gpu -- COMMAND``, here or on another host, in any tenant),
    so ``submit --workspace`` takes a name nothing serves yet: it says in one line why the task
    waits, and the first agent serving that workspace runs it. ``unknown_workspace`` is the
    answer of the commands that read a workspace's definition from colibri.jsonc."""
    root = daemon.root
    submitted = colibri("submit", "render the site", "--workspace", "gpu", "--json", root=root)
    task = json.loads(ok(submitted))
    assert (task["state"], task["workspace"]) == ("pending", "gpu")
    (line,) = submitted.stderr.splitlines()
    assert line == (
        f"colibri: task {task['id']} waits: no agent of workspace gpu has registered yet, and "
        f"colibri.jsonc defines no such workspace (see: colibri why {task['id']})"
    )
    plain = FakeAgent(daemon, "cpu-1", [])  # free first, but of no workspace: not for it
    gpu = FakeAgent(daemon, "gpu-1", [], workspace="gpu")
    try:
        assign = gpu.next_assign()
        assert assign["task"]["id"] == task["id"]
        gpu.out(assign, output="rendered")
        wait_until(lambda: daemon.task(task["id"])["outcome"] == "done")
        assert daemon.task(task["id"])["agent"] == "gpu-1"
    finally:
        gpu.close()
        plain.close()
    refused = json_error(colibri("workspace", "show", "gpu", "--json", root=root))
    assert refused["code"] == "unknown_workspace"


def test_a_partial_fit_says_in_the_ledger_what_the_agent_lacks(daemon: Daemon) -> None:
    agent = FakeAgent(daemon, "py-1", ["python"])
    try:
        task_id = daemon.submit("x", capabilities=["python", "zfs", "arm"])["id"]
        agent.next_assign()
        full = daemon.submit("y", capabilities=["python"])["id"]
    finally:
        agent.close()
    reasons = [r["reason"] for r in daemon.ledger(task_id) if r["to_state"] == "running"]
    assert reasons == ["assigned; missing: arm, zfs"]
    assert [r["reason"] for r in daemon.ledger(full)] == ["submitted"]  # not yet assigned


def test_why_on_an_ended_task_says_how_it_ended(daemon: Daemon) -> None:
    task_id = daemon.submit("x")["id"]
    daemon.call("cancel", task=task_id)
    daemon.wait_closed(task_id)
    first = ok(colibri("why", task_id, root=daemon.root)).splitlines()[0]
    assert first == f"task {task_id} is closed: it ended cancelled; nothing waits"


def test_an_agent_says_when_it_waits_connects_and_loses_the_daemon(root: Path) -> None:
    agent = subprocess.Popen(
        [sys.executable, "-m", "colibri", "--root", str(root), "agent", "--name", "a1", "--",
         "cat"],
        stderr=subprocess.PIPE, text=True, start_new_session=True,
    )  # fmt: skip
    assert agent.stderr is not None
    os.set_blocking(agent.stderr.fileno(), False)
    seen: list[str] = []

    def said(words: str) -> bool:
        seen.extend(agent.stderr.readlines() if agent.stderr else [])
        return any(words in line for line in seen)

    daemon = Daemon(root)
    try:
        wait_until(lambda: said("waiting for the daemon: no daemon is running"))
        daemon.start()
        wait_until(lambda: said("registered"))
        daemon.stop()
        wait_until(lambda: said("lost the daemon; reconnecting"))
        waiting = lambda: sum("waiting for the daemon" in line for line in seen)  # noqa: E731
        wait_until(lambda: said("") and waiting() == 2)  # and it waits again, saying so
        time.sleep(1.0)  # a few retries later ...
        said("")
        assert waiting() == 2  # ... still one line: not one per retry
    finally:
        stop_process(agent)  # type: ignore[arg-type]
        agent.stderr.close()
        daemon.stop()


@pytest.mark.parametrize(
    ("command", "says"),
    [
        ("no-such-program", "its command 'no-such-program' is not found on PATH"),
        ("/no/such/file", "its command /no/such/file does not exist"),
        ("./colibri.jsonc", "its command ./colibri.jsonc is not an executable file (in "),
    ],
)
def test_an_agent_whose_command_cannot_run_refuses_to_start(
    daemon: Daemon, command: str, says: str
) -> None:
    result = colibri("agent", "--name", "a1", "--", command, cwd=daemon.root)
    line = error_line(result)
    assert line.startswith(f"colibri: agent a1: {says}")
    assert daemon.call("agents")["agents"] == []  # it never registered


def test_run_detach_returns_once_it_serves_and_stop_waits_until_it_is_gone(root: Path) -> None:
    try:
        started = colibri("run", "--detach", root=root)
        assert ok(started).startswith("daemon pid ")
        assert "stop it with: colibri stop" in started.stdout
        pid = int(started.stdout.split()[2])
        assert ok(colibri("status", root=root)).startswith(f"daemon   pid {pid},")  # at once
        again = error_line(colibri("run", "--detach", root=root))
        where = root.resolve()
        assert again == f"colibri: another daemon (pid {pid}) is already running for {where}"
        assert ok(colibri("stop", root=root)) == f"stopped the daemon (pid {pid}) of {where}\n"
        proc = Path(f"/proc/{pid}")
        assert not proc.exists() or "zombie" in (proc / "status").read_text()
        assert "daemon stopped" in (root / ".colibri" / "daemon.log").read_text()
        nothing = error_line(colibri("stop", root=root))
        assert nothing.startswith("colibri: no daemon is running for")
        # A daemon that cannot start says why, in one line, from its log.
        refused = error_line(colibri("run", "--detach", "--listen", "tcp://127.0.0.1:1", root=root))
        assert "it stopped as it started: listening on tcp://127.0.0.1:1 needs TLS" in refused
    finally:
        _no_daemon_left(root)


def test_two_run_detach_at_once_on_a_fresh_root_each_report_on_their_own_daemon(
    scratch: Path,
) -> None:
    """Two ``run --detach`` racing on a root that does not exist yet: one says its own daemon
    serves, with the pid that serves; the other exits 1 naming that daemon, in its own daemon's
    words. Judged by the root's socket or log instead, both said they served (one daemon dead),
    or the loser quoted the winner's ready line as why it stopped. A few rounds: the race
    falls differently each time."""
    roots = [scratch / f"fresh{n}" for n in range(4)]
    try:
        for root in roots:
            racing = [
                subprocess.Popen(
                    [sys.executable, "-m", "colibri", "--root", str(root), "run", "--detach"],
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    text=True,
                )  # fmt: skip
                for _ in range(2)
            ]
            done = [(p.wait(timeout=60), *p.communicate()) for p in racing]
            served = [out for code, out, _ in done if code == 0]
            refused = [err for code, _, err in done if code == 1]
            assert len(served) == len(refused) == 1, done
            pid = int(served[0].split()[2])
            assert served[0].startswith(f"daemon pid {pid} serves {root} ")
            said = [line for line in refused[0].splitlines() if "initialised" not in line]
            assert said == [f"colibri: another daemon (pid {pid}) is already running for {root}"]
            assert ok(colibri("status", root=root)).startswith(f"daemon   pid {pid},")
            assert ok(colibri("stop", root=root)).startswith(f"stopped the daemon (pid {pid})")
    finally:
        for root in roots:
            _no_daemon_left(root)


def test_run_detach_says_why_its_own_daemon_stopped(root: Path, scratch: Path) -> None:
    """Siblings: a daemon refused the board another root's daemon has open says so (its own
    words, not its log's tail), and one killed just after it said it serves is not reported
    serving."""
    first = ok(colibri("run", "--detach", root=root))
    pid = int(first.split()[2])
    board = root / ".colibri" / "colibri.sqlite"
    other = scratch / "other"
    try:
        refused = colibri("run", "--detach", "--store", str(board), root=other)
        assert refused.returncode == 1, refused.stderr
        assert (
            refused.stderr.strip()
            .splitlines()[-1]
            .startswith(f"colibri: another daemon (pid {pid}) already has the board {board} open")
        )
        ok(colibri("stop", root=root))
        # Its first commit (the status run --detach asks it) kills it.
        killed = error_line(
            colibri("run", "--detach", root=root, env={"COLIBRI_CRASHPOINT": "before-commit"})
        )
        assert killed == (
            f"colibri: no daemon answers at {root}: it stopped just after it started (exit "
            f"code -9); see {root / '.colibri' / 'daemon.log'}"
        )
    finally:
        _no_daemon_left(root)
        _no_daemon_left(other)


def _no_daemon_left(root: Path) -> None:
    """A detached daemon a failed assertion left running is killed, not left to the machine."""
    from colibri.client import daemon_pid

    pid = daemon_pid(root)
    if pid is not None:
        os.kill(pid, signal.SIGKILL)


def test_schedule_times_are_shown_in_the_schedules_own_time_zone(daemon: Daemon) -> None:
    added = ok(colibri("schedule", "add", "n", "x", "--cron", "0 9 * * *", "--tz", "Asia/Tokyo",
                       root=daemon.root))  # fmt: skip
    assert " 09:00:00 JST (" in added and "T00:00:00.000Z)" in added
    shown = ok(colibri("schedule", "show", "n", "--next", "2", root=daemon.root))
    nexts = [line.strip() for line in shown.splitlines() if line.startswith("  ")]
    assert len(nexts) == 2 and all(" 09:00:00 JST (" in n and n.endswith("T00:00:00.000Z)")
                                   for n in nexts)  # fmt: skip
    assert " 09:00:00 JST (" in ok(colibri("schedule", "list", root=daemon.root))
    # --json keeps the instants in UTC, for programs.
    doc = as_json(colibri("schedule", "show", "n", "--json", root=daemon.root))
    assert all(n.endswith("T00:00:00.000Z") for n in doc["next"])


def test_workspace_show_prints_settings_as_people_read_them(root: Path) -> None:
    ok(colibri("workspace", "add", "web", "--cap", "tty", "--cap", "ts", "--", "/bin/echo",
               "two words", root=root))  # fmt: skip
    lines = ok(colibri("workspace", "show", "web", root=root)).splitlines()
    shown = {k: v.strip() for k, v in (line.split(":", 1) for line in lines)}
    assert shown["capabilities"] == "tty, ts"
    assert shown["command"] == "/bin/echo 'two words'"
    assert shown["budget_usd_daily"] == "-" and shown["env"] == "-"
    assert not any(v.startswith(("[", "{")) or v == "None" for v in shown.values()), shown


def test_a_pid_left_in_the_daemon_lock_by_a_crash_is_not_believed(root: Path) -> None:
    """A crashed daemon's pid stays in daemon.lock, and the system may give it to another
    process: stop must not signal that process, and commands must not wait for it to serve."""
    lock = root / ".colibri" / "daemon.lock"
    other = subprocess.Popen(["sleep", "60"])
    try:
        lock.write_text(f"{other.pid}\n")
        written = time.time() - 60  # the file was written a minute before that process started
        os.utime(lock, (written, written))
        started = time.monotonic()
        assert error_line(colibri("status", root=root)).startswith("colibri: no daemon is running")
        assert time.monotonic() - started < 14  # not the 15 s a starting daemon is given
        assert error_line(colibri("stop", root=root)).startswith("colibri: no daemon is running")
        assert other.poll() is None  # not signalled
        for junk in ("²", "-1", "12 34", "\x00"):
            lock.write_text(junk)
            assert error_line(colibri("stop", root=root)).startswith(
                "colibri: no daemon is running"
            ), junk
        # A real daemon's own pid is believed: run --detach, then stop.
        pid = int(ok(colibri("run", "--detach", root=root)).split()[2])
        assert ok(colibri("stop", root=root)).startswith(f"stopped the daemon (pid {pid})")
    finally:
        other.kill()
        other.wait()
        _no_daemon_left(root)


def test_a_tenants_hint_names_nothing_of_another_tenant_or_of_colibri_jsonc(root: Path) -> None:
    """The hint counts only what the task's own tenant could run on: another tenant's agents
    do not silence it, and colibri.jsonc's workspaces (the default tenant's) are never named
    to another tenant, nor told apart from workspaces that do not exist."""
    (root / "colibri.jsonc").write_text(json.dumps(
        {"workspaces": {"ops": {"capabilities": ["zfs"], "session": {"command": ["cat"]}}}}
    ))  # fmt: skip
    daemon = Daemon(root)
    daemon.start()
    agent = FakeAgent(daemon, "acme-1", ["arm"], tenant="acme")
    try:

        def waits(**fields: Any) -> str | None:
            cmd = "create-task" if "agent" in fields else "submit"
            hint: str | None = daemon.call(cmd, text="x", **fields).get("waits")
            return hint

        assert waits(workspace="ops") is None  # the default tenant's own workspace
        said = [waits(workspace=w, tenant="acme") or "" for w in ("ops", "nosuch")]
        assert said[0].replace("ops", "W") == said[1].replace("nosuch", "W")  # told apart? no
        assert waits(workspace="ops", tenant="acme") == (
            "no agent of workspace ops has registered yet"
        )
        assert waits(agent="ops", tenant="acme") == "no agent named ops has registered yet"
        assert waits(capabilities=["arm"], tenant="acme") is None  # acme's own agent has it
        assert waits(capabilities=["arm"]) == "no agent has registered with arm yet"
        assert waits(agent="acme-1") == "no agent named acme-1 has registered yet"
    finally:
        agent.close()
        daemon.stop()
