"""The Unix socket next to TLS over loopback, in the same run: throughput, latency, the cost of
a connection, and other clients while one address floods the TLS port with bad tokens.

Each repetition starts one daemon (durability full) that listens on its Unix socket and on
``tcp://127.0.0.1:0`` with TLS (a CA and server pair of ``colibri.certs.make_pki``, made for the
run), and measures, always both transports in the same repetition and in alternating order, so
that the machine's noise falls on both alike:

- throughput: ``--tasks`` no-op tasks drained by ``--agents`` agents, one submitter keeping
  ``--window`` submits in flight (``throughput.py``'s load: each ``assign`` answered with
  ``out`` at once; a task counts when the ``out`` reply says closed), once with every
  connection on the Unix socket, once with every connection over TLS (an agent token per
  agent, an operator token for the submitter); the order flips from one repetition to the next;
- latency: submit → assign at low load, one task at a time (``latency.py``'s loop), a Unix
  task and a TLS task taking turns, each with its own agent and submitter;
- connect: a fresh blocking ``Client`` on the Unix socket and its ``ping``, next to a fresh
  ``Client.remote`` (TCP connect, TLS handshake, the CA loaded, ``auth``), taking turns;
- flood: a client on TLS from 127.0.0.1 doing sequential ``ping`` round trips, first alone
  (``--pings``), then for as long as another process, from 127.0.0.2, opens ``--attempts`` TLS
  connections one after another, each sending ``auth`` with a bad token and reading until the
  daemon closes. The daemon's ``server.auth_failures`` (default 20 a minute) throttles that
  address: its first attempts get ``unauthorized``; the rest are throttled, closed as they are
  accepted, before the TLS handshake (counted ``throttled`` here).

Ratios are TLS / Unix (flood / quiet for the flood), taken within each repetition and reported
as their median; the figures are medians over the repetitions. A table goes to stderr at the
end, the JSON line to stdout.

    .venv/bin/python bench/remote.py --tasks 5000 --repeat 3
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import json
import multiprocessing
import shutil
import socket
import ssl
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from _support import (
    Daemon,
    Failure,
    LineProtocol,
    Message,
    check,
    cpu_seconds,
    decode_message,
    emit,
    encode,
    machine,
    median,
    note,
    own_cpu_seconds,
    percentile,
)
from colibri.certs import make_pki
from colibri.client import Client, Remote
from latency import Waiter
from throughput import BenchAgent, Submitter, Tally, run_phase

TRANSPORTS = ("unix", "tls")
#: Well formed, with an id no token has: the daemon looks it up and says ``unauthorized``.
BAD_TOKEN = "colibri_000000000000_" + "y" * 43
ATTACKER = "127.0.0.2"
HOST = "127.0.0.1"


# -- connections on either transport -----------------------------------------------------------


class Authenticating(LineProtocol):
    """With a token, sends ``auth`` as soon as it is connected and keeps the reply from the
    subclass, which sees every line after it; without one (the Unix socket), sends nothing."""

    def __init__(self, *args: Any, token: str | None = None) -> None:
        super().__init__(*args)
        self.token = token
        self.authed: asyncio.Future[Message | None] = asyncio.get_running_loop().create_future()
        if token is None:
            self.authed.set_result(None)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self.token is not None:
            self.write(encode({"cmd": "auth", "id": 0, "token": self.token}) + b"\n")

    def on_lines(self, lines: list[bytes]) -> None:
        if lines and not self.authed.done():
            self.authed.set_result(decode_message(lines[0]))
            lines = lines[1:]
        if lines:
            super().on_lines(lines)


class Agent(Authenticating, BenchAgent):
    pass


class Feeder(Authenticating, Submitter):
    pass


class Peer(Authenticating, Waiter):
    pass


P = TypeVar("P", bound=Authenticating)


class Endpoint:
    """Where one transport's connections go: the daemon's Unix socket, or its TLS port."""

    def __init__(self, name: str, daemon: Daemon, port: int, ca: str) -> None:
        self.name = name
        self.daemon = daemon
        self.port = port
        self.context = ssl.create_default_context(cafile=ca) if name == "tls" else None

    async def open(self, factory: Callable[..., P], *args: Any, token: str) -> P:
        """A connection of ``factory(*args)``; over TLS authenticated with ``token``."""
        loop = asyncio.get_running_loop()
        if self.context is None:
            proto = factory(*args)
            await loop.create_unix_connection(lambda: proto, str(self.daemon.socket))
        else:
            proto = factory(*args, token=token)
            await loop.create_connection(
                lambda: proto, HOST, self.port, ssl=self.context, server_hostname=HOST
            )
        await proto.connected
        reply = await asyncio.wait_for(proto.authed, 30)
        if reply is not None:
            check(reply, "auth")
        return proto


def close_all(protocols: list[Any]) -> None:
    for proto in protocols:
        if proto.transport is not None:
            proto.transport.close()


class Tokens:
    """The tokens of one repetition, made on the Unix socket as its owner."""

    def __init__(self, daemon: Daemon, agents: list[str]) -> None:
        self.operator = str(
            daemon.call("token-create", role="operator", tenant="default")["secret"]
        )
        self.agents = {
            name: str(
                daemon.call("token-create", role="agent", tenant="default", agent=name)["secret"]
            )
            for name in agents
        }


# -- throughput --------------------------------------------------------------------------------


async def throughput_once(
    endpoint: Endpoint, tokens: Tokens, args: argparse.Namespace
) -> dict[str, Any]:
    tally = Tally()
    capability = f"bench-{endpoint.name}"
    opened: list[Authenticating] = []
    try:
        agents: list[Agent] = []
        for n in range(args.agents):
            name = f"{endpoint.name}-{n:02d}"
            agent = await endpoint.open(Agent, tally, token=tokens.agents.get(name, ""))
            opened.append(agent)
            agent.register(name, [capability], args.slots)
            agents.append(agent)
        for agent in agents:
            reply = await asyncio.wait_for(agent.registered, 30)
            check(reply, "register-agent")
        feeder = await endpoint.open(Feeder, tally, [capability], token=tokens.operator)
        opened.append(feeder)
        if args.warmup:
            await run_phase(tally, [feeder], args.warmup, args.window, args.timeout)
        pid = endpoint.daemon.pid
        gc.collect()
        gc.disable()
        try:
            daemon_cpu, load_cpu = cpu_seconds(pid), own_cpu_seconds()
            seconds = await run_phase(tally, [feeder], args.tasks, args.window, args.timeout)
            daemon_cpu = cpu_seconds(pid) - daemon_cpu
            load_cpu = own_cpu_seconds() - load_cpu
        finally:
            gc.enable()
    finally:
        close_all(opened)
    return {
        "tasks_per_s": round(args.tasks / seconds, 1),
        "seconds": round(seconds, 3),
        "daemon_cpu_share": round(daemon_cpu / seconds, 2),
        "load_cpu_share": round(load_cpu / seconds, 2),
    }


# -- latency -----------------------------------------------------------------------------------


async def latency_once(
    endpoints: list[Endpoint], tokens: Tokens, tasks: int, warmup: int
) -> dict[str, dict[str, float]]:
    """Submit → assign, one task at a time, the transports taking turns task by task."""
    pairs: dict[str, tuple[Peer, Peer]] = {}
    try:
        for endpoint in endpoints:
            name = f"{endpoint.name}-lat"
            agent = await endpoint.open(Peer, token=tokens.agents.get(name, ""))
            submitter = await endpoint.open(Peer, token=tokens.operator)
            pairs[endpoint.name] = (agent, submitter)
            registered = agent.expect_reply()
            agent.send(
                encode(
                    {
                        "cmd": "register-agent",
                        "id": 1,
                        "name": name,
                        "capabilities": [f"lat-{endpoint.name}"],
                    }
                )
                + b"\n"
            )
            check((await asyncio.wait_for(registered, 30))[1], "register-agent")
            agent.answer_assign = True
        samples: dict[str, list[float]] = {e.name: [] for e in endpoints}
        gc.collect()
        gc.disable()
        try:
            for n in range(warmup + tasks):
                for endpoint in endpoints:
                    agent, submitter = pairs[endpoint.name]
                    ms = await one_task(agent, submitter, endpoint.name, n)
                    if n >= warmup:
                        samples[endpoint.name].append(ms)
        finally:
            gc.enable()
    finally:
        close_all([proto for pair in pairs.values() for proto in pair])
    out = {}
    for name, values in samples.items():
        values.sort()
        out[name] = {
            "p50_ms": round(percentile(values, 50), 3),
            "p99_ms": round(percentile(values, 99), 3),
            "max_ms": round(values[-1], 3),
        }
    return out


async def one_task(agent: Peer, submitter: Peer, transport: str, n: int) -> float:
    """latency.py's cycle: submit, the assign, the submit's reply, the out reply; the ms from
    writing the submit to receiving the assign."""
    assigned = agent.expect_assign()
    out_reply = agent.expect_reply()
    acked = submitter.expect_reply()
    start = time.perf_counter()
    submitter.send(
        b'{"cmd":"submit","id":%d,"text":"latency probe %d","capabilities":["lat-%s"]}\n'
        % (n, n, transport.encode())
    )
    t_assign, m = await asyncio.wait_for(assigned, 30)
    _, reply = await asyncio.wait_for(acked, 30)
    check(reply, "submit")
    assert m.task is not None and not isinstance(m.task, str)
    assert isinstance(reply.task, type(m.task)) and reply.task.id == m.task.id
    _, out = await asyncio.wait_for(out_reply, 30)
    check(out, "out")
    return (t_assign - start) * 1000


# -- the cost of a connection ------------------------------------------------------------------


def connect_once(daemon: Daemon, remote: Remote, count: int, order: list[str]) -> dict[str, float]:
    """Median ms of a fresh Unix ``Client`` + ping and of a fresh ``Client.remote`` (+ auth)."""
    times: dict[str, list[float]] = {name: [] for name in order}
    for _ in range(count):
        for name in order:
            start = time.perf_counter()
            if name == "unix":
                client = Client(daemon.socket, timeout=30)
                client.call("ping")
            else:
                client = Client.remote(remote, timeout=30)
            times[name].append((time.perf_counter() - start) * 1000)
            client.close()
    return {name: round(median(values), 3) for name, values in times.items()}


# -- the bad-token flood -----------------------------------------------------------------------


def bad_login(port: int, context: ssl.SSLContext, line: bytes) -> str:
    """One attempt from the attacker's address: the code of the daemon's answer."""
    try:
        raw = socket.create_connection((HOST, port), timeout=30, source_address=(ATTACKER, 0))
    except OSError:
        return "no connection"
    buffer = b""
    try:
        with context.wrap_socket(raw, server_hostname=HOST) as sock:
            with contextlib.suppress(OSError):  # a throttled one may be closed already
                sock.sendall(line)
            with contextlib.suppress(OSError):  # the daemon's close, with or without notify
                while chunk := sock.recv(65536):
                    buffer += chunk
    except OSError:  # how a throttled address is turned away: closed before TLS
        return "throttled"
    first = buffer.split(b"\n", 1)[0]
    if not first:
        return "closed"
    try:
        reply = json.loads(first)
    except ValueError:
        return "garbled"
    if reply.get("ok"):
        return "ok"
    return str((reply.get("error") or {}).get("code", "?"))


def attack(port: int, ca: str, attempts: int, started: Any, finished: Any, results: Any) -> None:
    context = ssl.create_default_context(cafile=ca)
    line = encode({"cmd": "auth", "id": 1, "token": BAD_TOKEN}) + b"\n"
    codes: dict[str, int] = {}
    started.set()
    start = time.perf_counter()
    try:
        for _ in range(attempts):
            code = bad_login(port, context, line)
            codes[code] = codes.get(code, 0) + 1
        results.put({"codes": codes, "seconds": time.perf_counter() - start})
    finally:
        finished.set()


def ping_once(client: Client) -> float:
    start = time.perf_counter()
    client.call("ping")
    return (time.perf_counter() - start) * 1000


def ping_until(client: Client, stop: Callable[[], bool]) -> list[float]:
    times = []
    while not stop():
        times.append(ping_once(client))
    return sorted(times)


def flood_once(
    daemon: Daemon, remote: Remote, port: int, ca: str, args: argparse.Namespace
) -> dict[str, Any]:
    with Client.remote(remote, timeout=30) as client:
        for _ in range(100):  # warm up
            client.call("ping")
        quiet = sorted(ping_once(client) for _ in range(args.pings))
        started, finished = multiprocessing.Event(), multiprocessing.Event()
        results: Any = multiprocessing.Queue()
        worker = multiprocessing.Process(
            target=attack,
            args=(port, ca, args.attempts, started, finished, results),
            daemon=True,
        )
        worker.start()
        try:
            if not started.wait(30):
                raise Failure("the attacker did not start")
            flood = ping_until(client, finished.is_set)
            try:
                attacker = results.get(timeout=30)
            except Exception:
                raise Failure("the attacker ended without its results") from None
            worker.join(timeout=30)
        finally:
            if worker.is_alive():
                worker.kill()
                worker.join(timeout=10)
        client.call("ping")  # still served
    assert daemon.process is not None and daemon.process.poll() is None, "daemon died"
    codes = attacker["codes"]
    return {
        "quiet": {
            "pings": len(quiet),
            "p50_ms": round(percentile(quiet, 50), 3),
            "p99_ms": round(percentile(quiet, 99), 3),
        },
        "flood": {
            "pings": len(flood),
            "p50_ms": round(percentile(flood, 50), 3),
            "p99_ms": round(percentile(flood, 99), 3),
        },
        "attacker": {
            "attempts": sum(codes.values()),
            "unauthorized": codes.get("unauthorized", 0),
            "throttled": codes.get("throttled", 0),
            "other": {k: v for k, v in codes.items() if k not in ("unauthorized", "throttled")},
            "seconds": round(attacker["seconds"], 3),
            "attempts_per_s": round(sum(codes.values()) / attacker["seconds"], 1),
        },
    }


# -- one repetition ----------------------------------------------------------------------------


def one_run(n: int, pki_dir: Path, args: argparse.Namespace) -> dict[str, Any]:
    pki = make_pki(pki_dir / f"run{n}", ["localhost", HOST], days=2)
    ca = str(pki.ca_cert)
    order = list(TRANSPORTS) if n % 2 == 0 else list(reversed(TRANSPORTS))
    listen = ["--listen", f"tcp://{HOST}:0", "--tls-cert", str(pki.server_cert)]
    listen += ["--tls-key", str(pki.server_key)]
    with Daemon(durability=args.durability, extra_args=listen) as daemon:
        address = daemon.call("status")["daemon"]["listen"][0]
        port = int(address.rsplit(":", 1)[1])
        names = [f"tls-{k:02d}" for k in range(args.agents)] + ["tls-lat"]
        tokens = Tokens(daemon, names)
        remote = Remote.parse(address, token=tokens.operator, ca=ca)
        endpoints = {name: Endpoint(name, daemon, port, ca) for name in TRANSPORTS}
        result: dict[str, Any] = {"order": order}

        result["connect_ms"] = connect_once(daemon, remote, args.connects, order)
        note(f"  connect: {result['connect_ms']}")

        result["throughput"] = {}
        for name in order:
            result["throughput"][name] = asyncio.run(throughput_once(endpoints[name], tokens, args))
            note(f"  throughput {name}: {result['throughput'][name]}")

        result["latency"] = asyncio.run(
            latency_once(
                [endpoints[name] for name in order], tokens, args.lat_tasks, args.lat_warmup
            )
        )
        note(f"  latency: {result['latency']}")

        result["flood"] = flood_once(daemon, remote, port, ca, args)
        note(f"  flood: {result['flood']}")

        status = daemon.call("status")
        expected = 2 * (args.tasks + args.warmup) + 2 * (args.lat_tasks + args.lat_warmup)
        if status["tasks"]["closed"] != expected:
            raise Failure(f"status says {status['tasks']['closed']} closed, expected {expected}")
    return result


def ratio(a: float, b: float) -> float:
    return a / b if b else float("nan")


def pick(run: dict[str, Any], path: tuple[str, ...]) -> Any:
    for key in path:
        run = run[key]
    return run


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Medians over the runs, and the medians of the per-run ratios."""

    def med(*path: str, digits: int = 3) -> float:
        return round(median([pick(r, path) for r in runs]), digits)

    def med_ratio(top: tuple[str, ...], bottom: tuple[str, ...]) -> float:
        return round(median([ratio(pick(r, top), pick(r, bottom)) for r in runs]), 3)

    quantiles = ("p50_ms", "p99_ms")
    return {
        "throughput_tasks_per_s": {
            t: med("throughput", t, "tasks_per_s", digits=1) for t in TRANSPORTS
        },
        "throughput_tls_vs_unix": med_ratio(
            ("throughput", "tls", "tasks_per_s"), ("throughput", "unix", "tasks_per_s")
        ),
        "latency_ms": {t: {q: med("latency", t, q) for q in quantiles} for t in TRANSPORTS},
        "latency_tls_vs_unix": {
            q: med_ratio(("latency", "tls", q), ("latency", "unix", q)) for q in quantiles
        },
        "connect_ms": {t: med("connect_ms", t) for t in TRANSPORTS},
        "connect_tls_vs_unix": med_ratio(("connect_ms", "tls"), ("connect_ms", "unix")),
        "flood_ping_ms": {
            phase: {q: med("flood", phase, q) for q in quantiles} for phase in ("quiet", "flood")
        },
        "flood_vs_quiet": {
            q: med_ratio(("flood", "flood", q), ("flood", "quiet", q)) for q in quantiles
        },
        "attacker": {
            k: med("flood", "attacker", k, digits=1)
            for k in ("attempts", "unauthorized", "throttled", "attempts_per_s")
        },
        "attacker_codes_per_run": [
            {k: r["flood"]["attacker"][k] for k in ("unauthorized", "throttled", "other")}
            for r in runs
        ],
    }


