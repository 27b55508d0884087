"""Coverage-guided fuzzing of the request decoder and dispatcher with atheris (plan G: "atheris
≥1 h nightly: 0 uncaught exceptions, 0 hangs >1 s").

The target is the daemon's own code for one request line, in process and with no socket: a
Server, Board, store and ledger mirror wired as ``colibri run`` wires them (daemon/app.py:
serve) on a fresh root under /tmp with durability relaxed, one Connection whose transport only
collects what is written to it. Each input is one line: newlines become spaces, and it goes
through ``Connection.data_received`` (framing, then ``Server.handle_line``), then
``Server.flush`` (dispatch, commit, replies out), then one turn of the event loop. The oracle:

* nothing raises, and every reply is ``ok: true`` or ``ok: false`` with a known error code;
  ``internal`` (a bug the server caught) counts as a crash;
* no input takes more than ``--hang`` seconds of CPU (1 s). CPU time, not wall time, because
  the run is niced on a shared machine, where wall time includes waiting for a core;
  libFuzzer's ``-timeout`` (60 s of wall time) catches a stall on top;
* every ``--check-every`` inputs (10,000) the history checker (tests/reliability/history.py)
  reads the SQLite file and ledger.jsonl: no illegal transition, replay mismatch, lost
  acknowledged submit, duplicate per idempotency key, open descendant of a cancelled task,
  mirror fault, and ``PRAGMA integrity_check`` ok. Every ``--fresh-every`` inputs (50,000) the
  board starts again on a new root, so the store stays small and the run stays fast.

``%t0`` … ``%t9`` in an input stand for the ids of the last tasks the board named (the
dictionary has them), so requests about a task can hit a real one. Our modules (colibri.*, and
cronsim, which parses cron fields) are instrumented; msgspec is C and is not.

A fuzzing child process runs libFuzzer; this process seeds the corpus, writes the dictionary,
reads the child's output and prints the summary (libFuzzer ends its process with exit(), so no
Python code runs after it). Progress on stderr, then one JSON line on stdout. A crash leaves
libFuzzer's ``crash-*`` file (the raw input, before ``%t`` substitution) and a ``history-*.txt``
of every line the board had been given since it started, as sent, in ``--crashes``
(/tmp/colibri-fuzz-crashes); ``--replay`` runs such files again on a fresh board. The exit
status is non-zero on a crash, a hang or a failed check.

atheris is not a dependency of Colibri. Install it into the virtualenv to run this:

    .venv/bin/pip install atheris
    .venv/bin/python bench/fuzz.py --seconds 120                 # a quick look
    .venv/bin/python bench/fuzz.py                                # 1 hour, the plan's run
    .venv/bin/python bench/fuzz.py --corpus /tmp/colibri-corpus   # keep the corpus for next time
    .venv/bin/python bench/fuzz.py --seconds 600 -- -seed=1 -only_ascii=1   # libFuzzer flags
    .venv/bin/python bench/fuzz.py --replay /tmp/colibri-fuzz-crashes/history-*.txt
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import logging
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter, deque
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
REPO = BENCH.parent
PYTHON = sys.executable
INSTALL = f"{Path(PYTHON).parent / 'pip'} install atheris"
CRASHES = Path("/tmp/colibri-fuzz-crashes")
#: Longest input libFuzzer makes; server.max_line below is shorter, so line_too_long is reached.
MAX_LEN = 4096
MAX_LINE = 2048
#: Ids of recently named tasks that ``%t0``…``%t9`` stand for.
TASK_REFS = 10
TASK_REF = re.compile(rb"%t([0-9])")

# Nothing from colibri is imported at the top: the fuzzing child must import it inside
# atheris.instrument_imports() for it to be instrumented.

# -- the target ---------------------------------------------------------------------------------


class Failure(Exception):
    """The oracle's verdict on one input: atheris records it as a crash."""


class Sink(asyncio.Transport):
    """The connection's transport: keeps what the server writes, for the oracle to read."""

    def __init__(self) -> None:
        super().__init__()
        self.data = bytearray()
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.data += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        self.closed = True

    def get_write_buffer_size(self) -> int:
        return 0

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default


