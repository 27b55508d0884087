"""The socket protocol against a real daemon: ids, framing, and above all bad input.

Every malformed or invalid request gets ``ok: false`` with a stable code, leaves the connection
usable and changes nothing stored; only a line over ``server.max_line`` closes the connection.
"""

from __future__ import annotations

import json
import os
import socket
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from colibri.core.model import DEFAULT_MAX_LINE
from tests.helpers import Daemon, FakeAgent, RawConnection, connect_as_nobody, pong

UNKNOWN_ID = "0190a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"  # well-formed, never issued


def line(obj: Any) -> bytes:
    return json.dumps(obj).encode() + b"\n"


@contextmanager
def raw(daemon: Daemon) -> Iterator[RawConnection]:
    conn = RawConnection(daemon.socket)
    try:
        yield conn
    finally:
        conn.close()


def assert_usable(conn: RawConnection, request_id: int | str = "after") -> None:
    conn.send(line({"cmd": "ping", "id": request_id}))
    reply = conn.reply()
    assert reply == pong(request_id)


def connection_closed(conn: RawConnection) -> bool:
    """EOF, or a reset (the daemon closed with our unread bytes still in its queue)."""
    try:
        return conn.file.readline() == b""
    except ConnectionResetError:
        return True


def send_ignoring_close(conn: RawConnection, data: bytes) -> None:
    """Send a large payload; the daemon may close the connection before taking all of it."""
    try:
        conn.send(data)
    except (BrokenPipeError, ConnectionResetError):
        pass


def snapshot(daemon: Daemon) -> dict[str, Any]:
    """What is stored: task counts per state, the last ledger row, every task and agent."""
    status = daemon.call("status")
    tasks = daemon.call("list", limit=10_000)["tasks"]
    return {
        "tasks": status["tasks"],
        "ledger_at": status["ledger_at"],
        "ids": sorted((t["id"], t["state"], t["epoch"]) for t in tasks),
        "agents": [a["name"] for a in daemon.call("agents")["agents"]],
        "skills": daemon.call("skills")["skills"],
    }


# -- ids ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("request_id", [7, 0, -3, 2**53, "abc", "", "ü-id"])
def test_reply_echoes_the_request_id(daemon: Daemon, request_id: int | str) -> None:
    with raw(daemon) as conn:
        conn.send(line({"cmd": "ping", "id": request_id}))
        assert conn.reply() == pong(request_id)
        # an error reply echoes it too
        conn.send(line({"cmd": "get", "id": request_id, "task": UNKNOWN_ID}))
        reply = conn.reply()
        assert reply["id"] == request_id
        assert reply["ok"] is False
        assert reply["error"]["code"] == "unknown_task"


def test_absent_or_null_id_is_echoed_as_null(daemon: Daemon) -> None:
    with raw(daemon) as conn:
        conn.send(b'{"cmd":"ping"}\n')
        assert conn.reply() == pong(None)
        conn.send(b'{"cmd":"ping","id":null}\n')
        assert conn.reply() == pong(None)
        conn.send(b'{"cmd":"no-such-command"}\n')
        reply = conn.reply()
        assert reply["id"] is None
        assert reply["error"]["code"] == "unknown_command"


def test_an_id_of_a_wrong_type_is_refused_not_echoed(daemon: Daemon) -> None:
    with raw(daemon) as conn:
        for bad in (b"true", b"1.5", b"[1]", b'{"a":1}'):
            conn.send(b'{"cmd":"ping","id":' + bad + b"}\n")
            reply = conn.reply()
            assert reply["ok"] is False
            assert reply["id"] is None
            assert reply["error"]["code"] == "bad_request"
            assert "$.id" in reply["error"]["message"]
        assert_usable(conn)


# -- bad input ---------------------------------------------------------------------------------

Case = tuple[str, bytes, str, Any, str | None]


