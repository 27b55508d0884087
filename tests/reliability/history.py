"""A Jepsen-style history checker: what clients were told, what agents did, what the store holds.

Three records of one run, each kept by a different party:

- **client ops** — every request a client made: ``{op, idempotency_key, invoke_t, outcome,
  task_id}`` where ``outcome`` is ``ok`` (the daemon acknowledged it), ``err`` (it refused it)
  or ``unknown`` (the connection died before the reply: it may or may not have happened);
- **agent events** — every session a stub agent started or finished, fsynced to the agent's own
  log before it acts: ``{task_id, epoch, event: start|finish|stop, agent}``;
- **the store and the mirror** — the tasks and ledger rows in the SQLite file (read with plain
  ``sqlite3``, not through Colibri's code) and ``ledger.jsonl``.

``check`` cross-examines them and returns a ``Report`` of every anomaly found; a correct run has
none. Nothing here trusts the code under test: states are replayed against
``colibri.core.states.TRANSITIONS``, the one definition of the legal edges.
"""

from __future__ import annotations

import json
import sqlite3
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from colibri.core.states import OUTCOMES, State, is_legal

OPEN_STATES = {State.PENDING.value, State.RUNNING.value}
TERMINAL_STATES = {s.value for s in OUTCOMES}

# -- reading the records ---------------------------------------------------------------------------


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    """Whole lines of a JSONL log; a torn last line (the writer died mid-line) is left out."""
    if not path.exists():
        return []
    rows = []
    for line in path.read_bytes().split(b"\n"):
        if not line.strip():
            continue
        try:
            rows.append(json.loads(line))
        except ValueError:
            continue
    return rows


def read_agent_logs(paths: Iterable[Path]) -> list[dict[str, Any]]:
    events: list[dict[str, Any]] = []
    for path in paths:
        events.extend(read_jsonl(path))
    return events


@dataclass
class StoreSnapshot:
    tasks: dict[str, dict[str, Any]]
    ledger: list[dict[str, Any]]
    fires: list[dict[str, Any]]
    integrity: str


def read_store(path: Path, *, integrity_check: bool = True) -> StoreSnapshot:
    """Tasks, ledger rows and schedule fires straight from the SQLite file."""
    db = sqlite3.connect(path)
    db.row_factory = sqlite3.Row
    try:
        integrity = "ok"
        if integrity_check:
            integrity = "; ".join(row[0] for row in db.execute("PRAGMA integrity_check"))
        tasks = {
            row["id"]: dict(row)
            for row in db.execute(f"SELECT {_TASK_COLUMNS} FROM tasks")
        }
        ledger = [dict(row) for row in db.execute("SELECT * FROM ledger ORDER BY tenant, seq")]
        fires = [dict(row) for row in db.execute("SELECT * FROM schedule_fires")]
    finally:
        db.close()
    return StoreSnapshot(tasks, ledger, fires, integrity)


_TASK_COLUMNS = (
    "id, state, outcome, epoch, attempts, max_attempts, idempotency_key, parent, agent, error,"
    " schedule, tenant"
)


def read_board(daemon: Any, *, integrity_check: bool = True) -> StoreSnapshot:
    """The board of a test daemon: its SQLite file, or its PostgreSQL schema (under
    ``COLIBRI_TEST_STORE=postgresql``), read straight from the database."""
    board = getattr(daemon, "pg_owner_board", None)
    if board is None:
        return read_store(daemon.root / ".colibri" / "colibri.sqlite",
                          integrity_check=integrity_check)  # fmt: skip
    return read_pg_board(board)


def read_pg_board(board: str) -> StoreSnapshot:
    """A PostgreSQL board (its connection string), read straight from the database."""
    import psycopg
    from psycopg.rows import dict_row

    with psycopg.connect(board, row_factory=dict_row) as db:
        tasks = {row["id"]: row for row in db.execute(f"SELECT {_TASK_COLUMNS} FROM tasks")}
        ledger = list(db.execute("SELECT * FROM ledger ORDER BY tenant, seq"))
        fires = list(db.execute("SELECT * FROM schedule_fires"))
    # PostgreSQL checks its own pages; there is no integrity_check to ask.
    return StoreSnapshot(tasks, ledger, fires, "ok")


