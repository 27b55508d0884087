"""Soak (I1): a daemon under a steady load of tasks for hours, hit by one random fault every few
minutes, watched for lost or doubled work, stuck tasks and slow growth of memory, files or WAL.

    .venv/bin/python bench/soak.py                        # the plan's 24 h: 50 agents, 200k tasks
    .venv/bin/python bench/soak.py --minutes 60 --fault-every 60       # one hour
    .venv/bin/python bench/soak.py --minutes 3 --fault-every 20        # a quick look

Load: ``--clients`` threads submit ``--tasks`` tasks (default: the plan's pace, 200,000 per
24 h, scaled to ``--minutes``) at a steady rate, each with its own idempotency key and
``max_attempts`` 2; an unacknowledged submit is sent again with the same key until it is
acknowledged (tests/reliability/fleet.py: SubmitClient, as in the A1 storm). ``--agents`` stub
agents (tests/reliability/stub_agent.py, one process each unless ``--per-process``) run them,
each session lasting ``--work-min``–``--work-max`` seconds, and fsync their own log of every
session start and end. The daemon runs with durability full, ``agent_ttl`` ``--agent-ttl`` and
the default ledger rotation, under libfaketime so that its wall clock can be moved.

Faults, one every ``--fault-every`` seconds, its kind drawn (seeded by ``--seed``) from:

- ``daemon-kill``: SIGKILL the daemon and start it again at once;
- ``agent-kill``: SIGKILL a stub agent (one holding sessions, if any) and start a new one;
- ``agent-stop``: SIGSTOP a stub agent for ``--stop-seconds`` (30), then SIGCONT: it is silent
  past its TTL, its claims fail or go to another agent, its late reports must be refused;
- ``clock-jump``: move the daemon's wall clock by +10 or −10 minutes (the offset file
  libfaketime re-reads; the monotonic clock stays), as NTP or ``date -s`` would. Left out, and
  said, when libfaketime is not installed.

The plan's fifth fault, terminating the PostgreSQL backend, is left out: there is no
PostgreSQL store yet.

Measured and judged (pass criteria of the plan):

- the history checker (tests/reliability/history.py) over the whole run: 0 acknowledged tasks
  lost; 0 duplicate executions (a session started twice for one claim, a task ended twice, a
  task started more often than claimed, a session for a claim never made); 0 illegal
  transitions or replay mismatches; ``ledger.jsonl`` and its rotated files equal to the store;
  ``PRAGMA integrity_check`` ok; all tasks closed at the end;
- 0 tasks ``running`` for longer than TTL + 5 s without a session: every second the running
  tasks (``list``) are compared with the sessions the live agent processes hold by their own
  logs. A task without one is timed from when its session ended (the agent's ``finish`` or
  ``stop``, or its process's SIGKILL; from when it was first seen if it never had one), but not
  from before the current daemon started: a new daemon waits ``agent_ttl`` for agents to claim
  their work back, by design (D1);
- daemon RSS, open fds (/proc/PID/fd) and the WAL's size, sampled every ``--sample-every`` s.
  A daemon kill starts a new process with a new heap, so samples are compared at steady state:
  a sample counts once its daemon has been up ``--settle`` seconds (agents registered again,
  the store read back); the first 10% of the run is warm-up. RSS growth is the median of the
  counted samples in the last 10% of the run (at least 60 s) over the median of those just
  after warm-up, the reference (10–20% of the run, at least 60 s); it must stay under 10%. A
  leak that a daemon kill resets shows only within a long lifetime, so the longest lifetime's
  own growth is reported too (not judged: a short run has none long enough). Open fds of every
  counted sample after warm-up must stay within ±5 of the reference's median; the WAL under 64
  MiB in every sample. With no counted sample in a window (a short run with many daemon kills)
  the criterion is reported as not measured, not failed.

Prints a progress line on stderr every 30 s, then a Markdown table of the criteria on stderr and
one JSON line on stdout; exits 1 if a criterion fails. The run's fresh root under /tmp (store,
ledger, agent logs, daemon.log) is removed after a pass and kept, and named, after a failure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import statistics
import sys
import time
import traceback
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from _support import REPO, emit, machine, note, proc_status

sys.path.insert(0, str(REPO))

from tests.helpers import Daemon, write_config
from tests.reliability import history
from tests.reliability.crash_scenarios import store_path
from tests.reliability.fleet import (
    Progress,
    StubAgents,
    SubmitClient,
    split,
    start_agents,
    wait_quiescent,
    wait_registered,
)
from tests.reliability.test_clock_jumps import LIBFAKETIME, Jumps
from tests.reliability.test_ledger_rotation import mirror_files, read_all

from chaos import fresh_root
from colibri.client import Client

FAULTS = ("daemon-kill", "agent-kill", "agent-stop", "clock-jump")
#: The plan's load: 200,000 tasks in 24 hours.
PLAN_TASKS, PLAN_MINUTES = 200_000, 1440
CLOCK_JUMP_S = 600
RSS_GROWTH_MAX = 0.10
FD_SPREAD_MAX = 5
WAL_MAX_MIB = 64.0
#: A task may be ``running`` without a session for at most TTL + this (the plan's figure).
STUCK_GRACE_S = 5.0
MIB = 1024 * 1024

Session = tuple[str, int]


class SessionTail:
    """The agents' logs read as they grow: the sessions each log's process holds, and when each
    ended. Reading only what was appended keeps a check per second cheap for a day."""

    def __init__(self) -> None:
        self.offsets: dict[Path, int] = {}
        self.live: dict[Path, set[Session]] = {}
        self.owner: dict[Session, Path] = {}
        self.ended: dict[Session, float] = {}

    def read(self, paths: list[Path]) -> None:
        for path in paths:
            offset = self.offsets.get(path, 0)
            try:
                with open(path, "rb") as f:
                    f.seek(offset)
                    data = f.read()
            except FileNotFoundError:
                continue
            end = data.rfind(b"\n") + 1  # a half-written last line waits for the next read
            self.offsets[path] = offset + end
            live = self.live.setdefault(path, set())
            for line in data[:end].splitlines():
                try:
                    event = json.loads(line)
                except ValueError:  # never written whole: the checker leaves it out too
                    continue
                key = (event["task_id"], event["epoch"])
                if event["event"] == "start":
                    live.add(key)
                    self.owner[key] = path
                else:
                    live.discard(key)
                    self.ended[key] = event["t"]

    def forget(self, before: float) -> None:
        """Drop sessions that ended before ``before`` (wall time): a day of them adds up, and
        only a task still listed running just after its session ended needs the entry."""
        for key in [k for k, t in self.ended.items() if t < before]:
            del self.ended[key]
            self.owner.pop(key, None)


@dataclass
class Sample:
    t: float  # seconds since the start of the run
    life: int  # which daemon process (0: the first, n: after the n-th kill)
    age: float  # seconds since this daemon became ready
    rss_kib: int | None
    fds: int | None
    wal: int


@dataclass
class Soak:
    args: argparse.Namespace
    root: Path
    rng: random.Random
    jumps: Jumps | None
    daemon: Daemon
    fleet: StubAgents = field(default_factory=StubAgents)
    tail: SessionTail = field(default_factory=SessionTail)
    started: float = 0.0  # monotonic
    life: int = 0
    ready_mono: float = 0.0
    ready_wall: float = 0.0
    restarts_s: list[float] = field(default_factory=list)
    faults: list[dict[str, Any]] = field(default_factory=list)
    #: Agent processes SIGKILLed: log → wall time of the kill.
    killed_at: dict[Path, float] = field(default_factory=dict)
    #: Agent processes SIGSTOPped: index → monotonic time of their SIGCONT.
    stopped: dict[int, float] = field(default_factory=dict)
    #: Names of agents that were killed or stopped (their expiries are expected).
    faulted_agents: set[str] = field(default_factory=set)
    replacements: int = 0
    #: Running tasks without a session now: claim → wall time the count starts from.
    orphans: dict[Session, float] = field(default_factory=dict)
    #: Seconds each such episode lasted (an upper bound: until the check that saw it over).
    orphan_spans: list[float] = field(default_factory=list)
    samples: list[Sample] = field(default_factory=list)
    watcher: Client | None = None

    # -- the daemon --------------------------------------------------------------------------

    def start_daemon(self) -> None:
        t0 = time.monotonic()
        self.daemon.start(timeout=60)
        self.ready_mono, self.ready_wall = time.monotonic(), time.time()
        self.restarts_s.append(self.ready_mono - t0)

    def call(self, cmd: str, **fields: Any) -> dict[str, Any] | None:
        """One request on the watcher's own connection; None while the daemon is unreachable."""
        try:
            if self.watcher is None:
                self.watcher = Client(self.daemon.socket, timeout=30)
            return self.watcher.call(cmd, **fields)
        except Exception:  # down or restarting: the next check connects again
            if self.watcher is not None:
                self.watcher.close()
                self.watcher = None
            return None

    # -- faults ------------------------------------------------------------------------------

    def victim(self) -> int | None:
        """An agent process alive and not frozen, preferably one holding sessions."""
        self.tail.read(self.fleet.logs)
        candidates = [
            n
            for n, process in enumerate(self.fleet.processes)
            if process.poll() is None and n not in self.stopped
        ]
        busy = [n for n in candidates if self.tail.live.get(self.fleet.logs[n])]
        return self.rng.choice(busy or candidates) if candidates else None

    def fault(self, kind: str) -> dict[str, Any]:
        at = round(time.monotonic() - self.started, 1)
        record: dict[str, Any] = {"kind": kind, "at_s": at}
        if kind == "daemon-kill":
            self.daemon.kill()
            if self.watcher is not None:
                self.watcher.close()
                self.watcher = None
            self.start_daemon()
            self.life += 1
            # A new daemon gives agents agent_ttl to claim their work back: count from now.
            self.orphans = {k: max(v, self.ready_wall) for k, v in self.orphans.items()}
            record["restart_s"] = round(self.restarts_s[-1], 3)
        elif kind == "clock-jump":
            assert self.jumps is not None
            delta = self.rng.choice((-CLOCK_JUMP_S, CLOCK_JUMP_S))
            self.jumps.set(self.jumps.offset + delta)
            record.update(jump_s=delta, offset_s=self.jumps.offset)
        else:
            self.hit_agent(kind, record)
        self.faults.append(record)
        return record

    def hit_agent(self, kind: str, record: dict[str, Any]) -> None:
        """SIGKILL an agent and start a new one, or SIGSTOP one until its SIGCONT is due."""
        n = self.victim()
        if n is None:
            record["skipped"] = "no agent alive and running"
            return
        log, names = self.fleet.logs[n], self.fleet.names[n]
        record.update(agent=names[0], sessions=len(self.tail.live.get(log, ())))
        self.faulted_agents.update(names)
        if kind == "agent-stop":
            self.fleet.signal(n, signal.SIGSTOP)
            self.stopped[n] = time.monotonic() + self.args.stop_seconds
            return
        self.fleet.kill(n)
        self.killed_at[log] = time.time()
        self.replacements += 1
        new = start_agents(
            self.root,
            1,
            slots=self.args.slots,
            ttl=self.args.agent_ttl,
            work=(self.args.work_min, self.args.work_max),
            seed=self.args.seed * 1000 + self.replacements,
            prefix=f"stub-r{self.replacements}",
            per_process=self.args.per_process,
        )
        self.fleet.processes += new.processes
        self.fleet.logs += new.logs
        self.fleet.names += new.names

    def wake_due(self, everyone: bool = False) -> None:
        now = time.monotonic()
        for n, due in list(self.stopped.items()):
            if everyone or now >= due:
                if self.fleet.processes[n].poll() is None:
                    self.fleet.signal(n, signal.SIGCONT)
                del self.stopped[n]

    # -- watching ----------------------------------------------------------------------------

    def watch(self) -> None:
        """Running tasks against the sessions the live agents hold (see the docstring)."""
        listed = self.call("list", state="running", limit=10_000)
        if listed is None:
            return
        now = time.time()
        running = {(t["id"], t["epoch"]) for t in listed["tasks"]}
        self.tail.read(self.fleet.logs)
        alive = {
            log
            for process, log in zip(self.fleet.processes, self.fleet.logs, strict=True)
            if process.poll() is None
        }
        without: set[Session] = set()
        for key in running:
            path = self.tail.owner.get(key)
            if path is not None and path in alive and key in self.tail.live[path]:
                continue
            without.add(key)
            if key not in self.orphans:
                gone = self.tail.ended.get(key)
                if gone is None and path is not None:
                    gone = self.killed_at.get(path)
                self.orphans[key] = max(gone if gone is not None else now, self.ready_wall)
        for key in list(self.orphans):
            if key not in without:
                self.orphan_spans.append(now - self.orphans.pop(key))

    def longest_orphan(self) -> float:
        now = time.time()
        return max([*self.orphan_spans, *(now - v for v in self.orphans.values())], default=0.0)

    def sample(self) -> Sample:
        process = self.daemon.process
        rss: int | None = None
        fds: int | None = None
        if process is not None and process.poll() is None:
            pid = process.pid
            try:
                rss = proc_status(pid)["VmRSS"]
                fds = len(os.listdir(f"/proc/{pid}/fd"))
            except (OSError, KeyError):
                pass
        wal_path = store_path(self.root).with_name(store_path(self.root).name + "-wal")
        wal = wal_path.stat().st_size if wal_path.exists() else 0
        now = time.monotonic()
        s = Sample(now - self.started, self.life, now - self.ready_mono, rss, fds, wal)
        self.samples.append(s)
        return s