def bad_input_cases(task_id: str) -> list[Case]:
    """(name, line without newline, expected code, expected reply id, text in the message)."""

    def req(**fields: Any) -> bytes:
        return json.dumps(fields).encode()

    deep = b"[" * 100_000
    return [
        # not JSON at all
        ("truncated JSON", b'{"cmd":', "bad_json", None, "not valid JSON"),
        ("garbage", b"hello there", "bad_json", None, "not valid JSON"),
        ("invalid UTF-8 bytes", b"\xff\xfe\xfd", "bad_json", None, None),
        ("invalid UTF-8 in a string", b'{"cmd":"ping","id":"\xff"}', "bad_json", None, "UTF-8"),
        ("bare NaN", b"NaN", "bad_json", None, None),
        (
            "NaN as a value",
            b'{"cmd":"submit","id":1,"text":"a","priority":NaN}',
            "bad_json",
            None,
            None,
        ),
        (
            "Infinity as a value",
            b'{"cmd":"submit","id":1,"text":"a","min_score":Infinity}',
            "bad_json",
            None,
            None,
        ),
        ("trailing garbage", b'{"cmd":"ping","id":1} x', "bad_json", None, None),
        # JSON, but not an object
        ("array", b"[]", "bad_request", None, "object"),
        ("number", b"1", "bad_request", None, "object"),
        ("string", b'"x"', "bad_request", None, "object"),
        ("null", b"null", "bad_request", None, "object"),
        ("deep nesting", deep, "bad_request", None, None),
        ("deep nesting, closed", deep + b"]" * 100_000, "bad_request", None, None),
        (
            "deep nesting in a field",
            b'{"cmd":"submit","id":2,"text":"a","labels":' + deep,
            "bad_request",
            None,
            None,
        ),
        # the command
        ("no cmd", req(id=3, text="a"), "bad_request", 3, '"cmd"'),
        ("unknown cmd", req(cmd="explode", id=4), "unknown_command", 4, "explode"),
        ("cmd not a string", req(cmd=5, id=5), "bad_request", 5, None),
        # fields
        ("missing required field", req(cmd="get", id=6), "bad_request", 6, "`task`"),
        ("missing text", req(cmd="submit", id=7), "bad_request", 7, "`text`"),
        ("wrong-typed field", req(cmd="submit", id=8, text=5), "bad_request", 8, "`$.text`"),
        (
            "wrong-typed list item",
            req(cmd="submit", id=9, text="a", capabilities=[1]),
            "bad_request",
            9,
            "`$.capabilities[0]`",
        ),
        (
            "list given as a string",
            req(cmd="submit", id=10, text="a", capabilities="linux"),
            "bad_request",
            10,
            "`$.capabilities`",
        ),
        (
            "nested wrong type",
            req(cmd="register-agent", id=11, name="a1", running=[{"task": task_id, "epoch": "x"}]),
            "bad_request",
            11,
            "`$.running[0].epoch`",
        ),
        ("unknown extra field", req(cmd="ping", id=12, bogus=1), "bad_request", 12, "`bogus`"),
        (
            "unknown extra field on submit",
            req(cmd="submit", id=13, text="a", colour="red"),
            "bad_request",
            13,
            "`colour`",
        ),
        (
            "negative epoch",
            req(cmd="out", id=14, task=task_id, epoch=-1),
            "bad_request",
            14,
            "`$.epoch`",
        ),
        (
            "text over the limit",
            req(cmd="submit", id=15, text="a" * (256 * 1024 + 1)),
            "bad_request",
            15,
            "`$.text`",
        ),
        (
            "bool for an int",
            req(cmd="submit", id=16, text="a", priority=True),
            "bad_request",
            16,
            "`$.priority`",
        ),
        # empty text
        ("empty text", req(cmd="submit", id=17, text=""), "bad_request", 17, "empty"),
        (
            "whitespace-only text",
            req(cmd="submit", id=18, text=" \t\n\r "),
            "bad_request",
            18,
            "empty",
        ),
        (
            "whitespace-only text, create-task",
            req(cmd="create-task", id=19, text="  ", agent="a1"),
            "bad_request",
            19,
            "empty",
        ),
        # unknown tasks and parents
        (
            "get unknown task",
            req(cmd="get", id=20, task=UNKNOWN_ID),
            "unknown_task",
            20,
            UNKNOWN_ID,
        ),
        (
            "cancel unknown task",
            req(cmd="cancel", id=21, task=UNKNOWN_ID),
            "unknown_task",
            21,
            UNKNOWN_ID,
        ),
        (
            "why unknown task",
            req(cmd="why", id=22, task=UNKNOWN_ID),
            "unknown_task",
            22,
            UNKNOWN_ID,
        ),
        (
            "wait unknown task",
            req(cmd="wait", id=23, task=UNKNOWN_ID),
            "unknown_task",
            23,
            UNKNOWN_ID,
        ),
        (
            "retry unknown task",
            req(cmd="retry", id=24, task=UNKNOWN_ID),
            "unknown_task",
            24,
            UNKNOWN_ID,
        ),
        ("get a made-up id", req(cmd="get", id=25, task="nope"), "unknown_task", 25, "nope"),
        (
            "unknown parent",
            req(cmd="submit", id=26, text="child", parent=UNKNOWN_ID),
            "unknown_parent",
            26,
            UNKNOWN_ID,
        ),
        # names
        (
            "capability with a path",
            req(cmd="submit", id=27, text="a", capabilities=["../x"]),
            "bad_request",
            27,
            "../x",
        ),
        (
            "capability with a space",
            req(cmd="submit", id=28, text="a", capabilities=["a b"]),
            "bad_request",
            28,
            "a b",
        ),
        (
            "capability of 70 chars",
            req(cmd="submit", id=29, text="a", capabilities=["c" * 70]),
            "bad_request",
            29,
            "capability",
        ),
        (
            "empty capability",
            req(cmd="submit", id=30, text="a", capabilities=[" "]),
            "bad_request",
            30,
            "capability",
        ),
        (
            "capability with a slash",
            req(cmd="submit", id=31, text="a", capabilities=["a/b"]),
            "bad_request",
            31,
            "a/b",
        ),
        (
            "bad label",
            req(cmd="submit", id=32, text="a", labels=["x y"]),
            "bad_request",
            32,
            "label",
        ),
        (
            "bad workspace",
            req(cmd="submit", id=33, text="a", workspace="../w"),
            "bad_request",
            33,
            "workspace",
        ),
        (
            "workspace with a newline",
            req(cmd="submit", id=34, text="a", workspace="w\n"),
            "bad_request",
            34,
            "workspace",
        ),
        (
            "pinned agent with a newline",
            req(cmd="create-task", id=35, text="a", agent="a1\n"),
            "bad_request",
            35,
            "agent name",
        ),
        (
            "agent capability bad",
            req(cmd="register-agent", id=36, name="a1", capabilities=["../x"]),
            "bad_request",
            36,
            "capability",
        ),
        (
            "agent name bad",
            req(cmd="register-agent", id=37, name="A B"),
            "bad_request",
            37,
            "agent name",
        ),
        (
            "agent name with a newline",
            req(cmd="register-agent", id=38, name="a1\n"),
            "bad_request",
            38,
            "agent name",
        ),
        (
            "skill name bad",
            req(cmd="describe-skill", id=39, name="../x", description="d"),
            "bad_request",
            39,
            "capability",
        ),
        # ranges
        (
            "priority too high",
            req(cmd="submit", id=40, text="a", priority=1_000_001),
            "bad_request",
            40,
            "`$.priority`",
        ),
        (
            "priority too low",
            req(cmd="submit", id=41, text="a", priority=-1_000_001),
            "bad_request",
            41,
            "`$.priority`",
        ),
        (
            "priority beyond int64",
            b'{"cmd":"submit","id":42,"text":"a","priority":1e400}',
            "bad_request",
            None,
            "`$.priority`",
        ),  # id unread: 1e400 is out of range for any number
        (
            "min_score above 1",
            req(cmd="submit", id=43, text="a", min_score=1.5),
            "bad_request",
            43,
            "`$.min_score`",
        ),
        (
            "max_attempts 0",
            req(cmd="submit", id=44, text="a", max_attempts=0),
            "bad_request",
            44,
            "`$.max_attempts`",
        ),
        (
            "zero slots",
            req(cmd="register-agent", id=45, name="a1", slots=0),
            "bad_request",
            45,
            "`$.slots`",
        ),
        ("list limit 0", req(cmd="list", id=46, limit=0), "bad_request", 46, "`$.limit`"),
        (
            "list unknown state",
            req(cmd="list", id=47, state="sleeping"),
            "bad_request",
            47,
            "sleeping",
        ),
        # agent commands without register-agent
        (
            "out unregistered",
            req(cmd="out", id=48, task=task_id, epoch=0, output="x"),
            "not_registered",
            48,
            "register-agent",
        ),
        (
            "fail unregistered",
            req(cmd="fail", id=49, task=task_id, epoch=0),
            "not_registered",
            49,
            "register-agent",
        ),
        (
            "heartbeat unregistered",
            req(cmd="heartbeat", id=50),
            "not_registered",
            50,
            "register-agent",
        ),
        (
            "reclaimed unregistered",
            req(cmd="reclaimed", id=51, task=task_id, epoch=0),
            "not_registered",
            51,
            "register-agent",
        ),
    ]


