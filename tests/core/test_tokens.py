"""Tokens, who may do what, the login throttle and TCP addresses: the pure parts."""

from __future__ import annotations

import re
from pathlib import Path

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from colibri.core import protocol as p
from colibri.core import tokens
from colibri.core.access import ALLOWED, OWNER, Principal
from colibri.core.errors import ConfigError, Forbidden, UnknownTask
from colibri.core.tokens import Token
from colibri.daemon.gateway import Throttle
from colibri.endpoints import TcpAddress, check_listeners, parse_address, parse_connect

SRC = Path(__file__).parents[2] / "src" / "colibri"


def _token(**fields: object) -> Token:
    base: dict[str, object] = {"id": "", "tenant": "acme", "role": "agent", "agent": "a1",
                               "created_at": "2026-01-01T00:00:00.000Z"}  # fmt: skip
    return Token(**{**base, **fields})  # type: ignore[arg-type]


def test_an_issued_token_splits_back_and_matches_only_its_own_hash() -> None:
    issued = tokens.issue(_token())
    token_id, secret = tokens.split(issued.text) or ("", "")
    assert token_id == issued.token.id and len(token_id) == tokens.ID_DIGITS
    assert len(secret) >= 43  # 256 bits of URL-safe base64
    assert tokens.matches(secret, issued.secret_hash)
    assert not tokens.matches(secret + "x", issued.secret_hash)
    assert secret not in issued.secret_hash and issued.secret_hash == tokens.digest(secret)
    assert tokens.issue(_token()).text != issued.text


@pytest.mark.parametrize(
    "text",
    ["", "colibri_", "colibri_abc_def", "colibri_0123456789ab", "colibri_0123456789ab_",
     "colibri_0123456789AB_x", "colibri_0123456789ag_x", "ghp_0123456789ab_x",
     "colibri_0123456789ab_" + "x" * 101],
)  # fmt: skip
def test_text_not_shaped_like_a_token_does_not_split(text: str) -> None:
    assert tokens.split(text) is None


@given(st.text(max_size=200))
def test_split_never_raises(text: str) -> None:
    parts = tokens.split(text)
    assert parts is None or tokens.PREFIX + parts[0] + "_" + parts[1] == text


def test_no_secret_or_hash_is_compared_with_equals() -> None:
    """S5: secrets are compared in constant time only (``hmac.compare_digest``)."""
    offending = []
    for path in SRC.rglob("*.py"):
        for number, line in enumerate(path.read_text().splitlines(), 1):
            code = line.split("#", 1)[0]
            if re.search(r"(secret|hash|digest)\w*\s*[!=]=|[!=]=\s*\w*(secret|hash|digest)", code):
                offending.append(f"{path.name}:{number}: {line.strip()}")
    assert offending == []


def test_every_request_is_placed_in_the_rules() -> None:
    """Each command is an agent's, an operator's, both, or the owner's alone, on purpose."""
    owner_only = set(p.REQUESTS) - ALLOWED["agent"] - ALLOWED["operator"]
    assert {p.ToggleSwarm, p.TokenCreate, p.TokenList, p.TokenRevoke, p.Subscribe, p.Send,
            p.ScheduleAdd, p.ScheduleRemove, p.DescribeSkill} <= owner_only  # fmt: skip
    assert p.RegisterAgent in ALLOWED["agent"] and p.RegisterAgent not in ALLOWED["operator"]
    assert p.Cancel in ALLOWED["operator"] and p.Cancel not in ALLOWED["agent"]
    # Reads both roles need, so a session or an operator afar can follow what it submitted.
    assert {p.Get, p.Wait, p.ListTasks, p.Family, p.Submit, p.Auth} <= (
        ALLOWED["agent"] & ALLOWED["operator"]
    )


def test_no_request_redefines_the_request_id() -> None:
    """A field named ``id`` would be taken for the request's own and echoed as the reply's."""
    for cls in p.REQUESTS:
        (field,) = [f for f in msgspec.structs.fields(cls) if f.name == "id"]
        assert field.default is None, cls


