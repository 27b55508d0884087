"""Ledger positions on the command line, each tenant's ledger numbered on its own: a position
says where each tenant's reader stands (``acme:5,default:120``), a bare number is the default
tenant's seq, a tenant's rows are printed ``tenant:seq``; against a real daemon."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from colibri.core import cursor
from colibri.core.errors import ColibriError
from tests.cli.test_attach import Attached
from tests.cli.test_cli import as_json, colibri, ok
from tests.helpers import Daemon, wait_until

#: No agent has it: the tasks stay pending, one ledger row each.
NOBODY = ["nobody-has-this"]


@pytest.fixture
def two_ledgers(daemon: Daemon) -> dict[str, list[str]]:
    """Three tasks of the default tenant and three of acme, submitted in turn: their ids by
    tenant, the task of seq N at index N - 1 of its tenant's list."""
    made: dict[str, list[str]] = {"default": [], "acme": []}
    for i in range(3):
        made["default"].append(daemon.submit(f"ours {i}", capabilities=NOBODY)["id"])
        made["acme"].append(daemon.submit(f"acme's {i}", tenant="acme", capabilities=NOBODY)["id"])
    rows = daemon.ledger()
    # Each tenant's ledger numbered on its own, from 1, without a gap.
    for tenant, tasks in made.items():
        assert [(r["seq"], r["task"]) for r in rows if r["tenant"] == tenant] == [
            (n + 1, task) for n, task in enumerate(tasks)
        ]
    return made


def rows_of(*args: str, root: Any) -> set[tuple[str, int]]:
    """The (tenant, seq) of each row ``colibri ledger --json ARGS`` prints, none twice."""
    out = ok(colibri("ledger", "--json", *args, root=root))
    rows = [json.loads(line) for line in out.splitlines()]
    keys = [(r["tenant"], r["seq"]) for r in rows]
    assert len(set(keys)) == len(keys), keys
    return set(keys)


def every(default: range, acme: range) -> set[tuple[str, int]]:
    return {("default", n) for n in default} | {("acme", n) for n in acme}


def test_a_tenants_rows_are_printed_tenant_colon_seq_the_defaults_by_seq(
    daemon: Daemon, two_ledgers: dict[str, list[str]]
) -> None:
    table = ok(colibri("ledger", root=daemon.root)).splitlines()
    shown = {}
    for line in table:
        position, _at, task, *_ = line.split()
        shown[task] = position
    assert shown == {
        **{task: str(n + 1) for n, task in enumerate(two_ledgers["default"])},
        **{task: f"acme:{n + 1}" for n, task in enumerate(two_ledgers["acme"])},
    }


def test_after_a_position_reads_each_tenant_beyond_its_own_seq(
    daemon: Daemon, two_ledgers: dict[str, list[str]]
) -> None:
    root = daemon.root
    assert rows_of(root=root) == every(range(1, 4), range(1, 4))
    # A tenant not named is read from its start.
    assert rows_of("--after", "acme:2", root=root) == every(range(1, 4), range(3, 4))
    assert rows_of("--after", "acme:2,default:1", root=root) == every(range(2, 4), range(3, 4))
    # The tenants in any order; one at 0 is at its start.
    assert rows_of("--after", "default:1,acme:0", root=root) == every(range(2, 4), range(1, 4))
    # A bare number is the default tenant's seq: acme's rows are all beyond it.
    assert rows_of("--after", "2", root=root) == every(range(3, 4), range(1, 4))
    assert rows_of("--after", "default:2", root=root) == every(range(3, 4), range(1, 4))
    assert rows_of("--after", "acme:3,default:3", root=root) == set()
    # --since takes the same positions, and ledger export too.
    assert rows_of("--since", "acme:1", root=root) == every(range(1, 4), range(2, 4))
    assert rows_of("--since", "1", root=root) == every(range(2, 4), range(1, 4))
    exported = ok(colibri("ledger", "export", "--since", "acme:1,default:3", root=root))
    assert [(r["tenant"], r["seq"]) for r in map(json.loads, exported.splitlines())] == [
        ("acme", 2), ("acme", 3)
    ]  # fmt: skip
    # With --task, that task's rows beyond the position only.
    task = two_ledgers["acme"][1]
    assert rows_of("--task", task, root=root) == {("acme", 2)}
    assert rows_of("--task", task, "--after", "acme:2", root=root) == set()
    # Read from the board itself, with no daemon running, the same rows.
    served = rows_of("--after", "acme:1,default:2", root=root)
    daemon.stop()
    assert rows_of("--after", "acme:1,default:2", root=root) == served == every(
        range(3, 4), range(2, 4)
    )


def test_more_prints_the_position_to_go_on_from_and_it_loses_no_row(
    daemon: Daemon, two_ledgers: dict[str, list[str]]
) -> None:
    read: list[tuple[str, int]] = []
    after = ""
    for _ in range(4):
        page = colibri("ledger", "--json", "--limit", "4", "--after", after, root=daemon.root)
        read += [(r["tenant"], r["seq"]) for r in map(json.loads, ok(page).splitlines())]
        if not page.stderr:
            break
        assert page.stderr.startswith("more: colibri ledger --after ")
        after = page.stderr.removeprefix("more: colibri ledger --after ").rstrip("\n")
        # Where it goes on from: the last row read of each tenant, as the cursor writes it.
        assert cursor.parse(after) == cursor.advance({}, _keyed(read))
    assert sorted(read) == sorted(every(range(1, 4), range(1, 4))) and len(read) == 6


def _keyed(keys: list[tuple[str, int]]) -> list[Any]:
    from types import SimpleNamespace

    return [SimpleNamespace(tenant=tenant, seq=seq, at="") for tenant, seq in keys]