def test_bad_input_is_answered_on_one_usable_connection_and_changes_nothing(
    daemon: Daemon,
) -> None:
    task_id = daemon.call("submit", text="already here", capabilities=["linux"])["task"]["id"]
    before = snapshot(daemon)
    assert before["ledger_at"] == "default:1"
    assert before["tasks"]["pending"] == 1

    cases = bad_input_cases(task_id)
    with raw(daemon) as conn:
        for number, (name, data, code, request_id, text) in enumerate(cases):
            conn.send(data + b"\n")
            reply = conn.reply()
            assert reply["ok"] is False, f"{name}: {reply}"
            assert reply["error"]["code"] == code, f"{name}: {reply}"
            assert reply["id"] == request_id, f"{name}: {reply}"
            assert reply["error"]["message"], f"{name}: {reply}"
            if text is not None:
                assert text in reply["error"]["message"], f"{name}: {reply}"
            assert set(reply) == {"id", "ok", "error"}, f"{name}: {reply}"
            assert_usable(conn, number)

    assert snapshot(daemon) == before
    assert daemon.process is not None and daemon.process.poll() is None


def test_all_bad_input_in_one_write_gets_one_reply_each_in_order(daemon: Daemon) -> None:
    task_id = daemon.call("submit", text="already here")["task"]["id"]
    before = snapshot(daemon)
    cases = bad_input_cases(task_id)
    blob = b"".join(
        data + b"\n" + line({"cmd": "ping", "id": f"p{i}"})
        for i, (_, data, _, _, _) in enumerate(cases)
    )
    with raw(daemon) as conn:
        conn.send(blob)
        for i, (name, _, code, request_id, _) in enumerate(cases):
            reply = conn.reply()
            assert (reply["id"], reply["error"]["code"]) == (request_id, code), name
            assert conn.reply() == pong(f"p{i}"), name
    assert snapshot(daemon) == before


