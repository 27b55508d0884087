"""The hive scaling out: three daemons serving six tenants (two each) on one PostgreSQL board,
against the same three daemons on three boards of their own, and one daemon serving all six —
in one run, the layouts in turn, PostgreSQL behind a relay that adds ``--delay-ms`` each way
(bench/delayed_pg.py, started here).

While each phase runs, ``pg_stat_activity`` is sampled (throughput.py ``--sample-locks``, the
sampler connected to the server directly): of the daemons' backends seen working, the share
that waits for a lock. Nothing else may use the server meanwhile.

    .venv/bin/python bench/hive_scale.py --delay-ms 1 --repeat 3

Prints each run, then the medians, the ratio of one board to three boards, and the lock
figures; the last line is the JSON of it all.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DIRECT = os.environ.get("COLIBRI_TEST_PG") or "postgresql://postgres@127.0.0.1:5432/test"

#: (name, daemons, tenants per daemon, boards)
LAYOUTS = [
    ("one board, 3 daemons x 2 tenants", 3, 2, "one"),
    ("three boards, 3 daemons x 2 tenants", 3, 2, "separate"),
    ("one board, 1 daemon x 6 tenants", 1, 6, "one"),
]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def relay(delay_ms: float) -> tuple[subprocess.Popen[bytes], str]:
    """bench/delayed_pg.py in a process of its own; the connection string through it."""
    port = free_port()
    target = DIRECT.split("@", 1)[1].split("/", 1)[0]
    process = subprocess.Popen(
        [sys.executable, str(HERE / "delayed_pg.py"), "--listen", str(port), "--to", target,
         "--delay-ms", str(delay_ms)],
    )  # fmt: skip
    deadline = time.monotonic() + 10
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            break
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                process.kill()
                raise SystemExit("the relay did not start") from None
            time.sleep(0.05)
    user, rest = DIRECT.split("@", 1)
    return process, f"{user}@127.0.0.1:{port}/{rest.split('/', 1)[1]}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--delay-ms", type=float, default=1.0, help="added each way (0: no relay)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=12_000)
    ap.add_argument("--warmup", type=int, default=1_200)
    ap.add_argument("--agents", type=int, default=12)
    ap.add_argument("--submitters", type=int, default=6)
    args = ap.parse_args()
    process = None
    if args.delay_ms > 0:
        process, through = relay(args.delay_ms)
        os.environ["COLIBRI_TEST_PG"] = through  # read by _support as it is imported
    try:
        sys.path.insert(0, str(HERE))
        import throughput
        from _support import emit, median, note

        base = throughput.parser().parse_args([])
        runs: list[dict[str, Any]] = []
        for n in range(args.repeat):
            order = LAYOUTS[n % len(LAYOUTS) :] + LAYOUTS[: n % len(LAYOUTS)]
            for name, daemons, per_daemon, boards in order:
                run = argparse.Namespace(**{
                    **vars(base), "store": "postgresql", "tasks": args.tasks,
                    "warmup": args.warmup, "agents": args.agents,
                    "submitters": args.submitters, "daemons": daemons,
                    "tenants_per_daemon": per_daemon, "boards": boards, "sample_locks": True,
                    "sample_dsn": DIRECT, "repeat": 1,
                })  # fmt: skip
                result = {"layout": name, **throughput.once(run, "postgresql")}
                note(f"run {n + 1}/{args.repeat}: {result}")
                runs.append(result)
    finally:
        if process is not None:
            process.kill()
            process.wait()
    figures: dict[str, Any] = {}
    for name, *_ in LAYOUTS:
        mine = [r for r in runs if r["layout"] == name]
        figures[name] = {
            "tasks_per_s": median([r["tasks_per_s"] for r in mine]),
            "lock_wait_share": median([r["lock_wait_share"] for r in mine]),
            "samples_with_a_lock_wait": median([r["samples_with_a_lock_wait"] for r in mine]),
            "lock_samples": sum(r["lock_samples"] for r in mine),
        }
    one, three = (figures[LAYOUTS[k][0]]["tasks_per_s"] for k in (0, 1))
    ratio = round(one / three, 2) if three else None
    note(f"medians: {figures}")
    note(f"one board / three boards: {ratio} (target >= 0.8)")
    emit({
        "bench": "hive_scale", "delay_ms": args.delay_ms, "runs": runs, "medians": figures,
        "one_board_vs_three": ratio, "met": ratio is not None and ratio >= 0.8,
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
