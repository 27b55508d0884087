"""Abuse of the daemon's socket: too many peers, slow peers, floods of garbage, fuzzed
requests, and unsafe socket paths — always against a real daemon on a real Unix socket.

Whatever one peer does, the daemon stays up, keeps answering everyone else, and answers every
line it reads with ``ok: true`` or ``ok: false`` and a known error code.
"""

from __future__ import annotations

import json
import os
import random
import select
import shutil
import socket
import stat
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from msgspec.structs import fields as struct_fields

from colibri.core import errors, protocol
from tests.helpers import (
    PYTHON,
    Daemon,
    RawConnection,
    colibri,
    one_line,
    pong,
    run_as_nobody,
    run_refused,
    wait_until,
)
from tests.properties import examples


def write_settings(root: Path, **server: Any) -> None:
    """colibri.jsonc with the given ``server`` settings."""
    settings_ = {"scheduler": {"tick": "30s", "agent_ttl": "30s"}, "server": server}
    (root / "colibri.jsonc").write_text(json.dumps(settings_, indent=2))


def line(obj: Any) -> bytes:
    return json.dumps(obj).encode() + b"\n"


def fd_count(daemon: Daemon) -> int:
    assert daemon.process is not None
    return len(os.listdir(f"/proc/{daemon.process.pid}/fd"))


def eof(conn: RawConnection) -> bool:
    """True once the daemon has closed the connection (EOF, or a reset)."""
    try:
        return conn.file.readline() == b""
    except ConnectionResetError:
        return True


def ping(conn: RawConnection, request_id: Any = "p") -> dict[str, Any]:
    conn.send(line({"cmd": "ping", "id": request_id}))
    return conn.reply()


class Peers:
    """Raw connections of one test, all closed at its end whatever happened."""

    def __init__(self) -> None:
        self.opened: list[RawConnection] = []
        self.lock = threading.Lock()

    def raw(self, daemon: Daemon, timeout: float = 10.0) -> RawConnection:
        conn = RawConnection(daemon.socket, timeout=timeout)
        with self.lock:
            self.opened.append(conn)
        return conn

    def served(self, daemon: Daemon) -> RawConnection:
        """A connection the daemon serves (retrying while a closed one still holds a slot)."""

        def attempt() -> RawConnection | None:
            conn = self.raw(daemon)
            try:
                if ping(conn) == pong("p"):
                    return conn
            except (BrokenPipeError, ConnectionResetError, AssertionError):
                pass
            conn.close()
            return None

        served: RawConnection = wait_until(attempt, timeout=10)
        return served

    def close(self) -> None:
        for conn in self.opened:
            conn.close()


@pytest.fixture
def peers() -> Iterator[Peers]:
    opened = Peers()
    yield opened
    opened.close()


@contextmanager
def running(root: Path, *args: str) -> Iterator[Daemon]:
    daemon = Daemon(root, *args)
    daemon.start()
    try:
        yield daemon
    finally:
        daemon.stop()


def assert_alive(daemon: Daemon) -> None:
    assert daemon.process is not None and daemon.process.poll() is None
    assert daemon.call("status")["daemon"]["pid"] == daemon.process.pid


# -- connection cap ------------------------------------------------------------------------------


def test_connection_cap_refuses_the_ninth_with_busy_and_frees_slots_on_close(
    root: Path, peers: Peers
) -> None:
    write_settings(root, max_connections=8)
    with running(root) as daemon:
        served = [peers.served(daemon) for _ in range(8)]
        extra = peers.raw(daemon)
        refusal = extra.reply()
        assert refusal["ok"] is False and refusal["id"] is None
        assert refusal["error"]["code"] == "busy"
        assert eof(extra)
        extra.close()
        for n, conn in enumerate(served):  # the eight are untouched
            assert ping(conn, n) == pong(n)

        for conn in served[:3]:
            conn.close()
        served = served[3:] + [peers.served(daemon) for _ in range(3)]
        assert len(served) == 8
        again = peers.raw(daemon)
        assert again.reply()["error"]["code"] == "busy"
        again.close()
        for conn in served:
            assert ping(conn)["ok"] is True
            conn.close()