@dataclass
class Mirror:
    rows: list[dict[str, Any]]
    #: Lines that are not one JSON object: two rows fused, or garbage.
    bad_lines: list[str]
    #: The file does not end in a newline (a torn last line not yet cut).
    torn_tail: bool


def read_mirror(path: Path) -> Mirror:
    """A mirror file's rows; for ``ledger.jsonl``, with those of every other tenant's file
    beside it (``ledger.<tenant>.jsonl``): the root's whole mirror."""
    mirror = _read_one(path)
    if path.name == "ledger.jsonl":
        for other in sorted(path.parent.glob("ledger.*.jsonl")):
            more = _read_one(other)
            mirror.rows += more.rows
            mirror.bad_lines += more.bad_lines
            mirror.torn_tail = mirror.torn_tail or more.torn_tail
    return mirror


def _read_one(path: Path) -> Mirror:
    data = path.read_bytes() if path.exists() else b""
    torn = bool(data) and not data.endswith(b"\n")
    rows: list[dict[str, Any]] = []
    bad: list[str] = []
    lines = data.split(b"\n")
    if torn:
        lines.pop()  # reported as the torn tail, not as a bad line
    for line in lines:
        if not line:
            continue
        try:
            row = json.loads(line)
        except ValueError:
            bad.append(line[:200].decode(errors="replace"))
            continue
        if not isinstance(row, dict):
            bad.append(line[:200].decode(errors="replace"))
            continue
        rows.append(row)
    return Mirror(rows, bad, torn)


# -- the checks ------------------------------------------------------------------------------------


def live_sessions(events: Iterable[dict[str, Any]]) -> set[tuple[str, int]]:
    """(task, epoch) of every session started and neither finished nor stopped."""
    live: set[tuple[str, int]] = set()
    for event in events:
        key = (event["task_id"], event["epoch"])
        if event["event"] == "start":
            live.add(key)
        else:
            live.discard(key)
    return live


@dataclass
class Report:
    #: Acknowledged submissions whose task is not in the store.
    lost: list[str] = field(default_factory=list)
    #: Idempotency keys with more than one task id (in the store, or among ok replies).
    duplicate_ids_per_key: list[str] = field(default_factory=list)
    #: (task, epoch) pairs started more than once by the agents.
    duplicate_starts: list[tuple[str, int]] = field(default_factory=list)
    #: Tasks started more often than the ledger claimed them (a replay).
    respawns: list[str] = field(default_factory=list)
    #: Sessions started for a (task, epoch, agent) the ledger never assigned.
    phantom_starts: list[tuple[str, int]] = field(default_factory=list)
    #: Tasks with more than one transition into done/failed/cancelled.
    duplicate_terminals: list[str] = field(default_factory=list)
    #: Ledger rows that are not a legal edge from the task's replayed state.
    illegal_transitions: list[str] = field(default_factory=list)
    #: Tasks whose replayed ledger does not end in the stored state.
    replay_mismatches: list[str] = field(default_factory=list)
    #: Tasks ``running`` with no live session behind them.
    stuck_running: list[str] = field(default_factory=list)
    #: Pending or running descendants of a cancelled task.
    open_descendants_of_cancelled: list[str] = field(default_factory=list)
    #: Ledger seqs in the store and not in ledger.jsonl, the reverse, or twice in ledger.jsonl.
    mirror_missing: list[int] = field(default_factory=list)
    mirror_extra: list[int] = field(default_factory=list)
    mirror_duplicated: list[int] = field(default_factory=list)
    #: Rows of ledger.jsonl that differ from the store's row of the same seq.
    mirror_mismatched: list[int] = field(default_factory=list)
    #: Lines of ledger.jsonl that are not one JSON object (fused or garbage), and a torn tail.
    fused_lines: list[str] = field(default_factory=list)
    #: Ledger seqs not 1..n without gaps.
    seq_gaps: list[int] = field(default_factory=list)
    integrity: str = "ok"

    def problems(self) -> dict[str, Any]:
        """Every non-empty finding, by name (empty for a correct run)."""
        found: dict[str, Any] = {
            name: value for name, value in vars(self).items() if isinstance(value, list) and value
        }
        if self.integrity != "ok":
            found["integrity"] = self.integrity
        return found

    def counts(self) -> dict[str, int]:
        counts = {name: len(value) for name, value in vars(self).items() if isinstance(value, list)}
        counts["integrity_ok"] = int(self.integrity == "ok")
        return counts


