"""Colibri side by side with its peers: one command, the same machine, the same run.

By default it measures the workloads of docs/PERFORMANCE.md's peer table through Colibri
(durable: SQLite ``synchronous=FULL``, every transition committed before it is acknowledged)
and through its peers, interleaved round by round (the order rotating), and prints the table
with ratios, the targets and whether each is met:

* **drain** — ``--tasks`` queued no-op tasks, nothing consuming them, then the consumer starts;
  tasks/s from the first task done to the last. Colibri: one stub agent of 32 slots, and 10 of
  32 (bench/throughput.py's agents: ``out`` at once for every ``assign``); each peer: its one
  consumer as configured below.
* **end to end** — submitting and running at once (bench/throughput.py: 4 submitters, 10
  agents of 32 slots); each peer: this process enqueues as fast as it can while its consumer
  runs. Tasks/s from the first submit to the last task done.
* **submit → start** — one task at a time, p50 and p99: Colibri's submit → ``assign``
  (bench/latency.py), each peer's enqueue call → its task's first line; and this machine's
  floor under Colibri's figure, measured in the same round: one durable SQLite commit + one
  Unix-socket round trip (bench/baseline.py).
* **memory** — the daemon's RSS holding 100,000 pending tasks (bench/memory.py), and
  ``colibri --help``'s wall time (bench/cli_startup.py): Colibri's own, against its targets.

The peers (bench/_queue_peers.py says how each is run): Huey on SQLite as it comes
(``huey-sqlite``, durable) and with ``fsync=False`` (``huey-sqlite-nofsync``), Huey on Redis
(``huey-redis``), Celery's solo worker on Redis (``celery``), and pgqueuer's default
``QueueManager`` on PostgreSQL (``pgqueuer``: drain and submit → start, bench/peers_pg.py).
This machine's Redis keeps nothing on disk, so the Redis peers are not durable. A peer that is
not installed, or whose server does not answer, is skipped with one line.

It prints the table on stderr and one JSON line on stdout, and writes ``peers.json``,
``peers.md`` and a chart, ``peers.png`` (with matplotlib installed), into ``--out``:

    .venv/bin/pip install -e '.[peers]'
    .venv/bin/python bench/peers.py --repeat 3          # about 10 minutes on 2 cores

``--peers pgqueuer,procrastinate`` runs the PostgreSQL comparison instead (bench/peers_pg.py):
Colibri on a PostgreSQL board next to pgqueuer and procrastinate on the same server, drain
rate and submit → start latency, and ``--daemons 1,2,3`` for standbys on the board:

    .venv/bin/python bench/peers.py --peers pgqueuer,procrastinate --tasks 5000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import _queue_peers
import baseline
import cli_startup
import latency
import memory
import peers_pg
import throughput
from _support import PYTHON, Daemon, emit, machine, median, note, percentile

INSTALL = f"{Path(PYTHON).parent / 'pip'} install -e '.[peers]'"
#: The peers of the table: Huey and Celery (bench/_queue_peers.py) and pgqueuer.
TABLE_PEERS = (*_queue_peers.PEERS, "pgqueuer")
#: Everything --peers may name: the table's peers, and procrastinate (PostgreSQL mode only).
PEERS = (*TABLE_PEERS, "procrastinate")
#: The targets of the table (docs/PERFORMANCE.md, "Side by side").
TARGET_E2E_VS_NOFSYNC = 1.0  # end to end at least as fast as Huey with fsync off
TARGET_DRAIN_VS_PGQUEUER = 3.0  # drain with 10 agents at least 3x pgqueuer's default
TARGET_P50_VS_FLOOR = 1.25  # submit → assign p50 within 1.25x the machine's floor
TARGET_P99_MS = 1.0
TARGET_RSS_MB = 97.6  # today's figure with 100,000 pending tasks: no higher
TARGET_HELP_MS = 100.0


def colibri_drain(args: argparse.Namespace, agents: int) -> float:
    with Daemon() as daemon:
        return round(asyncio.run(peers_pg.colibri_fill_and_drain(daemon, args, agents, 32)), 1)


def colibri_e2e(args: argparse.Namespace) -> float:
    t_args = throughput.parser().parse_args(
        ["--tasks", str(args.tasks), "--repeat", "1", "--timeout", str(args.timeout)]
    )
    return float(throughput.once(t_args, "sqlite")["tasks_per_s"])


def colibri_latency(args: argparse.Namespace) -> dict[str, float]:
    with Daemon() as daemon:
        result = asyncio.run(latency.measure_once(daemon, args.probes, args.probe_warmup))
    return dict(result["submit_to_assign_ms"])


def machine_floor(args: argparse.Namespace) -> dict[str, float]:
    """One durable SQLite commit and one Unix-socket round trip, in microseconds."""
    directory = Path(tempfile.mkdtemp(prefix="cbb", dir="/tmp"))
    server: subprocess.Popen[str] | None = None
    try:
        sock = directory / "echo.sock"
        server = subprocess.Popen(
            [PYTHON, "-c", baseline.ECHO_SERVER, str(sock)], stdout=subprocess.PIPE, text=True
        )
        assert server.stdout is not None
        server.stdout.readline()
        commit = baseline.sqlite_commit_us(directory, "FULL", 1000)
        rtt = asyncio.run(baseline.socket_rtt_us(sock, 2000))
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=10)
        shutil.rmtree(directory, ignore_errors=True)
    return {"commit_us": round(commit, 1), "rtt_us": round(rtt, 1),
            "floor_ms": round((commit + rtt) / 1000, 3)}  # fmt: skip


def colibri_memory(args: argparse.Namespace) -> float:
    m_args = argparse.Namespace(tasks=100_000, connections=4, window=512, timeout=args.timeout)
    with Daemon() as daemon:
        return float(asyncio.run(memory.measure_once(daemon, m_args))["rss_mb"])


def colibri_help_ms() -> float:
    command = [*cli_startup.colibri_command(), "--help"]
    env = {k: v for k, v in os.environ.items() if k != "COLIBRI_ROOT"}  # as cli_startup.py
    cli_startup.wall_ms(command, 2, env)  # warm the page cache
    return round(median(cli_startup.wall_ms(command, 10, env)), 1)


def quantiles(ms: list[float]) -> dict[str, float]:
    ms.sort()
    return {f"p{q}": round(percentile(ms, q), 3) for q in (50, 90, 99)} | {"max": round(ms[-1], 3)}


def measure(system: str, args: argparse.Namespace) -> dict[str, Any]:
    """One round of one system: what it is measured on, figure by figure."""
    if system == "colibri":
        return {
            "drain_1x32": colibri_drain(args, 1),
            "drain_10x32": colibri_drain(args, 10),
            "e2e": colibri_e2e(args),
            "latency_ms": colibri_latency(args),
            "floor": machine_floor(args),
            "rss_mb": colibri_memory(args),
            "help_ms": colibri_help_ms(),
        }
    if system == "pgqueuer":
        return {
            "drain": round(asyncio.run(peers_pg.peer_drain("pgqueuer", args)), 1),
            "latency_ms": asyncio.run(peers_pg.peer_latency("pgqueuer", args)),
        }
    figures = _queue_peers.e2e_and_drain(system, args.tasks, args.warmup, args.timeout)
    lat = _queue_peers.latency(system, args.probes, args.probe_warmup)
    return {"drain": figures["drain_tasks_per_s"], "e2e": figures["e2e_tasks_per_s"],
            "enqueue_per_s": figures["enqueue_per_s"], "latency_ms": quantiles(lat)}  # fmt: skip


def table(args: argparse.Namespace, peers: list[str]) -> int:
    ready = []
    for peer in peers:
        if peer == "pgqueuer":
            why, ok = peers_pg.unavailable(["pgqueuer"], args.pgqueuer_driver)
            why = why if why is not None or ok else f"pgqueuer not installed ({INSTALL})"
        else:
            why = _queue_peers.unavailable(peer)
        if why is not None:
            note(f"{peer} is skipped: {why}" + ("" if "answer" in why else f" ({INSTALL})"))
        else:
            ready.append(peer)
    systems = ["colibri", *ready]
    runs: dict[str, list[dict[str, Any]]] = {s: [] for s in systems}
    for n in range(args.repeat):
        for system in systems[n % len(systems) :] + systems[: n % len(systems)]:
            runs[system].append(measure(system, args))
        note(f"peers round {n + 1}/{args.repeat}: " + "; ".join(
            f"{s} {brief(r[-1])}" for s, r in runs.items()
        ))  # fmt: skip
    result = summarize(args, runs) | {"machine": machine()}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "peers.json").write_text(json.dumps(result, indent=2) + "\n")
    text = markdown(result)
    (out / "peers.md").write_text(text)
    note(text.rstrip())
    chart = draw(result, out / "peers.png")
    note(f"written: {out / 'peers.json'}, {out / 'peers.md'}" + (f", {chart}" if chart else ""))
    emit(result)
    return 0


def brief(figures: dict[str, Any]) -> str:
    parts = [f"{k} {v}" for k, v in figures.items() if isinstance(v, float)]
    if "latency_ms" in figures:
        parts.append(f"p50/p99 {figures['latency_ms']['p50']}/{figures['latency_ms']['p99']} ms")
    return ", ".join(parts)


def summarize(args: argparse.Namespace, runs: dict[str, list[dict[str, Any]]]) -> dict[str, Any]:
    """Medians per system and figure, the ratios of the table (each taken round by round, the
    same minutes of the host's noise, then their median), and the targets."""

    def med(system: str, key: str, q: str | None = None) -> float:
        values = [r[key][q] if q else r[key] for r in runs[system]]
        return round(median(values), 3 if q else 1)

    def by_round(num: str, key_num: str, den: str, key_den: str) -> float:
        pairs = zip(runs[num], runs[den], strict=True)
        return round(median([a[key_num] / b[key_den] for a, b in pairs]), 2)

    colibri = runs["colibri"]
    medians: dict[str, dict[str, Any]] = {}
    for system, rs in runs.items():
        keys = [k for k, v in rs[0].items() if isinstance(v, (int, float))]
        medians[system] = {k: med(system, k) for k in keys}
        medians[system]["latency_ms"] = {q: med(system, "latency_ms", q) for q in ("p50", "p99")}
    medians["colibri"]["floor"] = {
        k: round(median([r["floor"][k] for r in colibri]), 3) for k in colibri[0]["floor"]
    }
    peers = [s for s in runs if s != "colibri"]
    ratios: dict[str, dict[str, float]] = {}
    for peer in peers:
        ratios[peer] = {
            "drain_1x32": by_round("colibri", "drain_1x32", peer, "drain"),
            "drain_10x32": by_round("colibri", "drain_10x32", peer, "drain"),
        }
        if "e2e" in runs[peer][0]:
            ratios[peer]["e2e"] = by_round("colibri", "e2e", peer, "e2e")
        ratios[peer]["p50"] = round(
            median([a["latency_ms"]["p50"] / b["latency_ms"]["p50"]
                    for a, b in zip(colibri, runs[peer], strict=True)]), 2)  # fmt: skip
    floor_ratio = round(
        median([r["latency_ms"]["p50"] / r["floor"]["floor_ms"] for r in colibri]), 2
    )
    c = medians["colibri"]
    targets = {
        "e2e_vs_huey_nofsync": target(ratios, "huey-sqlite-nofsync", "e2e", TARGET_E2E_VS_NOFSYNC),
        "drain_10x32_vs_pgqueuer": target(
            ratios, "pgqueuer", "drain_10x32", TARGET_DRAIN_VS_PGQUEUER
        ),  # fmt: skip
        "p50_vs_floor": {
            "value": floor_ratio,
            "target": f"<= {TARGET_P50_VS_FLOOR}",
            "met": floor_ratio <= TARGET_P50_VS_FLOOR,
        },  # fmt: skip
        "p99_ms": {
            "value": c["latency_ms"]["p99"],
            "target": f"<= {TARGET_P99_MS}",
            "met": c["latency_ms"]["p99"] <= TARGET_P99_MS,
        },  # fmt: skip
        "rss_100k_mb": {
            "value": c["rss_mb"],
            "target": f"<= {TARGET_RSS_MB}",
            "met": c["rss_mb"] <= TARGET_RSS_MB,
        },  # fmt: skip
        "help_ms": {
            "value": c["help_ms"],
            "target": f"<= {TARGET_HELP_MS}",
            "met": c["help_ms"] <= TARGET_HELP_MS,
        },  # fmt: skip
    }
    return {
        "bench": "peers",
        "params": {
            "tasks": args.tasks,
            "warmup": args.warmup,
            "probes": args.probes,
            "repeat": args.repeat,
            "versions": versions(peers),
        },  # fmt: skip
        "runs": runs,
        "medians": medians,
        "colibri_vs": ratios,
        "targets": targets,
    }


def target(ratios: dict[str, dict[str, float]], peer: str, key: str, at_least: float) -> Any:
    if peer not in ratios or key not in ratios[peer]:
        return {"value": None, "target": f">= {at_least}", "met": None, "why": f"{peer} skipped"}
    value = ratios[peer][key]
    return {"value": value, "target": f">= {at_least}", "met": value >= at_least}


def markdown(result: dict[str, Any]) -> str:
    """The peer table as docs/PERFORMANCE.md shows it."""
    m, ratios, targets = result["medians"], result["colibri_vs"], result["targets"]
    c = m["colibri"]
    peers = list(ratios)

    def best(key: str) -> str:
        have = [p for p in peers if key in m[p]]
        if not have:
            return "(none ran)"
        top = max(have, key=lambda p: m[p][key])
        return f"{top} {m[top][key]:,.0f}"

    def vs(peer: str, key: str) -> str:
        if peer not in ratios or key not in ratios[peer]:
            return "(skipped)"
        return f"{peer} {m[peer]['drain' if key.startswith('drain') else key]:,.0f}: " \
               f"{ratios[peer][key]:.2f}x"  # fmt: skip

    floor = c["floor"]
    rows = [
        "| workload | Colibri (durable) | peers (same run) | target |",
        "| --- | --- | --- | --- |",
        f"| drain {result['params']['tasks']:,} queued no-op tasks, 1 agent x 32 slots | "
        f"{c['drain_1x32']:,.0f} tasks/s | best: {best('drain')}; "
        + ", ".join(vs(p, "drain_1x32") for p in peers)
        + " | |",
        f"| drain, 10 agents x 32 slots | {c['drain_10x32']:,.0f} tasks/s | "
        + ", ".join(vs(p, "drain_10x32") for p in peers)
        + f" | >= {TARGET_DRAIN_VS_PGQUEUER:g}x pgqueuer: "
        f"{verdict(targets['drain_10x32_vs_pgqueuer'])} |",
        f"| concurrent submit + run | {c['e2e']:,.0f} tasks/s | "
        + ", ".join(vs(p, "e2e") for p in peers if "e2e" in ratios[p])
        + f" | >= {TARGET_E2E_VS_NOFSYNC:g}x huey-sqlite-nofsync: "
        f"{verdict(targets['e2e_vs_huey_nofsync'])} |",
        f"| submit -> start p50 / p99 | {c['latency_ms']['p50']:.3f} / "
        f"{c['latency_ms']['p99']:.3f} ms (floor {floor['floor_ms']:.3f} ms: commit "
        f"{floor['commit_us']:.0f} us + round trip {floor['rtt_us']:.0f} us) | "
        + ", ".join(
            f"{p} {m[p]['latency_ms']['p50']:.3f} / {m[p]['latency_ms']['p99']:.3f}" for p in peers
        )  # fmt: skip
        + f" | p50 <= {TARGET_P50_VS_FLOOR}x floor: {verdict(targets['p50_vs_floor'])}; "
        f"p99 <= {TARGET_P99_MS:g} ms: {verdict(targets['p99_ms'])} |",
        f"| daemon RSS, 100,000 pending tasks | {c['rss_mb']:.1f} MB | | <= {TARGET_RSS_MB} MB: "
        f"{verdict(targets['rss_100k_mb'])} |",
        f"| colibri --help | {c['help_ms']:.1f} ms | | <= {TARGET_HELP_MS:g} ms: "
        f"{verdict(targets['help_ms'])} |",
    ]
    return "\n".join(rows) + "\n"


def verdict(t: dict[str, Any]) -> str:
    if t["met"] is None:
        return f"not measured ({t['why']})"
    return f"{t['value']} {'met' if t['met'] else 'missed'}"


def draw(result: dict[str, Any], path: Path) -> Path | None:
    """Bars of the throughput figures and of p50 latency, per system; None without matplotlib."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        note(f"matplotlib is not installed: no chart ({INSTALL})")
        return None
    m = result["medians"]
    systems = list(m)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.8))
    groups = [("drain_10x32", "drain", "drain (Colibri: 10 agents)"),
              ("drain_1x32", "drain", "drain (Colibri: 1 agent)"),
              ("e2e", "e2e", "submit + run")]  # fmt: skip
    width = 0.8 / len(groups)
    for g, (colibri_key, peer_key, label) in enumerate(groups):
        values = [m[s].get(colibri_key if s == "colibri" else peer_key, 0) for s in systems]
        ax1.bar([i + g * width for i in range(len(systems))], values, width, label=label)
    ax1.set_xticks([i + width for i in range(len(systems))], systems, rotation=20, ha="right")
    ax1.set_ylabel("tasks/s")
    ax1.set_title("throughput (higher is better)")
    ax1.legend(fontsize=8)
    p50 = [m[s]["latency_ms"]["p50"] for s in systems]
    p99 = [m[s]["latency_ms"]["p99"] for s in systems]
    xs = range(len(systems))
    ax2.bar([x - 0.2 for x in xs], p50, 0.4, label="p50")
    ax2.bar([x + 0.2 for x in xs], p99, 0.4, label="p99")
    ax2.axhline(m["colibri"]["floor"]["floor_ms"], color="grey", linestyle="--",
                label="machine floor (commit + round trip)")  # fmt: skip
    ax2.set_xticks(list(xs), systems, rotation=20, ha="right")
    ax2.set_ylabel("ms")
    ax2.set_title("submit -> start (lower is better)")
    ax2.legend(fontsize=8)
    fig.suptitle(f"Colibri and its peers, {result['params']['tasks']:,} no-op tasks, medians of "
                 f"{result['params']['repeat']} rounds")  # fmt: skip
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def versions(peers: list[str]) -> dict[str, str]:
    from importlib.metadata import version

    found = {p: _queue_peers.version(p) for p in peers if p != "pgqueuer"}
    if "pgqueuer" in peers:
        found["pgqueuer"] = version("pgqueuer")
    return found


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", type=int, default=20_000)
    ap.add_argument("--warmup", type=int, default=1_000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300.0)
    ap.add_argument(
        "--peers",
        default=",".join(TABLE_PEERS),
        help=f"comma-separated, among {', '.join(TABLE_PEERS)} (the table, by default all), or "
        "any of pgqueuer, procrastinate alone for the PostgreSQL comparison",
    )
    ap.add_argument(
        "--out", default="/tmp/colibri-peers", help="where the JSON, table and chart go"
    )
    ap.add_argument("--probes", type=int, default=500, help="submit → start probes per run")
    ap.add_argument("--probe-warmup", type=int, default=50)
    pg = ap.add_argument_group("the PostgreSQL comparison")
    pg.add_argument(
        "--daemons",
        default="1",
        help="Colibri daemons on the board for the drain, comma-separated (1,2,3: one serves, "
        "the others stand by)",
    )
    pg.add_argument(
        "--procrastinate-concurrency",
        type=int,
        default=1,
        help="procrastinate's worker concurrency (its default is 1)",
    )
    pg.add_argument(
        "--pgqueuer-driver",
        choices=["asyncpg", "psycopg"],
        default="asyncpg",
        help="pgqueuer's database driver (asyncpg, its first choice, by default)",
    )
    args = ap.parse_args()
    peers = [p.strip() for p in args.peers.split(",") if p.strip()]
    unknown = sorted(set(peers) - set(PEERS))
    postgresql_only = set(peers) <= set(peers_pg.PEERS)
    if unknown or not peers or ("procrastinate" in peers and not postgresql_only):
        ap.error(
            f"--peers {args.peers!r}: name any of {', '.join(TABLE_PEERS)}, or pgqueuer and "
            f"procrastinate alone (unknown: {', '.join(unknown) or 'none'})"
        )
    counts = args.daemons.split(",")
    if not all(c.strip().isdigit() and 1 <= int(c) <= 9 for c in counts):
        ap.error(f"--daemons {args.daemons!r}: daemon counts from 1 to 9, e.g. 1,2,3")
    if args.tasks < 2 or args.probes < 1 or args.probe_warmup < 0 or args.repeat < 1:
        ap.error("--tasks must be at least 2, --probes at least 1, --probe-warmup at least 0, "
                 "--repeat at least 1")  # fmt: skip
    if args.procrastinate_concurrency < 1:
        ap.error(f"--procrastinate-concurrency {args.procrastinate_concurrency}: at least 1")
    if postgresql_only:
        return postgresql(args, peers)
    return table(args, peers)


def postgresql(args: argparse.Namespace, peers: list[str]) -> int:
    """The PostgreSQL comparison; skipped with one line when it cannot run."""
    reason, ready = peers_pg.unavailable(peers, args.pgqueuer_driver)
    if reason is None and not ready:
        reason = f"none of {', '.join(peers)} is installed ({INSTALL})"
    if reason is not None:
        note(f"the PostgreSQL peer comparison is skipped: {reason}")
        emit({"bench": "peers-postgresql", "skipped": reason})
        return 0
    emit(peers_pg.compare(args, ready))
    return 0


if __name__ == "__main__":
    sys.exit(main())
