"""The wire protocol: decoding request lines, error codes, request ids; names and timestamps."""

from __future__ import annotations

import json
from typing import Any

import msgspec.inspect as mi
import pytest
from hypothesis import given
from hypothesis import strategies as st

from colibri.core import protocol as p
from colibri.core.errors import BadJson, BadRequest, ColibriError, UnknownCommand
from colibri.core.model import TaskSpec, check_name, normalize_names, parse_rfc3339, rfc3339
from colibri.core.protocol import COMMANDS, decode_request, request_id


def line(**fields: Any) -> bytes:
    return json.dumps(fields).encode()


def refused(raw: bytes) -> ColibriError:
    with pytest.raises(ColibriError) as caught:
        decode_request(raw)
    return caught.value


# One valid request per command, with only what it requires, and the struct it decodes to.
MINIMAL: dict[str, tuple[dict[str, Any], type[p.Request]]] = {
    "agents": ({}, p.Agents),
    "cancel": ({"task": "t1"}, p.Cancel),
    "create-task": ({"text": "hi", "agent": "bsd-1"}, p.CreateTask),
    "describe-skill": ({"name": "zfs", "description": "pools"}, p.DescribeSkill),
    "fail": ({"task": "t1", "epoch": 1}, p.Fail),
    "get": ({"task": "t1"}, p.Get),
    "heartbeat": ({}, p.Heartbeat),
    "intake-task": ({"text": "hi"}, p.IntakeTask),
    "ledger": ({}, p.Ledger),
    "list": ({}, p.ListTasks),
    "out": ({"task": "t1", "epoch": 1}, p.Out),
    "ping": ({}, p.Ping),
    "reclaimed": ({"task": "t1", "epoch": 1}, p.Reclaimed),
    "register-agent": ({"name": "bsd-1"}, p.RegisterAgent),
    "retry": ({"task": "t1"}, p.Retry),
    "skills": ({}, p.Skills),
    "status": ({}, p.Status),
    "submit": ({"text": "hi"}, p.Submit),
    "subscribe": ({}, p.Subscribe),
    "toggle-swarm": ({}, p.ToggleSwarm),
    "wait": ({"task": "t1"}, p.Wait),
    "why": ({"task": "t1"}, p.Why),
}


def minimal_value(t: mi.Type) -> Any:
    """The smallest JSON value a type accepts: required struct fields only, lower bounds."""
    if isinstance(t, mi.StructType):
        obj: dict[str, Any] = {}
        if t.tag_field is not None:
            obj[t.tag_field] = t.tag
        for f in t.fields:
            if f.required:
                obj[f.encode_name] = minimal_value(f.type)
        return obj
    if isinstance(t, mi.UnionType):
        for member in t.types:
            if isinstance(member, mi.NoneType):
                return None
        return minimal_value(t.types[0])
    if isinstance(t, mi.StrType):
        return "x" * max(1, t.min_length or 0)
    if isinstance(t, mi.BoolType):
        return False
    if isinstance(t, mi.IntType):
        return max(0, t.ge if t.ge is not None else 0, t.gt + 1 if t.gt is not None else 0)
    if isinstance(t, mi.FloatType):
        return max(1.0, t.ge if t.ge is not None else 0.0)
    if isinstance(t, mi.LiteralType):
        return t.values[0]
    if isinstance(t, (mi.ListType, mi.SetType, mi.FrozenSetType, mi.VarTupleType)):
        return [minimal_value(t.item_type)] * (t.min_length or 0)
    if isinstance(t, mi.DictType):
        return {}
    raise AssertionError(f"no minimal value for {t}")


def test_every_table_entry_is_a_command() -> None:
    assert set(MINIMAL) <= set(COMMANDS)
    assert len(COMMANDS) == len(set(COMMANDS))