def test_agent_commands_belong_to_the_registering_connection(daemon: Daemon) -> None:
    agent = FakeAgent(daemon, "a1", ["linux"])
    try:
        task = daemon.call("submit", text="work", capabilities=["linux"])["task"]
        assign = agent.next_assign()
        assert assign["task"]["id"] == task["id"]
        with raw(daemon) as conn:
            for cmd, fields in [
                ("heartbeat", {}),
                ("out", {"task": task["id"], "epoch": assign["epoch"], "output": "stolen"}),
                ("fail", {"task": task["id"], "epoch": assign["epoch"]}),
            ]:
                conn.send(line({"cmd": cmd, "id": cmd, **fields}))
                reply = conn.reply()
                assert reply["id"] == cmd
                assert reply["error"]["code"] == "not_registered", reply
        assert daemon.call("get", task=task["id"])["task"]["state"] == "running"
    finally:
        agent.close()


# -- framing -----------------------------------------------------------------------------------


def test_a_partial_line_over_the_limit_is_refused_and_closed(daemon: Daemon) -> None:
    before = snapshot(daemon)
    with daemon.client() as other, raw(daemon) as conn:
        assert other.call("ping")["pong"] is True
        payload = b'{"cmd":"submit","id":1,"text":"' + b"a" * (DEFAULT_MAX_LINE // 2 * 3)
        send_ignoring_close(conn, payload)  # 1.5 MiB, no newline
        reply = conn.reply()
        assert reply["ok"] is False
        assert reply["id"] is None
        assert reply["error"]["code"] == "line_too_long"
        assert str(DEFAULT_MAX_LINE) in reply["error"]["message"]
        assert connection_closed(conn)
        # the other connection, open all along, still works
        assert other.call("ping")["pong"] is True
        assert other.call("submit", text="still taking work")["created"] is True
    after = snapshot(daemon)
    assert after["tasks"]["pending"] == before["tasks"]["pending"] + 1


def test_a_full_line_over_the_limit_is_refused_and_closed(daemon: Daemon) -> None:
    before = snapshot(daemon)
    with daemon.client() as other, raw(daemon) as conn:
        assert other.call("ping")["pong"] is True
        payload = line({"cmd": "submit", "id": 1, "text": "a" * (2 * DEFAULT_MAX_LINE)})
        send_ignoring_close(conn, payload)  # 2 MiB, with its newline
        reply = conn.reply()
        assert reply == {"id": None, "ok": False, "error": reply["error"]}
        assert reply["error"]["code"] == "line_too_long"
        assert connection_closed(conn)
        assert other.call("ping")["pong"] is True
    assert snapshot(daemon) == before


def test_a_line_of_exactly_the_limit_is_accepted(daemon: Daemon) -> None:
    head, tail = b'{"cmd":"ping","id":"', b'"}'
    request_id = "x" * (DEFAULT_MAX_LINE - len(head) - len(tail))
    data = head + request_id.encode() + tail
    assert len(data) == DEFAULT_MAX_LINE
    with raw(daemon) as conn:
        conn.send(data + b"\n")
        assert conn.reply() == pong(request_id)
        send_ignoring_close(conn, b'{"cmd":"ping","id":"x' + request_id.encode() + tail + b"\n")
        assert conn.reply()["error"]["code"] == "line_too_long"
        assert connection_closed(conn)


def test_a_thousand_pipelined_requests_get_a_thousand_replies_in_order(daemon: Daemon) -> None:
    blob = b"".join(
        line({"cmd": "status" if i % 100 == 0 else "ping", "id": i}) for i in range(1, 1001)
    )
    with raw(daemon) as conn:
        conn.send(blob)
        replies = [conn.reply() for _ in range(1000)]
        assert [r["id"] for r in replies] == list(range(1, 1001))
        assert all(r["ok"] is True for r in replies)
        assert all(r.get("pong") is True for r in replies if r["id"] % 100)
        assert all("ledger_at" in r for r in replies if r["id"] % 100 == 0)
        assert_usable(conn)


def test_a_peer_that_pipelines_and_does_not_read_neither_stalls_others_nor_loses_replies(
    daemon: Daemon,
) -> None:
    """20,000 requests in one go from a peer that reads nothing back: the daemon handles them a
    turn's worth at a time and stops reading the peer while its replies pile up; the other
    clients are served meanwhile, and once the peer reads, every reply comes, in order."""
    count = 20_000
    blob = b"".join(line({"cmd": "ping", "id": i}) for i in range(count))
    with raw(daemon) as flooder:
        sender = threading.Thread(target=flooder.send, args=(blob,))
        sender.start()
        with daemon.client() as other:
            for n in range(20):
                assert other.call("ping")["pong"] is True, n
        ids = [flooder.reply()["id"] for _ in range(count)]
        sender.join(timeout=60)
        assert ids == list(range(count))
        assert_usable(flooder)


def test_pipelined_submissions_are_all_stored_in_order(daemon: Daemon) -> None:
    blob = b"".join(line({"cmd": "submit", "id": i, "text": f"task {i}"}) for i in range(1, 201))
    with raw(daemon) as conn:
        conn.send(blob)
        replies = [conn.reply() for _ in range(200)]
    assert [r["id"] for r in replies] == list(range(1, 201))
    assert [r["task"]["text"] for r in replies] == [f"task {i}" for i in range(1, 201)]
    status = daemon.call("status")
    assert status["tasks"]["pending"] == 200
    assert status["ledger_at"] == "default:200"


def test_blank_lines_are_ignored(daemon: Daemon) -> None:
    with raw(daemon) as conn:
        conn.send(
            b"\n\n   \n\t\n\r\n"
            + line({"cmd": "ping", "id": 1})
            + b"\n \n"
            + line({"cmd": "ping", "id": 2})
        )
        assert conn.reply() == pong(1)
        assert conn.reply() == pong(2)
        # nothing else was answered: the next reply is for the next request
        assert_usable(conn)


def test_crlf_line_endings_work(daemon: Daemon) -> None:
    with raw(daemon) as conn:
        conn.send(b'{"cmd":"ping","id":1}\r\n{"cmd":"submit","id":2,"text":"crlf"}\r\n')
        assert conn.reply() == pong(1)
        reply = conn.reply()
        assert reply["id"] == 2 and reply["ok"] is True
        assert reply["task"]["text"] == "crlf"
        conn.send(b'{"cmd":\r\n')
        assert conn.reply()["error"]["code"] == "bad_json"
        assert_usable(conn)


def test_a_request_split_across_writes_is_reassembled(daemon: Daemon) -> None:
    data = line({"cmd": "submit", "id": "split", "text": "in pieces"})
    with raw(daemon) as conn:
        for i in range(0, len(data), 3):
            conn.send(data[i : i + 3])
        reply = conn.reply()
        assert reply["id"] == "split" and reply["task"]["text"] == "in pieces"


def test_a_partial_line_followed_by_eof_has_no_effect(daemon: Daemon) -> None:
    before = snapshot(daemon)
    with raw(daemon) as conn:
        # a complete, valid request, only missing its newline
        conn.send(b'{"cmd":"submit","id":1,"text":"never sent in full"}')
        conn.sock.shutdown(socket.SHUT_WR)
        assert connection_closed(conn)  # no reply: the daemon just closes
    assert snapshot(daemon) == before
    assert daemon.call("ping")["pong"] is True


def test_a_second_client_is_unaffected_by_one_sending_garbage(daemon: Daemon) -> None:
    garbage = [
        b'{"cmd":',
        b"\xff\xfe",
        b"[]",
        b'"x"',
        b"NaN",
        b'{"cmd":"nope"}',
        b'{"cmd":"get","task":"nope"}',
        b"[" * 1_000,
    ]
    expected = [
        "bad_json",
        "bad_json",
        "bad_request",
        "bad_request",
        "bad_json",
        "unknown_command",
        "unknown_task",
        "bad_request",
    ]
    batch = b"".join(g + b"\n" for g in garbage) * 20
    stop = threading.Event()
    started = threading.Event()
    errors: list[BaseException] = []
    rounds = 0

    def pester() -> None:
        nonlocal rounds
        try:
            with raw(daemon) as conn:
                while not stop.is_set():
                    conn.send(batch)
                    codes = [conn.reply()["error"]["code"] for _ in range(len(garbage) * 20)]
                    assert codes == expected * 20
                    rounds += 1
                    started.set()
                assert_usable(conn)
        except BaseException as exc:
            errors.append(exc)
            started.set()

    thread = threading.Thread(target=pester, daemon=True)
    thread.start()
    try:
        assert started.wait(10)
        with daemon.client() as client:
            ids = []
            for i in range(20):
                assert client.call("ping")["pong"] is True
                task = client.call("submit", text=f"job {i}")["task"]
                assert client.call("get", task=task["id"])["task"]["text"] == f"job {i}"
                ids.append(task["id"])
            assert thread.is_alive() and not errors  # the garbage went on meanwhile
            listed = client.call("list", limit=1000)["tasks"]
            assert [t["id"] for t in listed] == ids
    finally:
        stop.set()
        thread.join(15)
    assert not thread.is_alive()
    assert not errors, errors
    assert rounds >= 1
    assert daemon.call("status")["tasks"]["pending"] == 20


# -- who may connect ---------------------------------------------------------------------------


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to connect as another uid (65534)")
def test_a_peer_with_another_uid_is_refused(daemon: Daemon) -> None:
    state_dir = daemon.socket.parent
    os.chmod(daemon.root, 0o755)
    os.chmod(state_dir, 0o777)
    os.chmod(daemon.socket, 0o666)
    out = connect_as_nobody(daemon.socket, '{"cmd":"ping","id":1}', until_closed=True)
    assert out.get("closed") is True, out  # the daemon disconnected it
    lines = [json.loads(x) for x in out["reply"].splitlines()]
    assert len(lines) == 1, lines  # the refusal, and no pong
    assert lines[0]["ok"] is False
    assert lines[0]["id"] is None
    assert lines[0]["error"]["code"] == "forbidden"
    assert "65534" in lines[0]["error"]["message"]
    # the owner still gets in
    assert daemon.call("ping")["pong"] is True
    assert daemon.call("status")["ledger_at"] == ""


def test_socket_is_0600_in_a_0700_folder(daemon: Daemon) -> None:
    sock_info = os.lstat(daemon.socket)
    assert stat.S_ISSOCK(sock_info.st_mode)
    assert stat.S_IMODE(sock_info.st_mode) == 0o600
    assert sock_info.st_uid == os.getuid()
    dir_info = os.lstat(daemon.socket.parent)
    assert daemon.socket.parent == Path(daemon.root) / ".colibri"
    assert stat.S_IMODE(dir_info.st_mode) == 0o700


def test_a_loose_state_folder_is_tightened_at_start(root: Path) -> None:
    os.chmod(root / ".colibri", 0o777)
    d = Daemon(root)
    d.start()
    try:
        assert stat.S_IMODE(os.lstat(root / ".colibri").st_mode) == 0o700
        assert stat.S_IMODE(os.lstat(d.socket).st_mode) == 0o600
    finally:
        d.stop()


# -- events ------------------------------------------------------------------------------------


def test_subscribe_then_submit_pushes_task_events_with_increasing_seq(daemon: Daemon) -> None:
    with daemon.client() as sub:
        assert sub.call("subscribe")["subscribed"] is True
        first = daemon.call("submit", text="one", capabilities=["linux"])["task"]
        second = daemon.call("submit", text="two")["task"]
        daemon.call("cancel", task=first["id"], reason="changed my mind")
        events = sub.events()
        got = [next(events) for _ in range(3)]
    assert [e["event"] for e in got] == ["task", "task", "task"]
    seqs = [e["seq"] for e in got]
    assert all(isinstance(s, int) for s in seqs)
    assert seqs == sorted(seqs) and len(set(seqs)) == 3
    assert [(e["task"]["id"], e["from"], e["to"]) for e in got] == [
        (first["id"], None, "pending"),
        (second["id"], None, "pending"),
        (first["id"], "pending", "cancelled"),
    ]
    assert got[0]["task"]["capabilities"] == ["linux"]
    assert got[2]["reason"] == "changed my mind"


def test_bad_input_on_a_subscriber_connection_is_answered_and_it_keeps_its_events(
    daemon: Daemon,
) -> None:
    with raw(daemon) as conn:
        conn.send(line({"cmd": "subscribe", "id": "s"}))
        assert conn.reply() == {"id": "s", "ok": True, "subscribed": True}
        conn.send(b'{"cmd":\n')
        assert conn.reply()["error"]["code"] == "bad_json"
        task = daemon.call("submit", text="seen")["task"]
        event = conn.reply()
        assert event["event"] == "task" and event["task"]["id"] == task["id"]
        assert_usable(conn)
