"""One handler per wire command: validate, call the board, shape the reply.

A handler returns the reply's fields (``ok`` and ``id`` are added by the server) or ``None``
when the reply comes later (``wait``). Errors are raised as ``ColibriError``s.

The server has already checked that the connection's principal may send the command at all
(``core/access.py``); here each handler keeps a token to its tenant: it acts in that tenant
only, and another tenant's tasks, agents, ledger rows, costs and schedules do not exist for it.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import msgspec

from colibri import __version__
from colibri.core import protocol as p
from colibri.core import sizes, states
from colibri.core.access import OWNER, Principal
from colibri.core.errors import (
    BadRequest,
    ColibriError,
    Forbidden,
    Throttled,
    Unauthorized,
    UnknownParent,
    UnknownTask,
)
from colibri.core.model import (
    DEFAULT_TENANT,
    HarnessStatus,
    LedgerEntry,
    Task,
    TaskSpec,
    normalize_names,
)
from colibri.core.states import State
from colibri.daemon.board import Board
from colibri.daemon.board.capacity import LiveAgent
from colibri.daemon.board.reports import failure
from colibri.daemon.tokens import TokenAuthority
from colibri.store import TaskFilter, named_task

if TYPE_CHECKING:
    from colibri.daemon.bus import Bus
    from colibri.daemon.connection import Connection
    from colibri.daemon.schedules import ScheduleRunner
    from colibri.daemon.server import Server
    from colibri.daemon.supervisor import Supervisor

log = logging.getLogger(__name__)

Reply = dict[str, Any] | None
#: Tasks and ledger rows read from the store at a time for one reply.
LIST_PAGE = 64
LEDGER_PAGE = 500
#: What one request of a token reads at most, all of it its tenant's: ``ledger`` rows and
#: ``list`` tasks (a page each, a few milliseconds of the loop), ``family`` members by bytes of
#: reply. The others wait behind one request at most (``Server.may_serve``): it must be short.
#: The client goes on from ``next`` (``family``: by ``list`` and ``parent``).
LEDGER_SCAN = LEDGER_PAGE
TOKEN_LIST = 500
TOKEN_FAMILY_BYTES = sizes.REPLY_BUDGET // 8


def _past(query: TaskFilter, last: str) -> TaskFilter:
    """``query`` from beyond ``last`` on, in its order: the next page's filter."""
    return replace(query, before=last) if query.newest else replace(query, after=last)


