"""``submit-all`` (``colibri submit --from``): several submissions taken whole or not at all.

Each submission is checked as if those before it had been written; a refusal of any of them,
of whatever kind, leaves nothing of the others behind and names the one refused (``index``).
The board on a real SQLite store, driven as the server drives it (a batch, then its commit)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from colibri.config import SchedulerSettings
from colibri.core.errors import ColibriError
from colibri.core.model import TaskSpec
from colibri.daemon.board import Board
from colibri.store import Store, TaskFilter, open_store
from tests.inprocess import ManualClock

MakeBoard = Callable[..., tuple[Store, Board]]


@pytest.fixture
def make_board(tmp_path: Path) -> Iterator[MakeBoard]:
    stores: list[Store] = []

    def make(**settings: Any) -> tuple[Store, Board]:
        store = open_store(str(tmp_path / f"board{len(stores)}.sqlite"), durability="relaxed")
        stores.append(store)
        board = Board(store, SchedulerSettings(**settings), ManualClock(),
                      send_to={"api": ["web"], "web": [], "docs": []})  # fmt: skip
        board.rebuild()
        store.commit()
        board.take_effects()
        return store, board

    yield make
    for store in stores:
        store.close()


def spec(text: str, **fields: Any) -> tuple[TaskSpec, str | None]:
    key = fields.pop("idempotency_key", None)
    return TaskSpec(text=text, **fields), key


def commit(store: Store, board: Board) -> None:
    store.commit()
    board.take_effects()


def state(store: Store, board: Board) -> Any:
    """What a refused submit-all must leave as it was: the stored tasks and ledger, the board's
    memory (tasks, quotas' counts, queue) and the batch's ledger rows."""
    return (
        sorted(t.id for t in store.list_tasks(TaskFilter(limit=10_000))),
        sum(store.ledger_heads().values()),
        sorted(board.tasks),
        dict(board.transitions.pending_by_tenant),
        dict(board.transitions.open_text),
        len(board.batch.ledger_rows),
    )


def parent_of(store: Store, board: Board, **fields: Any) -> str:
    task, _ = board.submit(TaskSpec(text="the parent", **fields))
    commit(store, board)
    return task.id


@pytest.mark.parametrize(
    "kind",
    ["unknown_parent", "parent_cancelled", "quota_pending", "quota_text", "quota_children",
     "budget", "handoff", "idempotency", "bad_name"],
)  # fmt: skip
def test_a_refusal_of_any_submission_but_the_first_leaves_none_submitted(
    make_board: MakeBoard, kind: str
) -> None:
    quotas: dict[str, dict[str, Any]] = {
        "quota_pending": {"max_pending": 3},
        "quota_text": {"max_pending_mib": 1 / 1024},  # 1 KiB of open text a tenant
        "quota_children": {"max_children": 2},
    }
    settings = quotas.get(kind, {})
    store, board = make_board(**settings)
    fine = [spec("one", capabilities=["x"]), spec("two", labels=["l"])]
    if kind == "unknown_parent":
        last = spec("three", parent="01930000-0000-7000-8000-000000000000")
        code = "unknown_parent"
    elif kind == "parent_cancelled":
        parent = parent_of(store, board)
        board.cancel(parent, "no more")
        commit(store, board)
        last = spec("three", parent=parent)
        code = "parent_cancelled"
    elif kind == "quota_pending":  # two of the file and one already there fill it
        parent_of(store, board)
        last = spec("three")
        code = "quota_exceeded"
    elif kind == "quota_text":
        fine = [spec("a" * 400), spec("b" * 400)]
        last = spec("c" * 400)  # 1,200 bytes: past the quota only with the two before it
        code = "quota_exceeded"
    elif kind == "quota_children":
        parent = parent_of(store, board)
        fine = [spec("one", parent=parent), spec("two", parent=parent)]
        last = spec("three", parent=parent)  # the third child of a task allowed two
        code = "quota_exceeded"
    elif kind == "budget":
        parent = parent_of(store, board, budget_usd=1.0)
        fine = [spec("one", parent=parent, budget_usd=0.4), spec("two", parent=parent,
                                                                   budget_usd=0.4)]  # fmt: skip
        last = spec("three", parent=parent, budget_usd=0.4)  # 1.2 of the parent's 1.0
        code = "budget_exceeded"
    elif kind == "handoff":
        parent = parent_of(store, board, workspace="api")
        fine = [spec("one", parent=parent, workspace="web"), spec("two", parent=parent)]
        last = spec("three", parent=parent, workspace="docs")  # api may send to web only
        code = "handoff_refused"
    elif kind == "idempotency":
        fine = [spec("one", idempotency_key="k"), spec("one", idempotency_key="k")]  # the same
        last = spec("another", idempotency_key="k")  # the key, taken by the first, for another
        code = "idempotency_conflict"
    else:
        last = spec("three", capabilities=["NOT A NAME"])
        code = "bad_request"
    before = state(store, board)
    with pytest.raises(ColibriError) as caught:
        board.submit_all([*fine, last, spec("after")])
    assert caught.value.code == code, caught.value
    assert caught.value.index == 2
    assert caught.value.to_wire()["index"] == 2
    assert state(store, board) == before
    commit(store, board)
    assert state(store, board) == before
    # Without the refused one (and those after it), the same submissions are taken.
    made = board.submit_all(fine)
    commit(store, board)
    assert len({task.id for task, _ in made}) == (1 if kind == "idempotency" else 2)
    assert sum(store.ledger_heads().values()) > before[1]


def test_submissions_taken_together_count_against_each_other_and_take_a_key_once(
    make_board: MakeBoard,
) -> None:
    store, board = make_board(max_pending=10)
    made = board.submit_all([spec("one", idempotency_key="k"), spec("two"),
                             spec("one", idempotency_key="k")])  # fmt: skip
    commit(store, board)
    assert [created for _, created in made] == [True, True, False]
    assert made[0][0].id == made[2][0].id
    assert board.transitions.pending_by_tenant["default"] == 2
    # The first is on the board: the same key again, alone, gets it back.
    again, created = board.submit(TaskSpec(text="one"), idempotency_key="k")
    assert (again.id, created) == (made[0][0].id, False)
    # One child inherits what its parent has left: its sibling, in the same file, has none.
    parent = parent_of(store, board, budget_usd=1.0)
    with pytest.raises(ColibriError) as caught:
        board.submit_all([spec("a", parent=parent), spec("b", parent=parent)])
    assert (caught.value.code, caught.value.index) == ("budget_exceeded", 1)
