"""Would a writer thread pay? SQLite's statements on a second thread while the loop works.

The daemon's loop is one Python thread, its core full, about half of it in the SQLite store's
statements. The ``sqlite3`` module releases the GIL inside SQLite, so in principle a writer
thread could write and commit batch N while the loop builds batch N+1. This measures that
shape without the daemon around it, on the daemon's write pattern per task (one INSERT of the
task row, two UPDATEs of it, four ledger rows, one durable COMMIT per batch):

* ``serial`` — the loop's work for a batch, then its writes, on one thread (the daemon today);
* ``thread`` — the writes of batch N on a writer thread (one ``executemany`` per statement)
  while the loop does batch N+1's work; the loop hands N+1 over once N is committed;
* ``thread-json`` — the same, each statement given its whole batch as one JSON text
  (``json_each``), so a batch is three statements stepped inside SQLite with the GIL released,
  and the values are bound once rather than row by row under the GIL.

The loop's work is plain Python (dicts and strings, like the board's) that lets the GIL go
every ``--release-every`` steps with a zero-timeout ``select``, as an event loop does when it
polls its sockets. ``--work`` sets how much of it there is per task; the serial mode's
``sql_share`` says what share of the time the statements took, to compare with the daemon's
profile (docs/PERFORMANCE.md).

    .venv/bin/python bench/writer_thread.py --repeat 5
"""

from __future__ import annotations

import argparse
import json
import queue
import select
import sqlite3
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path

from _support import emit, median, note

SCHEMA = """
PRAGMA journal_mode=WAL;
PRAGMA synchronous=FULL;
CREATE TABLE tasks (id TEXT PRIMARY KEY, tenant TEXT, state TEXT, epoch INTEGER,
                    title TEXT, needs TEXT, agent TEXT, updated_at TEXT);
CREATE TABLE ledger (seq INTEGER PRIMARY KEY, at TEXT, task TEXT, kind TEXT, agent TEXT,
                     detail TEXT);
"""

INSERT = "INSERT INTO tasks VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
UPDATE = "UPDATE tasks SET state = ?, epoch = ?, agent = ?, updated_at = ? WHERE id = ?"
LEDGER = "INSERT INTO ledger VALUES (?, ?, ?, ?, ?, ?)"
INSERT_JSON = (
    "INSERT INTO tasks SELECT value->>0, value->>1, value->>2, value->>3, value->>4, "
    "value->>5, value->>6, value->>7 FROM json_each(?)"
)
UPDATE_JSON = (
    "UPDATE tasks SET state = j.value->>0, epoch = j.value->>1, agent = j.value->>2, "
    "updated_at = j.value->>3 FROM json_each(?) AS j WHERE tasks.id = j.value->>4"
)
LEDGER_JSON = (
    "INSERT INTO ledger SELECT value->>0, value->>1, value->>2, value->>3, value->>4, "
    "value->>5 FROM json_each(?)"
)

Rows = tuple[list[tuple[object, ...]], list[tuple[object, ...]], list[tuple[object, ...]]]


def open_db(path: Path) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.executescript(SCHEMA)
    return conn


def batch_rows(first: int, size: int, seq: int) -> Rows:
    at = "2026-12-02T20:00:00.000Z"
    inserts: list[tuple[object, ...]] = []
    updates: list[tuple[object, ...]] = []
    ledger: list[tuple[object, ...]] = []
    for n in range(first, first + size):
        task = f"0193a1b2-{n:012d}"
        inserts.append((task, "default", "pending", 0, f"task {n}", '["bash"]', None, at))
        updates.append(("running", 1, "agent-3", at, task))
        updates.append(("closed", 1, "agent-3", at, task))
        for kind in ("submitted", "assigned", "done", "closed"):
            ledger.append((seq, at, task, kind, "agent-3", None))
            seq += 1
    return inserts, updates, ledger


def write_many(conn: sqlite3.Connection, rows: Rows) -> None:
    inserts, updates, ledger = rows
    conn.execute("BEGIN IMMEDIATE")
    conn.executemany(INSERT, inserts)
    conn.executemany(UPDATE, updates)
    conn.executemany(LEDGER, ledger)
    conn.execute("COMMIT")