def test_follow_after_a_position_prints_each_tenants_new_rows(
    daemon: Daemon, two_ledgers: dict[str, list[str]]
) -> None:
    follower = subprocess.Popen(
        [sys.executable, "-m", "colibri", "--root", str(daemon.root), "ledger", "--follow",
         "--json", "--after", "acme:3,default:2"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert follower.stdout is not None
        first = json.loads(follower.stdout.readline())
        assert (first["tenant"], first["seq"]) == ("default", 3)  # the one row beyond it
        newer = daemon.submit("acme's newest", tenant="acme", capabilities=NOBODY)["id"]
        pushed = json.loads(follower.stdout.readline())
        assert (pushed["tenant"], pushed["seq"], pushed["task"]) == ("acme", 4, newer)
    finally:
        follower.kill()
        follower.communicate()


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ("acme", "each part is TENANT:SEQ"),
        ("acme:x", "each part is TENANT:SEQ"),
        ("acme:-1", "each part is TENANT:SEQ"),
        ("acme:1,", "each part is TENANT:SEQ"),
        ("acme:1,acme:2", "acme names it twice"),
        (f"acme:{2**63}", "acme past the last seq there can be"),
        ("ACME:1", "invalid tenant 'ACME'"),
        # A time mistyped: not a tenant '2026-11-30 08' at 0, which would read from the start.
        ("2026-11-30 08:00", "invalid tenant '2026-11-30 08'"),
    ],
)
def test_a_bad_position_is_refused_in_one_line_saying_how_it_reads(
    daemon: Daemon, value: str, says: str
) -> None:
    for command in (["ledger", "--after"], ["attach", "--since"]):
        refused = colibri(*command, value, root=daemon.root)
        assert refused.returncode == 2 and refused.stdout == "", refused.stderr
        (line,) = [line for line in refused.stderr.splitlines() if line.startswith("Error:")]
        assert line == refused.stderr.strip().splitlines()[-1]
        assert f"Invalid value for {command[1]}: ledger position " in line and says in line, line
    # --since takes a time as well: what is neither is said so, in one line.
    refused = colibri("ledger", "export", "--since", value, root=daemon.root)
    assert refused.returncode == 2 and refused.stdout == "", refused.stderr
    (line,) = [line for line in refused.stderr.splitlines() if line.startswith("Error:")]
    assert "Invalid value for --since: " in line, line
    assert f"{value!r} is neither a ledger position nor a time" in line or says in line, line


def test_an_older_clients_number_for_after_is_refused_in_words(daemon: Daemon) -> None:
    """A client of the protocol before the ledger was numbered per tenant sends ``after`` as a
    number: refused in one line saying what to send instead, not read from the wrong place."""
    daemon.submit("a row", capabilities=NOBODY)
    for number in (0, 120):
        with pytest.raises(ColibriError) as caught:
            daemon.call("ledger", after=number)
        message = caught.value.message
        assert caught.value.code == "bad_request" and "\n" not in message
        assert f"not the number {number}" in message and "older protocol" in message
    assert daemon.call("ledger", after="default:0")["next"] == "default:1"


def test_attach_since_a_position_catches_up_on_the_rows_beyond_it(
    daemon: Daemon, two_ledgers: dict[str, list[str]]
) -> None:
    attached = Attached(daemon.root, "--since", "acme:2,default:3")
    try:
        wait_until(lambda: attached.saw(two_ledgers["acme"][2][-8:]))
        newer = daemon.submit("after attach", capabilities=NOBODY)["id"]
        wait_until(lambda: attached.saw(newer[-8:]))
    finally:
        daemon.stop()
    code, stderr = attached.end()
    assert code == 0, stderr
    assert attached.lines[0].endswith(", ledger at acme:3,default:3; Ctrl+C detaches")
    # Caught up on acme's third row only, shown as acme's; nothing before the position.
    (caught_up,) = [line for line in attached.lines if two_ledgers["acme"][2][-8:] in line]
    assert " #acme:3 " in caught_up
    for task in [*two_ledgers["default"], *two_ledgers["acme"][:2]]:
        assert not attached.saw(task[-8:]), task


def test_attach_to_an_empty_ledger_says_it_is_at_its_start(daemon: Daemon) -> None:
    attached = Attached(daemon.root, "--since", "0")
    try:
        wait_until(lambda: len(attached.lines) >= 1)
        row = daemon.submit("the first row", capabilities=NOBODY)["id"]
        wait_until(lambda: attached.saw(row[-8:]))
    finally:
        daemon.stop()
    code, stderr = attached.end()
    assert code == 0, stderr
    assert attached.lines[0].endswith(", ledger at its start; Ctrl+C detaches")


def test_a_backup_says_where_its_ledger_stands(
    daemon: Daemon, two_ledgers: dict[str, list[str]], tmp_path: Path
) -> None:
    said = ok(colibri("backup", str(tmp_path / "copy.sqlite"), root=daemon.root))
    assert ": 6 tasks, 6 ledger rows (at acme:3,default:3), " in said, said
    copy = as_json(colibri("backup", str(tmp_path / "again.sqlite"), "--json", root=daemon.root))
    assert (copy["ledger_rows"], copy["ledger_at"]) == (6, "acme:3,default:3")
    assert "last_seq" not in copy


def test_a_backup_of_an_empty_ledger_says_it_is_at_its_start(
    daemon: Daemon, tmp_path: Path
) -> None:
    said = ok(colibri("backup", str(tmp_path / "copy.sqlite"), root=daemon.root))
    assert ": 0 tasks, 0 ledger rows (at its start), " in said, said
    copy = as_json(colibri("backup", str(tmp_path / "again.sqlite"), "--json", root=daemon.root))
    assert copy["ledger_at"] == ""