def test_peers_that_connect_and_say_nothing_lock_nobody_out(root: Path, peers: Peers) -> None:
    """The cap full of anonymous connections that send nothing, beside a registered agent:
    once they have been silent EVICT_AFTER, each newcomer takes the place of the one silent
    longest (it is closed), so `colibri status` works; the agent is never evicted and still
    gets its work. Before, the silent peers held every slot for as long as they liked."""
    from colibri.daemon.server import EVICT_AFTER
    from tests.helpers import FakeAgent

    write_settings(root, max_connections=4)
    with running(root) as daemon:
        agent = FakeAgent(daemon, "steady", ["x"])
        silent = [peers.raw(daemon) for _ in range(3)]
        time.sleep(EVICT_AFTER + 0.5)
        done = subprocess.run([PYTHON, "-m", "colibri", "--root", str(root), "status"],
                              capture_output=True, text=True, timeout=30)  # fmt: skip
        assert done.returncode == 0, done.stderr  # in the place of a silent peer
        newcomers = [peers.raw(daemon) for _ in range(3)]  # they stay: each takes a place
        for n, conn in enumerate(newcomers):
            assert ping(conn, n) == pong(n)
        assert all(eof(conn) for conn in silent)
        for conn in newcomers:
            conn.close()
        task = daemon.call("submit", text="still served", capabilities=["x"])["task"]
        assert agent.next_assign()["task"]["id"] == task["id"]
        agent.close()


def test_active_peers_at_the_cap_are_not_evicted(root: Path, peers: Peers) -> None:
    """Eviction takes only silent connections: peers that keep talking keep their places,
    and a newcomer at the cap is refused with busy, as before."""
    write_settings(root, max_connections=3)
    with running(root) as daemon:
        talking = [peers.served(daemon) for _ in range(3)]
        extra = peers.raw(daemon)
        assert extra.reply()["error"]["code"] == "busy"
        extra.close()
        for n, conn in enumerate(talking):
            assert ping(conn, n) == pong(n)


def test_anonymous_connections_silent_past_idle_timeout_are_closed(
    root: Path, peers: Peers
) -> None:
    """`server.idle_timeout`: a connection that sent nothing for that long and is owed
    nothing is closed; a subscriber, a ledger follower, a `wait` still waiting and an agent
    are left alone."""
    from tests.helpers import FakeAgent

    write_settings(root, idle_timeout="1s")
    with running(root) as daemon:
        silent = peers.raw(daemon)
        agent = FakeAgent(daemon, "kept", ttl=60.0)
        subscriber = daemon.client(timeout=10)
        subscriber.call("subscribe")
        follower = daemon.client(timeout=10)
        follower.call("ledger", follow=True)
        task = daemon.call("create-task", agent="nobody", text="waited on")["task"]
        waiter = peers.raw(daemon)
        waiter.send(line({"cmd": "wait", "id": "w", "task": task["id"]}))
        time.sleep(3.5)  # past the timeout, with a sweep or two
        assert eof(silent)
        daemon.call("cancel", task=task["id"])
        assert waiter.reply()["task"]["outcome"] == "cancelled"
        assert any(e["event"] == "task" for e in subscriber.events())
        assert any(e["event"] == "ledger" for e in follower.events())
        assert agent.client.call("heartbeat")["ok"] is True
        for client in (subscriber, follower):
            client.close()
        agent.close()


# -- slow clients --------------------------------------------------------------------------------


