"""Agent and session faults with real processes: a real daemon, real workspace harnesses started
by its supervisor, real sessions (a small script), real signals.

- a session SIGKILLed: its task fails (or is retried by ``max_attempts``) with a ledger row
  saying it was killed; nothing of its process group is left;
- a harness SIGKILLed: the supervisor starts another, which kills the sessions it left; their
  tasks end by the rules, each with a ledger row saying why;
- a harness and its session SIGSTOPped past the TTL (B4): the task goes to another agent; the
  woken session's own report is refused ``stale_claim``; the second agent's result stands, one
  terminal transition;
- a harness stopped with SIGTERM while work waits: its sessions' tasks fail, it takes no new
  task on its way out, and nothing it ran is left;
- connections dropped in the middle of a request line: nothing of the half line is stored, the
  daemon serves everyone else, a held task ends by the rules;
- all of it with the daemon SIGKILLed and restarted twice in between.

Every session records its start (task, epoch, agent) in ``starts.jsonl``, so the history checker
(``history.py``) can count duplicate starts, re-spawns and phantom starts besides replaying the
ledger. Every process a session starts carries ``COLIBRI_ROOT`` and ``COLIBRI_TASK_ID`` in its
environment, including its ``sleep 1000`` grandchild: a scan of ``/proc`` for them finds any
orphan.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import (
    Daemon,
    FakeAgent,
    RawConnection,
    group_members,
    harness,
    online,
    stop_process,
    wait_until,
)
from tests.reliability import history
from tests.sessions.conftest import fleet  # noqa: F401  (a fixture, used by start)
from tests.sessions.support import alive, harnesses, mentioning, one_each

#: The session: records its start, starts a grandchild that would live 1000 s, then — for a
#: task whose text says "wait" — waits for ROOT/go-TASK-EPOCH. A go file saying "self-out" makes
#: it report by itself first (``colibri out``), recording the CLI's exit code and stderr in
#: ROOT/reported-TASK-EPOCH. It prints "AGENT epoch EPOCH" and exits 0.
SESSION = """\
import json, os, subprocess, sys, time
root, task = os.environ["COLIBRI_ROOT"], os.environ["COLIBRI_TASK_ID"]
epoch, agent = os.environ["COLIBRI_EPOCH"], os.environ["COLIBRI_AGENT"]
text = sys.stdin.read()
child = subprocess.Popen(["sleep", "1000"], stdin=subprocess.DEVNULL,
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
me = os.path.join(root, f"{task}-{epoch}")
start = {"task_id": task, "epoch": int(epoch), "agent": agent, "event": "start",
         "pid": os.getpid(), "pgid": os.getpgid(0), "child": child.pid}
with open(os.path.join(root, "starts.jsonl"), "a") as log:
    log.write(json.dumps(start) + "\\n")
with open(me + ".started.tmp", "w") as out:
    out.write(json.dumps(start))
os.rename(me + ".started.tmp", me + ".started")
if "wait" in text:
    while not os.path.exists(me + ".go"):
        time.sleep(0.02)
    if open(me + ".go").read() == "self-out":
        done = subprocess.run([sys.executable, "-m", "colibri", "out", f"late from {agent}"],
                              capture_output=True, text=True)
        with open(me + ".reported.tmp", "w") as out:
            out.write(json.dumps({"code": done.returncode, "stderr": done.stderr}))
        os.rename(me + ".reported.tmp", me + ".reported")
print(f"{agent} epoch {epoch}")
"""

Start = Callable[..., Daemon]


@pytest.fixture
def start(fleet: Start, root: Path) -> Iterator[Start]:  # noqa: F811
    """``fleet`` (colibri.jsonc, then the daemon, which starts a harness per workspace) that
    waits until every harness is online. Afterwards nothing of the root runs."""

    def run(workspaces: dict[str, Any], **scheduler: Any) -> Daemon:
        daemon = fleet(workspaces, **scheduler)
        wait_until(lambda: online(daemon, *workspaces), timeout=30)
        return daemon

    yield run
    for pid in leftovers(root):  # a grandchild whose session leader is gone
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)


def workspace(root: Path, capabilities: list[str] | None = None, slots: int = 1) -> dict[str, Any]:
    (root / "session.py").write_text(SESSION)
    return {
        "capabilities": capabilities or [],
        "slots": slots,
        "session": {"command": [sys.executable, str(root / "session.py")]},
    }


# -- reading what happened -------------------------------------------------------------------------


def leftovers(root: Path) -> list[int]:
    """Live processes started for a session of ``root`` (sessions and what they started): their
    environment names the root and a task."""
    mark = f"COLIBRI_ROOT={root}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue
        tasked = any(var.startswith(b"COLIBRI_TASK_ID=") for var in environ)
        if mark in environ and tasked and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


def started(root: Path, task: dict[str, Any], epoch: int) -> dict[str, Any]:
    """The start record of the task's session for ``epoch`` (waits for it)."""
    path = root / f"{task['id']}-{epoch}.started"
    wait_until(path.exists, timeout=30)
    return json.loads(path.read_text())


def release(root: Path, task: dict[str, Any], epoch: int, what: str = "") -> None:
    (root / f"{task['id']}-{epoch}.go").write_text(what)


def gone(session: dict[str, Any]) -> bool:
    """The session, its grandchild and every other member of its group are gone."""
    return (
        not alive(session["pid"])
        and not alive(session["child"])
        and not group_members(session["pgid"])
    )


def moves(daemon: Daemon, task: dict[str, Any]) -> list[tuple[str | None, str, str | None]]:
    """The task's ledger as (from, to, reason)."""
    rows = daemon.call("ledger", task=task["id"])["entries"]
    return [(r.get("from_state"), r["to_state"], r.get("reason")) for r in rows]


def harness_status(daemon: Daemon, name: str) -> dict[str, Any]:
    return next(h for h in daemon.call("status")["harnesses"] if h["workspace"] == name)


def checked(root: Path) -> tuple[history.StoreSnapshot, history.Report]:
    """The store and the history checker's report on it, the sessions' starts and the mirror.

    Called at quiescence (every task closed), so any ``running`` task would be stuck."""
    store = history.read_store(root / ".colibri" / "colibri.sqlite")
    report = history.check(
        store,
        agent_events=history.read_jsonl(root / "starts.jsonl"),
        mirror=history.read_mirror(root / ".colibri" / "ledger.jsonl"),
        live=set(),
    )
    return store, report


def outcomes(store: history.StoreSnapshot) -> Counter[str]:
    return Counter(f"{t['state']}/{t['outcome']}" for t in store.tasks.values())


def terminal_rows(daemon: Daemon, task: dict[str, Any]) -> int:
    return sum(1 for _, to, _ in moves(daemon, task) if to in ("done", "failed", "cancelled"))


# -- the scenarios ---------------------------------------------------------------------------------


def test_a_killed_session_fails_or_retries_its_task_and_leaves_no_process(
    start: Start, root: Path
) -> None:
    daemon = start({"w": workspace(root, slots=2)}, retry_backoff="0.1s")
    once = daemon.submit("wait", workspace="w", max_attempts=1)
    twice = daemon.submit("wait", workspace="w", max_attempts=2)
    first = [started(root, once, 1), started(root, twice, 1)]
    for session in first:
        os.kill(session["pid"], signal.SIGKILL)  # the session alone; its grandchild lives on

    failed = daemon.wait_closed(once["id"], timeout=30)
    assert (failed["outcome"], failed["attempts"], failed["error"]) == (
        "failed",
        1,
        "killed by SIGKILL",
    )
    assert moves(daemon, once) == [
        (None, "pending", "submitted"),
        ("pending", "running", "assigned"),
        ("running", "failed", "killed by SIGKILL"),
        ("failed", "closed", None),
    ]
    # the retry runs as a new session of the same harness, and finishes
    release(root, twice, started(root, twice, 2)["epoch"])
    done = daemon.wait_closed(twice["id"], timeout=30)
    assert (done["outcome"], done["attempts"], done["output"]) == ("done", 2, "w epoch 2\n")
    assert [m for m in moves(daemon, twice) if m[0] == "running"] == [
        ("running", "pending", "retry 2/2 in 0.1s after: killed by SIGKILL"),
        ("running", "done", "out"),
    ]
    # the group of each killed session went with it: the grandchild too
    wait_until(lambda: all(gone(s) for s in first), timeout=15)
    wait_until(lambda: leftovers(root) == [], timeout=15)
    assert harness_status(daemon, "w")["restarts"] == 0
    store, report = checked(root)
    assert report.problems() == {}
    assert outcomes(store) == {"closed/failed": 1, "closed/done": 1}
    assert len(history.read_jsonl(root / "starts.jsonl")) == 3  # 2 tasks, 3 attempts


def test_a_killed_harness_is_replaced_and_its_sessions_reaped(start: Start, root: Path) -> None:
    # A long TTL: the tasks end because the replacement registers without them, not by expiry.
    daemon = start({"w": workspace(root, slots=2)}, agent_ttl="60s", retry_backoff="0.1s")
    once = daemon.submit("wait", workspace="w", max_attempts=1)
    twice = daemon.submit("wait", workspace="w", max_attempts=2)
    first = [started(root, once, 1), started(root, twice, 1)]
    old = harness_status(daemon, "w")["pid"]
    os.killpg(old, signal.SIGKILL)  # the harness's own group: its sessions have theirs

    lost = "session lost: agent w registered again without it"
    failed = daemon.wait_closed(once["id"], timeout=30)
    assert (failed["outcome"], failed["attempts"], failed["error"]) == ("failed", 1, lost)
    assert ("running", "failed", lost) in moves(daemon, once)
    # the replacement killed both sessions of the one it replaced, grandchildren included
    wait_until(lambda: all(gone(s) for s in first), timeout=15)
    new = wait_until(lambda: (p := one_each(root, ["w"])) and p["w"] != old and p["w"], timeout=30)
    status = harness_status(daemon, "w")
    assert (status["pid"], status["restarts"], status["degraded"]) == (new, 1, False)

    release(root, twice, started(root, twice, 2)["epoch"])
    done = daemon.wait_closed(twice["id"], timeout=30)
    assert (done["outcome"], done["attempts"], done["output"]) == ("done", 2, "w epoch 2\n")
    assert ("running", "pending", f"retry 2/2 in 0.1s after: {lost}") in moves(daemon, twice)
    wait_until(lambda: leftovers(root) == [], timeout=15)
    store, report = checked(root)
    assert report.problems() == {}
    assert outcomes(store) == {"closed/failed": 1, "closed/done": 1}
    assert harnesses(root) == {"w": [new]}


def test_a_stopped_agent_woken_after_the_ttl_is_fenced_off(start: Start, root: Path) -> None:
    """B4 with real processes: harness a and its session SIGSTOPped past the TTL; the task goes
    to harness b; a's session, woken, reports by itself and is refused ``stale_claim``."""
    daemon = start(
        {"a": workspace(root, ["x"]), "b": workspace(root, ["x"])},
        agent_ttl="4s",
        retry_backoff="0.1s",
    )
    task = daemon.submit("wait", capabilities=["x"], max_attempts=2)
    stalled = started(root, task, 1)
    assert stalled["agent"] == "a"  # equal scores: the name that sorts first
    harness_a = harness_status(daemon, "a")["pid"]
    os.killpg(harness_a, signal.SIGSTOP)
    os.killpg(stalled["pgid"], signal.SIGSTOP)
    try:
        taken = started(root, task, 2)
        assert taken["agent"] == "b"
        assert ("running", "pending", "retry 2/2 in 0.1s after: session lost: agent a silent "
                "for more than 4s") in moves(daemon, task)  # fmt: skip

        # a's session wakes first and reports by itself, on its old claim
        release(root, task, 1, "self-out")
        os.killpg(stalled["pgid"], signal.SIGCONT)
        late = root / f"{task['id']}-1.reported"
        wait_until(late.exists, timeout=30)
        assert json.loads(late.read_text()) == {
            "code": 1,
            "stderr": f"colibri: report for task {task['id']} carries epoch 1 but the current "
            "claim is epoch 2; it was refused\n",
        }
    finally:
        os.killpg(harness_a, signal.SIGCONT)
    # a's harness wakes too: its own late report is refused and it registers again, holding none
    wait_until(lambda: not alive(stalled["pid"]), timeout=15)
    wait_until(lambda: online(daemon, "a"), timeout=30)
    agents = {a["name"]: a for a in daemon.call("agents")["agents"]}
    assert (agents["a"]["running"], agents["b"]["running"]) == ([], [task["id"]])
    now = daemon.task(task["id"])
    assert (now["state"], now["agent"], now["epoch"], now["output"]) == ("running", "b", 2, None)

    release(root, task, 2)
    final = daemon.wait_closed(task["id"], timeout=30)
    assert (final["outcome"], final["agent"], final["epoch"], final["attempts"]) == (
        "done",
        "b",
        2,
        2,
    )
    assert final["output"] == "b epoch 2\n"
    rows = daemon.call("ledger", task=task["id"])["entries"]
    assert [(r.get("from_state"), r["to_state"], r["agent"], r["epoch"]) for r in rows] == [
        (None, "pending", None, 0),
        ("pending", "running", "a", 1),
        ("running", "pending", "a", 1),
        ("pending", "running", "b", 2),
        ("running", "done", "b", 2),
        ("done", "closed", "b", 2),
    ]
    assert terminal_rows(daemon, task) == 1
    # the woken harness serves again
    after = daemon.submit("after the wake", workspace="a")
    assert daemon.wait_closed(after["id"], timeout=30)["output"] == "a epoch 1\n"
    wait_until(lambda: gone(stalled) and leftovers(root) == [], timeout=15)
    store, report = checked(root)
    assert report.problems() == {}
    assert outcomes(store) == {"closed/done": 2}
    assert one_each(root, ["a", "b"]) is not None


def test_a_stopping_harness_takes_no_new_work(start: Start, root: Path) -> None:
    """SIGTERM stops a harness's sessions and fails their tasks; the slots that frees must not
    bring it new work (it would start it and never stop). The waiting task stays pending."""
    daemon = start({"w": workspace(root)})
    running, waiting = (daemon.submit("wait", workspace="w") for _ in range(2))
    session = started(root, running, 1)
    daemon.stop()  # SIGTERM: its harness stops too; asserts exit 0
    wait_until(lambda: gone(session) and leftovers(root) == mentioning(root) == [], timeout=15)
    store = history.read_store(root / ".colibri" / "colibri.sqlite")
    assert (store.tasks[running["id"]]["outcome"], store.tasks[running["id"]]["error"]) == (
        "failed",
        "agent w stopped",
    )
    assert store.tasks[waiting["id"]]["state"] == "pending"
    assert store.tasks[waiting["id"]]["attempts"] == 0

    # The same for an agent started by hand, while the daemon runs.
    daemon.start()
    command = workspace(root)["session"]["command"]
    solo = harness(root, "solo", ["s"], command)
    try:
        first, second = (daemon.submit("wait", capabilities=["s"]) for _ in range(2))
        session = started(root, first, 1)
        os.killpg(solo.pid, signal.SIGTERM)
        assert solo.wait(timeout=30) == 0
    finally:
        stop_process(solo)
    assert daemon.wait_closed(first["id"], timeout=30)["error"] == "agent solo stopped"
    assert daemon.task(second["id"])["state"] == "pending"
    wait_until(lambda: gone(session), timeout=15)
    # what waited for w runs on w since the restart: its session is the only one left
    resumed = started(root, waiting, 1)
    assert sorted(leftovers(root)) == sorted([resumed["pid"], resumed["child"]])
    release(root, waiting, 1)
    assert daemon.wait_closed(waiting["id"], timeout=30)["output"] == "w epoch 1\n"
    again = harness(root, "solo-2", ["s"], command)  # and second on another agent
    try:
        release(root, second, started(root, second, 1)["epoch"])
        assert daemon.wait_closed(second["id"], timeout=30)["output"] == "solo-2 epoch 1\n"
    finally:
        stop_process(again)
    wait_until(lambda: leftovers(root) == [], timeout=15)
    store, report = checked(root)
    assert report.problems() == {}
    assert outcomes(store) == {"closed/failed": 2, "closed/done": 2}


def line(obj: dict[str, Any]) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def cuts(data: bytes) -> list[int]:
    """Where to cut a request line: after its first byte, in its middle, before its newline."""
    return [1, len(data) // 2, len(data) - 1]


def drop_after(daemon: Daemon, *chunks: bytes) -> None:
    """Connect, write ``chunks``, close: the connection dies in the middle of the last line."""
    conn = RawConnection(daemon.socket)
    try:
        for chunk in chunks:
            conn.send(chunk)
    finally:
        conn.close()


def test_connections_dropped_mid_line_store_nothing_and_the_rest_is_served(
    start: Start, root: Path
) -> None:
    daemon = start({"w": workspace(root, slots=2)})
    served: list[dict[str, Any]] = []
    half_submit = line({"cmd": "submit", "id": 1, "text": "never whole", "workspace": "w"})
    half_register = line({"cmd": "register-agent", "id": 1, "name": "half", "slots": 1})
    for data in (half_submit, half_register):
        for cut in cuts(data):
            drop_after(daemon, data[:cut])
            served.append(daemon.submit("between the drops", workspace="w"))
    for task in served:
        assert daemon.wait_closed(task["id"], timeout=30)["outcome"] == "done"

    # Two agents, each holding a task, die in the middle of their report line. drop-1 will be
    # back within its TTL, drop-2 never.
    held: dict[str, tuple[dict[str, Any], int, str]] = {}
    for name, part, ttl in (("drop-1", 0.5, 60), ("drop-2", 1.0, 3)):
        conn = RawConnection(daemon.socket)
        try:
            conn.send(line({"cmd": "register-agent", "id": 1, "name": name, "ttl": ttl}))
            assert conn.reply()["ok"] is True
            task = daemon.call("create-task", text=f"held by {name}", agent=name)["task"]
            assign = conn.reply()
            assert (assign["event"], assign["task"]["id"]) == ("assign", task["id"])
            out = line({"cmd": "out", "id": 2, "task": task["id"], "epoch": assign["epoch"],
                        "output": "half a report"})  # fmt: skip
            conn.send(out[: int((len(out) - 1) * part)])
        finally:
            conn.close()
        held[name] = (task, assign["epoch"], assign["claim"])
    for task, _, _ in held.values():  # the half reports did nothing
        now = daemon.task(task["id"])
        assert now["output"] is None and now["outcome"] != "done", now

    # drop-1 comes back and reports in full; drop-2 stays away past the TTL
    task, epoch, claim = held["drop-1"]
    back = FakeAgent(
        daemon, "drop-1", ttl=60.0, running=[{"task": task["id"], "epoch": epoch, "claim": claim}]
    )
    try:
        assert back.registration["adopted"] == [task["id"]]
        reply = back.out({"task": task, "epoch": epoch}, "whole, after the reconnect")
        assert reply["task"]["outcome"] == "done"
    finally:
        back.close()
    ended = daemon.wait_closed(held["drop-2"][0]["id"], timeout=30)
    assert (ended["outcome"], ended["error"]) == (
        "failed",
        "session lost: agent drop-2 silent for more than 3s",
    )
    assert daemon.task(task["id"])["output"] == "whole, after the reconnect"

    store, report = checked(root)
    assert report.problems() == {}
    assert outcomes(store) == {"closed/done": 7, "closed/failed": 1}
    assert all(t["text"] != "never whole" for t in daemon.call("list")["tasks"])
    assert "half" not in {a["name"] for a in daemon.call("agents")["agents"]}
    assert len(store.ledger) == 8 * 4  # each task: pending, running, an outcome, closed
    wait_until(lambda: leftovers(root) == [], timeout=15)


def test_every_fault_at_once_through_two_daemon_kills(start: Start, root: Path) -> None:
    """Sessions and a harness killed, a half line, the daemon SIGKILLed twice: every task ends
    in a state the rules allow, the ledger replays, no session process is left."""
    daemon = start(
        {"a": workspace(root, slots=3), "b": workspace(root, slots=2)},
        # longer than a harness's reconnect backoff (at most 5 s): a's sessions are claimed back
        agent_ttl="8s",
        retry_backoff="0.1s",
        max_sessions=5,  # the default, twice the CPUs, may be fewer
    )
    kept = [daemon.submit("wait", workspace="a") for _ in range(2)]
    killed = daemon.submit("wait", workspace="a")
    lost = daemon.submit("wait", workspace="b")
    retried = daemon.submit("wait", workspace="b", max_attempts=2)
    first = {t["id"]: started(root, t, 1) for t in [*kept, killed, lost, retried]}

    os.kill(first[killed["id"]]["pid"], signal.SIGKILL)
    assert daemon.wait_closed(killed["id"], timeout=30)["error"] == "killed by SIGKILL"
    drop_after(daemon, line({"cmd": "submit", "id": 1, "text": "never whole"})[:20])

    # The daemon dies; harness b dies while it is down. Harness a and its sessions live on.
    harness_b = harness_status(daemon, "b")["pid"]
    harness_a = harness_status(daemon, "a")["pid"]
    daemon.kill()
    os.killpg(harness_b, signal.SIGKILL)
    daemon.start()
    wait_until(lambda: online(daemon, "a", "b"), timeout=30)
    # a's sessions were claimed back; b's were killed by b's replacement and are lost
    wait_until(lambda: gone(first[lost["id"]]) and gone(first[retried["id"]]), timeout=15)
    assert all(daemon.task(t["id"])["state"] == "running" for t in kept)
    assert all(alive(first[t["id"]]["pid"]) for t in kept)
    orphaned = "session lost: not claimed back after the daemon restarted"
    assert daemon.wait_closed(lost["id"], timeout=30)["error"] == orphaned
    started(root, retried, 2)
    assert ("running", "pending", f"retry 2/2 in 0.1s after: {orphaned}") in moves(daemon, retried)
    quick = [daemon.submit("quick") for _ in range(6)]
    for task in quick:
        assert daemon.wait_closed(task["id"], timeout=30)["outcome"] == "done"

    # Sessions end and report while the daemon is down again: delivered after the restart.
    for task in kept:
        release(root, task, 1)
    release(root, retried, 2)
    daemon.kill()
    daemon.start()
    for task in [*kept, retried]:
        final = daemon.wait_closed(task["id"], timeout=30)
        assert final["outcome"] == "done", final
    assert [daemon.task(t["id"])["attempts"] for t in [*kept, retried]] == [1, 1, 2]
    assert harness_status(daemon, "a")["pid"] == harness_a  # adopted twice, never restarted
    wait_until(lambda: leftovers(root) == [], timeout=15)

    store, report = checked(root)
    assert report.problems() == {}
    assert outcomes(store) == {"closed/done": 9, "closed/failed": 2}
    assert len(store.tasks) == 11  # the half line stored nothing
    for task in store.tasks.values():
        terminals = [
            r
            for r in store.ledger
            if r["task"] == task["id"] and r["to_state"] in ("done", "failed")
        ]
        assert len(terminals) == 1 and terminals[0]["reason"], terminals
    assert len(history.read_jsonl(root / "starts.jsonl")) == 12  # 11 tasks, one retried
    daemon.stop()  # SIGTERM: harnesses stop too
    wait_until(lambda: leftovers(root) == mentioning(root) == [], timeout=15)


STUBBORN = """\
import os, signal, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
with open(os.path.join(sys.argv[1], os.environ["COLIBRI_TASK_ID"] + ".pid"), "w") as out:
    out.write(str(os.getpid()))
time.sleep(1000)
"""


def test_sessions_that_ignore_sigterm_are_stopped_together_and_all_reported(
    start: Start, root: Path
) -> None:
    """Three sessions ignore SIGTERM, so each needs the harness's 5 s kill grace. Stopped one by
    one they would outlast the supervisor's 10 s before it SIGKILLs the harness, and their
    reports would be lost; stopped together, every task is failed with the harness's reason."""
    (root / "stubborn.py").write_text(STUBBORN)
    stubborn = {
        "slots": 3,
        "session": {"command": [sys.executable, str(root / "stubborn.py"), str(root)]},
    }
    daemon = start({"w": stubborn})
    tasks = [daemon.submit(f"stubborn {n}", workspace="w") for n in range(3)]
    wait_until(lambda: all((root / f"{t['id']}.pid").exists() for t in tasks), timeout=30)
    daemon.stop()  # SIGTERM: the supervisor stops the harness; asserts exit 0
    store = history.read_store(root / ".colibri" / "colibri.sqlite")
    assert [(store.tasks[t["id"]]["outcome"], store.tasks[t["id"]]["error"]) for t in tasks] == [
        ("failed", "agent w stopped")
    ] * 3
    wait_until(lambda: leftovers(root) == [], timeout=15)
