"""``colibri demo``: a living swarm, so a newcomer sees the board work.

A daemon, three agents and two workspaces (``api`` hands work on to ``web``) on a fresh root;
tasks keep arriving at a gentle pace for as long as the demo runs — plain ones, a family, one
that fails and is retried, one that fails for good, a hand-off — and a schedule fires every few
seconds. It is shown in the TUI when the terminal allows (stdout a terminal, Textual
importable), else as the lines of ``colibri attach``. Tasks submitted from another terminal
show up too. ``--exit-when-done`` submits one round, follows it to the end and stops.
``--web`` has the daemon serve the board in a browser too (``cli/demo_web.py``): the demo
prints its sign-in URL first.

The demo owns what it starts: its daemon and agents run in process groups of their own, so a
signal meant for the demo (Ctrl+C, the terminal closing) reaches the demo alone, and the demo
stops each of them once, cleanly — the daemon its workspace harnesses with it. SIGINT, SIGTERM
and SIGHUP all stop it so (``host.stop_signals``); one that came to the daemon too would be its
second, which ends it at once, its harnesses left running. A demo killed outright has them
stopped all the same, on Linux: each gets SIGTERM when the demo dies (``host.stop_with_parent``).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import random
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from colibri import host
from colibri.cli.demo_web import DaemonOutput, refuse_without_web_extra, say_url, tui_with_notice
from colibri.client import Client, socket_path
from colibri.config import init_root
from colibri.core import protocol as p
from colibri.core.errors import ColibriError, DaemonNotRunning
from colibri.core.model import TaskSpec
from colibri.core.schedules import ScheduleSpec
from colibri.privatefiles import open_private, write_private

#: Each session: a moment's work, then its output with what it cost (as Claude Code's JSON
#: result, which the harness reads). "fail" fails; "flaky" fails its first attempt; in the
#: api workspace, "hand off" hands a child task on to the web workspace.
WORKER = """\
import json, os, random, subprocess, sys, time
text = sys.stdin.read().strip()
spent = random.uniform(0.8, 3.0)
time.sleep(spent)
task = os.environ.get("COLIBRI_TASK_ID", "")
if "fails for good" in text:
    print("this task was meant to fail", file=sys.stderr)
    sys.exit(3)
marker = os.path.join(os.environ.get("COLIBRI_ROOT", "."), ".demo-tried-" + task)
if "flaky" in text and not os.path.exists(marker):
    open(marker, "w").close()
    print("flaky: the first attempt fails; the retry will pass", file=sys.stderr)
    sys.exit(3)
if "hand off" in text and os.environ.get("COLIBRI_WORKSPACE") == "api":
    subprocess.run([sys.executable, "-m", "colibri", "submit", "--to", "web",
                    "update the web client for: " + text], check=True, stdout=subprocess.DEVNULL)
tokens_in, tokens_out = random.randint(800, 4000), random.randint(100, 900)
print(json.dumps({"result": f"finished in {spent:.1f}s", "total_cost_usd": round(tokens_in * 3e-6
                  + tokens_out * 15e-6, 4), "usage": {"input_tokens": tokens_in,
                  "output_tokens": tokens_out}, "model": "demo-model"}))