def known_codes() -> set[str]:
    from colibri.core import errors

    def codes(cls: type[errors.ColibriError]) -> set[str]:
        found = {cls.code}
        for sub in cls.__subclasses__():
            found |= codes(sub)
        return found

    # internal is a bug; storage_unavailable cannot happen on a healthy disk, so it is one too.
    return codes(errors.ColibriError) - {"error", "internal", "storage_unavailable"}


def config_text() -> str:
    """colibri.jsonc of the fuzzed board: workspaces with hand-off edges and a daily budget,
    and small quotas, so those refusals are reachable too."""
    return json.dumps(
        {
            "scheduler": {"tick": "30s", "agent_ttl": "30s", "max_pending": 2000,
                          "max_children": 20},
            "server": {"max_line": MAX_LINE},
            "store": {"durability": "relaxed"},
            "workspaces": {
                "api": {"session": {"command": ["true"]}, "send_to": ["web"]},
                "web": {"session": {"command": ["true"]}, "send_to": ["docs"],
                        "budget_usd_daily": 0.5},
                "docs": {"session": {"command": ["true"]}},
            },
        },
        indent=2,
    )  # fmt: skip


class Target:
    """One board on its own root, fed one line at a time and judged after each."""

    def __init__(self, work: Path, hang: float, check_every: int, fresh_every: int) -> None:
        self.work = work
        self.hang = hang
        self.check_every = check_every
        self.fresh_every = fresh_every
        self.codes = known_codes()
        self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(self.loop)
        self.root: Path | None = None
        self.inputs = 0
        self.outcomes: Counter[str] = Counter()
        self.events = 0
        self.checks = 0
        self.boards = 0
        self.reconnects = 0
        self.slowest_cpu = 0.0
        self.slowest_wall = 0.0
        self.slowest_input = b""
        self.failure: str | None = None
        self.recent: deque[bytes] = deque(maxlen=TASK_REFS)
        #: Every line this board was given, as sent (after ``%t`` substitution).
        self.history: list[bytes] = []
        #: Acknowledged submits, for the checker's lost and duplicate counts.
        self.ops: list[dict[str, Any]] = []
        self.fresh()

    # -- a board ---------------------------------------------------------------------------

    def fresh(self) -> None:
        """A new root and a new board on it: what ``colibri run`` builds, without the socket."""
        from colibri.config import init_root, load_config

        self.close()
        self.boards += 1
        self.root = Path(tempfile.mkdtemp(prefix=f"b{self.boards}-", dir=self.work))
        init_root(self.root)
        (self.root / "colibri.jsonc").write_text(config_text())
        self.config = load_config(self.root, durability="relaxed")
        self.loop.run_until_complete(self._build())
        self.history = []
        self.ops = []
        self.recent.clear()

    async def _build(self) -> None:
        from colibri.daemon.app import compose
        from colibri.daemon.clock import SystemClock
        from colibri.daemon.mirrors import LedgerMirrors
        from colibri.store import open_store

        config = self.config
        self.store = open_store(config.store, durability=config.durability)
        self.mirror = LedgerMirrors(
            config.layout.ledger, config.ledger.rotate_bytes, config.ledger.keep
        )
        self.mirror.open(self.store)
        daemon = compose(config, self.store, self.mirror, SystemClock())
        daemon.board.rebuild()
        self.server = daemon.server
        daemon.schedules.load(config.schedules)
        self.server.flush()
        self.connect()

    def connect(self) -> None:
        """A new peer, set up as Connection.connection_made does for the daemon's own user."""
        from colibri.daemon.connection import Connection

        self.sink = Sink()
        self.conn = Connection(self.server)
        self.conn.transport = self.sink
        self.conn.peer = (os.getuid(), os.getpid())
        self.server.connections.add(self.conn)

    def close(self) -> None:
        if self.root is None:
            return
        self.server.closed = True
        self.mirror.close()
        self.store.close()
        shutil.rmtree(self.root, ignore_errors=True)
        self.root = None

    # -- one input -------------------------------------------------------------------------

    def __call__(self, data: bytes) -> None:
        line = TASK_REF.sub(self._task_ref, data.replace(b"\n", b" "))
        self.inputs += 1
        self.history.append(line)
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            self.loop.run_until_complete(self._step(line))
        except Exception as exc:
            self.failure = f"uncaught {type(exc).__name__}: {exc}"
            raise
        cpu = time.process_time() - cpu
        wall = time.perf_counter() - wall
        if cpu > self.slowest_cpu:
            self.slowest_cpu, self.slowest_input = cpu, line
        self.slowest_wall = max(self.slowest_wall, wall)
        if cpu > self.hang:
            self._fail(f"hang: one input took {cpu:.3f} s of CPU ({wall:.3f} s wall)")
        self._judge()
        if self.sink.closed:  # the server hung up (line_too_long): the peer is gone, as in life
            self.conn.connection_lost(None)
            self.loop.run_until_complete(asyncio.sleep(0))
            self.reconnects += 1
            self.connect()
        if self.inputs % self.check_every == 0:
            self.check()
        if self.inputs % self.fresh_every == 0:
            self.fresh()

    def _task_ref(self, match: re.Match[bytes]) -> bytes:
        n = int(match[1])
        return self.recent[-1 - n] if n < len(self.recent) else match[0]

    async def _step(self, line: bytes) -> None:
        self.conn.data_received(line + b"\n")
        self.server.flush()
        await asyncio.sleep(0)  # what the request scheduled (a flush, a dispatch pass) runs now

    def _judge(self) -> None:
        out = bytes(self.sink.data)
        self.sink.data.clear()
        for raw in out.split(b"\n"):
            if not raw:
                continue
            message = json.loads(raw)
            if "event" in message:
                self.events += 1
            elif message.get("ok") is True:
                self.outcomes["ok"] += 1
            elif message.get("ok") is False and isinstance(message.get("error"), dict):
                code = message["error"].get("code")
                self.outcomes[str(code)] += 1
                if code not in self.codes or not message["error"].get("message"):
                    self._fail(f"reply with error {code!r}: {raw[:500]!r}")
            else:
                self._fail(f"neither a reply nor an event: {raw[:500]!r}")
            self._remember(message)

    def _remember(self, message: dict[str, Any]) -> None:
        task = message.get("task")
        if isinstance(task, dict) and isinstance(task.get("id"), str):
            task_id = task["id"].encode()
            if task_id in self.recent:
                self.recent.remove(task_id)
            self.recent.append(task_id)
            if message.get("ok") is True and "created" in message:  # a submit's reply
                key = task.get("idempotency_key")
                self.ops.append(
                    {
                        "op": "submit",
                        "outcome": "ok",
                        "task_id": task["id"],
                        # keys are per tenant
                        "idempotency_key": key and f"{task.get('tenant')}/{key}",
                    }
                )

    def check(self) -> None:
        """The history checker on the store and ledger.jsonl as they are now."""
        assert self.root is not None
        problems = judge_root(self.config.store, self.config.layout.ledger, self.ops)
        self.checks += 1
        if problems:
            self._fail(f"history check: {str(problems)[:2000]}")

    def _fail(self, reason: str) -> None:
        self.failure = reason
        raise Failure(reason)

    # -- what the parent reads -------------------------------------------------------------

    def stats(self) -> dict[str, Any]:
        return {
            "inputs": self.inputs,
            "outcomes": dict(self.outcomes.most_common()),
            "events": self.events,
            "checks": self.checks,
            "boards": self.boards,
            "reconnects": self.reconnects,
            "slowest_cpu_s": round(self.slowest_cpu, 4),
            "slowest_wall_s": round(self.slowest_wall, 4),
            "slowest_input": self.slowest_input[:300].decode(errors="replace"),
            "failure": self.failure,
            "store": self.config.store if self.root else None,
            "ledger": str(self.config.layout.ledger) if self.root else None,
        }