def table(s: dict[str, Any], args: argparse.Namespace, repeat: int) -> str:
    tp, lat, con = s["throughput_tasks_per_s"], s["latency_ms"], s["connect_ms"]
    fl, att = s["flood_ping_ms"], s["attacker"]
    rows = [
        f"Unix socket vs TLS on loopback, {repeat} runs, durability {args.durability}: medians; "
        "ratios are the median of the per-run ratios",
        "",
        f"{'':44}{'unix':>12}{'tls':>12}{'tls/unix':>10}",
        f"{f'throughput, tasks/s ({args.tasks:,} tasks)':44}{tp['unix']:>12,.1f}"
        f"{tp['tls']:>12,.1f}{s['throughput_tls_vs_unix']:>10.2f}",
    ]
    for q in ("p50", "p99"):
        rows.append(
            f"{f'submit → assign {q}, ms ({args.lat_tasks:,} tasks)':44}"
            f"{lat['unix'][q + '_ms']:>12.3f}{lat['tls'][q + '_ms']:>12.3f}"
            f"{s['latency_tls_vs_unix'][q + '_ms']:>10.2f}"
        )
    rows += [
        f"{'new connection, ms (unix: + ping; tls: + auth)':44}{con['unix']:>12.3f}"
        f"{con['tls']:>12.3f}{s['connect_tls_vs_unix']:>10.2f}",
        "",
        f"{'a TLS client pinging, bad-token flood':44}{'quiet':>12}{'flood':>12}{'ratio':>10}",
    ]
    for q in ("p50", "p99"):
        rows.append(
            f"{f'ping {q}, ms':44}{fl['quiet'][q + '_ms']:>12.3f}{fl['flood'][q + '_ms']:>12.3f}"
            f"{s['flood_vs_quiet'][q + '_ms']:>10.2f}"
        )
    rows += [
        f"attacker from {ATTACKER}: {att['attempts']:,.0f} attempts, "
        f"{att['unauthorized']:,.0f} unauthorized, {att['throttled']:,.0f} throttled, "
        f"{att['attempts_per_s']:,.1f} attempts/s",
        "  per run: "
        + "; ".join(
            f"{c['unauthorized']} unauthorized, {c['throttled']} throttled"
            + (f", other {c['other']}" if c["other"] else "")
            for c in s["attacker_codes_per_run"]
        ),
    ]
    m = machine()
    rows += [
        "",
        f"machine: {m['nproc']} × {m['cpu']}, Python {m['python']}, Linux {m['kernel']}, "
        f"load {' '.join(str(x) for x in m['loadavg'])}, {m['date']}",
    ]
    return "\n".join(rows)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--tasks", type=int, default=5_000, help="throughput: tasks per transport")
    ap.add_argument("--warmup", type=int, default=500, help="throughput: tasks before measuring")
    ap.add_argument("--agents", type=int, default=10)
    ap.add_argument("--slots", type=int, default=32, help="slots per agent")
    ap.add_argument("--window", type=int, default=256, help="submits in flight")
    ap.add_argument("--lat-tasks", type=int, default=1_000, help="latency: tasks per transport")
    ap.add_argument("--lat-warmup", type=int, default=100)
    ap.add_argument("--connects", type=int, default=200, help="new connections per transport")
    ap.add_argument("--pings", type=int, default=2_000, help="flood: pings of the quiet case")
    ap.add_argument("--attempts", type=int, default=1_000, help="flood: bad logins")
    ap.add_argument("--durability", choices=["full", "relaxed"], default="full")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per phase at most")
    args = ap.parse_args()
    pki_dir = Path(tempfile.mkdtemp(prefix="cbpki", dir="/tmp"))
    runs = []
    try:
        for n in range(args.repeat):
            note(f"remote run {n + 1}/{args.repeat}")
            runs.append(one_run(n, pki_dir, args))
    finally:
        shutil.rmtree(pki_dir, ignore_errors=True)
    summary = summarize(runs)
    note(table(summary, args, args.repeat))
    emit(
        {
            "bench": "remote",
            "params": {
                k: getattr(args, k)
                for k in (
                    "tasks",
                    "warmup",
                    "agents",
                    "slots",
                    "window",
                    "lat_tasks",
                    "lat_warmup",
                    "connects",
                    "pings",
                    "attempts",
                    "durability",
                )
            },  # fmt: skip
            "runs": runs,
            **summary,
        }
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