def test_a_partial_line_is_closed_after_line_timeout_while_others_are_served(
    root: Path, peers: Peers
) -> None:
    write_settings(root, line_timeout="1s")
    with running(root) as daemon:
        idle = peers.served(daemon)  # connected, no partial line: never timed out
        other = peers.served(daemon)
        stuck = peers.raw(daemon)
        stuck.send(b'{"cmd": "pi')  # and nothing more
        trickle = peers.raw(daemon)  # one byte at a time, never a newline
        trickle.send(b"{")

        answered = 0
        stuck_closed = trickle_closed = False
        deadline = time.monotonic() + 15
        while not (stuck_closed and trickle_closed):
            assert time.monotonic() < deadline, "slow peers were not closed"
            assert ping(other, answered) == pong(answered)
            answered += 1
            if not stuck_closed and select.select([stuck.sock], [], [], 0)[0]:
                stuck_closed = eof(stuck)
                assert stuck_closed, "a partial line got a reply"
            if not trickle_closed:
                try:
                    trickle.send(b" ")
                except (BrokenPipeError, ConnectionResetError):
                    trickle_closed = True
                else:
                    if select.select([trickle.sock], [], [], 0)[0]:
                        trickle_closed = eof(trickle)
            time.sleep(0.05)
        assert answered > 0
        assert ping(idle, "still") == pong("still")
        for conn in (idle, other, stuck, trickle):
            conn.close()


def test_a_peer_that_keeps_completing_lines_is_never_timed_out(root: Path, peers: Peers) -> None:
    """Each write finishes the previous request and starts the next one: the connection always
    holds a partial line, but never the same one for long. It must not be closed as stalled
    (as a busy harness whose writes the kernel splits mid-line would be)."""
    write_settings(root, line_timeout="1s")
    with running(root) as daemon:
        conn = peers.raw(daemon)
        conn.send(b'{"cmd":"ping","id":0')
        for n in range(1, 16):  # 15 × 0.25 s: several line timeouts long
            time.sleep(0.25)
            conn.send(b'}\n{"cmd":"ping","id":' + str(n).encode())
            assert conn.reply() == pong(n - 1)
        conn.send(b"}\n")
        assert conn.reply() == pong(15)
        conn.close()


def test_line_timeout_must_be_a_duration(root: Path) -> None:
    write_settings(root, line_timeout="soon")
    done = run_refused(root)
    assert done.returncode == 1
    assert "server.line_timeout" in done.stderr


# -- many connections ----------------------------------------------------------------------------


def test_two_hundred_connections_at_once_are_served_and_their_fds_released(
    root: Path, peers: Peers
) -> None:
    write_settings(root, max_connections=300)
    with running(root) as daemon:
        wait_until(lambda: daemon.call("status")["daemon"]["connections"] == 1)
        baseline = fd_count(daemon)
        conns = [peers.raw(daemon) for _ in range(200)]
        for n, conn in enumerate(conns):
            conn.send(line({"cmd": "ping", "id": n}))
        for n, conn in enumerate(conns):
            assert conn.reply() == pong(n)
        # (the baseline may still count the fd of the status connection that just closed)
        assert fd_count(daemon) >= baseline + 199
        assert daemon.call("status")["daemon"]["connections"] == 201
        for conn in conns:
            conn.close()
        wait_until(lambda: fd_count(daemon) <= baseline + 2)
        assert daemon.call("ping")["pong"] is True


# -- a flood of garbage --------------------------------------------------------------------------

GARBAGE = [
    b'{"op":',
    b"[]",
    b"1",
    b'"x"',
    b"\xff\xfe\xfd",
    b'{"cmd": "nope"}',
    b'{"cmd": "submit"}',
    b'{"cmd": "ping", "zzz": 1}',
    b'{"cmd": "get", "task": 7}',
    b"NaN",
    b"[" * 5000,
]


