"""A session's question (``ask``) waits for its answer on its asker's connection: one question
of a task at a time. The board on a real SQLite store, driven as the server drives it."""

from __future__ import annotations

from pathlib import Path

import pytest

from colibri.core.access import OWNER
from colibri.core.errors import BadRequest
from colibri.core.model import TaskSpec
from colibri.core.protocol import RegisterAgent
from tests.inprocess import Peer, board_on, plain


def test_a_second_question_while_the_first_waits_is_refused_and_the_first_is_answered(
    tmp_path: Path,
) -> None:
    """A second ``ask`` of the task, on another connection, while the first asker waits: before,
    it took the first one's place, and the first asker was never answered. Now it is refused
    in one line, the first is answered, and once an asker is gone (its session asks again
    after a restart or a dropped connection) the question is taken again."""
    with board_on(tmp_path / "board.sqlite") as (board, _):
        store = board.store
        agent = Peer("harness")
        board.register(RegisterAgent(name="a1", capabilities=["x"]), agent)
        task, _ = board.submit(TaskSpec(text="asks", capabilities=["x"]))
        board.dispatch()
        store.commit()
        board.take_effects()
        epoch = board.tasks[task.id].epoch
        claim = board.claim_of(task.id, epoch)

        def ask(peer: Peer, request_id: int, question: str) -> None:
            holder = board.reporter(
                peer, OWNER, "ask", task.id, epoch, from_session=True, claim=claim
            )
            board.ask(holder, peer, request_id, task.id, epoch, question)
            store.commit()
            board.take_effects()

        first, second, third = Peer("first"), Peer("second"), Peer("third")
        ask(first, 1, "which branch?")
        with pytest.raises(BadRequest, match="one question at a time"):
            ask(second, 2, "which tests?")
        assert board.tasks[task.id].question == "which branch?"
        board.answer(task.id, "main")
        store.commit()
        outbox = board.take_effects().outbox
        assert [(p, plain(m)) for p, m in outbox if p is first] == [
            (first, {"id": 1, "ok": True, "answer": "main"})
        ]
        ask(second, 3, "which tests?")
        board.disconnect(second)  # its connection dropped: the question waits for it
        ask(third, 4, "which tests?")
        assert board.reports.askers[task.id] == (third, 4)
