"""A well-behaved client's latency while other peers abuse the socket.

One client pings the daemon (one request at a time, the round trip timed) while, in separate
processes, other peers misbehave; the same run measures the quiet case first, so the figures are
ratios on the same machine at the same moment:

- quiet:     nobody else connected;
- garbage:   one peer writes bad lines (bad JSON, unknown commands, wrong types) as fast as the
             daemon takes them, reading the error replies;
- slowloris: 200 peers each trickle one byte of an unfinished line every 0.5 s;
- churn:     a peer opens, pings and closes connections in a loop.

    .venv/bin/python bench/abuse.py --pings 2000 --repeat 3

``--tenant-flood`` measures instead the owner's ping on the Unix socket while one tenant's
token floods the TLS port with pipelined reads, on a board whose ledger holds ``--rows`` rows
of tenant ``tb`` (written into its SQLite file while the daemon is stopped):

- quiet:        nobody else connected;
- empty-ledger: three connections of tenant ``te``'s token (it has no rows at all), each
                keeping 64 ``ledger`` requests (``after`` "", ``limit`` 10,000) in flight;
- own-ledger:   the same by tenant ``tb``'s token, whose rows are the board's;
- own-cost:     tenant ``tb``'s token, 64 ``cost`` requests in flight on each connection,
                each summing all of its rows.

    .venv/bin/python bench/abuse.py --tenant-flood --rows 50000 --pings 1000 --repeat 3
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from _support import Daemon, emit, median, note, percentile
from colibri.client import Client

GARBAGE = [
    b'{"cmd":',
    b"not json at all",
    b'{"cmd":"no-such-command"}',
    b'{"cmd":"submit","text":42}',
    b'{"cmd":"get","task":"not-a-uuid"}',
    b"[1,2,3]",
    b'{"cmd":"submit","text":"x","priority":1e999}',
]
#: The plan's bound for other clients' p99 while one peer abuses the socket.
TARGET_P99_MS = 100.0


def garbage(path: str, stop: Any) -> None:
    payload = b"".join(line + b"\n" for line in GARBAGE) * 50
    while not stop.is_set():
        try:
            with socket.socket(socket.AF_UNIX) as sock:
                sock.connect(path)
                reader = sock.makefile("rb")
                while not stop.is_set():
                    sock.sendall(payload)
                    for _ in range(len(GARBAGE) * 50):
                        if not reader.readline():
                            break
        except OSError:
            time.sleep(0.01)  # closed by the daemon (allowed): connect again


def slowloris(path: str, stop: Any, peers: int = 200) -> None:
    socks = []
    for _ in range(peers):
        sock = socket.socket(socket.AF_UNIX)
        try:
            sock.connect(path)
            socks.append(sock)
        except OSError:
            sock.close()
    while not stop.is_set():
        for sock in list(socks):
            try:
                sock.send(b"{")
            except OSError:
                socks.remove(sock)  # closed at the line timeout, or refused as busy
        stop.wait(0.5)
    for sock in socks:
        sock.close()


def churn(path: str, stop: Any) -> None:
    while not stop.is_set():
        try:
            with Client(Path(path), timeout=10) as client:
                client.call("ping")
        except OSError:
            time.sleep(0.01)


ABUSERS: dict[str, Callable[[str, Any], None] | None] = {
    "quiet": None,
    "garbage": garbage,
    "slowloris": slowloris,
    "churn": churn,
}


def ping_latencies(path: Path, pings: int) -> list[float]:
    times = []
    with Client(path, timeout=30) as client:
        for _ in range(pings):
            start = time.perf_counter()
            client.call("ping")
            times.append((time.perf_counter() - start) * 1000)
    return sorted(times)


def end(worker: multiprocessing.Process | None, stop: Any) -> None:
    """Tell the abusing process to stop, and kill it if it does not within 30 s."""
    stop.set()
    if worker is not None:
        worker.join(timeout=30)
        if worker.is_alive():
            worker.kill()


def one_run(pings: int) -> dict[str, dict[str, float]]:
    results: dict[str, dict[str, float]] = {}
    with Daemon() as daemon:
        path = str(daemon.socket)
        for name, abuser in ABUSERS.items():
            stop = multiprocessing.Event()
            worker = None
            if abuser is not None:
                worker = multiprocessing.Process(target=abuser, args=(path, stop), daemon=True)
                worker.start()
                time.sleep(1.0)  # let the abuse get going
            try:
                times = ping_latencies(daemon.socket, pings)
            finally:
                end(worker, stop)
            assert daemon.process is not None and daemon.process.poll() is None, "daemon died"
            p50, p99 = percentile(times, 50), percentile(times, 99)
            results[name] = {"p50_ms": p50, "p99_ms": p99}
            note(f"{name:>9}: p50 {p50:.3f} ms  p99 {p99:.3f} ms")
    return results


# -- one tenant's flood of pipelined reads, over TLS ---------------------------------------------

#: What each connection of the flooding token keeps in flight, by scenario.
TENANT_FLOODS: dict[str, tuple[str, dict[str, Any]] | None] = {
    "quiet": None,
    "empty-ledger": ("te", {"cmd": "ledger", "after": "", "limit": 10_000}),
    "own-ledger": ("tb", {"cmd": "ledger", "after": "", "limit": 10_000}),
    "own-cost": ("tb", {"cmd": "cost", "by": "agent"}),
}
#: Requests each flooding connection keeps in flight (the daemon's LINES_PER_TURN).
IN_FLIGHT = 64
#: The finding's bound: the owner's ping p99 under one tenant's flood, times the quiet p99.
TARGET_VS_QUIET = 10.0


def tenant_flooder(
    port: int, ca: str, token: str, request: dict[str, Any], stop: Any, served: Any
) -> None:
    """Three TLS connections of ``token``, each keeping IN_FLIGHT ``request``s in flight (one
    more sent for each reply read) until ``stop``; ``served`` counts the replies."""
    import json
    import ssl
    import threading

    context = ssl.create_default_context(cafile=ca)
    line = json.dumps({"id": 1, **request}).encode() + b"\n"

    def one_connection() -> None:
        raw = socket.create_connection(("127.0.0.1", port), timeout=60)
        with context.wrap_socket(raw, server_hostname="127.0.0.1") as sock:
            reader = sock.makefile("rb")
            sock.sendall(json.dumps({"cmd": "auth", "id": 0, "token": token}).encode() + b"\n")
            assert json.loads(reader.readline())["ok"], "auth refused"
            sock.sendall(line * IN_FLIGHT)
            while not stop.is_set():
                reply = reader.readline()
                if not reply:
                    raise RuntimeError("the daemon closed a flooding connection")
                # A refusal is cheap to send: counted as served, it would measure nothing.
                if b'"ok":true' not in reply[:64]:
                    raise RuntimeError(f"a flooding request was refused: {reply[:300]!r}")
                with served.get_lock():
                    served.value += 1
                sock.sendall(line)

    threads = [threading.Thread(target=one_connection, daemon=True) for _ in range(3)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()


def grow(daemon: Daemon, rows: int) -> None:
    """Stop ``daemon``, write ``rows`` ledger rows with a cost of tenant tb into its board, and
    start it again."""
    import sqlite3

    board = daemon.call("status")["daemon"]["store"]
    daemon.stop()
    cost = '{"usd": 0.01, "tokens_in": 100, "tokens_out": 10}'
    with sqlite3.connect(board) as conn:
        # Tenant tb's ledger is numbered on its own, from its head on, kept beside it.
        (head,) = conn.execute(
            "SELECT coalesce(max(seq), 0) FROM ledger_heads WHERE tenant = 'tb'"
        ).fetchone()
        conn.executemany(
            "INSERT INTO ledger (seq, at, task, tenant, from_state, to_state, agent, epoch, cost) "
            "VALUES (?, '2026-01-01T00:00:00.000Z', ?, 'tb', 'running', 'done', 'a1', 1, ?)",
            ((head + n + 1, f"task-{n}", cost) for n in range(rows)),
        )
        conn.execute(
            "INSERT INTO ledger_heads (tenant, seq) VALUES ('tb', ?) "
            "ON CONFLICT (tenant) DO UPDATE SET seq = excluded.seq",
            (head + rows,),
        )
    conn.close()
    daemon.start(timeout=60.0)


def tenant_run(pings: int, rows: int, pki_dir: Path) -> dict[str, dict[str, float]]:
    from colibri.certs import make_pki

    pki = make_pki(pki_dir, ["localhost", "127.0.0.1"], days=2)
    listen = ["--listen", "tcp://127.0.0.1:0", "--tls-cert", str(pki.server_cert)]
    listen += ["--tls-key", str(pki.server_key)]
    results: dict[str, dict[str, float]] = {}
    with Daemon(extra_args=listen) as daemon:
        grow(daemon, rows)
        port = int(daemon.call("status")["daemon"]["listen"][0].rsplit(":", 1)[1])
        tokens = {
            t: str(daemon.call("token-create", role="operator", tenant=t)["secret"])
            for t in ("te", "tb")
        }
        for name, flood in TENANT_FLOODS.items():
            stop = multiprocessing.Event()
            served = multiprocessing.Value("q", 0)
            worker = None
            if flood is not None:
                tenant, request = flood
                worker = multiprocessing.Process(
                    target=tenant_flooder,
                    args=(port, str(pki.ca_cert), tokens[tenant], request, stop, served),
                    daemon=True,
                )
                worker.start()
                while served.value < 3 * IN_FLIGHT and worker.is_alive():
                    time.sleep(0.05)  # the flood is going: a window's worth served
                if not worker.is_alive():
                    raise SystemExit(f"{name}: the flood ended before it began (see above)")
            try:
                start = served.value
                times = ping_latencies(daemon.socket, pings)
                flooded = served.value - start
            finally:
                end(worker, stop)
            assert daemon.process is not None and daemon.process.poll() is None, "daemon died"
            p50, p99 = percentile(times, 50), percentile(times, 99)
            results[name] = {"p50_ms": p50, "p99_ms": p99, "flood_replies": flooded}
            note(f"{name:>12}: p50 {p50:.3f} ms  p99 {p99:.3f} ms  ({flooded} flood replies)")
    return results


def tenant_main(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory(prefix="cb-pki") as pki_dir:
        runs = [
            tenant_run(args.pings, args.rows, Path(pki_dir) / f"run{n}") for n in range(args.repeat)
        ]
    summary: dict[str, Any] = {}
    for name in TENANT_FLOODS:
        summary[name] = {
            key: round(median([r[name][key] for r in runs]), 3)
            for key in ("p50_ms", "p99_ms", "flood_replies")
        }
    quiet = summary["quiet"]["p99_ms"]
    for name in TENANT_FLOODS:
        summary[name]["p99_vs_quiet"] = round(summary[name]["p99_ms"] / quiet, 2)
    emit(
        {
            "bench": "abuse-tenant-flood",
            "pings": args.pings,
            "rows": args.rows,
            "repeat": args.repeat,
            "scenarios": summary,
            "target_p99_vs_quiet": TARGET_VS_QUIET,
            "met": summary["empty-ledger"]["p99_vs_quiet"] <= TARGET_VS_QUIET,
        }
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pings", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--tenant-flood", action="store_true", help="one tenant's reads over TLS")
    ap.add_argument("--rows", type=int, default=50_000, help="tenant tb's ledger rows")
    args = ap.parse_args()
    if args.tenant_flood:
        tenant_main(args)
        return
    runs = [one_run(args.pings) for _ in range(args.repeat)]
    summary: dict[str, Any] = {}
    for name in ABUSERS:
        p50 = median([r[name]["p50_ms"] for r in runs])
        p99 = median([r[name]["p99_ms"] for r in runs])
        summary[name] = {"p50_ms": round(p50, 3), "p99_ms": round(p99, 3)}
    quiet = summary["quiet"]
    for name in ABUSERS:
        summary[name]["p99_vs_quiet"] = round(summary[name]["p99_ms"] / quiet["p99_ms"], 2)
    worst = max(summary[name]["p99_ms"] for name in ABUSERS)
    emit(
        {
            "bench": "abuse",
            "pings": args.pings,
            "repeat": args.repeat,
            "scenarios": summary,
            "target_p99_ms": TARGET_P99_MS,
            "met": worst < TARGET_P99_MS,
        }
    )


if __name__ == "__main__":
    main()