def test_a_flood_of_garbage_is_answered_and_does_not_starve_others(
    daemon: Daemon, peers: Peers
) -> None:
    rng = random.Random(20_000)
    lines = []
    for _ in range(20_000):
        if rng.random() < 0.5:
            lines.append(rng.choice(GARBAGE))
        else:  # random bytes, never a newline, never blank
            lines.append(
                b"#" + bytes(rng.choice(range(11, 256)) for _ in range(rng.randint(0, 40)))
            )
    payload = b"".join(item + b"\n" for item in lines)
    ready = threading.Event()
    flooding = threading.Event()
    flood_over = threading.Event()
    pings_during: list[dict[str, Any]] = []

    def pinger() -> None:
        conn = peers.served(daemon)
        ready.set()
        while not flood_over.is_set():
            during = flooding.is_set()
            reply = ping(conn, "during")
            if during and not flood_over.is_set():
                pings_during.append(reply)
        conn.close()

    def send() -> None:
        try:
            flooder.sock.sendall(payload)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the daemon may close a peer that floods it

    thread = threading.Thread(target=pinger)
    thread.start()
    assert ready.wait(timeout=10)
    flooder = peers.raw(daemon, timeout=60)
    sender = threading.Thread(target=send)
    flooding.set()
    sender.start()
    replies = 0
    codes: set[str] = set()
    try:
        while replies < len(lines):
            raw = flooder.file.readline()
            if not raw:
                break  # closed: allowed, as long as the daemon stays up
            reply = json.loads(raw)
            assert reply["ok"] is False, reply
            codes.add(reply["error"]["code"])
            replies += 1
    finally:
        flood_over.set()
        sender.join(timeout=60)
        thread.join(timeout=60)
    assert replies == len(lines) or eof(flooder)
    assert codes <= {"bad_json", "bad_request", "unknown_command"}, codes
    assert pings_during
    assert all(r == pong("during") for r in pings_during)
    assert_alive(daemon)
    assert daemon.call("status")["tasks"]["pending"] == 0  # no garbage was stored
    flooder.close()


# -- fuzzing the decoder and the dispatcher ------------------------------------------------------


def _codes(cls: type[errors.ColibriError]) -> set[str]:
    found = {cls.code}
    for sub in cls.__subclasses__():
        found |= _codes(sub)
    return found


#: Every error a request may get; ``internal`` (a bug) is not among them.
KNOWN_CODES = _codes(errors.ColibriError) - {"error", "internal"}
FIELD_NAMES = sorted({f.name for cls in protocol.REQUESTS for f in struct_fields(cls)})
JUNK_NAMES = ["zzz", "", "cmd ", "__proto__", "\x00", "id\x00", "TEXT"]


class Deep:
    """A placeholder for ``depth`` nested arrays (too deep for json.dumps to write)."""

    def __init__(self, depth: int) -> None:
        self.depth = depth


def encode(obj: Any) -> bytes:
    deep: list[int] = []

    def default(value: Any) -> Any:
        if isinstance(value, Deep):
            deep.append(value.depth)
            return f"\x01deep{len(deep) - 1}\x01"
        raise TypeError(value)

    text = json.dumps(obj, default=default)  # NaN and Infinity come out as bare words
    for n, depth in enumerate(deep):
        text = text.replace(f'"\\u0001deep{n}\\u0001"', "[" * depth + "]" * depth, 1)
    return text.encode()


scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-5, max_value=20),
    st.integers(min_value=-(2**80), max_value=2**80),
    st.floats(),  # NaN, infinities, negative zero
    st.text(max_size=20),  # any code point, NUL and surrogates' neighbours included
    st.sampled_from(["", "\x00", "a\x00b", "freebsd", "pending", "1s", "0 0 * * *", "UTC"]),
    st.sampled_from([200, 201, 256 * 1024, 256 * 1024 + 1]).map(lambda n: "x" * n),
    st.sampled_from([64, 1000, 100_000]).map(Deep),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.sampled_from(FIELD_NAMES) | st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=12,
)