@pytest.mark.parametrize("cmd", COMMANDS)
def test_every_command_decodes_from_its_required_fields(cmd: str) -> None:
    """Every command the decoder knows, including ones added after this table was written."""
    union = mi.type_info(p.AnyRequest)
    members = union.types if isinstance(union, mi.UnionType) else (union,)
    (struct,) = [m for m in members if isinstance(m, mi.StructType) and m.tag == cmd]
    payload = minimal_value(struct)
    payload["id"] = "r-1"
    request = decode_request(json.dumps(payload).encode())
    assert type(request) is struct.cls
    assert request.id == "r-1"
    # Each required field is required: leaving one out is a bad_request naming it.
    for f in struct.fields:
        if f.required:
            partial = {k: v for k, v in payload.items() if k != f.encode_name}
            err = refused(json.dumps(partial).encode())
            assert type(err) is BadRequest
            assert f"`{f.encode_name}`" in err.message


@pytest.mark.parametrize("cmd", sorted(MINIMAL))
def test_every_command_decodes(cmd: str) -> None:
    fields, cls = MINIMAL[cmd]
    request = decode_request(line(cmd=cmd, id=7, **fields))
    assert type(request) is cls
    assert request.id == 7
    for name, value in fields.items():
        assert getattr(request, name) == value


@pytest.mark.parametrize("cmd", sorted(MINIMAL))
def test_every_command_decodes_without_an_id(cmd: str) -> None:
    fields, cls = MINIMAL[cmd]
    request = decode_request(line(cmd=cmd, **fields))
    assert type(request) is cls
    assert request.id is None


def test_submit_is_an_alias_of_intake_task() -> None:
    fields = {
        "text": "upgrade zfs",
        "capabilities": ["freebsd", "zfs"],
        "workspace": "build",
        "priority": 3,
        "min_score": 0.5,
        "labels": ["ops"],
        "idempotency_key": "k1",
        "max_attempts": 2,
    }
    submit = decode_request(line(cmd="submit", **fields))
    intake = decode_request(line(cmd="intake-task", **fields))
    assert isinstance(submit, p.TaskFields) and isinstance(intake, p.TaskFields)
    for name in p.TaskFields.__struct_fields__:
        assert getattr(submit, name) == getattr(intake, name)
    assert submit.capabilities == ["freebsd", "zfs"]
    assert submit.priority == 3


def test_task_fields_have_defaults() -> None:
    request = decode_request(line(cmd="submit", text="hi"))
    assert isinstance(request, p.Submit)
    assert request.capabilities == []
    assert request.priority == 0
    assert request.min_score is None
    assert request.max_attempts == 1
    assert request.workspace is None and request.parent is None


def test_register_agent_decodes_held_sessions() -> None:
    request = decode_request(
        line(
            cmd="register-agent",
            name="bsd-1",
            slots=2,
            ttl=1.5,
            running=[{"task": "t1", "epoch": 3}],
        )
    )
    assert isinstance(request, p.RegisterAgent)
    assert request.running == [p.Held("t1", 3)]
    assert request.slots == 2 and request.ttl == 1.5


def test_out_decodes_cost() -> None:
    request = decode_request(
        line(cmd="out", task="t1", epoch=2, output="ok", cost={"tokens_in": 5, "usd": 0.1})
    )
    assert isinstance(request, p.Out)
    assert request.cost is not None
    assert (request.cost.tokens_in, request.cost.tokens_out, request.cost.usd) == (5, 0, 0.1)
    assert request.session_ended is True


# --- bad_json -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "raw",
    [
        pytest.param(b'{"cmd":"submit","text":"x"', id="truncated"),
        pytest.param(b"", id="empty"),
        pytest.param(b'{"cmd":"submit","text":"\xc3"}', id="invalid-utf8-in-string"),
        pytest.param(b"\xff\xfe{}", id="invalid-utf8-bytes"),
        pytest.param(b'{"cmd":"submit","text":"x","min_score":NaN}', id="nan"),
        pytest.param(b'{"cmd":"submit","text":"x","priority":Infinity}', id="infinity"),
        pytest.param(b"{'cmd':'ping'}", id="single-quotes"),
        pytest.param(b'{"cmd":"ping",}', id="trailing-comma"),
    ],
)
def test_bad_json(raw: bytes) -> None:
    err = refused(raw)
    assert isinstance(err, BadJson)
    assert err.code == "bad_json"
    assert err.message.startswith("not valid JSON")