def check(
    store: StoreSnapshot,
    *,
    ops: Iterable[dict[str, Any]] = (),
    agent_events: Iterable[dict[str, Any]] = (),
    mirror: Mirror | None = None,
    live: set[tuple[str, int]] | None = None,
    check_stuck: bool = True,
) -> Report:
    """Cross-examine one run's records. ``live``: sessions still running at the end (None:
    computed from ``agent_events``); ``check_stuck=False`` when the run is not quiescent."""
    report = Report(integrity=store.integrity)
    tasks = store.tasks
    ops = list(ops)
    agent_events = list(agent_events)
    _check_clients(report, ops, tasks)
    claims = _replay_ledger(report, store)
    _check_agents(report, agent_events, claims)
    if check_stuck:
        sessions = live_sessions(agent_events) if live is None else live
        report.stuck_running = sorted(
            task_id
            for task_id, task in tasks.items()
            if task["state"] == State.RUNNING and (task_id, task["epoch"]) not in sessions
        )
    _check_cancelled_families(report, tasks)
    if mirror is not None:
        _check_mirror(report, store.ledger, mirror)
    return report


def _check_clients(
    report: Report, ops: list[dict[str, Any]], tasks: dict[str, dict[str, Any]]
) -> None:
    ids_by_key: dict[str, set[str]] = defaultdict(set)
    for op in ops:
        if op["outcome"] != "ok":
            continue
        if op["task_id"] not in tasks:
            report.lost.append(op["task_id"])
        if op.get("idempotency_key"):
            ids_by_key[op["idempotency_key"]].add(op["task_id"])
    stored_by_key: dict[tuple[str, str], set[str]] = defaultdict(set)
    for task_id, task in tasks.items():
        if task["idempotency_key"]:
            stored_by_key[(task["tenant"], task["idempotency_key"])].add(task_id)
    dup = {key for key, ids in ids_by_key.items() if len(ids) > 1}
    dup |= {key for (_, key), ids in stored_by_key.items() if len(ids) > 1}
    report.duplicate_ids_per_key = sorted(dup)


def _replay_ledger(report: Report, store: StoreSnapshot) -> set[tuple[str, int, str | None]]:
    """Replay every task's rows against the state machine; return the claims it saw."""
    state: dict[str, str] = {}
    last_epoch: dict[str, int] = {}
    terminals: Counter[str] = Counter()
    claims: set[tuple[str, int, str | None]] = set()
    expected_seq: Counter[str] = Counter()  # each tenant's next seq, less one
    for row in store.ledger:
        if row["seq"] != expected_seq[row["tenant"]] + 1:
            report.seq_gaps.append(row["seq"])
        expected_seq[row["tenant"]] = row["seq"]
        task_id = row["task"]
        if task_id is None:
            continue  # a schedule's row (missed or skipped fire)
        current = state.get(task_id)
        to = row["to_state"]
        where = f"seq {row['seq']} task {task_id}: {row['from_state']} → {to}"
        if row["from_state"] != current:
            report.illegal_transitions.append(f"{where} (replayed state is {current})")
        elif current is None:
            if to != State.PENDING:
                report.illegal_transitions.append(f"{where} (a task must start pending)")
        elif not is_legal(State(current), State(to)):
            report.illegal_transitions.append(f"{where} (not an edge)")
        if current == State.PENDING and to == State.RUNNING:
            if row["epoch"] <= last_epoch.get(task_id, 0):
                report.illegal_transitions.append(f"{where} (epoch {row['epoch']} not new)")
            claims.add((task_id, row["epoch"], row["agent"]))
        last_epoch[task_id] = max(last_epoch.get(task_id, 0), row["epoch"])
        if to in TERMINAL_STATES:
            terminals[task_id] += 1
        state[task_id] = to
    report.duplicate_terminals = sorted(t for t, n in terminals.items() if n > 1)
    for task_id, task in store.tasks.items():
        if state.get(task_id) != task["state"]:
            report.replay_mismatches.append(
                f"{task_id}: ledger replays to {state.get(task_id)}, store has {task['state']}"
            )
    report.replay_mismatches.extend(
        f"{task_id}: in the ledger, not in the store" for task_id in state.keys() - store.tasks
    )
    return claims