class Commands:
    def __init__(
        self,
        board: Board,
        server: Server,
        bus: Bus,
        schedules: ScheduleRunner,
        supervisor: Supervisor,
        tokens: TokenAuthority,
    ) -> None:
        self.board = board
        self.tokens = tokens
        #: For the connection-level commands: its settings, counts, and ledger followers.
        self.server = server
        self.bus = bus
        self.schedules = schedules
        self.supervisor = supervisor
        self.started = time.time()
        self.table: dict[type[p.Request], Callable[[Any, Connection], Reply]] = {
            p.Ping: self.ping,
            p.Status: self.status,
            p.IntakeTask: self.intake_task,
            p.Submit: self.intake_task,
            p.CreateTask: self.intake_task,
            p.SubmitAll: self.submit_all,
            p.Get: self.get,
            p.ListTasks: self.list_tasks,
            p.Cancel: self.cancel,
            p.Retry: self.retry,
            p.Family: self.family,
            p.CostTotals: self.cost,
            p.Why: self.why,
            p.Wait: self.wait,
            p.ToggleSwarm: self.toggle_swarm,
            p.Agents: self.agents,
            p.Skills: self.skills,
            p.DescribeSkill: self.describe_skill,
            p.Ledger: self.ledger,
            p.RegisterAgent: self.register_agent,
            p.Heartbeat: self.heartbeat,
            p.Out: self.out,
            p.Fail: self.fail,
            p.Reclaimed: self.reclaimed,
            p.Ready: self.ready,
            p.Ask: self.ask,
            p.Answer: self.answer,
            p.Requeue: self.requeue,
            p.Subscribe: self.subscribe,
            p.Send: self.send,
            p.Consumed: self.consumed,
            p.ScheduleAdd: self.schedule_add,
            p.ScheduleList: self.schedule_list,
            p.ScheduleGet: self.schedule_get,
            p.ScheduleRun: self.schedule_run,
            p.ScheduleRemove: self.schedule_rm,
            p.SchedulePause: self.schedule_pause,
            p.ScheduleResume: self.schedule_resume,
            p.Auth: self.auth,
            p.TokenCreate: self.token_create,
            p.TokenList: self.token_list,
            p.TokenRevoke: self.token_revoke,
        }

    def handle(self, req: p.Request, conn: Connection) -> Reply:
        return self.table[type(req)](req, conn)

    # -- tenants -----------------------------------------------------------------------------

    @staticmethod
    def _principal(conn: Connection) -> Principal:
        return conn.principal or OWNER  # the server lets nothing but auth through without one

    def _task(self, conn: Connection, task_id: str) -> Task:
        """The task, if the connection may see it: to a token another tenant's is unknown."""
        task = self.board.get(task_id)
        self._principal(conn).visible(task_id, task.tenant)
        return task

    def _resolve(self, conn: Connection, task_id: str) -> str:
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
            self._principal(conn).tenant,
            lambda query: [task.id for task in self.board.list_tasks(query)],
            self.board.store.count_tasks,
        )

    def _reporter(
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
            conn, self._principal(conn), cmd, task_id, epoch,
            from_session=from_session, claim=claim, same=same,
        )  # fmt: skip

    # -- commands ----------------------------------------------------------------------------

    def auth(self, req: p.Auth, conn: Connection) -> Reply:
        if conn.remote is None:
            return {"role": "owner", "tenant": None}  # the kernel said who it is already
        if conn.principal is not None:
            raise BadRequest("this connection has authenticated already")
        wait = self.server.throttle.blocked(conn.remote)
        if wait is not None:  # it connected before the limit was reached: no guess now either
            raise Throttled(f"too many failed logins from {conn.remote}; try again in {wait:.0f}s")
        try:
            principal = self.tokens.authenticate(req.token)
        except Unauthorized as exc:
            log.warning(
                "failed login: %s",
                exc.message,
                extra={"event": "login_failed", "peer": conn.remote},
            )
            self.server.login_failed(conn.remote)
            raise
        # A good token of a tenant another daemon serves: told where (not a failed login).
        self.board.tenancy.check(principal.tenant)
        if not conn.authenticated(principal):
            return None  # told busy, and closed
        log.info(
            "authenticated",
            extra={"event": "login", "peer": conn.remote, "token": principal.token,
                   "role": principal.kind, "tenant": principal.tenant},
        )  # fmt: skip
        return {"role": principal.kind, "tenant": principal.tenant, "agent": principal.agent}

    def token_create(self, req: p.TokenCreate, conn: Connection) -> Reply:
        issued = self.tokens.create(
            req.tenant, req.role, req.agent, req.capabilities, req.expires_in, req.workspace
        )
        # (Not "id": the reply's own is the request's.)
        return {"token": issued.token, "secret": issued.text}

    def token_list(self, req: p.TokenList, conn: Connection) -> Reply:
        return {"tokens": self.tokens.list()}

    def token_revoke(self, req: p.TokenRevoke, conn: Connection) -> Reply:
        token = self.tokens.revoke(self.tokens.resolve(req.token))
        return {"token": token, "closed": self.server.close_token(token.id)}

    def ping(self, req: p.Ping, conn: Connection) -> Reply:
        # The line limit, so that a client can cut a long report to fit (``fit_report``).
        return {"pong": True, "max_line": self.server.config.server.max_line}

    def status(self, req: p.Status, conn: Connection) -> Reply:
        config = self.server.config
        principal = self._principal(conn)
        if not principal.is_owner:
            # The board's counts are every tenant's: a token is told who it is, not those.
            return {
                "daemon": {"version": __version__},
                "paused": self.board.paused,
                "you": {"role": principal.kind, "tenant": principal.tenant,
                        "agent": principal.agent, "token": principal.token},
            }  # fmt: skip
        return {
            "daemon": {
                "pid": os.getpid(),
                "version": __version__,
                "root": str(config.root),
                "store": self.board.store.location,
                "durability": config.durability,
                "uptime": round(time.time() - self.started, 3),
                "connections": self.server.connection_count,
                "listen": self.server.listening,
                "metrics": self.server.metrics_url,
            },
            **self.board.status(),
            "harnesses": self.supervisor.status(),
        }

    def intake_task(self, req: p.TaskFields, conn: Connection) -> Reply:
        # create-task too: its spec carries the agent it is pinned to.
        spec = self._submission(req, conn)
        task, created = self.board.submit(
            spec, idempotency_key=req.idempotency_key, claim=req.claim
        )
        return self._submitted(task, created, conn)

    def submit_all(self, req: p.SubmitAll, conn: Connection) -> Reply:
        """Every submission checked — each as if those before it had been taken — before any
        is written: all of them, in this batch's transaction, or none."""
        submissions = []
        for index, item in enumerate(req.tasks):
            try:
                if item.claim is not None:
                    raise BadRequest("a hand-off (claim) is submitted alone, with submit")
                submissions.append((self._submission(item, conn), item.idempotency_key))
            except ColibriError as exc:
                exc.index = index
                raise
        made = self.board.submit_all(submissions)
        return {"tasks": [self._submitted(task, created, conn) for task, created in made]}

    def _submission(self, req: p.TaskFields, conn: Connection) -> TaskSpec:
        """A submission's spec as the connection may make it, or why not: its parent's whole
        id, among the tasks it sees; a token's tenant; a hand-off by the holder's token only;
        a tenant this daemon serves."""
        spec = req.spec()
        principal = self._principal(conn)
        if spec.parent is not None:
            spec = msgspec.structs.replace(spec, parent=self._resolve(conn, spec.parent))
        if not principal.is_owner:
            spec = msgspec.structs.replace(spec, tenant=principal.tenant_for(spec.tenant))
            if spec.parent is not None:
                try:
                    parent = self._task(conn, spec.parent)
                except UnknownTask:
                    raise UnknownParent(spec.parent) from None
                if req.claim is not None and parent.state == State.RUNNING:
                    # A hand-off is its parent's session reporting: by the holder's token only.
                    self._reporter(
                        conn, "a hand-off", parent.id, parent.epoch, from_session=True,
                        claim=req.claim,
                    )  # fmt: skip
        self.board.tenancy.check(spec.tenant)
        return spec

    def _submitted(self, task: Task, created: bool, conn: Connection) -> dict[str, Any]:
        reply: dict[str, Any] = {"task": task, "created": created}
        waits = self.board.waits_because(task) if created else None
        if waits is None and created:
            down = self._harnesses_down(task, conn, lambda: self._anyone_online(task.tenant))
            if down:
                waits = "; ".join(h.line() for h in down)
        if waits is not None:
            reply["waits"] = waits
        return reply

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
            not self._principal(conn).is_owner
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

    def get(self, req: p.Get, conn: Connection) -> Reply:
        return {"task": self._task(conn, self._resolve(conn, req.task))}

    def list_tasks(self, req: p.ListTasks, conn: Connection) -> Reply:
        """Up to ``limit`` tasks, and fewer when they would pass REPLY_BUDGET bytes: read
        from the store a page at a time, so a long page is never built whole. Oldest first,
        or newest first (``newest``); ``next`` is where the next page starts, in that order."""
        principal = self._principal(conn)
        tenant = principal.tenant_for(req.tenant)
        if tenant is not None:
            self.board.tenancy.check(tenant)
        parent = None if req.parent is None else self._resolve(conn, req.parent)
        limit = req.limit if principal.is_owner else min(req.limit, TOKEN_LIST)
        query = TaskFilter(
            state=req.state, outcome=req.outcome, agent=req.agent, workspace=req.workspace,
            parent=parent, tenant=tenant, after=req.after, before=req.before,
            newest=req.newest, limit=limit,
        )  # fmt: skip
        tasks, exhausted = self._list_page(query)
        last = tasks[-1].id if tasks and not exhausted else None
        reply: dict[str, Any] = {"tasks": tasks, "next": last}
        if req.count:
            reply["remaining"] = (
                0 if last is None else self.board.store.count_tasks(_past(query, last))
            )
        return reply

    def _list_page(self, query: TaskFilter) -> tuple[list[Task], bool]:
        """The page, and whether it holds every match left (no next page)."""
        tasks: list[Task] = []
        used = 0
        while len(tasks) < query.limit:
            want = min(LIST_PAGE, query.limit - len(tasks))
            page = self.board.list_tasks(replace(query, limit=want))
            for task in page:
                used += sizes.task_size(task)
                if tasks and used > sizes.REPLY_BUDGET:
                    return tasks, False
                tasks.append(task)
            if len(page) < want:
                return tasks, True
            last = page[-1].id
            query = _past(query, last)
        return tasks, False

    def cancel(self, req: p.Cancel, conn: Connection) -> Reply:
        task_id = self._resolve(conn, req.task)
        self._task(conn, task_id)
        cancelled = self.board.cancel(task_id, req.reason)
        return {"cancelled": [t.id for t in cancelled]}

    def cost(self, req: p.CostTotals, conn: Connection) -> Reply:
        since = req.since or ""
        if since:
            from colibri.core.model import parse_rfc3339, rfc3339

            try:
                since = rfc3339(parse_rfc3339(since if "T" in since else since + "T00:00:00Z"))
            except ValueError:
                raise BadRequest(
                    f"since {req.since!r} is not a time: write 2026-11-30 or 2026-11-30T08:00:00Z"
                ) from None
        rows = self.board.store.cost_totals(req.by, since, self._principal(conn).tenant)
        return {"by": req.by, "since": since or None, "totals": rows}

    def family(self, req: p.Family, conn: Connection) -> Reply:
        task_id = self._resolve(conn, req.task)
        self._task(conn, task_id)
        budget = sizes.REPLY_BUDGET if self._principal(conn).is_owner else TOKEN_FAMILY_BYTES
        top, members, complete = self.board.family(task_id, budget)
        return {"root": top, "tasks": members, "complete": complete}

    def retry(self, req: p.Retry, conn: Connection) -> Reply:
        task_id = self._resolve(conn, req.task)
        self._task(conn, task_id)
        return {"task": self.board.retry(task_id)}

    def why(self, req: p.Why, conn: Connection) -> Reply:
        task_id = self._resolve(conn, req.task)
        self._task(conn, task_id)
        reply = self.board.why(task_id)
        # No agent can take it: a workspace harness that keeps exiting may be why.
        eligible = any(row["eligible"] for row in reply["agents"])
        down = [] if eligible else self._harnesses_down(reply["task"], conn, lambda: False)
        if down:
            reply["summary"] += " — " + "; ".join(h.line() for h in down)
        reply["harnesses"] = down
        return reply

    def wait(self, req: p.Wait, conn: Connection) -> Reply:
        task_id = self._resolve(conn, req.task)
        if self._task(conn, task_id).state not in states.ENDED:
            self.server.check_share(conn, "waits")
        task = self.board.wait(conn, req.id, task_id)
        return None if task is None else {"task": task}

    def toggle_swarm(self, req: p.ToggleSwarm, conn: Connection) -> Reply:
        return {"paused": self.board.toggle(req.paused)}

    def agents(self, req: p.Agents, conn: Connection) -> Reply:
        principal = self._principal(conn)
        return {"agents": [a for a in self.board.agent_list() if principal.sees(a.tenant)]}

    def skills(self, req: p.Skills, conn: Connection) -> Reply:
        return {
            "skills": [
                {"name": name, "description": description, "agents": agents}
                for name, description, agents in self.board.store.skills()
            ]
        }

    def describe_skill(self, req: p.DescribeSkill, conn: Connection) -> Reply:
        from colibri.core.model import check_name

        name = check_name(req.name.strip().lower(), "capability")
        self.board.store.describe_skill(name, req.description.strip())
        return {"skill": {"name": name, "description": req.description.strip()}}

    def ledger(self, req: p.Ledger, conn: Connection) -> Reply:
        """Up to ``limit`` rows after ``after``, fewer when they would pass REPLY_BUDGET."""
        rows: list[LedgerEntry] = []
        used, after = 0, req.after
        full = False
        principal = self._principal(conn)
        if req.follow and not conn.follows_ledger:
            self.server.check_share(conn, "follows")
        if req.task is not None:
            task_id = self._resolve(conn, req.task)
            req = msgspec.structs.replace(req, task=task_id)
            if not principal.is_owner:
                self._task(conn, task_id)
        scanned = req.after
        # A token reads its tenant's rows only, by an index (what a read costs is its own
        # rows, not the board's), and a bounded number of them per request: the client asks
        # again from ``next``, and the others' requests are served in between.
        budget = None if principal.is_owner else LEDGER_SCAN
        while len(rows) < req.limit and not full:
            want = min(LEDGER_PAGE, req.limit - len(rows))
            page = self.board.store.ledger(after, want, req.task, principal.tenant)
            if budget is not None:
                budget -= len(page)
            for row in page:
                if not principal.sees(row.tenant):
                    scanned = row.seq
                    continue
                used += sizes.ledger_size(row)
                full = bool(rows) and used > sizes.REPLY_BUDGET
                if full:
                    break
                rows.append(row)
                scanned = row.seq
            if len(page) < want:
                break
            after = page[-1].seq
            if budget is not None and budget <= 0:
                full = True  # more may follow: the client goes on from ``next``
                break
        if req.follow:
            self.server.follow_ledger(conn, req.task)
        last = rows[-1].seq if full and rows and budget is None else scanned
        more = full or (
            len(rows) == req.limit
            and bool(self.board.store.ledger(last, 1, req.task, principal.tenant))
        )
        return {"entries": rows, "next": last, "more": more}

    def register_agent(self, req: p.RegisterAgent, conn: Connection) -> Reply:
        principal = self._principal(conn)
        if not principal.is_owner:
            principal.check_registration(
                req.name, normalize_names(req.capabilities, "capability"), req.workspace
            )
            req = msgspec.structs.replace(req, tenant=principal.tenant_for(req.tenant))
            # Agents are known by name across tenants: a token must not take over (or learn
            # of) another tenant's agent of its name.
            known = {a.name: a.tenant for a in self.board.agent_list()}
            if known.get(req.name, req.tenant) != req.tenant:
                raise Forbidden(
                    f"agent name {req.name!r} is taken; create the token for another name"
                )
        self.board.tenancy.check(req.tenant)
        agent, adopted, rejected = self.board.register(req, conn)
        return {
            "agent": agent.wire(),
            "adopted": adopted,
            "rejected": [{"task": h.task, "epoch": h.epoch} for h in rejected],
            "heartbeat": round(agent.ttl / 3, 3),
            "max_line": self.server.config.server.max_line,
        }

    def heartbeat(self, req: p.Heartbeat, conn: Connection) -> Reply:
        self.board.heartbeat(self.board.agent_of(conn, "heartbeat"), req.ready)
        return {}

    def out(self, req: p.Out, conn: Connection) -> Reply:
        agent = self._reporter(
            conn, "out", req.task, req.epoch, from_session=req.from_session, claim=req.claim,
            same=(State.DONE, req.output),
        )  # fmt: skip
        task = self.board.out(agent, req.task, req.epoch, req.output, req.cost, req.session_ended)
        return {"task": task}

    def fail(self, req: p.Fail, conn: Connection) -> Reply:
        agent = self._reporter(
            conn, "fail", req.task, req.epoch, from_session=req.from_session, claim=req.claim,
            same=failure(req.error),
        )  # fmt: skip
        task = self.board.fail(agent, req.task, req.epoch, req.error, req.session_ended)
        return {"task": task}

    def reclaimed(self, req: p.Reclaimed, conn: Connection) -> Reply:
        agent = self._reporter(conn, "reclaimed", req.task, req.epoch)
        return {"task": self.board.reclaimed(agent, req.task, req.epoch)}

    def ask(self, req: p.Ask, conn: Connection) -> Reply:
        holder = self._reporter(
            conn, "ask", req.task, req.epoch, from_session=True, claim=req.claim
        )
        self.board.ask(holder, conn, req.id, req.task, req.epoch, req.question)
        return None  # answered later, by `answer`

    def answer(self, req: p.Answer, conn: Connection) -> Reply:
        task_id = self._resolve(conn, req.task)
        self._task(conn, task_id)
        return {"task": self.board.answer(task_id, req.text)}

    def ready(self, req: p.Ready, conn: Connection) -> Reply:
        holder = self._reporter(
            conn, "ready", req.task, req.epoch, from_session=True, claim=req.claim
        )
        self.board.session_ready(holder, req.task, req.epoch)
        return {}

    def requeue(self, req: p.Requeue, conn: Connection) -> Reply:
        agent = self._reporter(conn, "requeue", req.task, req.epoch)
        return {"task": self.board.requeue(agent, req.task, req.epoch, req.reason)}

    def subscribe(self, req: p.Subscribe, conn: Connection) -> Reply:
        self.board.subscribe(conn, req.priority, req.workspace, req.name, req.messages)
        conn.subscriber = True
        return {"subscribed": True}

    def send(self, req: p.Send, conn: Connection) -> Reply:
        return self.bus.send(conn, req.id, req.to, req.text)

    def consumed(self, req: p.Consumed, conn: Connection) -> Reply:
        self.bus.consumed(conn, req.message, req.consumed)
        return {}

    # -- schedules ---------------------------------------------------------------------------

    def schedule_add(self, req: p.ScheduleAdd, conn: Connection) -> Reply:
        self.board.tenancy.check(req.schedule.task.tenant)
        schedule = self.schedules.add(req.name, req.schedule, req.replace)
        return {"schedule": schedule, "next": self.schedules.upcoming(req.name, 1)}

    def schedule_list(self, req: p.ScheduleList, conn: Connection) -> Reply:
        principal = self._principal(conn)
        shown = [
            s
            for s in self.schedules.schedules.values()
            if principal.sees(s.task.tenant or DEFAULT_TENANT)
        ]
        return {"schedules": sorted(shown, key=lambda s: s.name)}

    def schedule_get(self, req: p.ScheduleGet, conn: Connection) -> Reply:
        runner = self.schedules
        if not self._principal(conn).sees(runner.get(req.name).task.tenant or DEFAULT_TENANT):
            from colibri.core.errors import UnknownSchedule

            raise UnknownSchedule(req.name)
        reply: dict[str, Any] = {
            "schedule": runner.get(req.name),
            "next": runner.upcoming(req.name, req.next),
        }
        if req.fires:
            reply["fires"] = self.board.store.fires(req.name, req.fires)
        return reply

    def schedule_run(self, req: p.ScheduleRun, conn: Connection) -> Reply:
        task_id = self.schedules.run_now(req.name)
        return {"task": self.board.get(task_id)}

    def schedule_rm(self, req: p.ScheduleRemove, conn: Connection) -> Reply:
        return {"schedule": self.schedules.remove(req.name)}

    def schedule_pause(self, req: p.SchedulePause, conn: Connection) -> Reply:
        return {"schedule": self.schedules.set_paused(req.name, True)}

    def schedule_resume(self, req: p.ScheduleResume, conn: Connection) -> Reply:
        return {"schedule": self.schedules.set_paused(req.name, False)}