def judge_root(store: str | Path, ledger: Path, ops: Iterable[dict[str, Any]] = ()) -> Any:
    """The history checker's findings on one root (empty: consistent)."""
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from tests.reliability.history import check, read_mirror, read_store

    # check_stuck=False: the tasks the fuzzing peer's agent holds run with no session behind them
    report = check(read_store(Path(store)), ops=ops, mirror=read_mirror(ledger), check_stuck=False)
    return report.problems()


# -- the fuzzing child --------------------------------------------------------------------------


def child(settings_path: Path, libfuzzer_args: list[str]) -> None:
    import atheris

    with atheris.instrument_imports(include=["colibri", "cronsim"]):
        import cronsim  # noqa: F401  (cron fields of schedule-add)

        import colibri.config
        import colibri.daemon.board
        import colibri.daemon.server
        import colibri.store.sqlite  # noqa: F401  (imported lazily by open_store)

    settings = json.loads(settings_path.read_text())
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    stats_path = Path(settings["stats"])
    crashes = Path(settings["crashes"])
    target = Target(
        Path(settings["work"]), settings["hang"], settings["check_every"], settings["fresh_every"]
    )
    last_dump = 0.0

    def dump() -> None:
        tmp = stats_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(target.stats()))
        os.replace(tmp, stats_path)

    def one_input(data: bytes) -> None:
        nonlocal last_dump
        try:
            target(data)
        except BaseException:
            if target.failure is None:
                target.failure = "uncaught exception (see the traceback)"
            path = crashes / f"history-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.txt"
            path.write_bytes(b"".join(line + b"\n" for line in target.history))
            print(f"fuzz: the board's {len(target.history)} lines are in {path}", file=sys.stderr)
            dump()
            raise
        now = time.monotonic()
        if now - last_dump > 0.25:
            dump()
            last_dump = now

    dump()
    atheris.Setup([sys.argv[0], *libfuzzer_args], one_input)
    atheris.Fuzz()


