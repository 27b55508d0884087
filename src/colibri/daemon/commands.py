"""One handler per wire command: validate, call the board, shape the reply.

A handler returns the reply's fields (``ok`` and ``id`` are added by the server) or ``None``
when the reply comes later (``wait``). Errors are raised as ``ColibriError``s.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from colibri import __version__
from colibri.core import protocol as p
from colibri.core import sizes
from colibri.core.errors import BadRequest
from colibri.core.model import LedgerEntry, Task
from colibri.daemon.board import Board
from colibri.store import TaskFilter

if TYPE_CHECKING:
    from colibri.daemon.bus import Bus
    from colibri.daemon.connection import Connection
    from colibri.daemon.schedules import ScheduleRunner
    from colibri.daemon.server import Server
    from colibri.daemon.supervisor import Supervisor

Reply = dict[str, Any] | None
#: Tasks and ledger rows read from the store at a time for one reply.
LIST_PAGE = 64
LEDGER_PAGE = 500


class Commands:
    def __init__(
        self,
        board: Board,
        server: Server,
        bus: Bus,
        schedules: ScheduleRunner,
        supervisor: Supervisor,
    ) -> None:
        self.board = board
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
        }

    def handle(self, req: p.Request, conn: Connection) -> Reply:
        return self.table[type(req)](req, conn)

    def ping(self, req: p.Ping, conn: Connection) -> Reply:
        # The line limit, so that a client can cut a long report to fit (``fit_report``).
        return {"pong": True, "max_line": self.server.config.server.max_line}

    def status(self, req: p.Status, conn: Connection) -> Reply:
        config = self.server.config
        return {
            "daemon": {
                "pid": os.getpid(),
                "version": __version__,
                "root": str(config.root),
                "store": config.store,
                "durability": config.durability,
                "uptime": round(time.time() - self.started, 3),
                "connections": self.server.connection_count,
            },
            **self.board.status(),
            "harnesses": self.supervisor.status(),
        }

    def intake_task(self, req: p.TaskFields, conn: Connection) -> Reply:
        # create-task too: its spec carries the agent it is pinned to.
        task, created = self.board.submit(
            req.spec(), idempotency_key=req.idempotency_key, claim=req.claim
        )
        return {"task": task, "created": created}

    def get(self, req: p.Get, conn: Connection) -> Reply:
        return {"task": self.board.get(req.task)}

    def list_tasks(self, req: p.ListTasks, conn: Connection) -> Reply:
        """Up to ``limit`` tasks, and fewer when they would pass REPLY_BUDGET bytes: read
        from the store a page at a time, so a long page is never built whole."""
        tasks: list[Task] = []
        used, after = 0, req.after
        while len(tasks) < req.limit:
            want = min(LIST_PAGE, req.limit - len(tasks))
            page = self.board.list_tasks(
                TaskFilter(state=req.state, agent=req.agent, workspace=req.workspace,
                           parent=req.parent, tenant=req.tenant, after=after, limit=want)
            )  # fmt: skip
            for task in page:
                used += sizes.task_size(task)
                if tasks and used > sizes.REPLY_BUDGET:
                    return {"tasks": tasks, "next": tasks[-1].id}
                tasks.append(task)
            if len(page) < want:
                return {"tasks": tasks, "next": None}
            after = page[-1].id
        return {"tasks": tasks, "next": tasks[-1].id}

    def cancel(self, req: p.Cancel, conn: Connection) -> Reply:
        cancelled = self.board.cancel(req.task, req.reason)
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
        rows = self.board.store.cost_totals(req.by, since)
        return {"by": req.by, "since": since or None, "totals": rows}

    def family(self, req: p.Family, conn: Connection) -> Reply:
        top, members, complete = self.board.family(req.task)
        return {"root": top, "tasks": members, "complete": complete}

    def retry(self, req: p.Retry, conn: Connection) -> Reply:
        return {"task": self.board.retry(req.task)}

    def why(self, req: p.Why, conn: Connection) -> Reply:
        return self.board.why(req.task)

    def wait(self, req: p.Wait, conn: Connection) -> Reply:
        task = self.board.wait(conn, req.id, req.task)
        return None if task is None else {"task": task}

    def toggle_swarm(self, req: p.ToggleSwarm, conn: Connection) -> Reply:
        return {"paused": self.board.toggle(req.paused)}

    def agents(self, req: p.Agents, conn: Connection) -> Reply:
        return {"agents": self.board.agent_list()}

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
        while len(rows) < req.limit and not full:
            want = min(LEDGER_PAGE, req.limit - len(rows))
            page = self.board.store.ledger(after, want, req.task)
            for row in page:
                used += sizes.ledger_size(row)
                full = bool(rows) and used > sizes.REPLY_BUDGET
                if full:
                    break
                rows.append(row)
            if len(page) < want:
                break
            after = page[-1].seq
        if req.follow:
            self.server.follow_ledger(conn, req.task)
        last = rows[-1].seq if rows else req.after
        more = full or (len(rows) == req.limit and bool(self.board.store.ledger(last, 1, req.task)))
        return {"entries": rows, "next": last, "more": more}

    def register_agent(self, req: p.RegisterAgent, conn: Connection) -> Reply:
        agent, adopted, rejected = self.board.register(req, conn)
        return {
            "agent": agent.wire(),
            "adopted": adopted,
            "rejected": [{"task": h.task, "epoch": h.epoch} for h in rejected],
            "heartbeat": round(agent.ttl / 3, 3),
            "max_line": self.server.config.server.max_line,
        }

    def heartbeat(self, req: p.Heartbeat, conn: Connection) -> Reply:
        self.board.heartbeat(self.board.agent_of(conn, "heartbeat"))
        return {}

    def out(self, req: p.Out, conn: Connection) -> Reply:
        agent = self.board.reporter(conn, "out", req.task, req.from_session, req.epoch, req.claim)
        task = self.board.out(agent, req.task, req.epoch, req.output, req.cost, req.session_ended)
        return {"task": task}

    def fail(self, req: p.Fail, conn: Connection) -> Reply:
        agent = self.board.reporter(conn, "fail", req.task, req.from_session, req.epoch, req.claim)
        task = self.board.fail(agent, req.task, req.epoch, req.error, req.session_ended)
        return {"task": task}

    def reclaimed(self, req: p.Reclaimed, conn: Connection) -> Reply:
        agent = self.board.agent_of(conn, "reclaimed")
        return {"task": self.board.reclaimed(agent, req.task, req.epoch)}

    def ask(self, req: p.Ask, conn: Connection) -> Reply:
        self.board.ask(conn, req.id, req.task, req.epoch, req.question, req.claim)
        return None  # answered later, by `answer`

    def answer(self, req: p.Answer, conn: Connection) -> Reply:
        return {"task": self.board.answer(req.task, req.text)}

    def ready(self, req: p.Ready, conn: Connection) -> Reply:
        self.board.session_ready(conn, req.task, req.epoch, req.claim)
        return {}

    def requeue(self, req: p.Requeue, conn: Connection) -> Reply:
        agent = self.board.agent_of(conn, "requeue")
        return {"task": self.board.requeue(agent, req.task, req.epoch, req.reason)}

    def subscribe(self, req: p.Subscribe, conn: Connection) -> Reply:
        self.board.subscribe(conn, req.priority, req.workspace, req.name)
        conn.subscriber = True
        return {"subscribed": True}

    def send(self, req: p.Send, conn: Connection) -> Reply:
        return self.bus.send(conn, req.id, req.to, req.text)

    def consumed(self, req: p.Consumed, conn: Connection) -> Reply:
        self.bus.consumed(conn, req.message, req.consumed)
        return {}

    # -- schedules ---------------------------------------------------------------------------

    def schedule_add(self, req: p.ScheduleAdd, conn: Connection) -> Reply:
        schedule = self.schedules.add(req.name, req.schedule, req.replace)
        return {"schedule": schedule, "next": self.schedules.upcoming(req.name, 1)}

    def schedule_list(self, req: p.ScheduleList, conn: Connection) -> Reply:
        return {"schedules": sorted(self.schedules.schedules.values(), key=lambda s: s.name)}

    def schedule_get(self, req: p.ScheduleGet, conn: Connection) -> Reply:
        runner = self.schedules
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