# -- judging the samples -----------------------------------------------------------------------


def resources(samples: list[Sample], run_s: float, settle: float) -> dict[str, Any]:
    """RSS growth, fd spread and WAL peak at steady state (see the docstring)."""
    warm = 0.1 * run_s
    window = max(0.1 * run_s, 60.0)
    steady = [s for s in samples if s.age >= settle and s.rss_kib is not None and s.t >= warm]
    reference = [s for s in steady if s.t < warm + window]
    final = [s for s in steady if s.t >= run_s - window]
    out: dict[str, Any] = {
        "warm_up_s": round(warm),
        "settle_s": settle,
        "samples": len(samples),
        "steady_samples": len(steady),
        "reference_samples": len(reference),
        "final_samples": len(final),
        "wal_max_mib": round(max((s.wal for s in samples), default=0) / MIB, 2),
    }
    if reference and final:
        ref_rss = statistics.median(s.rss_kib or 0 for s in reference)
        end_rss = statistics.median(s.rss_kib or 0 for s in final)
        out.update(
            rss_reference_mib=round(ref_rss / 1024, 1),
            rss_final_mib=round(end_rss / 1024, 1),
            rss_growth_pct=round(100 * (end_rss / ref_rss - 1), 1),
        )
    if reference:
        ref_fds = statistics.median(s.fds or 0 for s in reference)
        fds = [s.fds or 0 for s in steady]
        out.update(
            fds_reference=ref_fds,
            fds_min=min(fds),
            fds_max=max(fds),
            fds_spread=max(abs(f - ref_fds) for f in fds),
        )
    lives: dict[int, list[Sample]] = {}
    for s in samples:
        if s.rss_kib is not None and s.age >= settle:
            lives.setdefault(s.life, []).append(s)
    out["daemon_lifetimes"] = len({s.life for s in samples})
    if lives:
        longest = max(lives.values(), key=lambda ss: ss[-1].age - ss[0].age)
        first, last = longest[0].rss_kib or 1, longest[-1].rss_kib or 0
        out.update(
            longest_lifetime_s=round(longest[-1].age),
            longest_lifetime_rss_mib=[round(first / 1024, 1), round(last / 1024, 1)],
            longest_lifetime_rss_growth_pct=round(100 * (last / first - 1), 1),
        )
    rss = [s.rss_kib for s in samples if s.rss_kib]
    if rss:
        out["rss_all_samples_mib"] = [round(min(rss) / 1024, 1), round(max(rss) / 1024, 1)]
    return out