#: Integers and floats at and just past every bound something downstream has: SQLite's and
#: JSON's integers, epochs, token counts, dollars, durations past the calendar.
EDGE_INTS = st.sampled_from([
    -1, 0, 1, 2**31, 2**53 + 1, 2**62, 2**62 + 1, 2**63 - 1, 2**63, 2**64, 10**12, 10**12 + 1,
    -(2**63), -(2**63) - 1,
])  # fmt: skip
EDGE_FLOATS = st.sampled_from([0.0, 1e-300, 1e6, 1e6 * 1.000001, 1e9, 1e9 * 1.01, 1e300, 1e308])
edge_numbers = EDGE_INTS | EDGE_FLOATS
EDGE_DURATIONS = st.sampled_from(
    ["100000000d", "300000000000s", "100000w", "3650d", "3651d", "1d1s", 1e300, "0s", 0.5]
)
short = st.text(max_size=12)
names = st.sampled_from(["linux", "freebsd", "zfs", "a1", "a2", "", "x" * 300])
#: Values of the right type (mostly) for each field, so many requests get past validation.
PLAUSIBLE: dict[str, st.SearchStrategy[Any]] = {
    "text": st.text(max_size=40),
    "capabilities": st.lists(names, max_size=3),
    "labels": st.lists(names, max_size=3),
    "workspace": st.none() | names,
    "parent": st.none() | short,
    "priority": st.integers(-1000, 1000) | edge_numbers,
    "min_score": st.none() | st.floats(-1, 2),
    "tenant": st.none() | st.sampled_from(["default", "t1", "t2"]),
    "idempotency_key": st.none() | short,
    "max_attempts": st.integers(0, 101) | EDGE_INTS,
    "agent": st.none() | names,
    "task": short,
    "state": st.sampled_from(["pending", "running", "done", "failed", "bogus"]),
    "limit": st.integers(0, 10_001) | EDGE_INTS,
    "after": st.none() | st.integers(-1, 50) | short | EDGE_INTS,
    "reason": st.none() | short,
    "paused": st.none() | st.booleans(),
    "name": names,
    "description": st.text(max_size=40),
    "slots": st.integers(0, 4),
    "ttl": st.none() | st.floats(-1, 100) | edge_numbers,
    "running": st.lists(
        st.fixed_dictionaries(
            {"task": short, "epoch": st.integers(-1, 3) | EDGE_INTS},
            optional={"claim": st.none() | short},
        ),
        max_size=2,
    ),
    "epoch": st.integers(-1, 3) | EDGE_INTS,
    "claim": st.none() | short | st.sampled_from(["0" * 32, "x" * 129]),
    "budget_usd": st.none() | edge_numbers,
    "cost": st.none() | st.fixed_dictionaries({}, optional={
        "tokens_in": edge_numbers, "tokens_out": edge_numbers, "usd": edge_numbers,
        "model": short,
    }),  # fmt: skip
    "message": edge_numbers,
    "output": st.text(max_size=40) | st.sampled_from(["\x00" * 1000, "\x1b[2J" * 200]),
    "error": st.text(max_size=40),
    "session_ended": st.booleans(),
    "follow": st.booleans(),
    "replace": st.booleans(),
    "next": st.integers(-1, 1001),
    "fires": st.integers(-1, 1001),
    "schedule": st.fixed_dictionaries(
        {"task": st.fixed_dictionaries({"text": short})},
        optional={
            "every": st.sampled_from(["1h", "15m", 3600, -1, "soon"]) | EDGE_DURATIONS,
            "cron": st.sampled_from(["0 0 * * *", "*/5 * * * *", "61 * * * *"]),
            "at": st.sampled_from(["2999-01-01T00:00:00+00:00", "yesterday",
                                   "9999-12-31T23:59:59-12:00", "9999-11-30T00:00:00Z"]),
            "tz": st.sampled_from(["UTC", "Europe/Berlin", "Mars/Base", "Pacific/Kiritimati"]),
            "jitter": EDGE_DURATIONS,
            "grace": EDGE_DURATIONS,
        },
    ),
}


def echoable_ids(raw: bytes) -> list[Any]:
    """The ids a reply to ``raw`` may carry: the request's own id if it has a valid one; null."""
    try:
        obj = json.loads(raw)
    except (ValueError, RecursionError):
        return [None]
    if isinstance(obj, dict) and isinstance(obj.get("id"), (int, str)):
        return [obj["id"], None]
    return [None]


