"""What a connection's requests may see and act on: to a token, its tenant only.

The server has already checked that the connection's principal may send the command at all
(``core/access.py``); the handlers keep a token to its tenant through these guards: it acts in
that tenant only, and another tenant's tasks, agents, ledger rows, costs and schedules do not
exist for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from colibri.core.access import OWNER, Principal
from colibri.core.model import Task
from colibri.core.states import State
from colibri.daemon.board import Board
from colibri.daemon.board.capacity import LiveAgent
from colibri.store import named_task

if TYPE_CHECKING:
    from colibri.daemon.connection import Connection


class Guards:
    """The board as one connection may see it."""

    def __init__(self, board: Board) -> None:
        self.board = board

    @staticmethod
    def principal(conn: Connection) -> Principal:
        return conn.principal or OWNER  # the server lets nothing but auth through without one

    def task(self, conn: Connection, task_id: str) -> Task:
        """The task, if the connection may see it: to a token another tenant's is unknown."""
        task = self.board.get(task_id)
        self.principal(conn).visible(task_id, task.tenant)
        return task

    def resolve(self, conn: Connection, task_id: str) -> str:
        """The whole id of the one task whose id starts or ends with ``task_id``, among the
        tasks the connection may see (a token's never counts another tenant's); ``task_id``
        itself when it is a whole id or names none, for the caller's ``unknown_task``.

        The one place where an id an operator typed is read: every command that names a task
        for one resolves it here, so the short form shown anywhere is taken everywhere.
        """
        if task_id in self.board.tasks:
            return task_id
        return named_task(
            task_id,
            self.principal(conn).tenant,
            lambda query: [task.id for task in self.board.list_tasks(query)],
            self.board.store.count_tasks,
        )

    def seen_task(self, conn: Connection, task_id: str) -> str:
        """The whole id of the task ``task_id`` names (``resolve``), once the connection may
        see it (``task``)."""
        resolved = self.resolve(conn, task_id)
        self.task(conn, resolved)
        return resolved

    def reporter(
        self,
        conn: Connection,
        cmd: str,
        task_id: str,
        epoch: int,
        *,
        from_session: bool = False,
        claim: str | None = None,
        same: tuple[State, str] | None = None,
    ) -> LiveAgent:
        return self.board.reporter(
            conn, self.principal(conn), cmd, task_id, epoch,
            from_session=from_session, claim=claim, same=same,
        )  # fmt: skip