# -- the seed corpus and the dictionary ---------------------------------------------------------

#: Values a person would send, by field name; fields not named here get a value of their type.
SAMPLES: dict[str, Any] = {
    "text": "rotate the zfs snapshots",
    "capabilities": ["zfs", "freebsd"],
    "labels": ["ops", "weekly"],
    "workspace": "api",
    "tenant": "acme",
    "idempotency_key": "snap-2026-48",
    "agent": "bsd-1",
    "name": "bsd-1",
    "task": "%t0",
    "parent": "%t1",
    "state": "pending",
    "reason": "release postponed",
    "description": "ZFS pools and datasets",
    "output": "zpool upgraded on 4 hosts",
    "error": "pool is busy",
    "question": "which pool?",
    "to": "web",
    "since": "2026-11-30",
    "by": "workspace",
    "priority": 5,
    "min_score": 0.5,
    "max_attempts": 2,
    "budget_usd": 1.0,
    "slots": 2,
    "ttl": 30,
    "limit": 10,
    "epoch": 1,
    "message": 1,
    "cost": {"tokens_in": 1830, "tokens_out": 412, "usd": 0.021, "model": "m-large"},
    "running": [{"task": "%t0", "epoch": 1, "claim": "0" * 32}],
    "claim": "0" * 32,
    "schedule": {"cron": "*/5 * * * *", "tz": "Europe/Berlin", "task": {"text": "nightly"}},
}
#: More schedules, one of each kind and with the optional fields.
SCHEDULES: list[dict[str, Any]] = [
    {"every": "15m", "task": {"text": "poll", "workspace": "api"}},
    {"at": "2999-01-01T00:00:00+00:00", "task": {"text": "once"}},
    {"cron": "30 2 * * *", "tz": "America/New_York", "catch_up": "all", "catch_up_max": 3,
     "grace": "5m", "overlap": "replace", "jitter": 10, "paused": True,
     "task": {"text": "backup", "capabilities": ["zfs"], "priority": 3, "max_attempts": 2}},
]  # fmt: skip


def type_value(info: Any, name: str) -> Any:
    """A value that fits ``info`` (a msgspec.inspect type), plausible for a field ``name``."""
    import msgspec.inspect as mi

    if isinstance(info, mi.UnionType):
        return type_value(next(t for t in info.types if not isinstance(t, mi.NoneType)), name)
    if isinstance(info, mi.StrType):
        return "x" * max(1, info.min_length or 0)
    if isinstance(info, mi.BoolType):
        return True
    if isinstance(info, mi.IntType):
        low = info.ge if info.ge is not None else (info.gt + 1 if info.gt is not None else 1)
        return max(low, 1) if info.le is None or info.le >= 1 else low
    if isinstance(info, mi.FloatType):
        return 0.5
    if isinstance(info, mi.LiteralType):
        return sorted(info.values)[0]  # type: ignore[type-var]  # one Literal: one type
    if isinstance(info, mi.ListType):
        return [type_value(info.item_type, name)]
    if isinstance(info, mi.StructType):
        return {f.encode_name: type_value(f.type, f.name) for f in info.fields if f.required}
    return None