@st.composite
def request_lines(draw: st.DrawFn, request_id: int) -> bytes:
    kind = draw(st.sampled_from(["plausible"] * 5 + ["request"] * 4 + ["other json", "bytes"]))
    if kind == "plausible":
        cls = draw(st.sampled_from(protocol.REQUESTS))
        optional = {
            f.name: PLAUSIBLE.get(f.name, values) for f in struct_fields(cls) if f.name != "id"
        }
        fields_ = draw(st.fixed_dictionaries({}, optional=optional))
        tag = cls.__struct_config__.tag
        return encode({"cmd": tag, "id": request_id, **fields_})
    if kind == "bytes":
        return b"x" + draw(st.binary(max_size=64)).replace(b"\n", b" ")
    if kind == "other json":
        return encode(draw(values))
    obj: dict[str, Any] = draw(
        st.dictionaries(st.sampled_from(FIELD_NAMES + JUNK_NAMES), values, max_size=5)
    )
    cmd = draw(
        st.sampled_from(protocol.COMMANDS)
        | st.sampled_from(["", "PING", "ping ", "shutdown", "submit\x00"])
        | values
    )
    if draw(st.integers(0, 19)):  # now and then no cmd at all
        obj["cmd"] = cmd
    if draw(st.integers(0, 9)):  # mostly our own id, now and then a fuzzed one
        obj["id"] = request_id
    return encode(obj)


