"""The history checker finds what it is meant to find (on small hand-made histories)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.reliability import history


def task(task_id: str, state: str, **extra: Any) -> dict[str, Any]:
    row = {
        "id": task_id,
        "state": state,
        "outcome": None,
        "epoch": 0,
        "attempts": 0,
        "max_attempts": 1,
        "idempotency_key": None,
        "parent": None,
        "agent": None,
        "error": None,
        "schedule": None,
        "tenant": "default",
    }
    row.update(extra)
    return row


def rows(*edges: tuple[str, str | None, str, int, str | None]) -> list[dict[str, Any]]:
    return [
        {
            "seq": n,
            "at": f"2026-01-01T00:00:{n:02d}.000Z",
            "task": t,
            "schedule": None,
            "tenant": "default",
            "from_state": a,
            "to_state": b,
            "agent": agent,
            "epoch": epoch,
            "reason": None,
        }
        for n, (t, a, b, epoch, agent) in enumerate(edges, start=1)
    ]


def done_once() -> history.StoreSnapshot:
    """t1: submitted, claimed by x (epoch 1), done, closed."""
    return history.StoreSnapshot(
        tasks={"t1": task("t1", "closed", outcome="done", epoch=1, attempts=1, agent="x")},
        ledger=rows(
            ("t1", None, "pending", 0, None),
            ("t1", "pending", "running", 1, "x"),
            ("t1", "running", "done", 1, "x"),
            ("t1", "done", "closed", 1, "x"),
        ),
        fires=[],
        integrity="ok",
    )


def start(task_id: str, epoch: int, agent: str = "x") -> dict[str, Any]:
    return {"task_id": task_id, "epoch": epoch, "event": "start", "agent": agent}


def test_a_clean_history_has_no_findings() -> None:
    ok = {"op": "submit", "idempotency_key": None, "invoke_t": 0, "outcome": "ok"}
    report = history.check(
        done_once(),
        ops=[{**ok, "task_id": "t1"}],
        agent_events=[start("t1", 1), {**start("t1", 1), "event": "finish"}],
    )
    assert report.problems() == {}


def test_lost_acknowledgements_and_keys_with_two_ids() -> None:
    ops = [
        {"op": "submit", "idempotency_key": "k", "invoke_t": 0, "outcome": "ok", "task_id": "t1"},
        {"op": "submit", "idempotency_key": "k", "invoke_t": 1, "outcome": "ok", "task_id": "t9"},
        {"op": "submit", "idempotency_key": "u", "invoke_t": 2, "outcome": "unknown"},
    ]
    report = history.check(done_once(), ops=ops)
    assert report.lost == ["t9"]
    assert report.duplicate_ids_per_key == ["k"]


def test_double_starts_replays_and_phantom_sessions() -> None:
    events = [start("t1", 1), start("t1", 1), start("t1", 2), start("t2", 1)]
    report = history.check(done_once(), agent_events=events, check_stuck=False)
    assert report.duplicate_starts == [("t1", 1)]
    assert report.respawns == ["t1", "t2"]
    assert report.phantom_starts == [("t1", 2), ("t2", 1)]
    wrong_agent = history.check(done_once(), agent_events=[start("t1", 1, agent="y")])
    assert wrong_agent.phantom_starts == [("t1", 1)]


def test_illegal_edges_second_outcomes_and_replay_mismatch() -> None:
    snapshot = done_once()
    reopened = rows(*[("t1", "closed", "running", 2, "x")] * 5)[-1]  # seq 5
    snapshot.ledger.append(reopened)
    report = history.check(snapshot)
    assert report.illegal_transitions and "not an edge" in report.illegal_transitions[0]
    assert report.replay_mismatches  # the ledger now ends in running, the store says closed
    twice = done_once()
    twice.ledger = rows(
        ("t1", None, "pending", 0, None),
        ("t1", "pending", "running", 1, "x"),
        ("t1", "running", "done", 1, "x"),
        ("t1", "done", "failed", 1, "x"),
    )
    assert history.check(twice).duplicate_terminals == ["t1"]
    assert history.check(twice).illegal_transitions


def test_stuck_running_and_open_descendants_of_a_cancelled_task() -> None:
    snapshot = history.StoreSnapshot(
        tasks={
            "p": task("p", "closed", outcome="cancelled"),
            "c": task("c", "running", parent="p", epoch=1, attempts=1, agent="x"),
            "g": task("g", "pending", parent="c"),
        },
        ledger=[],
        fires=[],
        integrity="ok",
    )
    report = history.check(snapshot, live=set())
    assert report.stuck_running == ["c"]
    assert report.open_descendants_of_cancelled == ["c", "g"]
    assert history.check(snapshot, live={("c", 1)}).stuck_running == []


def test_mirror_missing_extra_fused_and_torn(tmp_path: Path) -> None:
    snapshot = done_once()
    path = tmp_path / "ledger.jsonl"
    lines = [json.dumps(r) for r in snapshot.ledger]
    path.write_text(lines[0] + "\n" + lines[1] + lines[2] + "\n" + lines[2][:20])
    report = history.check(snapshot, mirror=history.read_mirror(path))
    assert report.fused_lines == [(lines[1] + lines[2])[:200], "<torn last line>"]
    assert report.mirror_missing == [2, 3, 4]
    path.write_text(
        "\n".join([*lines, lines[3], json.dumps({**snapshot.ledger[0], "seq": 9})]) + "\n"
    )
    report = history.check(snapshot, mirror=history.read_mirror(path))
    assert report.mirror_duplicated == [4] and report.mirror_extra == [9]
    changed = [json.dumps({**snapshot.ledger[0], "to_state": "running"}), *lines[1:]]
    path.write_text("\n".join(changed) + "\n")
    assert history.check(snapshot, mirror=history.read_mirror(path)).mirror_mismatched == [1]


def test_ledger_seq_gaps() -> None:
    snapshot = done_once()
    del snapshot.ledger[1]
    assert history.check(snapshot, check_stuck=False).seq_gaps == [3]