def request_seeds() -> Iterator[tuple[str, bytes]]:
    """Per command: its required fields alone, then every field that decodes; all valid."""
    import msgspec
    import msgspec.inspect as mi

    from colibri.core import protocol

    def valid(obj: dict[str, Any]) -> bool:
        raw = TASK_REF.sub(b"01a22b5b-158a-7df5-b5e0-576d47c86c51", msgspec.json.encode(obj))
        try:
            protocol.decode_request(raw)
        except Exception:
            return False
        return True

    for n, cls in enumerate(protocol.REQUESTS):
        info = mi.type_info(cls)
        assert isinstance(info, mi.StructType)
        tag = cls.__struct_config__.tag
        obj: dict[str, Any] = {"cmd": tag, "id": n + 1}
        required = [f for f in info.fields if f.required]
        for f in required:
            obj[f.encode_name] = SAMPLES.get(f.name, type_value(f.type, f.name))
        for f in required:  # a sample of another command's field of that name may not fit
            if not valid(obj):
                obj[f.encode_name] = type_value(f.type, f.name)
        assert valid(obj), obj
        required_only = msgspec.json.encode(obj)
        yield f"{tag}-required", required_only
        for f in info.fields:
            if f.required or f.name == "id":
                continue
            for value in (SAMPLES.get(f.name), type_value(f.type, f.name)):
                if value is not None and valid({**obj, f.encode_name: value}):
                    obj[f.encode_name] = value
                    break
        if msgspec.json.encode(obj) != required_only:
            yield f"{tag}-all", msgspec.json.encode(obj)
    for n, schedule in enumerate(SCHEDULES):
        obj = {"cmd": "schedule-add", "id": 100 + n, "name": f"s{n}", "schedule": schedule}
        assert valid(obj), obj
        yield f"schedule-add-{n}", msgspec.json.encode(obj)


def edge_values(info: Any) -> list[Any]:
    """Numbers at and just past the bounds of a msgspec int or float type, and the bounds of
    what lies downstream (SQLite's 64-bit integers, a float's range)."""
    import msgspec.inspect as mi

    if isinstance(info, mi.UnionType):
        return [v for t in info.types for v in edge_values(t)]
    found: list[float]
    bound: float | None
    if isinstance(info, mi.IntType):
        found = [2**63 - 1, 2**63, -(2**63) - 1]
        for bound in (info.ge, info.le, info.gt, info.lt):
            if bound is not None:
                found += [bound - 1, bound, bound + 1]
        return found
    if isinstance(info, mi.FloatType):
        found = [1e308, -1e308, 5e-324]
        for bound in (info.ge, info.le, info.gt, info.lt):
            if bound is not None:
                found += [bound, bound * 1.000001 + 1e-9, bound * 0.999999 - 1e-9]
        return found
    return []


def edge_seeds() -> Iterator[tuple[str, bytes]]:
    """Per command and numeric field (a report's cost too): the field at and past each of its
    bounds, the other fields as ``request_seeds`` gives them."""
    import msgspec
    import msgspec.inspect as mi

    from colibri.core import protocol

    for cls in protocol.REQUESTS:
        info = mi.type_info(cls)
        assert isinstance(info, mi.StructType)
        tag = cls.__struct_config__.tag
        base: dict[str, Any] = {"cmd": tag, "id": 1}
        for f in info.fields:
            if f.required:
                base[f.encode_name] = SAMPLES.get(f.name, type_value(f.type, f.name))
        for f in info.fields:
            for n, value in enumerate(edge_values(f.type)):
                yield f"{tag}-{f.name}-edge{n}", msgspec.json.encode({**base, f.encode_name: value})
    cost_fields = mi.type_info(protocol.ReportedCost).fields  # type: ignore[attr-defined]
    for f in cost_fields:
        for n, value in enumerate(edge_values(f.type)):
            line = {"cmd": "out", "id": 1, "task": "%t0", "epoch": 1, "cost": {f.name: value}}
            yield f"out-cost-{f.name}-edge{n}", msgspec.json.encode(line)


