"""One handler per wire command: validate, call the board, shape the reply.

A handler returns its request's reply struct (``core/replies.py``; the server sets its ``id``)
or ``None`` when the reply comes later (``wait``). Errors are raised as ``ColibriError``s.

The server has already checked that the connection's principal may send the command at all
(``core/access.py``); each handler keeps a token to its tenant (``guards.py``). The table is
here, with the commands of the daemon itself (its status, tokens, schedules, swarm, hive); the
commands on tasks are ``task_commands.py``'s, those of agents ``agent_commands.py``'s.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from colibri import __version__
from colibri.core import protocol as p
from colibri.core import replies as r
from colibri.core.errors import BadRequest, Throttled, Unauthorized
from colibri.core.model import DEFAULT_TENANT
from colibri.daemon.agent_commands import AgentCommands
from colibri.daemon.board import Board
from colibri.daemon.guards import Guards
from colibri.daemon.task_commands import TaskCommands
from colibri.daemon.tokens import TokenAuthority

if TYPE_CHECKING:
    from colibri.daemon.bus import Bus
    from colibri.daemon.connection import Connection
    from colibri.daemon.schedules import ScheduleRunner
    from colibri.daemon.server import Server
    from colibri.daemon.supervisor import Supervisor
    from colibri.store.postgres import BoardLease

log = logging.getLogger(__name__)


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
        self.started = board.clock.time()
        #: A PostgreSQL board's lease (``hive``); None on SQLite.
        self.lease: BoardLease | None = None
        self.guards = guards = Guards(board)
        tasks = TaskCommands(board, guards, server, supervisor)
        agents = AgentCommands(board, guards, server, bus)
        self.table: dict[type[p.Request[Any]], Callable[[Any, Connection], r.Reply | None]] = {
            p.Ping: self.ping,
            p.Status: self.status,
            p.IntakeTask: tasks.intake_task,
            p.Submit: tasks.intake_task,
            p.CreateTask: tasks.intake_task,
            p.SubmitAll: tasks.submit_all,
            p.Get: tasks.get,
            p.ListTasks: tasks.list_tasks,
            p.Cancel: tasks.cancel,
            p.Retry: tasks.retry,
            p.Family: tasks.family,
            p.CostTotals: tasks.cost,
            p.Why: tasks.why,
            p.Wait: tasks.wait,
            p.ToggleSwarm: self.toggle_swarm,
            p.Agents: self.agents,
            p.Skills: self.skills,
            p.DescribeSkill: self.describe_skill,
            p.Ledger: tasks.ledger,
            p.RegisterAgent: agents.register_agent,
            p.Heartbeat: agents.heartbeat,
            p.Out: agents.out,
            p.Fail: agents.fail,
            p.Reclaimed: agents.reclaimed,
            p.Ready: agents.ready,
            p.Ask: agents.ask,
            p.Answer: tasks.answer,
            p.Requeue: agents.requeue,
            p.Subscribe: agents.subscribe,
            p.Send: agents.send,
            p.Consumed: agents.consumed,
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
            p.Hive: self.hive,
        }

    def handle(self, req: p.Request[Any], conn: Connection) -> r.Reply | None:
        return self.table[type(req)](req, conn)

    def auth(self, req: p.Auth, conn: Connection) -> r.Reply | None:
        if conn.remote is None:
            return r.Authenticated(role="owner", tenant=None)  # the kernel said who it is already
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
        return r.Authenticated(role=principal.kind, tenant=principal.tenant, agent=principal.agent)

    def token_create(self, req: p.TokenCreate, conn: Connection) -> r.Reply | None:
        issued = self.tokens.create(
            req.tenant, req.role, req.agent, req.capabilities, req.expires_in, req.workspace
        )
        # (Not "id": the reply's own is the request's.)
        return r.TokenCreated(token=issued.token, secret=issued.text)

    def token_list(self, req: p.TokenList, conn: Connection) -> r.Reply | None:
        return r.Tokens(tokens=self.tokens.list())

    def token_revoke(self, req: p.TokenRevoke, conn: Connection) -> r.Reply | None:
        token = self.tokens.revoke(self.tokens.resolve(req.token))
        return r.TokenRevoked(token=token, closed=self.server.close_token(token.id))

    def ping(self, req: p.Ping, conn: Connection) -> r.Reply | None:
        # The line limit, so that a client can cut a long report to fit (``fit_report``).
        return r.Pong(max_line=self.server.config.server.max_line)

    def status(self, req: p.Status, conn: Connection) -> r.Reply | None:
        config = self.server.config
        principal = self.guards.principal(conn)
        if not principal.is_owner:
            # The board's counts are every tenant's: a token is told who it is, not those.
            return r.Status(
                daemon={"version": __version__},
                paused=self.board.paused,
                you={"role": principal.kind, "tenant": principal.tenant,
                     "agent": principal.agent, "token": principal.token},
            )  # fmt: skip
        return r.Status(
            daemon={
                "pid": os.getpid(),
                "version": __version__,
                "root": str(config.root),
                "store": self.board.store.location,
                "durability": config.durability,
                "uptime": round(self.board.clock.time() - self.started, 3),
                "connections": self.server.connection_count,
                "listen": self.server.listening,
                "metrics": self.server.metrics_url,
            },
            **self.board.status(),
            harnesses=self.supervisor.status(),
        )

    def hive(self, req: p.Hive, conn: Connection) -> r.Reply | None:
        from colibri.daemon.hive.listing import hive

        return hive(self.lease)

    def toggle_swarm(self, req: p.ToggleSwarm, conn: Connection) -> r.Reply | None:
        return r.Paused(paused=self.board.toggle(req.paused))

    def agents(self, req: p.Agents, conn: Connection) -> r.Reply | None:
        principal = self.guards.principal(conn)
        return r.Agents(agents=[a for a in self.board.agent_list() if principal.sees(a.tenant)])

    def skills(self, req: p.Skills, conn: Connection) -> r.Reply | None:
        return r.Skills(
            skills=[
                r.Skill(name=name, description=description, agents=agents)
                for name, description, agents in self.board.store.skills()
            ]
        )

    def describe_skill(self, req: p.DescribeSkill, conn: Connection) -> r.Reply | None:
        from colibri.core.model import check_name

        name = check_name(req.name.strip().lower(), "capability")
        self.board.store.describe_skill(name, req.description.strip())
        return r.SkillDescribed(skill=r.Skill(name=name, description=req.description.strip()))

    # -- schedules ---------------------------------------------------------------------------

    def schedule_add(self, req: p.ScheduleAdd, conn: Connection) -> r.Reply | None:
        self.board.tenancy.check(req.schedule.task.tenant)
        schedule = self.schedules.add(req.name, req.schedule, req.replace)
        return r.ScheduleAdded(schedule=schedule, next=self.schedules.upcoming(req.name, 1))

    def schedule_list(self, req: p.ScheduleList, conn: Connection) -> r.Reply | None:
        principal = self.guards.principal(conn)
        shown = [
            s
            for s in self.schedules.schedules.values()
            if principal.sees(s.task.tenant or DEFAULT_TENANT)
        ]
        return r.Schedules(schedules=sorted(shown, key=lambda s: s.name))

    def schedule_get(self, req: p.ScheduleGet, conn: Connection) -> r.Reply | None:
        runner = self.schedules
        if not self.guards.principal(conn).sees(runner.get(req.name).task.tenant or DEFAULT_TENANT):
            from colibri.core.errors import UnknownSchedule

            raise UnknownSchedule(req.name)
        reply = r.ScheduleShown(
            schedule=runner.get(req.name), next=runner.upcoming(req.name, req.next)
        )
        if req.fires:
            reply.fires = self.board.store.fires(req.name, req.fires)
        return reply

    def schedule_run(self, req: p.ScheduleRun, conn: Connection) -> r.Reply | None:
        task_id = self.schedules.run_now(req.name)
        return r.TaskReply(task=self.board.get(task_id))

    def schedule_rm(self, req: p.ScheduleRemove, conn: Connection) -> r.Reply | None:
        return r.ScheduleReply(schedule=self.schedules.remove(req.name))

    def schedule_pause(self, req: p.SchedulePause, conn: Connection) -> r.Reply | None:
        return r.ScheduleReply(schedule=self.schedules.set_paused(req.name, True))

    def schedule_resume(self, req: p.ScheduleResume, conn: Connection) -> r.Reply | None:
        return r.ScheduleReply(schedule=self.schedules.set_paused(req.name, False))
