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
"""

from __future__ import annotations

import argparse
import multiprocessing
import socket
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
                stop.set()
                if worker is not None:
                    worker.join(timeout=10)
                    if worker.is_alive():
                        worker.kill()
            assert daemon.process is not None and daemon.process.poll() is None, "daemon died"
            p50, p99 = percentile(times, 50), percentile(times, 99)
            results[name] = {"p50_ms": p50, "p99_ms": p99}
            note(f"{name:>9}: p50 {p50:.3f} ms  p99 {p99:.3f} ms")
    return results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--pings", type=int, default=2000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
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