def protocol_doc_seeds() -> Iterator[tuple[str, bytes]]:
    """Every request line shown in docs/PROTOCOL.md, valid or not, as it is written there."""
    seen: set[bytes] = set()
    for line in (REPO / "docs" / "PROTOCOL.md").read_text().splitlines():
        line = line.removeprefix("→ ").strip()
        if line.startswith('{"cmd"'):
            raw = line.split("  ")[0].encode()  # without a trailing "(a note)"
            if raw not in seen:
                seen.add(raw)
                yield f"doc-{len(seen)}", raw


def seed_corpus(corpus: Path) -> int:
    corpus.mkdir(parents=True, exist_ok=True)
    count = 0
    for seeds in (request_seeds(), edge_seeds(), protocol_doc_seeds()):
        for name, raw in seeds:
            (corpus / f"seed-{name}").write_bytes(raw)
            count += 1
    return count


def dictionary_tokens() -> list[bytes]:
    """Command names, every field name of every request (nested ones too), literal values and
    states, from colibri.core.protocol and colibri.core.states; JSON's own words; ``%tN``."""
    import msgspec.inspect as mi

    from colibri.core import protocol
    from colibri.core.states import State

    tokens: set[bytes] = set()

    def walk(info: Any) -> None:
        if isinstance(info, mi.StructType):
            for f in info.fields:
                tokens.add(f'"{f.encode_name}":'.encode())
                walk(f.type)
        elif isinstance(info, mi.UnionType):
            for t in info.types:
                walk(t)
        elif isinstance(info, mi.ListType):
            walk(info.item_type)
        elif isinstance(info, mi.LiteralType):
            tokens.update(json.dumps(v).encode() for v in info.values)

    for cls in protocol.REQUESTS:
        walk(mi.type_info(cls))
    for command in protocol.COMMANDS:
        tokens.add(json.dumps(command).encode())
        tokens.add(f'{{"cmd":"{command}"'.encode())
    tokens.update(json.dumps(s.value).encode() for s in State)
    for value in [*SAMPLES.values(), *SCHEDULES[-1].values()]:
        if isinstance(value, str):
            tokens.add(json.dumps(value).encode())
    tokens.update(
        [b"true", b"false", b"null", b"{}", b"[]", b'""', b"-0", b"1e308", b"NaN",
         b"Infinity", b"\\u0000", b"\\ud800", b"\r"]
    )  # fmt: skip
    tokens.update(f"%t{n}".encode() for n in range(4))
    return sorted(tokens)


def write_dictionary(path: Path) -> int:
    def quoted(token: bytes) -> str:
        return "".join(
            chr(b) if 32 <= b < 127 and b not in b'"\\' else f"\\x{b:02X}" for b in token
        )

    tokens = dictionary_tokens()
    path.write_text("".join(f'"{quoted(t)}"\n' for t in tokens))
    return len(tokens)


# -- the parent ---------------------------------------------------------------------------------

STATUS = re.compile(
    r"^#(\d+)\s+(\w+)\s+cov: (\d+) ft: (\d+) corp: (\d+)/(\S+) .*?exec/s: (\d+) rss: (\d+)Mb"
)
ARTIFACT = re.compile(r"Test unit written to (\S+)")
STAT = re.compile(r"^stat::(\w+):\s+(\S+)")