def test_invalid_utf8_says_so() -> None:
    assert "UTF-8" in refused(b'{"cmd":"submit","text":"\xc3"}').message


# --- bad_request --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("raw", "got"),
    [(b"[1]", "array"), (b"1", "int"), (b'"submit"', "str"), (b"null", "null"), (b"true", "bool")],
)
def test_a_request_must_be_an_object(raw: bytes, got: str) -> None:
    err = refused(raw)
    assert type(err) is BadRequest
    assert err.code == "bad_request"
    assert "object" in err.message and got in err.message


def test_missing_cmd() -> None:
    err = refused(line(id=1, text="x"))
    assert type(err) is BadRequest
    assert "`cmd`" in err.message


def test_cmd_of_the_wrong_type() -> None:
    err = refused(line(cmd=5))
    assert type(err) is BadRequest
    assert "$.cmd" in err.message


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"cmd": "submit", "text": 1}, "$.text"),
        ({"cmd": "submit", "text": "x", "capabilities": "freebsd"}, "$.capabilities"),
        ({"cmd": "submit", "text": "x", "capabilities": ["a", 3]}, "$.capabilities[1]"),
        ({"cmd": "submit", "text": "x", "priority": True}, "$.priority"),
        ({"cmd": "submit", "text": "x", "priority": "high"}, "$.priority"),
        ({"cmd": "submit", "text": "x", "id": 1.5}, "$.id"),
        ({"cmd": "out", "task": "t1", "epoch": "1"}, "$.epoch"),
        (
            {"cmd": "register-agent", "name": "a", "running": [{"task": 1, "epoch": 0}]},
            "$.running[0].task",
        ),
        ({"cmd": "toggle-swarm", "paused": "yes"}, "$.paused"),
    ],
)
def test_wrong_type_names_the_field_path(fields: dict[str, Any], path: str) -> None:
    err = refused(json.dumps(fields).encode())
    assert type(err) is BadRequest
    assert f"`{path}`" in err.message


@pytest.mark.parametrize(
    ("fields", "path"),
    [
        ({"cmd": "submit", "text": "x", "priority": 10_000_000}, "$.priority"),
        ({"cmd": "submit", "text": "x", "priority": -10_000_000}, "$.priority"),
        ({"cmd": "submit", "text": "x", "min_score": 1.5}, "$.min_score"),
        ({"cmd": "submit", "text": "x", "min_score": -0.1}, "$.min_score"),
        ({"cmd": "submit", "text": "x", "max_attempts": 0}, "$.max_attempts"),
        ({"cmd": "out", "task": "t1", "epoch": -1}, "$.epoch"),
        ({"cmd": "register-agent", "name": "a", "slots": 0}, "$.slots"),
        ({"cmd": "register-agent", "name": "a", "ttl": 0}, "$.ttl"),
        ({"cmd": "list", "limit": 0}, "$.limit"),
        ({"cmd": "get", "task": "t" * 65}, "$.task"),
    ],
)
def test_out_of_range_values_name_the_field_path(fields: dict[str, Any], path: str) -> None:
    err = refused(json.dumps(fields).encode())
    assert type(err) is BadRequest
    assert f"`{path}`" in err.message


def test_priority_at_the_limits_is_accepted() -> None:
    for priority in (-1_000_000, 1_000_000):
        request = decode_request(line(cmd="submit", text="x", priority=priority))
        assert isinstance(request, p.Submit) and request.priority == priority


@given(text=st.text(alphabet=st.sampled_from(["\x00", "\\", "u", "0", "a", "\u00e9"]),
                   max_size=12))  # fmt: skip