def series(samples: list[Sample], points: int = 300) -> list[list[Any]]:
    """At most ``points`` samples, evenly spread: [t, life, rss MiB, fds, WAL MiB]."""
    step = max(1, -(-len(samples) // points))
    return [
        [
            round(s.t),
            s.life,
            round((s.rss_kib or 0) / 1024, 1),
            s.fds,
            round(s.wal / MIB, 2),
        ]
        for s in samples[::step]
    ]


SILENT = re.compile(r"agent (\S+) silent")


def losses(store: history.StoreSnapshot, faulted: set[str]) -> dict[str, int]:
    """Claims ended by a lost session, by cause: the agent's silence (split into agents that a
    fault hit and the others: false expiries), or not claimed back after a daemon start."""
    found: Counter[str] = Counter()
    for row in store.ledger:
        reason = row["reason"] or ""
        if row["from_state"] != "running" or "session lost" not in reason:
            continue
        silent = SILENT.search(reason)
        if silent is None:
            found["not_claimed_back_after_restart"] += 1
        elif silent[1] in faulted:
            found["silent_agent_killed_or_stopped"] += 1
        else:
            found["silent_agent_not_faulted"] += 1
    return dict(found)


# -- the run -----------------------------------------------------------------------------------


def run(args: argparse.Namespace, root: Path) -> dict[str, Any]:
    rng = random.Random(args.seed)
    write_config(root, agent_ttl=f"{args.agent_ttl:g}s", retry_backoff="1s")
    jumps = Jumps(root / "faketime") if "clock-jump" in args.faults else None
    daemon = Daemon(root, env=jumps.env if jumps else None, log_level="warning")
    soak = Soak(args, root, rng, jumps, daemon)
    run_s = args.minutes * 60
    total = args.tasks
    note(
        f"soak: {args.minutes:g} min, {total:,} tasks by {args.clients} clients, "
        f"{args.agents} agents, a fault every {args.fault_every:g} s from "
        f"{', '.join(args.faults)}; seed {args.seed}; root {root}"
    )
    progress = Progress()
    clients = [
        SubmitClient(
            daemon.socket, c, share, progress, every=run_s / share if share else 0, max_attempts=2
        )
        for c, share in enumerate(split(total, args.clients))
    ]
    quiet = False
    stop_error: str | None = None
    try:
        soak.start_daemon()
        soak.fleet = start_agents(
            root,
            args.agents // args.per_process,
            slots=args.slots,
            ttl=args.agent_ttl,
            work=(args.work_min, args.work_max),
            seed=args.seed,
            per_process=args.per_process,
        )
        wait_registered(daemon, [n for names in soak.fleet.names for n in names], timeout=120)
        soak.started = time.monotonic()
        for client in clients:
            client.start()
        end = soak.started + run_s
        next_fault = soak.started + args.fault_every
        next_sample = next_watch = soak.started
        next_progress = soak.started + 30
        while (now := time.monotonic()) < end:
            soak.wake_due()
            if now >= next_fault:
                record = soak.fault(rng.choice(args.faults))
                note(f"  fault {len(soak.faults)}: {record}")
                next_fault += args.fault_every
            if now >= next_watch:
                soak.watch()
                next_watch = time.monotonic() + 1.0
            if now >= next_sample:
                soak.sample()
                next_sample += args.sample_every
            if now >= next_progress:
                report_progress(soak, progress, total)
                soak.tail.forget(time.time() - 600)
                next_progress += 30
            errors = [c.error for c in clients if c.error is not None]
            if errors:
                raise errors[0]
            wake = min(next_fault, next_watch, next_sample, next_progress, end)
            time.sleep(max(0.0, min(0.5, wake - time.monotonic())))
        soak.wake_due(everyone=True)
        note("soak: faults over; the last submissions and sessions drain")
        for client in clients:
            client.join(timeout=600)
        errors = [c.error for c in clients if c.error is not None]
        if errors:
            raise errors[0]
        if any(c.is_alive() for c in clients):
            raise RuntimeError("a client did not finish within 600 s of the end")
        deadline = time.monotonic() + args.agent_ttl + args.work_max + 120
        while not (quiet := wait_quiescent(daemon, total, timeout=1.0)):
            soak.watch()
            if time.monotonic() > deadline:
                break
        soak.watch()
        drain_s = time.monotonic() - end
        events = soak.fleet.events()
        live = soak.fleet.live_sessions()
    finally:
        soak.wake_due(everyone=True)
        if soak.watcher is not None:
            soak.watcher.close()
        soak.fleet.stop()
        try:
            daemon.stop()
        except AssertionError as exc:  # a daemon that does not exit 0 on SIGTERM: a finding
            stop_error = str(exc)[:2000]
            note(f"soak: daemon stop failed: {stop_error[:500]}")
        if daemon.process is not None and daemon.process.poll() is None:
            daemon.kill()
    ops = [op for c in clients for op in c.ops]
    store = history.read_store(store_path(root))
    mirror = read_all(mirror_files(root))
    report = history.check(store, ops=ops, agent_events=events, mirror=mirror, live=live)
    counts = report.counts()
    outcomes = Counter(op["outcome"] for op in ops)
    tasks = store.tasks.values()
    ttl_bound = args.agent_ttl + STUCK_GRACE_S
    spans = soak.orphan_spans + [time.time() - v for v in soak.orphans.values()]
    figures = {
        "minutes": args.minutes,
        "fault_every_s": args.fault_every,
        "seed": args.seed,
        "agents": args.agents,
        "agent_processes": args.agents // args.per_process,
        "agent_ttl_s": args.agent_ttl,
        "tasks": total,
        "submit_ops": len(ops),
        "acknowledged": outcomes["ok"],
        "unknown_outcome": outcomes["unknown"],
        "refused": outcomes["err"],
        "tasks_in_store": len(store.tasks),
        "done": sum(1 for t in tasks if t["outcome"] == "done"),
        "failed": sum(1 for t in tasks if t["outcome"] == "failed"),
        "retried_tasks": sum(1 for t in tasks if t["attempts"] > 1),
        "session_starts": sum(1 for e in events if e["event"] == "start"),
        "session_stops": sum(1 for e in events if e["event"] == "stop"),
        "ledger_rows": len(store.ledger),
        "mirror_files": len(mirror_files(root)),
        "quiescent": quiet,
        "drain_s": round(drain_s, 1),
        "daemon_stop_error": stop_error,
        "faults": dict(Counter(f["kind"] for f in soak.faults)),
        "fault_log": soak.faults,
        "restart_to_ready_max_s": round(max(soak.restarts_s[1:], default=0.0), 3),
        "clock_offset_final_s": soak.jumps.offset if soak.jumps else None,
        "sessions_lost": losses(store, soak.faulted_agents),
        "orphan_episodes": len(spans),
        "running_without_session_max_s": round(max(spans, default=0.0), 2),
        "running_without_session_over_bound": sum(1 for s in spans if s > ttl_bound),
        "bound_s": ttl_bound,
        **{f"anomaly_{k}": v for k, v in counts.items()},
        **resources(soak.samples, run_s, args.settle),
        "series": series(soak.samples),
    }
    if report.problems():
        note(f"soak: the history checker found {str(report.problems())[:3000]}")
    return figures


def report_progress(soak: Soak, progress: Progress, total: int) -> None:
    status = soak.call("status")
    counts = {k: f"{v:,}" for k, v in status["tasks"].items()} if status else {}
    last = soak.samples[-1] if soak.samples else None
    kinds = Counter(f["kind"] for f in soak.faults)
    rss = f"{last.rss_kib / 1024:.1f}" if last and last.rss_kib else "?"
    note(
        f"  {(time.monotonic() - soak.started) / 60:5.1f} min: acknowledged "
        f"{progress.acked:,}/{total:,}, closed {counts.get('closed', '?')}, running "
        f"{counts.get('running', '?')}; faults {sum(kinds.values())} {dict(kinds)}; RSS {rss}"
        f" MiB, fds {last.fds if last else '?'}, WAL "
        f"{(last.wal / MIB if last else 0):.1f} MiB; no session ≤ {soak.longest_orphan():.1f} s"
    )


def criteria(f: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """(criterion, must be, measured, passed: None when not measured)."""
    duplicates = sum(
        f[f"anomaly_{k}"]
        for k in ("duplicate_starts", "duplicate_terminals", "respawns", "phantom_starts")
    )
    mirror = sum(
        f[f"anomaly_{k}"]
        for k in (
            "mirror_missing",
            "mirror_extra",
            "mirror_duplicated",
            "mirror_mismatched",
            "fused_lines",
            "seq_gaps",
        )
    )
    other = sum(
        f[f"anomaly_{k}"]
        for k in ("duplicate_ids_per_key", "open_descendants_of_cancelled", "stuck_running")
    )
    growth = f.get("rss_growth_pct")
    spread = f.get("fds_spread")
    rows: list[tuple[str, str, str, bool | None]] = [
        (
            "acknowledged tasks lost",
            "0",
            f"{f['anomaly_lost']} of {f['acknowledged']:,} acknowledged "
            f"({f['unknown_outcome']} unknown outcomes retried with their key)",
            f["anomaly_lost"] == 0,
        ),
        (
            "duplicate executions",
            "0",
            f"{duplicates} (starts twice per claim {f['anomaly_duplicate_starts']}, ended twice "
            f"{f['anomaly_duplicate_terminals']}, re-spawns {f['anomaly_respawns']}, phantom "
            f"{f['anomaly_phantom_starts']}); {f['session_starts']:,} session starts",
            duplicates == 0,
        ),
        (
            f"running > TTL + {STUCK_GRACE_S:g} s without a session",
            "0",
            f"{f['running_without_session_over_bound']} of {f['orphan_episodes']} episodes; "
            f"longest {f['running_without_session_max_s']} s (bound {f['bound_s']:g} s)",
            f["running_without_session_over_bound"] == 0,
        ),
        (
            "illegal transitions, replay mismatches",
            "0",
            f"{f['anomaly_illegal_transitions']}, {f['anomaly_replay_mismatches']} "
            f"({f['ledger_rows']:,} ledger rows)",
            f["anomaly_illegal_transitions"] == f["anomaly_replay_mismatches"] == 0,
        ),
        (
            "mirror = store; integrity_check",
            "0 faults; ok",
            f"{mirror} faults over {f['mirror_files']} file(s); "
            f"{'ok' if f['anomaly_integrity_ok'] else 'BAD'}",
            mirror == 0 and f["anomaly_integrity_ok"] == 1,
        ),
        (
            "other checker findings; all tasks closed at the end",
            "0; yes",
            f"{other}; {'yes' if f['quiescent'] else 'NO'} ({f['done']:,} done, "
            f"{f['failed']:,} failed, {f['retried_tasks']:,} retried; drain {f['drain_s']} s)"
            + (f"; daemon stop: {f['daemon_stop_error'][:200]}" if f["daemon_stop_error"] else ""),
            other == 0 and f["quiescent"] and not f["daemon_stop_error"],
        ),
        (
            "RSS growth after warm-up",
            f"< {RSS_GROWTH_MAX:.0%}",
            (
                f"{growth:+.1f}% ({f['rss_reference_mib']} → {f['rss_final_mib']} MiB, medians of "
                f"{f['reference_samples']} and {f['final_samples']} samples)"
                if growth is not None
                else "not measured (no steady sample in a window)"
            )
            + (
                f"; longest lifetime {f['longest_lifetime_s']} s: "
                f"{f['longest_lifetime_rss_mib'][0]} → {f['longest_lifetime_rss_mib'][1]} MiB"
                if "longest_lifetime_s" in f
                else ""
            ),
            None if growth is None else growth < 100 * RSS_GROWTH_MAX,
        ),
        (
            "open fds",
            f"±{FD_SPREAD_MAX}",
            f"{f['fds_min']}–{f['fds_max']} around {f['fds_reference']:g}"
            if spread is not None
            else "not measured",
            None if spread is None else spread <= FD_SPREAD_MAX,
        ),
        (
            "WAL",
            f"< {WAL_MAX_MIB:g} MiB",
            f"max {f['wal_max_mib']} MiB over {f['samples']} samples",
            f["wal_max_mib"] < WAL_MAX_MIB,
        ),
    ]
    return rows


def table(rows: list[tuple[str, str, str, bool | None]]) -> str:
    lines = ["| criterion | must be | measured | result |", "| --- | --- | --- | --- |"]
    for name, must, measured, passed in rows:
        result = "not measured" if passed is None else "pass" if passed else "FAIL"
        lines.append(f"| {name} | {must} | {measured} | {result} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--minutes", type=float, default=PLAN_MINUTES, help="of faults and load")
    parser.add_argument("--fault-every", type=float, default=300.0, help="seconds")
    parser.add_argument("--agents", type=int, default=50)
    parser.add_argument("--per-process", type=int, default=1, help="stub agents a process")
    parser.add_argument(
        "--tasks", type=int, help=f"default: {PLAN_TASKS:,} per {PLAN_MINUTES} min, scaled"
    )
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--slots", type=int, default=2, help="per agent")
    parser.add_argument("--work-min", type=float, default=1.0, help="session seconds")
    parser.add_argument("--work-max", type=float, default=20.0)
    parser.add_argument("--agent-ttl", type=float, default=5.0, help="seconds")
    parser.add_argument("--stop-seconds", type=float, default=30.0, help="SIGSTOP length")
    parser.add_argument("--faults", default=",".join(FAULTS), help="kinds to draw from")
    parser.add_argument("--sample-every", type=float, default=10.0, help="seconds")
    parser.add_argument("--settle", type=float, default=30.0, help="s after a daemon start")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1, help="accepted for run_all; ignored")
    args = parser.parse_args()
    args.faults = [k.strip() for k in args.faults.split(",") if k.strip()]
    if not args.faults or set(args.faults) - set(FAULTS):
        parser.error(f"--faults: a comma-separated list of {', '.join(FAULTS)}")
    if "clock-jump" in args.faults and not LIBFAKETIME.is_file():
        note("soak: libfaketime is not installed: clock jumps left out")
        args.faults.remove("clock-jump")
        if not args.faults:
            parser.error("no fault left to inject")
    if args.tasks is None:
        args.tasks = round(PLAN_TASKS * args.minutes / PLAN_MINUTES)
    if args.minutes <= 0 or args.fault_every <= 0 or args.tasks < args.clients:
        parser.error("--minutes and --fault-every must be positive, --tasks ≥ --clients")
    if args.per_process < 1 or args.agents % args.per_process or args.agents < 2:
        parser.error("--agents must be ≥ 2 and a multiple of --per-process")
    started = time.monotonic()
    root = fresh_root()
    try:
        figures = run(args, root)
    except Exception as exc:
        note("soak: FAILED with an error:")
        note("".join(traceback.format_exception(exc))[-4000:])
        note(f"soak: root kept at {root}")
        emit({"bench": "soak", "passed": False, "error": repr(exc)[:2000], "root": str(root)})
        raise SystemExit(1) from None
    rows = criteria(figures)
    passed = all(ok is not False for _, _, _, ok in rows)
    note(table(rows))
    seconds = round(time.monotonic() - started, 1)
    note(
        f"soak: {'passed' if passed else 'FAILED'} in {seconds / 60:.1f} min; faults "
        f"{figures['faults']}; sessions lost {figures['sessions_lost']}"
    )
    if passed:
        shutil.rmtree(root, ignore_errors=True)
    else:
        note(f"soak: root kept at {root}")
    emit(
        {
            "bench": "soak",
            "passed": passed,
            "seconds": seconds,
            "criteria": [
                {"criterion": n, "must_be": m, "measured": v, "passed": ok} for n, m, v, ok in rows
            ],
            **figures,
            "root": None if passed else str(root),
            "machine": machine(),
        }
    )
    raise SystemExit(0 if passed else 1)


if __name__ == "__main__":
    main()