def run(args: argparse.Namespace, libfuzzer_args: list[str]) -> int:
    from _support import emit, note

    work = Path(tempfile.mkdtemp(prefix="cbfz", dir="/tmp"))
    corpus = Path(args.corpus) if args.corpus else work / "corpus"
    crashes = Path(args.crashes)
    crashes.mkdir(parents=True, exist_ok=True)
    seeds = seed_corpus(corpus)
    dictionary = work / "colibri.dict"
    words = write_dictionary(dictionary)
    settings = {
        "stats": str(work / "stats.json"),
        "crashes": str(crashes),
        "work": str(work),
        "hang": args.hang,
        "check_every": args.check_every,
        "fresh_every": args.fresh_every,
    }
    (work / "settings.json").write_text(json.dumps(settings))
    flags = [
        f"-max_total_time={args.seconds}",
        f"-max_len={MAX_LEN}",
        f"-dict={dictionary}",
        f"-artifact_prefix={crashes}/",
        "-timeout=60",  # wall time, for a stall; generous, as the run may be niced
        "-print_final_stats=1",
        *libfuzzer_args,  # later flags win
        str(corpus),
    ]
    command = [PYTHON, str(Path(__file__).resolve()), "--child", str(work / "settings.json"),
               "--", *flags]  # fmt: skip
    note(f"fuzz: {args.seconds} s; corpus {corpus} ({seeds} seeds), {words} dictionary words")
    note(f"fuzz: {' '.join(command)}")
    last: dict[str, Any] = {}
    final: dict[str, str] = {}
    artifacts: list[str] = []
    started = time.monotonic()
    next_note = started + args.progress
    log_path = work / "libfuzzer.log"
    process = subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        start_new_session=True, cwd=work,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        with open(log_path, "wb") as log:
            for raw in process.stdout:
                log.write(raw)
                text = raw.decode(errors="replace").rstrip("\n")
                if m := STATUS.match(text):
                    last = {"inputs": int(m[1]), "cov": int(m[3]), "ft": int(m[4])}
                    last.update(corpus=int(m[5]), corpus_size=m[6], rss_mb=int(m[8]))
                    if m[2] in ("NEW", "REDUCE"):  # one line per new unit: too many to show
                        if time.monotonic() >= next_note:
                            next_note = time.monotonic() + args.progress
                            note(f"fuzz: {time.monotonic() - started:.0f} s {text}")
                        continue
                elif m := STAT.match(text):
                    final[m[1]] = m[2]
                if m := ARTIFACT.search(text):
                    artifacts.append(m[1])
                note(text)
        process.wait()
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGTERM)
            process.wait()
    elapsed = time.monotonic() - started
    stats = (
        json.loads(Path(settings["stats"]).read_text()) if Path(settings["stats"]).exists() else {}
    )
    # The board the child was on when it stopped: checked once more, as it was left.
    final_check: Any = None
    if stats.get("store") and Path(stats["store"]).exists():
        final_check = judge_root(stats["store"], Path(stats["ledger"]))
    passed = (
        process.returncode == 0 and not artifacts and not stats.get("failure") and not final_check
    )
    inputs = int(final.get("number_of_executed_units", last.get("inputs", stats.get("inputs", 0))))
    result = {
        "bench": "fuzz",
        "params": {
            "seconds": args.seconds,
            "max_len": MAX_LEN,
            "hang_cpu_s": args.hang,
            "check_every": args.check_every,
            "fresh_every": args.fresh_every,
            "libfuzzer": flags[:-1],
            "atheris": atheris_version(),
        },
        "elapsed_s": round(elapsed, 1),
        "inputs": inputs,
        "exec_per_s": round(inputs / elapsed) if elapsed else 0,
        "cov": last.get("cov"),
        "ft": last.get("ft"),
        "corpus": last.get("corpus"),
        "new_units": int(final.get("new_units_added", 0)),
        "peak_rss_mb": int(final.get("peak_rss_mb", last.get("rss_mb", 0))),
        "crashes": len(artifacts),
        "artifacts": artifacts,
        "crash_dir": str(crashes),
        "exit_code": process.returncode,
        "failure": stats.get("failure"),
        "judged_inputs": stats.get("inputs"),
        "outcomes": stats.get("outcomes", {}),
        "events": stats.get("events"),
        "history_checks": stats.get("checks", 0) + (final_check is not None),
        "final_check_problems": final_check or {},
        "boards": stats.get("boards"),
        "reconnects": stats.get("reconnects"),
        "slowest_cpu_s": stats.get("slowest_cpu_s"),
        "slowest_wall_s": stats.get("slowest_wall_s"),
        "slowest_input": stats.get("slowest_input"),
        "passed": passed,
    }
    note(summary(result, log_path))
    emit(result)
    if passed:
        shutil.rmtree(work, ignore_errors=True)
    else:
        note(f"fuzz: FAILED; kept {work} (libFuzzer's log: {log_path}); crashes in {crashes}")
    return 0 if passed else 1