def test_a_text_holding_a_nul_is_refused_in_one_line_wherever_it_is(text: str) -> None:
    """A NUL anywhere in a request's text (here: a task's text, and a label) is refused, for
    every store alike; a backslash written before ``u0000`` is no NUL and is taken as it is."""
    for fields in ({"text": text}, {"text": "x", "labels": [f"l{text}"]}):
        raw = line(cmd="submit", **fields)
        if "\x00" in text:
            err = refused(raw)
            assert type(err) is BadRequest and err.message == p.NUL_REFUSED
        else:
            request = decode_request(raw)
            assert isinstance(request, p.Submit) and request.text == fields["text"]


def test_unknown_field_is_named() -> None:
    err = refused(line(cmd="submit", text="x", capabilites=["typo"]))
    assert type(err) is BadRequest
    assert "`capabilites`" in err.message


def test_unknown_nested_field_is_named_with_its_path() -> None:
    err = refused(line(cmd="out", task="t1", epoch=1, cost={"dollars": 1}))
    assert type(err) is BadRequest
    assert "`dollars`" in err.message and "`$.cost`" in err.message


def test_missing_required_field_is_named() -> None:
    err = refused(line(cmd="submit"))
    assert type(err) is BadRequest
    assert "`text`" in err.message


# --- unknown_command ----------------------------------------------------------------------------


def test_unknown_command_lists_the_known_commands() -> None:
    err = refused(line(cmd="sbumit", text="x"))
    assert isinstance(err, UnknownCommand)
    assert isinstance(err, BadRequest)  # a kind of bad request
    assert err.code == "unknown_command"
    assert "sbumit" in err.message
    for cmd in COMMANDS:
        assert cmd in err.message


# --- request_id ---------------------------------------------------------------------------------


@pytest.mark.parametrize("rid", [1, 0, -3, "abc", "", None])
def test_request_id_echoes_the_id_of_a_refused_line(rid: int | str | None) -> None:
    raw = line(cmd="nope", id=rid)
    with pytest.raises(UnknownCommand):
        decode_request(raw)
    assert request_id(raw) == rid


@pytest.mark.parametrize(
    "raw",
    [
        b'{"cmd":"ping","id":1',  # not JSON
        b"[1, 2]",
        b'"id"',
        b'{"cmd":"ping"}',
        b'{"cmd":"ping","id":true}',
        b'{"cmd":"ping","id":1.5}',
        b'{"cmd":"ping","id":{"n":1}}',
        b'{"cmd":"ping","id":[1]}',
    ],
)
def test_request_id_is_none_when_there_is_no_usable_id(raw: bytes) -> None:
    assert request_id(raw) is None


def test_request_id_survives_deep_nesting() -> None:
    assert request_id(b"[" * 100_000) is None


@given(rid=st.one_of(st.integers(-(2**63), 2**63 - 1), st.text(max_size=20)))
def test_request_id_round_trips_any_int_or_string(rid: int | str) -> None:
    raw = json.dumps({"cmd": "ping", "id": rid, "bogus": 1}).encode()
    with pytest.raises(BadRequest):
        decode_request(raw)
    assert request_id(raw) == rid


# --- names --------------------------------------------------------------------------------------


def test_normalize_names_trims_lower_cases_and_de_duplicates_in_order() -> None:
    raw = [" FreeBSD ", "zfs", "ZFS", "linux", "freebsd", "x86_64", "py3.11", "a:b+c-d"]
    assert normalize_names(raw, "capability") == [
        "freebsd",
        "zfs",
        "linux",
        "x86_64",
        "py3.11",
        "a:b+c-d",
    ]
    assert normalize_names([], "capability") == []


def test_the_longest_name_is_accepted() -> None:
    assert normalize_names(["a" * 64], "capability") == ["a" * 64]


