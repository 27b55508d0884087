"""Tasks that wait for others from the command line: ``submit --after``, a plan submitted
with ``submit --from`` whose lines name each other, and what ``show`` and ``why`` say; against
a real daemon and an agent that runs what it is given."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.test_cli import as_json, colibri, error_line, ok
from tests.helpers import Daemon, FakeAgent


def test_submit_after_holds_a_task_until_its_dependency_is_done(daemon: Daemon) -> None:
    first = ok(colibri("submit", "plan it", root=daemon.root)).strip()
    submitted = colibri("submit", "build it", "--after", first[-8:], root=daemon.root)
    second = ok(submitted).strip()
    assert f"waits for 1 task: {first} (pending)" in submitted.stderr
    shown = ok(colibri("show", second, root=daemon.root))
    assert f"after:          {first}" in shown
    assert "if_dependency_fails: cancel" in shown
    agent = FakeAgent(daemon, "a1")
    try:
        assign = agent.next_assign()
        assert assign["task"]["id"] == first
        why = ok(colibri("why", second, root=daemon.root)).splitlines()[0]
        assert why == f"task {second} is pending: waits for 1 task: {first} (running)"
        agent.out(assign, "the plan")
        assign = agent.next_assign()
        assert assign["task"]["id"] == second
        assert assign["task"]["after"] == [first]
        agent.out(assign)
    finally:
        agent.close()
    rows = ok(colibri("ledger", "--task", second, "--json", root=daemon.root)).splitlines()
    reasons = [json.loads(row).get("reason") for row in rows]
    assert reasons.count("released: every task it waited for is done") == 1


def test_a_plan_from_a_file_names_its_steps_and_a_circle_is_refused_with_its_line(
    daemon: Daemon, tmp_path: Path
) -> None:
    plan = tmp_path / "plan.jsonl"
    steps = [
        {"name": "plan", "text": "write the plan"},
        {"name": "build", "text": "implement it", "after": ["plan"]},
        {"name": "test", "text": "test it", "after": ["build"]},
        {"name": "review", "text": "review it", "after": ["test", "build"]},
    ]
    plan.write_text("".join(json.dumps(s) + "\n" for s in steps))
    made = colibri("submit", "--from", str(plan), root=daemon.root)
    ids = ok(made).split()
    assert len(ids) == 4
    assert "3 tasks wait: for other tasks to end" in made.stderr
    tasks = {t["id"]: t for t in daemon.call("list", limit=10)["tasks"]}
    assert tasks[ids[3]]["after"] == [ids[2], ids[1]]
    assert daemon.call("status")["blocked"] == 3

    circle = tmp_path / "circle.jsonl"
    circle.write_text("".join(json.dumps(s) + "\n" for s in [
        {"name": "a", "text": "a"},
        {"name": "b", "text": "b", "after": ["c"]},
        {"name": "c", "text": "c", "after": ["b"]},
    ]))  # fmt: skip
    line = error_line(colibri("submit", "--from", str(circle), root=daemon.root))
    assert line == (
        f"colibri: {circle}:2: the plan waits in a circle: b → c → b; a task cannot wait, "
        "even through others, for itself; nothing was submitted"
    )
    unknown = tmp_path / "unknown.jsonl"
    unknown.write_text(json.dumps({"text": "x", "after": ["nosuchname"]}) + "\n")
    line = error_line(colibri("submit", "--from", str(unknown), root=daemon.root))
    assert line.startswith(f"colibri: {unknown}:1: ") and "nosuchname" in line
    assert len(daemon.call("list", limit=10)["tasks"]) == 4


def test_submit_from_refuses_after_beside_it(daemon: Daemon, tmp_path: Path) -> None:
    plan = tmp_path / "one.jsonl"
    plan.write_text('{"text": "x"}\n')
    refused = colibri("submit", "--from", str(plan), "--after", "abcd", root=daemon.root)
    assert refused.returncode == 2
    assert "Error: --from takes every field from the file; leave out --after" in refused.stderr


def test_schedule_add_then_makes_a_pipeline_that_show_lists(daemon: Daemon) -> None:
    ok(colibri("schedule", "add", "nightly", "plan the night", "--cron", "0 3 * * *",
               "--workspace", "api", "--then", "implement it", "--then", "review it",
               root=daemon.root))  # fmt: skip
    shown = ok(colibri("schedule", "show", "nightly", root=daemon.root)).splitlines()
    assert "then step-1 (after task): implement it" in shown
    assert "then step-2 (after step-1): review it" in shown
    fired = as_json(colibri("schedule", "run", "nightly", "--json", root=daemon.root))
    tasks = daemon.call("list", limit=10)["tasks"]
    assert [(t["text"], t["workspace"]) for t in tasks] == [
        ("plan the night", "api"), ("implement it", "api"), ("review it", "api")
    ]
    assert fired["id"] == tasks[2]["id"] and tasks[2]["after"] == [tasks[1]["id"]]


def test_a_plan_line_waiting_for_too_many_is_refused_with_its_line(
    daemon: Daemon, tmp_path: Path
) -> None:
    wide = tmp_path / "wide.jsonl"
    wide.write_text(json.dumps({"text": "ok"}) + "\n"
                    + json.dumps({"text": "x", "after": [f"n{i}" for i in range(1001)]}) + "\n")
    line = error_line(colibri("submit", "--from", str(wide), root=daemon.root))
    assert line.startswith(f"colibri: {wide}:2: after: Expected `array` of length <= 1000")
    assert daemon.call("list", limit=10)["tasks"] == []


def test_a_base_that_is_no_ref_is_refused_in_words(daemon: Daemon) -> None:
    for base in ("--upload-pack=touch /tmp/x", "main\nclaim: forged", "two words"):
        line = error_line(colibri("submit", "x", "--base", base, root=daemon.root))
        assert "is not a branch or commit name: give one without spaces or control " \
            "characters, not starting with -" in line, line  # fmt: skip
    assert daemon.call("list", limit=10)["tasks"] == []
    made = ok(colibri("submit", "x", "--base", "release/2.x~1", "--json", root=daemon.root))
    assert json.loads(made)["base"] == "release/2.x~1"
