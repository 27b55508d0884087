"""``colibri web`` under load: 10,000 tasks on the board and about 200 events a second.

A daemon gets ``--tasks`` pending tasks (a capability nobody has: they stay on the board);
``colibri web`` loads them; then a separate process submits tasks at ``--rate`` a second, each
carrying the moment it was sent, while this process:

- keeps a board page's event stream open and, for each new card it is sent, takes the time
  from the submit to the card's arrival (``event``: what a person watching the board waits);
- fetches whole pages in turn, timing each: the board (7 columns of the newest 50 cards, the
  counts), the first page of the list (200 rows), the list filtered by a word.

p50 and p95 within a run, median over ``--repeat`` runs; the web server's CPU over the run.

    .venv/bin/python bench/web.py --tasks 10000 --rate 200 --repeat 3
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import subprocess
import threading
import time
from pathlib import Path

from _support import PYTHON, Daemon, cpu_seconds, emit, median, note, percentile
from colibri.client import Client

FEEDER = """\
import sys, time
from colibri.client import Client
rate = float(sys.argv[2])
with Client(sys.argv[1]) as client:
    n, start = 0, time.monotonic()
    while True:
        n += 1
        text = f"arriving t={time.time():.6f}"
        client.call("submit", text=text, capabilities=["nobody-has-this"])
        time.sleep(max(0.0, start + n / rate - time.monotonic()))
"""


def fill(daemon: Daemon, tasks: int) -> None:
    with Client(daemon.socket, timeout=120) as client:
        for start in range(0, tasks, 1000):
            batch = [{"text": f"task {n} on the board", "capabilities": ["nobody-has-this"]}
                     for n in range(start, min(tasks, start + 1000))]  # fmt: skip
            client.call("submit-all", tasks=batch)


def start_web(root: Path) -> tuple[subprocess.Popen[str], str, str]:
    web = subprocess.Popen(
        [PYTHON, "-m", "colibri", "--root", str(root), "web", "--listen", "127.0.0.1:0"],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    )  # fmt: skip
    assert web.stderr is not None
    line = web.stderr.readline()
    found = re.search(r"(http://[^/\s]+)(/login\?secret=\S+)", line)
    assert found, line
    return web, found.group(1), found.group(2)


def get(base: str, path: str, cookie: str) -> tuple[int, dict[str, str], bytes]:
    host, port = base.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        conn.request("GET", path, headers={"Cookie": f"colibri_session={cookie}"})
        response = conn.getresponse()
        return response.status, dict(response.getheaders()), response.read()
    finally:
        conn.close()


def follow(base: str, cookie: str, latencies: list[float], stop: threading.Event) -> None:
    host, port = base.removeprefix("http://").rsplit(":", 1)
    conn = http.client.HTTPConnection(host, int(port), timeout=60)
    conn.request("GET", "/events?view=board", headers={"Cookie": f"colibri_session={cookie}"})
    response = conn.getresponse()
    while not stop.is_set():
        line = response.readline().decode()
        if line.startswith("data: "):
            now = time.time()
            for upsert in json.loads(line[6:]).get("upsert", []):
                if sent := re.search(r"arriving t=([0-9.]+)", upsert["html"]):
                    latencies.append(now - float(sent.group(1)))
    conn.close()


def measure(tasks: int, rate: float, seconds: float) -> dict[str, float]:
    with Daemon() as daemon:
        fill(daemon, tasks)
        web, base, sign_in = start_web(daemon.root)
        try:
            _, headers, _ = get(base, sign_in, "")
            cookie = re.search(r"colibri_session=([^;]+)", headers["set-cookie"]).group(1)  # type: ignore[union-attr]
            started = time.monotonic()
            status, _, _ = get(base, "/", cookie)
            loaded = time.monotonic() - started
            assert status == 200
            latencies: list[float] = []
            stop = threading.Event()
            follower = threading.Thread(target=follow, args=(base, cookie, latencies, stop),
                                        daemon=True)  # fmt: skip
            follower.start()
            feeder = subprocess.Popen([PYTHON, "-c", FEEDER, str(daemon.socket), str(rate)])
            cpu_before, at = cpu_seconds(web.pid), time.monotonic()
            pages: dict[str, list[float]] = {"board": [], "list": [], "filtered": []}
            paths = {"board": "/", "list": "/tasks", "filtered": "/tasks?q=arriving"}
            try:
                while time.monotonic() - at < seconds:
                    for name, path in paths.items():
                        begun = time.monotonic()
                        status, _, _ = get(base, path, cookie)
                        assert status == 200, (name, status)
                        pages[name].append(time.monotonic() - begun)
            finally:
                feeder.terminate()
                feeder.wait()
            cpu = (cpu_seconds(web.pid) - cpu_before) / (time.monotonic() - at)
            stop.set()
        finally:
            web.terminate()
            web.wait()
    result = {"first_page_s": round(loaded, 3), "web_cpu": round(cpu, 3),
              "events_seen": len(latencies)}  # fmt: skip
    for name, times in {**pages, "event": latencies}.items():
        times.sort()
        result[f"{name}_p50_ms"] = round(percentile(times, 50) * 1000, 1)
        result[f"{name}_p95_ms"] = round(percentile(times, 95) * 1000, 1)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--rate", type=float, default=200.0, help="events a second")
    parser.add_argument("--seconds", type=float, default=10.0, help="of load per run")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    runs = []
    for n in range(args.repeat):
        runs.append(measure(args.tasks, args.rate, args.seconds))
        note(f"run {n + 1}: {runs[-1]}")
    keys = runs[0].keys()
    emit({"bench": "web", "tasks": args.tasks, "rate": args.rate, "repeat": args.repeat,
          **{k: median([r[k] for r in runs]) for k in keys}})  # fmt: skip


if __name__ == "__main__":
    main()