def _check_agents(
    report: Report, events: list[dict[str, Any]], claims: set[tuple[str, int, str | None]]
) -> None:
    starts = [e for e in events if e["event"] == "start"]
    per_attempt = Counter((e["task_id"], e["epoch"]) for e in starts)
    report.duplicate_starts = sorted(k for k, n in per_attempt.items() if n > 1)
    per_task = Counter(e["task_id"] for e in starts)
    claimed = Counter(task_id for task_id, _, _ in claims)
    report.respawns = sorted(t for t, n in per_task.items() if n > claimed[t])
    report.phantom_starts = sorted(
        {
            (e["task_id"], e["epoch"])
            for e in starts
            if (e["task_id"], e["epoch"], e["agent"]) not in claims
        }
    )


def _check_cancelled_families(report: Report, tasks: dict[str, dict[str, Any]]) -> None:
    children: dict[str, list[str]] = defaultdict(list)
    for task_id, task in tasks.items():
        if task["parent"]:
            children[task["parent"]].append(task_id)
    found: set[str] = set()
    for task_id, task in tasks.items():
        if task["outcome"] != State.CANCELLED:
            continue
        stack = list(children.get(task_id, ()))
        while stack:
            child = stack.pop()
            if tasks[child]["state"] in OPEN_STATES:
                found.add(child)
            stack.extend(children.get(child, ()))
    report.open_descendants_of_cancelled = sorted(found)


def _key(row: dict[str, Any]) -> tuple[str, int]:
    """A mirror row's place: its tenant's, then its seq."""
    return row.get("tenant", "default"), row.get("seq", -1)


#: The fields a mirror row must share with the store's row of the same seq.
MIRROR_FIELDS = ("task", "schedule", "from_state", "to_state", "agent", "epoch", "reason", "at")


def _check_mirror(report: Report, ledger: list[dict[str, Any]], mirror: Mirror) -> None:
    report.fused_lines = list(mirror.bad_lines) + (["<torn last line>"] if mirror.torn_tail else [])
    stored = {(row["tenant"], row["seq"]): row for row in ledger}
    seen: Counter[tuple[str, int]] = Counter(_key(row) for row in mirror.rows)
    report.mirror_duplicated = sorted(s for (_, s), n in seen.items() if n > 1)
    report.mirror_missing = sorted(s for _, s in stored.keys() - seen.keys())
    report.mirror_extra = sorted(s for _, s in seen.keys() - stored.keys())
    for row in mirror.rows:
        mine = stored.get(_key(row))
        if mine is None:
            continue
        defaults = {"epoch": 0}
        if any(
            row.get(name, defaults.get(name)) != mine.get(name, defaults.get(name))
            for name in MIRROR_FIELDS
        ):
            report.mirror_mismatched.append(row["seq"])
    for tenant in {t for t, _ in seen}:
        seqs = [row.get("seq", -1) for row in mirror.rows if _key(row)[0] == tenant]
        if seqs != sorted(seqs):
            report.mirror_mismatched.append(-1)  # out of order
