"""The commands on tasks: submissions, reads of tasks, costs and the ledger, and what an
operator does to a task (cancel, retry, answer, wait for it)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec

from colibri.core import cursor, sizes, states
from colibri.core import protocol as p
from colibri.core import replies as r
from colibri.core.errors import BadRequest, ColibriError, UnknownParent, UnknownTask
from colibri.core.model import DEFAULT_TENANT, HarnessStatus, Task, TaskSpec
from colibri.core.states import State
from colibri.daemon.board import Board
from colibri.daemon.guards import Guards
from colibri.daemon.pages import TOKEN_FAMILY_BYTES, TOKEN_LIST, ledger_page, past, task_page
from colibri.store import TaskFilter

if TYPE_CHECKING:
    from colibri.daemon.connection import Connection
    from colibri.daemon.server import Server
    from colibri.daemon.supervisor import Supervisor


class TaskCommands:
    def __init__(
        self, board: Board, guards: Guards, server: Server, supervisor: Supervisor
    ) -> None:
        self.board = board
        self.guards = guards
        #: For the shares of waits and ledger follows, and the ledger's followers.
        self.server = server
        self.supervisor = supervisor

    def intake_task(self, req: p.TaskFields, conn: Connection) -> r.Reply | None:
        # create-task too: its spec carries the agent it is pinned to.
        spec = self._submission(req, conn)
        task, created = self.board.submit(
            spec, idempotency_key=req.idempotency_key, claim=req.claim
        )
        return r.SubmitReply(task=task, created=created, waits=self._waits(task, created, conn))

    def submit_all(self, req: p.SubmitAll, conn: Connection) -> r.Reply | None:
        """Every submission checked — each as if those before it had been taken — before any
        is written: all of them, in this batch's transaction, or none."""
        submissions = []
        names = {item.name for item in req.tasks if item.name is not None}
        for index, item in enumerate(req.tasks):
            try:
                if item.claim is not None:
                    raise BadRequest("a hand-off (claim) is submitted alone, with submit")
                spec = self._submission(item, conn, local=names)
                submissions.append((spec, item.idempotency_key))
            except ColibriError as exc:
                exc.index = index
                raise
        made = self.board.submit_all(submissions, [item.name for item in req.tasks])
        return r.SubmitAllReply(
            tasks=[
                r.Submitted(task=task, created=created, waits=self._waits(task, created, conn))
                for task, created in made
            ]
        )

    def _submission(
        self, req: p.TaskFields, conn: Connection, local: set[str] | frozenset[str] = frozenset()
    ) -> TaskSpec:
        """A submission's spec as the connection may make it, or why not: its parent's and
        its dependencies' whole ids, among the tasks it sees (``local``: the names of the
        submissions sent with it, which a dependency may be, left as they are); a token's
        tenant; a hand-off by the holder's token only; a tenant this daemon serves."""
        spec = req.spec()
        principal = self.guards.principal(conn)
        if spec.parent is not None:
            spec = msgspec.structs.replace(spec, parent=self.guards.resolve(conn, spec.parent))
        if spec.after:
            after = [a if a in local else self.guards.resolve(conn, a) for a in spec.after]
            spec = msgspec.structs.replace(spec, after=after)
        if not principal.is_owner:
            spec = msgspec.structs.replace(spec, tenant=principal.tenant_for(spec.tenant))
            if spec.parent is not None:
                try:
                    parent = self.guards.task(conn, spec.parent)
                except UnknownTask:
                    raise UnknownParent(spec.parent) from None
                if req.claim is not None and parent.state == State.RUNNING:
                    # A hand-off is its parent's session reporting: by the holder's token only.
                    self.guards.reporter(
                        conn, "a hand-off", parent.id, parent.epoch, from_session=True,
                        claim=req.claim,
                    )  # fmt: skip
        self.board.tenancy.check(spec.tenant)
        return spec

    def _waits(self, task: Task, created: bool, conn: Connection) -> str | msgspec.UnsetType:
        """Why a task just made will wait (unset: it will not, or it was made before)."""
        waits = self.board.waits_because(task) if created else None
        if waits is None and created:
            down = self._harnesses_down(task, conn, lambda: self._anyone_online(task.tenant))
            if down:
                waits = "; ".join(h.line() for h in down)
        return msgspec.UNSET if waits is None else waits

    def _anyone_online(self, tenant: str) -> bool:
        return any(a.online and a.tenant == tenant for a in self.board.agents.values())

    def _harnesses_down(
        self, task: Task, conn: Connection, anyone_can: Callable[[], bool]
    ) -> list[HarnessStatus]:
        """The workspace harnesses that would serve ``task`` but exited, and whose agent is
        not online since: the harness of its workspace (or of the workspace it is pinned to);
        for a task of no workspace, every one, if no other agent can take it (``anyone_can``).
        Said to the root's owner only: the workspaces are the default tenant's, and their
        harnesses' words are the host's."""
        if (
            not self.guards.principal(conn).is_owner
            or task.tenant != DEFAULT_TENANT
            or task.state != State.PENDING
        ):
            return []
        everywhere = task.workspace is None and not (task.pinned and task.agent is not None)
        if task.workspace is not None:
            names = [task.workspace]
        elif not everywhere:
            names = [str(task.agent)]
        else:
            names = list(self.supervisor.harnesses)
        down = []
        for name in names:
            harness = self.supervisor.harnesses.get(name)
            if harness is None or harness.last_failure is None:
                continue
            agent = self.board.agents.get(name)
            if agent is not None and agent.online and agent.peer is not None:
                continue  # it came back: its agent serves
            down.append(harness.status(self.supervisor.clock.monotonic()))
        if down and everywhere and anyone_can():
            return []  # a task of no workspace that another agent can take
        return down

    def get(self, req: p.Get, conn: Connection) -> r.Reply | None:
        return r.TaskReply(task=self.guards.task(conn, self.guards.resolve(conn, req.task)))

    def list_tasks(self, req: p.ListTasks, conn: Connection) -> r.Reply | None:
        """Up to ``limit`` tasks, and fewer when they would pass REPLY_BUDGET bytes: read
        from the store a page at a time, so a long page is never built whole. Oldest first,
        or newest first (``newest``); ``next`` is where the next page starts, in that order."""
        principal = self.guards.principal(conn)
        tenant = principal.tenant_for(req.tenant)
        if tenant is not None:
            self.board.tenancy.check(tenant)
        parent = None if req.parent is None else self.guards.resolve(conn, req.parent)
        limit = req.limit if principal.is_owner else min(req.limit, TOKEN_LIST)
        query = TaskFilter(
            state=req.state, outcome=req.outcome, agent=req.agent, workspace=req.workspace,
            parent=parent, tenant=tenant, after=req.after, before=req.before,
            newest=req.newest, limit=limit,
        )  # fmt: skip
        tasks, exhausted = task_page(self.board, query)
        last = tasks[-1].id if tasks and not exhausted else None
        reply = r.TaskPage(tasks=tasks, next=last)
        if req.count:
            reply.remaining = 0 if last is None else self.board.store.count_tasks(past(query, last))
        return reply

    def cancel(self, req: p.Cancel, conn: Connection) -> r.Reply | None:
        task_id = self.guards.seen_task(conn, req.task)
        cancelled = self.board.cancel(task_id, req.reason)
        return r.Cancelled(cancelled=[t.id for t in cancelled])

    def cost(self, req: p.CostTotals, conn: Connection) -> r.Reply | None:
        since = req.since or ""
        if since:
            from colibri.core.model import parse_rfc3339, rfc3339

            try:
                since = rfc3339(parse_rfc3339(since if "T" in since else since + "T00:00:00Z"))
            except ValueError:
                raise BadRequest(
                    f"since {req.since!r} is not a time: write 2026-11-30 or 2026-11-30T08:00:00Z"
                ) from None
        rows = self.board.store.cost_totals(req.by, since, self.guards.principal(conn).tenant)
        return r.CostTotals(by=req.by, since=since or None, totals=rows)

    def family(self, req: p.Family, conn: Connection) -> r.Reply | None:
        task_id = self.guards.seen_task(conn, req.task)
        budget = sizes.REPLY_BUDGET if self.guards.principal(conn).is_owner else TOKEN_FAMILY_BYTES
        top, members, complete = self.board.family(task_id, budget)
        return r.Family(root=top, tasks=members, complete=complete)

    def retry(self, req: p.Retry, conn: Connection) -> r.Reply | None:
        task_id = self.guards.seen_task(conn, req.task)
        return r.TaskReply(task=self.board.retry(task_id))

    def why(self, req: p.Why, conn: Connection) -> r.Reply | None:
        task_id = self.guards.seen_task(conn, req.task)
        reply = self.board.why(task_id)
        # No agent can take it: a workspace harness that keeps exiting may be why.
        eligible = any(row.eligible for row in reply.agents)
        down = [] if eligible else self._harnesses_down(reply.task, conn, lambda: False)
        if down:
            reply.summary += " — " + "; ".join(h.line() for h in down)
        reply.harnesses = down
        return reply

    def wait(self, req: p.Wait, conn: Connection) -> r.Reply | None:
        task_id = self.guards.resolve(conn, req.task)
        if self.guards.task(conn, task_id).state not in states.ENDED:
            self.server.check_share(conn, "waits")
        task = self.board.wait(conn, req.id, task_id)
        return None if task is None else r.TaskReply(task=task)

    def answer(self, req: p.Answer, conn: Connection) -> r.Reply | None:
        task_id = self.guards.seen_task(conn, req.task)
        return r.TaskReply(task=self.board.answer(task_id, req.text))

    def ledger(self, req: p.Ledger, conn: Connection) -> r.Reply | None:
        """Up to ``limit`` rows beyond the cursor ``after``, fewer when they would pass
        REPLY_BUDGET."""
        principal = self.guards.principal(conn)
        if req.follow and not conn.follows_ledger:
            self.server.check_share(conn, "follows")
        task_id = None
        if req.task is not None:
            task_id = self.guards.resolve(conn, req.task)
            if not principal.is_owner:
                self.guards.task(conn, task_id)
        if not isinstance(req.after, str):
            raise BadRequest(cursor.OLD_FORM.format(value=req.after))
        reply = ledger_page(self.board, principal, req.after, req.limit, task_id)
        if req.follow:
            self.server.follow_ledger(conn, task_id)
        return reply