"""

FLEET = [
    ("linux-1", ["linux", "python"], 2),
    ("bsd-1", ["freebsd", "zfs"], 1),
    ("docs-1", ["docs"], 1),
]

#: One round of the demo's work, in the order it arrives.
ROUND: list[dict[str, Any]] = [
    {"text": "upgrade zfs on the build hosts", "capabilities": ["freebsd", "zfs"]},
    {"text": "run the python test suite", "capabilities": ["python"], "priority": 5},
    {"family": "prepare the release", "children": ["write release notes", "tag the release"]},
    {"text": "rebuild the linux kernel module", "capabilities": ["linux"]},
    {"text": "a flaky integration test", "capabilities": ["python"], "max_attempts": 2},
    {"text": "api: add a /health endpoint, then hand off the client change", "workspace": "api"},
    {"text": "check disk space anywhere", "capabilities": []},
    {"text": "a task that fails for good", "capabilities": ["python"]},
    {"text": "snapshot pools (zfs + linux: best partial fit)", "capabilities": ["zfs", "linux"]},
]
#: How long the demo's daemon is given to stop (seconds): more than it gives its harnesses
#: (``daemon.supervisor.STOP_GRACE``, 10 s) before it SIGKILLs them, which a demo killing the
#: daemon first would leave running.
DAEMON_STOP = 30.0
#: Seconds between two arrivals, and the schedule's period.
PACE = (1.5, 3.5)
SCHEDULE_EVERY = "8s"


def write_config(root: Path, worker: Path) -> None:
    session = {"command": [sys.executable, str(worker)]}
    config = {
        "workspaces": {
            "api": {"capabilities": ["api"], "send_to": ["web"], "session": session},
            "web": {"capabilities": ["web"], "session": session},
        }
    }
    # Never writable by others, whatever the umask: it says what sessions run.
    write_private(
        root / "colibri.jsonc", (json.dumps(config, indent=2) + "\n").encode(), mode=0o644
    )
    for name in ("api", "web"):
        (root / name).mkdir(exist_ok=True)


def _wait_for_daemon(
    root: Path, process: subprocess.Popen[bytes], output: DaemonOutput | None, timeout: float = 15.0
) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            if output is not None:
                output.join(timeout=5)  # its last words: why (the web's port taken, say)
            why = f": {output.last}" if output is not None and output.last else ""
            raise SystemExit(f"colibri: the demo daemon exited with code {process.returncode}{why}")
        with contextlib.suppress(DaemonNotRunning, OSError):
            with Client.for_root(root, timeout=2) as client:
                client.request(p.Ping())
                return
        time.sleep(0.05)
    raise SystemExit("colibri: the demo daemon did not start in time")


class Feeder(threading.Thread):
    """Keeps the swarm busy: a round of work after another, a task every few seconds, until
    the demo stops."""

    def __init__(self, root: Path) -> None:
        super().__init__(name="demo-feeder", daemon=True)
        self.root = root
        self.stopping = threading.Event()

    def run(self) -> None:
        with contextlib.suppress(ColibriError, OSError), Client.for_root(self.root) as client:
            for round_no in itertools.count(1):
                for _ in submit_round(client, round_no):
                    if self.stopping.wait(random.uniform(*PACE)):
                        return


def submit_round(client: Client, round_no: int) -> Iterator[str]:
    """Submit one round of work, yielding after each arrival (a family arrives at once) the
    id of the task submitted."""
    tag = f" (round {round_no})" if round_no > 1 else ""
    for spec in ROUND:
        if "family" in spec:
            parent = client.submit(spec["family"] + tag, capabilities=["docs"])
            for child in spec["children"]:
                task = client.submit(child + tag, capabilities=["docs"], parent=parent.id)
            yield task.id
        else:
            yield client.submit(**{**spec, "text": spec["text"] + tag}).id


def start_fleet(
    root: Path, base: list[str], worker: Path, log: IO[bytes]
) -> list[subprocess.Popen[bytes]]:
    processes = []
    for name, caps, slots in FLEET:
        cmd = [*base, "agent", "--name", name, "--slots", str(slots), "--log-level", "warning"]
        for cap in caps:
            cmd += ["--cap", cap]
        processes.append(_start([*cmd, "--", sys.executable, str(worker)], log, cwd=root))
    return processes


def _start(
    command: list[str], log: IO[bytes], cwd: Path | None = None, piped: bool = False
) -> subprocess.Popen[bytes]:
    """One of the demo's processes: its output to the demo's log (``piped``: to the demo,
    which passes it on), in a process group of its own (a signal meant for the demo reaches
    the demo alone), and SIGTERMed when it dies."""
    return subprocess.Popen(
        command, cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE if piped else log,
        stderr=subprocess.STDOUT if piped else log, process_group=0,
        preexec_fn=host.stop_with_parent,
    )  # fmt: skip


def can_show_tui() -> bool:
    """Whether the demo can show the TUI: a terminal on both ends, and Textual installed."""
    if not (sys.stdout.isatty() and sys.stdin.isatty()):
        return False
    try:
        import textual  # noqa: F401
    except ImportError:
        return False
    return True


def lay_out(root: Path) -> Path:
    """Make ``root`` the demo's: its configuration and the worker every session runs (neither
    writable by others, whatever the umask), and its workspaces' folders; the worker's path."""
    init_root(root, force=True)
    worker = root / "demo_worker.py"
    write_private(worker, WORKER.encode(), mode=0o644)
    write_config(root, worker)
    return worker


def run_demo(root: Path, *, exit_when_done: bool, web: str | None = None) -> int:
    """The demo on ``root``; ``web``: where its daemon serves the board in a browser too."""
    if web is not None:
        refuse_without_web_extra()  # before anything is started or laid out
    worker = lay_out(root)
    base = [sys.executable, "-m", "colibri", "--root", str(root)]
    log_path = root / "demo.log"
    print(f"demo root: {root} (the daemon's and agents' own messages go to {log_path})")
    processes: list[subprocess.Popen[bytes]] = []
    stops = host.stop_signals()
    for signum in stops:
        signal.signal(signum, _interrupted)
    with open(open_private(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND), "ab") as log:
        serving = ["--web", web] if web is not None else []
        daemon = _start([*base, "run", "--log-level", "warning", *serving], log, piped=bool(web))
        processes.append(daemon)
        output = None
        if daemon.stdout is not None:
            output = DaemonOutput(daemon.stdout, log)
            output.start()
        notice = None
        try:
            _wait_for_daemon(root, daemon, output)
            print(f"daemon running (pid {daemon.pid}) on {socket_path(root)}")
            if output is not None:
                notice = say_url(output.first_url(), log_path)
                print(notice, flush=True)
            processes += start_fleet(root, base, worker, log)
            for (name, caps, slots), process in zip(FLEET, processes[1:], strict=True):
                plural = "slot" if slots == 1 else "slots"
                print(f"agent {name:8} (pid {process.pid}) {', '.join(caps)}; {slots} {plural}")
            print("workspaces api and web (api hands work on to web): the daemon runs them")
            if exit_when_done:
                _one_round(root)
            else:
                with contextlib.suppress(KeyboardInterrupt):
                    _live(root, processes, notice)
            return 0
        finally:
            # Nothing cuts the stop short: another signal (Ctrl+C again, the terminal's
            # SIGHUP after a SIGTERM) is not taken for one more interruption.
            for signum in stops:
                signal.signal(signum, signal.SIG_IGN)
            _stop_all(processes)
            if output is not None:
                # (its workspace harnesses may hold the pipe a moment longer)
                output.join(timeout=10)
            with contextlib.suppress(OSError):  # the terminal may be gone (SIGHUP)
                print(
                    f"stopped the demo's daemon and its {len(processes) - 1} agents (the "
                    "workspace harnesses with it); nothing of it keeps running. The board stays "
                    f"in {root}.",
                    flush=True,
                )


def _interrupted(signum: int, frame: object) -> None:
    """SIGTERM and SIGHUP as Ctrl+C: the demo stops what it started, then exits."""
    raise KeyboardInterrupt


def _one_round(root: Path) -> None:
    """Submit one round at once, and a family cancelled at once; follow until every task on
    the board has ended."""
    from colibri.cli.stream import Printer, follow

    def submit_everything() -> None:
        with Client.for_root(root) as client:
            arrivals = len(list(submit_round(client, 1)))
            parent = client.submit("a family cancelled at once", capabilities=["docs"],
                                   priority=-1)  # fmt: skip
            for n in (1, 2):
                client.submit(f"child {n} of the cancelled family", capabilities=["docs"],
                              parent=parent.id, priority=-1)  # fmt: skip
            client.request(p.Cancel(task=parent.id, reason="demo: cancel a whole family"))
        total = sum(1 + len(s.get("children", [])) for s in ROUND) + 3
        print(f"submitted {total} tasks in {arrivals + 1} arrivals, then cancelled a family\n")

    with Client.for_root(root) as client, Client.for_root(root) as asking:

        def all_ended(message: dict[str, Any]) -> bool:
            if message.get("event") != "task" or message["to"] != "closed":
                return False
            tasks = asking.request(p.Status()).tasks
            assert tasks, "the owner is told the board's counts"
            return all(tasks[state] == 0 for state in ("pending", "running", "done", "failed",
                                                        "cancelled"))  # fmt: skip

        follow(client, Printer(as_json=False), stop=all_ended, subscribed=submit_everything)


def _live(root: Path, processes: list[subprocess.Popen[bytes]], notice: str | None) -> None:
    """Tasks arriving for as long as the demo runs, in the TUI (``notice``, where the board
    is in a browser, shown in it) or as lines."""
    with Client.for_root(root) as client:
        mirror_check = ScheduleSpec(
            every=SCHEDULE_EVERY, task=TaskSpec(text="check the package mirrors")
        )
        client.request(p.ScheduleAdd(name="mirror-check", schedule=mirror_check, replace=True))
    exe = Path(sys.executable).parent / "colibri"
    colibri = str(exe) if exe.exists() else "colibri"
    pids = ", ".join(str(p.pid) for p in processes)
    show_tui = can_show_tui()
    print(
        f"\nThe daemon and its agents (pids {pids}) keep running while the demo does; quitting "
        f"the demo ({'q' if show_tui else 'Ctrl+C'}) stops them. Meanwhile, in another "
        f"terminal:\n  export COLIBRI_ROOT={root}\n"
        f"  {colibri} submit 'hello from me' --cap python --wait\n"
        f"  {colibri} tui      (or: {colibri} attach, {colibri} list, {colibri} agents)\n",
        flush=True,
    )
    feeder = Feeder(root)
    try:
        if show_tui:
            from colibri.tui.app import ColibriApp

            feeder.start()
            if notice is not None:
                tui_with_notice(socket_path(root), root, notice).run()
            else:
                ColibriApp(socket_path(root), root=root).run()
        else:
            from colibri.cli.stream import Printer, follow

            with Client.for_root(root) as client:
                follow(client, Printer(as_json=False), subscribed=feeder.start)
    finally:
        feeder.stopping.set()
        if feeder.is_alive():
            feeder.join(timeout=5)


def _stop_all(processes: list[subprocess.Popen[bytes]]) -> None:
    """SIGTERM to each, once; SIGKILL to one still running past its time."""
    for process in reversed(processes):
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
    for number, process in enumerate(processes):
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(timeout=DAEMON_STOP if number == 0 else 10)
        if process.poll() is None:
            process.kill()
            process.wait()