def write_json(conn: sqlite3.Connection, texts: tuple[str, str, str]) -> None:
    conn.execute("BEGIN IMMEDIATE")
    conn.execute(INSERT_JSON, (texts[0],))
    conn.execute(UPDATE_JSON, (texts[1],))
    conn.execute(LEDGER_JSON, (texts[2],))
    conn.execute("COMMIT")


def loop_work(steps: int, release_every: int) -> int:
    """The loop's own share of a batch: Python objects made and read, the GIL let go now and
    then as a poll of the sockets would."""
    total = 0
    for i in range(steps):
        message: dict[str, str] = {"id": str(i), "cmd": "out", "task": f"t{i}"}
        total += len(message["task"]) + len(message["id"])
        if i % release_every == 0:
            select.select([], [], [], 0)
    return total


class Writer:
    """One thread that writes each batch handed to it, one at a time."""

    def __init__(self, write: Callable[[object], None]) -> None:
        self._write = write
        self._todo: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._done: queue.SimpleQueue[None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while (item := self._todo.get()) is not None:
            self._write(item)
            self._done.put(None)

    def hand(self, item: object) -> None:
        self._todo.put(item)

    def wait(self) -> None:
        self._done.get()

    def stop(self) -> None:
        self._todo.put(None)
        self._thread.join()


def run(mode: str, args: argparse.Namespace, root: Path) -> dict[str, float]:
    path = root / f"{mode}-{time.monotonic_ns()}.db"
    conn = open_db(path)
    size, batches = args.batch, args.tasks // args.batch
    steps = args.work * size
    sql_seconds = 0.0
    started = time.perf_counter()
    if mode == "serial":
        for b in range(batches):
            loop_work(steps, args.release_every)
            rows = batch_rows(b * size, size, b * size * 4 + 1)
            t = time.perf_counter()
            write_many(conn, rows)
            sql_seconds += time.perf_counter() - t
    else:
        as_json = mode == "thread-json"
        writer = Writer(
            (lambda texts: write_json(conn, texts)) if as_json else (lambda r: write_many(conn, r))  # type: ignore[arg-type]
        )
        in_flight = False
        for b in range(batches):
            loop_work(steps, args.release_every)
            rows = batch_rows(b * size, size, b * size * 4 + 1)
            item: object = tuple(json.dumps(part) for part in rows) if as_json else rows
            if in_flight:
                writer.wait()  # replies of batch N go out here, after its commit
            writer.hand(item)
            in_flight = True
        if in_flight:
            writer.wait()
        writer.stop()
    seconds = time.perf_counter() - started
    count = conn.execute("SELECT count(*) FROM ledger").fetchone()[0]
    conn.close()
    if count != batches * size * 4:
        raise SystemExit(f"{mode}: {count} ledger rows, expected {batches * size * 4}")
    return {"tasks_per_s": batches * size / seconds, "sql_share": sql_seconds / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--batch", type=int, default=64, help="tasks per commit")
    parser.add_argument("--work", type=int, default=40, help="loop steps per task")
    parser.add_argument("--release-every", type=int, default=50)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    modes = ("serial", "thread", "thread-json")
    figures: dict[str, list[dict[str, float]]] = {m: [] for m in modes}
    with tempfile.TemporaryDirectory(prefix="colibri-writer-") as tmp:
        for r in range(args.repeat):
            order = modes[r % 3 :] + modes[: r % 3]  # the order rotates round by round
            for mode in order:
                figures[mode].append(run(mode, args, Path(tmp)))
            note(f"round {r + 1}: " + ", ".join(
                f"{m} {figures[m][-1]['tasks_per_s']:,.0f}/s" for m in modes
            ))  # fmt: skip
    serial = [f["tasks_per_s"] for f in figures["serial"]]
    result: dict[str, object] = {
        "bench": "writer_thread",
        "tasks": args.tasks,
        "batch": args.batch,
        "sql_share_serial": round(median([f["sql_share"] for f in figures["serial"]]), 3),
    }
    for mode in modes:
        rates = [f["tasks_per_s"] for f in figures[mode]]
        result[f"{mode}_tasks_per_s"] = round(median(rates))
        ratios = [a / b for a, b in zip(rates, serial, strict=True)]
        result[f"{mode}_vs_serial"] = round(median(ratios), 3)
    emit(result)


if __name__ == "__main__":
    main()