def fuzz(daemon: Daemon, conn: RawConnection, examples: int) -> tuple[dict[str, int], float]:
    """Send ``examples`` Hypothesis-generated lines on ``conn``, one at a time, checking each
    reply; return the count of each outcome ("ok" or an error code) and the slowest reply in
    seconds. The long form (bench/chaos.py, G) runs it with 100,000 examples."""
    counter = iter(range(1, 1 << 62))
    seen: dict[str, int] = {}
    slowest = 0.0

    @settings(
        max_examples=examples,
        derandomize=True,
        database=None,
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(st.data())
    def exchange(data: st.DataObject) -> None:
        nonlocal slowest
        request_id = next(counter)
        raw = data.draw(request_lines(request_id))
        assume(len(raw) < 1_000_000)  # below server.max_line: a longer line closes the peer
        sent = time.monotonic()
        conn.send(raw + b"\n")
        while True:
            reply = conn.reply()
            if "event" not in reply:
                break  # assignments, ledger rows and board events may come in between
        slowest = max(slowest, time.monotonic() - sent)
        assert isinstance(reply, dict) and reply.get("id") in echoable_ids(raw), reply
        if reply["ok"] is True:
            outcome = "ok"
        else:
            assert reply["ok"] is False, reply
            outcome = reply["error"]["code"]
            assert outcome in KNOWN_CODES, reply
            assert isinstance(reply["error"]["message"], str) and reply["error"]["message"]
        seen[outcome] = seen.get(outcome, 0) + 1
        assert daemon.process is not None and daemon.process.poll() is None

    exchange()
    return seen, slowest


@pytest.mark.properties
def test_fuzzed_requests_get_ok_or_a_known_error_and_never_kill_the_daemon(
    daemon: Daemon, peers: Peers
) -> None:
    conn = peers.raw(daemon, timeout=30)
    seen, _slowest = fuzz(daemon, conn, examples(1000))
    assert sum(seen.values()) >= examples(1000)
    # Far from everything was refused: the dispatcher ran real commands, too.
    assert seen.get("ok", 0) > 0 and seen.get("bad_request", 0) > 0 and seen.get("bad_json", 0)
    assert ping(conn, "end") == pong("end")
    conn.close()
    assert_alive(daemon)


# -- S2: unsafe socket paths ---------------------------------------------------------------------


def test_a_regular_file_at_the_socket_path_is_refused_and_kept(root: Path) -> None:
    path = root / ".colibri" / "colibri.sock"
    path.write_text("not yours to delete\n")
    done = run_refused(root)
    assert done.returncode == 1
    message = one_line(done.stderr)
    assert str(path) in message and "not a socket" in message
    assert path.read_text() == "not yours to delete\n"


def test_a_symlinked_state_folder_is_refused(root: Path) -> None:
    state = root / ".colibri"
    elsewhere = root / "elsewhere"
    state.rename(elsewhere)
    state.symlink_to(elsewhere)
    before = sorted(os.listdir(elsewhere))
    done = run_refused(root)
    assert done.returncode == 1
    message = one_line(done.stderr)
    assert str(state) in message and "symlink" in message
    assert sorted(os.listdir(elsewhere)) == before  # nothing created through the link


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the folder to another uid needs root")
def test_a_state_folder_of_another_uid_is_refused(root: Path) -> None:
    state = root / ".colibri"
    os.chown(state, 65534, 65534)
    done = run_refused(root)
    assert done.returncode == 1
    assert "belongs to nobody (uid 65534)" in one_line(done.stderr)
    assert not (state / "colibri.sock").exists()
    # Trusted by name, it is still not the daemon's to serve from: it must own its folder.
    done = colibri(root, "run", env={"COLIBRI_TRUSTED_ROOTS": str(root)})
    assert done.returncode == 1
    assert "belongs to uid 65534, not to us" in one_line(done.stderr)
    assert not (state / "colibri.sock").exists()


def test_a_world_writable_state_folder_is_tightened_to_0700(root: Path) -> None:
    state = root / ".colibri"
    os.chmod(state, 0o777)
    with running(root) as daemon:
        assert stat.S_IMODE(os.stat(state).st_mode) == 0o700
        assert stat.S_IMODE(os.lstat(daemon.socket).st_mode) == 0o600


POLLER = """
import os, socket, sys, time
path, stop = sys.argv[1], sys.argv[2]
tries = connected = 0
deadline = time.monotonic() + 120  # a backstop; the test ends it through the stop file
while not os.path.exists(stop) and time.monotonic() < deadline:
    s = socket.socket(socket.AF_UNIX)
    try:
        s.connect(path)
        connected += 1
    except OSError:
        pass
    finally:
        s.close()
    tries += 1
print(tries, connected)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="connecting as another uid needs root")
def test_another_uid_never_connects_through_restarts_from_a_loose_folder(root: Path) -> None:
    """S1: uid 65534 polls ``connect`` while the daemon is started 15 times, each time from a
    state folder an operator left 0777: the folder is tightened before the socket is bound,
    and the socket is born 0600, so not one connect gets through at any instant."""
    os.chmod(root, 0o755)
    stop = Path(tempfile.mkdtemp(prefix="cbstop", dir="/tmp"))
    os.chmod(stop, 0o755)
    daemon = Daemon(root)
    result: list[subprocess.CompletedProcess[bytes]] = []
    poller = threading.Thread(
        target=lambda: result.append(
            run_as_nobody(POLLER, str(daemon.socket), str(stop / "stop"), timeout=180)
        )
    )
    os.chmod(root / ".colibri", 0o777)
    poller.start()
    try:
        for _ in range(15):
            os.chmod(root / ".colibri", 0o777)
            daemon.start()
            assert stat.S_IMODE(os.stat(root / ".colibri").st_mode) == 0o700
            daemon.kill()
    finally:
        (stop / "stop").touch()
        poller.join(timeout=60)
        shutil.rmtree(stop, ignore_errors=True)
    assert result, "the poller did not finish"
    tries, connected = map(int, result[0].stdout.split())
    assert tries > 0, result[0].stderr
    assert connected == 0, (connected, tries)


def test_a_second_daemon_says_already_running_and_leaves_the_first_alone(daemon: Daemon) -> None:
    done = run_refused(daemon.root)
    assert done.returncode == 1
    message = one_line(done.stderr)
    assert "already running" in message
    assert daemon.process is not None and str(daemon.process.pid) in message
    assert stat.S_ISSOCK(os.lstat(daemon.socket).st_mode)
    assert_alive(daemon)


def test_a_stale_socket_with_no_listener_is_replaced(root: Path) -> None:
    path = root / ".colibri" / "colibri.sock"
    leftover = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    leftover.bind(str(path))  # a socket file nobody listens on: a dead daemon's
    leftover.close()
    assert stat.S_ISSOCK(os.lstat(path).st_mode)
    with running(root) as daemon:
        assert daemon.call("ping")["pong"] is True