def summary(r: dict[str, Any], log_path: Path) -> str:
    outcomes = ", ".join(f"{k} {v:,}" for k, v in r["outcomes"].items())
    return "\n".join(
        [
            f"fuzz: {'passed' if r['passed'] else 'FAILED'} after {r['elapsed_s']} s",
            f"  inputs executed   {r['inputs']:,} ({r['exec_per_s']:,}/s)",
            f"  coverage          cov {r['cov']} ft {r['ft']}; corpus {r['corpus']} units",
            f"  crashes           {r['crashes']} (crash files in {r['crash_dir']})",
            f"  failure           {r['failure'] or 'none'}",
            f"  slowest input     {r['slowest_cpu_s']} s CPU; slowest wall {r['slowest_wall_s']} s",
            f"  history checks    {r['history_checks']}, boards {r['boards']}",
            f"  outcomes          {outcomes}; events {r['events']}"
            f" (of the first {r['judged_inputs'] or 0:,} inputs: the child's last snapshot)",
            f"  libFuzzer log     {log_path}",
        ]
    )


def atheris_version() -> str:
    from importlib.metadata import version

    return version("atheris")


# -- replaying ----------------------------------------------------------------------------------


def replay(paths: list[str], hang: float) -> int:
    """Feed saved inputs to a fresh board: a ``history-*.txt`` line by line, any other file
    (a libFuzzer ``crash-*``) as one input. Stops at the first failure, with its traceback."""
    from _support import note

    work = Path(tempfile.mkdtemp(prefix="cbfz", dir="/tmp"))
    logging.basicConfig(level=logging.ERROR, format="%(levelname)s %(name)s: %(message)s")
    target = Target(work, hang, check_every=1 << 62, fresh_every=1 << 62)
    try:
        for name in paths:
            data = Path(name).read_bytes()
            lines = data.split(b"\n")[:-1] if Path(name).name.startswith("history-") else [data]
            for n, line in enumerate(lines, 1):
                try:
                    target(line)
                except Exception:
                    note(f"replay: {name} line {n} fails: {line[:300]!r}")
                    raise
        target.check()
        note(f"replay: {target.inputs} inputs, no failure; {json.dumps(target.stats())}")
        return 0
    finally:
        target.close()
        shutil.rmtree(work, ignore_errors=True)


def main() -> int:
    argv = sys.argv[1:]
    extra: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, extra = argv[:at], argv[at + 1 :]
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter,
        epilog="Flags after -- go to libFuzzer as they are (e.g. -- -seed=1 -only_ascii=1).",
    )  # fmt: skip
    ap.add_argument("--seconds", type=int, default=3600, help="how long to fuzz (3600)")
    ap.add_argument("--corpus", help="corpus folder, seeded and kept (default: a temporary one)")
    ap.add_argument("--crashes", default=str(CRASHES), help=f"crash files go here ({CRASHES})")
    ap.add_argument("--hang", type=float, default=1.0, help="CPU seconds one input may take (1)")
    ap.add_argument("--check-every", type=int, default=10_000, help="history check period")
    ap.add_argument("--fresh-every", type=int, default=50_000, help="a new board every N inputs")
    ap.add_argument("--progress", type=float, default=60.0, help="seconds between notes")
    ap.add_argument("--replay", nargs="+", metavar="FILE", help="run saved inputs and stop")
    ap.add_argument("--repeat", type=int, default=1, help="accepted for run_all; ignored")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        child(Path(args.child), extra)
        return 0
    if importlib.util.find_spec("atheris") is None:
        sys.exit(f"bench/fuzz.py needs atheris, not a dependency of Colibri: {INSTALL}")
    sys.path.insert(0, str(BENCH))
    if args.replay:
        return replay(args.replay, args.hang)
    return run(args, extra)


if __name__ == "__main__":
    sys.exit(main())