@pytest.mark.parametrize(
    "bad",
    [
        "",
        "   ",
        "-leading-dash",
        ".hidden",
        "_x",
        "has space",
        "a/b",
        "../etc",
        "a" * 65,
        "é",
        "a\nb",
    ],
)
def test_bad_names_are_refused_with_bad_request(bad: str) -> None:
    with pytest.raises(BadRequest) as caught:
        normalize_names(["ok", bad], "capability")
    assert caught.value.code == "bad_request"
    assert "invalid capability" in caught.value.message
    assert "a-z 0-9" in caught.value.message


def test_check_name_names_what_was_checked() -> None:
    assert check_name("bsd-1", "agent name") == "bsd-1"
    with pytest.raises(BadRequest, match="invalid workspace 'A B'"):
        check_name("A B", "workspace")


# --- timestamps ---------------------------------------------------------------------------------


def test_rfc3339_is_utc_with_milliseconds() -> None:
    assert rfc3339(0) == "1970-01-01T00:00:00.000Z"
    assert rfc3339(1_800_000_000.5) == "2027-01-15T08:00:00.500Z"


def test_parse_rfc3339_reads_z_and_offsets() -> None:
    assert parse_rfc3339("1970-01-01T00:00:00.000Z") == 0.0
    assert parse_rfc3339("2026-01-01T01:00:00+01:00") == parse_rfc3339("2026-01-01T00:00:00Z")


@given(ts=st.floats(min_value=0, max_value=4_102_444_800, allow_nan=False))
def test_rfc3339_round_trips_to_the_millisecond(ts: float) -> None:
    text = rfc3339(ts)
    back = parse_rfc3339(text)
    assert abs(back - ts) < 0.001
    assert rfc3339(back) == text


def test_a_submission_carries_every_field_of_a_task_spec_alike() -> None:
    """The wire's submission and the board's TaskSpec are declared apart (a request and a
    struct cannot share a base): the same names, types and defaults, or this fails."""
    spec, submit, create = (mi.type_info(t) for t in (TaskSpec, p.TaskFields, p.CreateTask))
    assert isinstance(spec, mi.StructType)
    assert isinstance(submit, mi.StructType) and isinstance(create, mi.StructType)
    wire = {f.name: f for f in submit.fields}
    pinned = {f.name: f for f in create.fields}
    for field in spec.fields:
        theirs = pinned["agent"] if field.name == "agent" else wire.get(field.name)
        assert theirs is not None, f"submissions lack TaskSpec.{field.name}"
        if field.name == "agent":  # create-task requires it: the spec's type, less None
            assert isinstance(field.type, mi.UnionType) and theirs.required
            assert [t for t in field.type.types if not isinstance(t, mi.NoneType)] == [theirs.type]
            continue
        assert theirs.type == field.type, field.name
        assert theirs.default == field.default, field.name
    decoded = decode_request(line(cmd="create-task", agent="a1", text="t", budget_usd=2.5,
                                  max_attempts=3, labels=["x"]))  # fmt: skip
    assert isinstance(decoded, p.CreateTask)
    assert decoded.spec() == TaskSpec(text="t", agent="a1", budget_usd=2.5, max_attempts=3,
                                      labels=["x"])  # fmt: skip
    assert decode_request(line(cmd="submit", text="t")).spec().agent is None  # type: ignore[attr-defined]


def test_every_request_names_the_reply_it_is_answered_with() -> None:
    """``Request[R]``: the reply struct is found for every request; one that names none is a
    mistake in the protocol's code, said when the module loads."""
    from colibri.core import replies

    assert set(p.REPLY_OF) == set(p.REQUESTS)
    assert all(issubclass(reply, replies.Reply) for reply in p.REPLY_OF.values())
    assert p.REPLY_OF[p.Get] is replies.TaskReply
    assert p.REPLY_OF[p.Submit] is p.REPLY_OF[p.CreateTask] is replies.SubmitReply

    class Unanswered(p.Request, tag="unanswered"):
        pass

    with pytest.raises(TypeError, match="Unanswered names no reply"):
        p._reply_of(Unanswered)
