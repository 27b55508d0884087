"""``colibri tui`` under load: keypress → screen updated, with 10,000 tasks on the board and
about 200 events a second arriving.

A daemon gets ``--tasks`` pending tasks (a capability nobody has: they stay on the board);
the TUI (headless, Textual's ``run_test``, a 160×50 terminal) loads them; then a separate
process submits tasks at ``--rate`` a second (each one a ``task`` event to the TUI) while keys
are pressed in turn, and the time from each key to its effect being drawn is measured on the
app's own loop:

- ``down``: the cursor moves one row;
- ``v``: the board is laid out again as a family tree (every task placed again), and back;
- ``p``: dispatch paused or resumed — a request to the daemon, its reply, the banner drawn;
  ``daemon``: the same request's round trip alone, on a connection of its own.

p50 and p95 within a run, median over ``--repeat`` runs.

    .venv/bin/python bench/tui.py --tasks 10000 --rate 200 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import time
from collections.abc import Callable

from _support import PYTHON, Daemon, emit, median, note, percentile
from colibri.client import AsyncClient, Client
from colibri.tui.app import ColibriApp

TARGET_MS = 100.0

FEEDER = """\
import sys, time
from colibri.client import AsyncClient, Client
rate = float(sys.argv[2])
with Client(sys.argv[1]) as client:
    n, start = 0, time.monotonic()
    while True:
        n += 1
        client.call("submit", text=f"arriving task {n}", capabilities=["nobody-has-this"])
        time.sleep(max(0.0, start + n / rate - time.monotonic()))
"""


def fill(daemon: Daemon, tasks: int) -> None:
    with Client(daemon.socket) as client:
        for n in range(tasks):
            client.call("submit", text=f"task {n} on the board", capabilities=["nobody-has-this"])


def changed(read: Callable[[], object]) -> Callable[[], bool]:
    """Whether what ``read`` returns is no longer what it returned now."""
    before = read()
    return lambda: read() != before


async def measure(daemon: Daemon, tasks: int, rate: float, presses: int) -> dict[str, float]:
    app = ColibriApp(daemon.socket, root=daemon.root)
    results: dict[str, list[float]] = {"down": [], "v": [], "p": []}
    async with app.run_test(size=(160, 50)) as pilot:
        deadline = time.monotonic() + 120
        while len(app.board.tasks) < tasks:
            if time.monotonic() > deadline:
                raise SystemExit("the TUI did not load the board in time")
            await pilot.pause(0.1)
        feeder = subprocess.Popen([PYTHON, "-c", FEEDER, str(daemon.socket), str(rate)])
        try:
            await pilot.pause(1.0)  # the events flow
            before, began = len(app.board.tasks), time.monotonic()

            async def timed(key: str, done: Callable[[], bool]) -> None:
                # Not ``pilot.press``: it waits for the app to be idle, which a stream of
                # events never lets it be. The key goes in as a terminal's would.
                start = time.perf_counter()
                app.simulate_key(key)
                while not done():
                    await asyncio.sleep(0.001)
                results[key].append((time.perf_counter() - start) * 1000)

            # The daemon's part of ``p``: the same request's round trip on a connection of
            # its own, on the same loop, under the same stream.
            results["daemon"] = []
            async with asyncio.timeout(60):
                probe = await AsyncClient(daemon.socket).connect()
                try:
                    for _ in range(presses):
                        start = time.perf_counter()
                        await probe.call("toggle-swarm", paused=app.board.paused)
                        results["daemon"].append((time.perf_counter() - start) * 1000)
                finally:
                    await probe.close()
            for n in range(presses):
                await timed("down", changed(lambda: app.task_list.cursor))
                await timed("v", changed(lambda: app.as_tree))
                await timed("p", changed(lambda: app.board.paused))
                if n == 0:
                    note("  first round of keys done")
                await pilot.pause(0.05)
            arrived = len(app.board.tasks) - before
            elapsed = time.monotonic() - began
        finally:
            feeder.terminate()
            feeder.wait()
    # What arrived as the keys were pressed: the rate the feeder kept up (a loaded machine may
    # give it less than asked).
    figures: dict[str, float] = {"events_per_s": arrived / elapsed}
    for key, values in results.items():
        values.sort()
        figures[f"{key}_p50_ms"] = statistics.median(values)
        figures[f"{key}_p95_ms"] = percentile(values, 95)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=200.0, help="events a second")
    parser.add_argument("--presses", type=int, default=30, help="of each key, per run")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for n in range(args.repeat):
        with Daemon(durability="relaxed") as daemon:
            note(f"run {n + 1}: filling the board with {args.tasks} tasks")
            fill(daemon, args.tasks)
            runs.append(asyncio.run(measure(daemon, args.tasks, args.rate, args.presses)))
            note(f"run {n + 1}: {runs[-1]}")
    result = {key: median([run[key] for run in runs]) for key in runs[0]}
    worst = max(v for k, v in result.items() if k.endswith("_p95_ms") and "daemon" not in k)
    emit({"bench": "tui", "tasks": args.tasks, "rate": args.rate, "repeat": args.repeat,
          **result, "target_ms": TARGET_MS, "met": worst <= TARGET_MS})  # fmt: skip


if __name__ == "__main__":
    main()