def test_a_principal_keeps_to_its_tenant_name_and_capabilities() -> None:
    agent = Principal.of(_token(id="0123456789ab", capabilities=["zfs"]))
    assert agent.tenant_for(None) == "acme" and agent.tenant_for("acme") == "acme"
    with pytest.raises(Forbidden, match="'acme' only"):
        agent.tenant_for("beta")
    with pytest.raises(UnknownTask):
        agent.visible("t1", "beta")
    agent.visible("t1", "acme")
    agent.check_registration("a1", ["zfs"])
    agent.check_registration("a1", [])
    with pytest.raises(Forbidden, match="'a1' only"):
        agent.check_registration("a2", ["zfs"])
    with pytest.raises(Forbidden, match="gpu"):
        agent.check_registration("a1", ["zfs", "gpu"])
    with pytest.raises(Forbidden, match="serves no workspace, not 'api'"):
        agent.check_registration("a1", ["zfs"], "api")
    serving = Principal.of(_token(id="0123456789ab", workspace="api"))
    serving.check_registration("a1", [], "api")
    with pytest.raises(Forbidden, match="workspace 'api' only, not 'web'"):
        serving.check_registration("a1", [], "web")
    with pytest.raises(Forbidden, match="not None"):
        serving.check_registration("a1", [])
    anything = Principal.of(_token(id="0123456789ab"))
    anything.check_registration("a1", ["gpu", "zfs"])
    with pytest.raises(Forbidden, match="operator token"):
        agent.check(p.Cancel(task="t1"))
    operator = Principal.of(_token(id="0123456789ab", role="operator", agent=None))
    with pytest.raises(Forbidden, match="agent token"):
        operator.check(p.Heartbeat())
    with pytest.raises(Forbidden, match="daemon's owner"):
        operator.check(p.TokenList())
    assert OWNER.tenant_for("beta") == "beta" and OWNER.sees("anything")


def test_the_throttle_counts_per_address_and_forgets_after_the_window() -> None:
    now = [1000.0]
    throttle = Throttle(limit=3, window=60.0, clock=lambda: now[0])
    assert [throttle.failed("10.0.0.1") for _ in range(3)] == [False, False, True]
    assert throttle.blocked("10.0.0.1") == pytest.approx(60.0)
    assert throttle.blocked("10.0.0.2") is None
    now[0] += 30
    assert throttle.blocked("10.0.0.1") == pytest.approx(30.0)
    now[0] += 30.5
    assert throttle.blocked("10.0.0.1") is None
    assert throttle.take_refused() == {"10.0.0.1": 2}
    assert throttle.take_refused() == {}


def test_an_ipv6_peer_is_counted_by_its_slash_64_and_a_mapped_v4_as_v4() -> None:
    throttle = Throttle(limit=2, clock=lambda: 0.0)
    throttle.failed("2001:db8:1:2::1")
    throttle.failed("2001:db8:1:2:ffff::9")
    assert throttle.blocked("2001:db8:1:2::77") is not None
    assert throttle.blocked("2001:db8:1:3::1") is None
    throttle.failed("::ffff:10.1.1.1")
    throttle.failed("10.1.1.1")
    assert throttle.blocked("10.1.1.1") is not None


def test_the_throttle_remembers_a_bounded_number_of_addresses(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from colibri.daemon import gateway

    monkeypatch.setattr(gateway, "TRACKED_ADDRESSES", 100)
    throttle = Throttle(limit=5, clock=lambda: 0.0)
    for n in range(1000):
        throttle.failed(f"10.0.{n // 256}.{n % 256}")
    assert len(throttle._failures) == 100


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("tcp://127.0.0.1:7433", TcpAddress("127.0.0.1", 7433)),
        ("tcp://[::1]:9", TcpAddress("::1", 9)),
        ("tcp://board.example:65535", TcpAddress("board.example", 65535)),
    ],
)
def test_addresses_parse(text: str, expected: TcpAddress) -> None:
    assert parse_address(text) == expected
    assert str(expected) == text


@pytest.mark.parametrize(
    "text",
    ["127.0.0.1:7433", "tcp://127.0.0.1", "tcp://:7433", "tcp://h:0", "tcp://h:65536",
     "tcp://h:x", "tcp://::1:7433", "tcp://[::1]7433", "tcp://a b:1", "unix:///x",
     "tcp://h:-1", "tcp://u@h:1"],
)  # fmt: skip
def test_bad_addresses_are_one_clear_error(text: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_address(text)
    assert "\n" not in caught.value.message


def test_listening_allows_port_zero_and_connect_takes_a_list() -> None:
    assert parse_address("tcp://127.0.0.1:0", listening=True).port == 0
    assert [str(a) for a in parse_connect(" tcp://a:1 , tcp://b:2 ")] == ["tcp://a:1", "tcp://b:2"]
    with pytest.raises(ConfigError):
        parse_connect(" , ")


def test_plain_tcp_only_on_loopback_and_only_when_asked() -> None:
    check_listeners(("tcp://127.0.0.1:1", "tcp://[::1]:1", "tcp://localhost:1"), None, None, True)
    with pytest.raises(ConfigError, match="needs TLS"):
        check_listeners(("tcp://127.0.0.1:1",), None, None, False)
    with pytest.raises(ConfigError, match="loopback addresses only"):
        check_listeners(("tcp://0.0.0.0:1",), None, None, True)
    with pytest.raises(ConfigError, match="together"):
        check_listeners(("tcp://0.0.0.0:1",), "cert.pem", None, False)
    with pytest.raises(ConfigError, match="not a readable file"):
        check_listeners(("tcp://0.0.0.0:1",), "/nonexistent.pem", "/nonexistent.key", False)
