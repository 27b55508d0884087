"""Ledger cursors (colibri.core.cursor): each tenant's last seq read, written
``acme:5,default:120``; and the merge of several tenants' rows a page is made of."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from colibri.core import cursor
from colibri.core.errors import BadRequest
from tests.properties import examples


@dataclass(frozen=True)
class Row:
    tenant: str
    seq: int
    at: str


def test_a_cursor_is_written_in_tenant_order_without_tenants_at_their_start() -> None:
    assert cursor.render({"default": 120, "acme": 5}) == "acme:5,default:120"
    assert cursor.render({"acme": 0, "default": 3}) == "default:3"
    assert cursor.render({}) == ""
    assert cursor.parse("") == {}
    assert cursor.parse("default:120,acme:5") == {"default": 120, "acme": 5}
    # A name may hold a colon: the seq is after the last one.
    assert cursor.parse("team:a:7") == {"team:a": 7}
    assert cursor.render(cursor.parse("team:a:7,b:0")) == "team:a:7"
    assert cursor.parse(f"acme:{2**63 - 1}") == {"acme": 2**63 - 1}


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("120", "each part is TENANT:SEQ"),
        ("acme", "each part is TENANT:SEQ"),
        (":5", "each part is TENANT:SEQ"),
        ("acme:", "each part is TENANT:SEQ"),
        ("acme:-1", "each part is TENANT:SEQ"),
        ("acme:1.5", "each part is TENANT:SEQ"),
        ("acme:٣", "each part is TENANT:SEQ"),  # a digit, but not an ASCII one
        ("acme:1,", "each part is TENANT:SEQ"),
        ("acme:1,,default:2", "each part is TENANT:SEQ"),
        ("end", "each part is TENANT:SEQ"),  # END is the caller's to handle
        (f"acme:{2**63}", "acme past the last seq there can be"),
        ("acme:1,acme:2", "acme names it twice"),
    ],
)
def test_a_bad_cursor_is_refused_in_one_line_saying_how_it_reads(text: str, says: str) -> None:
    with pytest.raises(BadRequest) as caught:
        cursor.parse(text)
    message = caught.value.message
    assert says in message and "\n" not in message
    assert message.startswith("ledger position ")


def test_advance_moves_past_each_row_and_never_back() -> None:
    at = {"default": 4}
    rows = [Row("acme", 1, "t1"), Row("default", 5, "t2"), Row("acme", 2, "t3")]
    assert cursor.advance(at, rows) is at and at == {"default": 5, "acme": 2}
    cursor.advance(at, [Row("default", 3, "t0")])  # a row already read: the cursor stays
    assert at == {"default": 5, "acme": 2}
    assert not cursor.unread(at, Row("default", 5, "t2"))
    assert cursor.unread(at, Row("default", 6, "t4"))
    assert cursor.unread(at, Row("beta", 1, "t0"))  # a tenant not named: read from its start


def test_merged_interleaves_by_time_and_keeps_each_tenants_order() -> None:
    acme = [Row("acme", 1, "b"), Row("acme", 2, "a"), Row("acme", 3, "d")]  # a clock set back
    default = [Row("default", 1, "a"), Row("default", 2, "c")]
    merged = cursor.merged([acme, default], 10)
    assert [(r.tenant, r.seq) for r in merged] == [
        ("default", 1), ("acme", 1), ("acme", 2), ("default", 2), ("acme", 3)
    ]  # fmt: skip
    assert cursor.merged([acme, default], 2) == merged[:2]
    assert cursor.merged([[], acme], 2) == acme[:2]
    assert cursor.merged([], 5) == []


#: Each tenant's rows: their times (the seqs are 1, 2, 3 … in that order).
LEDGERS = st.dictionaries(
    st.sampled_from(["acme", "default", "team:a", "z"]),
    st.lists(st.integers(min_value=0, max_value=5).map(lambda n: f"t{n}"), max_size=12),
    max_size=4,
)


@pytest.mark.properties
@settings(max_examples=examples(1000), deadline=None)
@given(ledgers=LEDGERS, page=st.integers(min_value=1, max_value=7))
def test_reading_page_by_page_from_a_cursor_reads_every_row_once_in_each_tenants_order(
    ledgers: dict[str, list[str]], page: int
) -> None:
    """What a reader does: ask for the rows beyond its cursor (each tenant's, merged), go on
    from the cursor moved past them, written out and read back as a reply's ``next`` is."""
    rows = {t: [Row(t, n + 1, at) for n, at in enumerate(ats)] for t, ats in ledgers.items()}
    text = ""
    read: list[Row] = []
    while True:
        at = cursor.parse(text)
        beyond = [[r for r in tenants if cursor.unread(at, r)] for tenants in rows.values()]
        got = cursor.merged(beyond, page)
        if not got:
            break
        assert len(got) <= page
        read += got
        text = cursor.render(cursor.advance(at, got))
    assert sorted(read, key=lambda r: (r.tenant, r.seq)) == sorted(
        (r for tenants in rows.values() for r in tenants), key=lambda r: (r.tenant, r.seq)
    )
    for tenant, tenants in rows.items():
        assert [r for r in read if r.tenant == tenant] == tenants  # in seq order, none twice
    assert cursor.parse(text) == {t: len(ats) for t, ats in ledgers.items() if ats}
