"""The commands of agents and their sessions: registering, heartbeats, reports, questions,
subscriptions and messages."""

from __future__ import annotations

from typing import TYPE_CHECKING

import msgspec

from colibri.core import protocol as p
from colibri.core import replies as r
from colibri.core.errors import Forbidden
from colibri.core.model import normalize_names
from colibri.core.states import State
from colibri.daemon.board import Board
from colibri.daemon.board.reports import failure
from colibri.daemon.guards import Guards

if TYPE_CHECKING:
    from colibri.daemon.bus import Bus
    from colibri.daemon.connection import Connection
    from colibri.daemon.server import Server


class AgentCommands:
    def __init__(self, board: Board, guards: Guards, server: Server, bus: Bus) -> None:
        self.board = board
        self.guards = guards
        #: For the line limit an agent is told.
        self.server = server
        self.bus = bus

    def register_agent(self, req: p.RegisterAgent, conn: Connection) -> r.Reply | None:
        principal = self.guards.principal(conn)
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
        return r.Registered(
            agent=agent.wire(),
            adopted=adopted,
            rejected=[r.Rejected(task=h.task, epoch=h.epoch) for h in rejected],
            heartbeat=round(agent.ttl / 3, 3),
            max_line=self.server.config.server.max_line,
        )

    def heartbeat(self, req: p.Heartbeat, conn: Connection) -> r.Reply | None:
        self.board.heartbeat(self.board.agent_of(conn, "heartbeat"), req.ready)
        return r.Empty()

    def out(self, req: p.Out, conn: Connection) -> r.Reply | None:
        agent = self.guards.reporter(
            conn, "out", req.task, req.epoch, from_session=req.from_session, claim=req.claim,
            same=(State.DONE, req.output),
        )  # fmt: skip
        task = self.board.out(
            agent, req.task, req.epoch, req.output, req.cost, req.session_ended, req.change
        )
        return r.TaskReply(task=task)

    def fail(self, req: p.Fail, conn: Connection) -> r.Reply | None:
        agent = self.guards.reporter(
            conn, "fail", req.task, req.epoch, from_session=req.from_session, claim=req.claim,
            same=failure(req.error),
        )  # fmt: skip
        task = self.board.fail(agent, req.task, req.epoch, req.error, req.session_ended, req.change)
        return r.TaskReply(task=task)

    def reclaimed(self, req: p.Reclaimed, conn: Connection) -> r.Reply | None:
        agent = self.guards.reporter(conn, "reclaimed", req.task, req.epoch)
        return r.TaskReply(task=self.board.reclaimed(agent, req.task, req.epoch, req.change))

    def ask(self, req: p.Ask, conn: Connection) -> r.Reply | None:
        holder = self.guards.reporter(
            conn, "ask", req.task, req.epoch, from_session=True, claim=req.claim
        )
        self.board.ask(holder, conn, req.id, req.task, req.epoch, req.question)
        return None  # answered later, by `answer`

    def ready(self, req: p.Ready, conn: Connection) -> r.Reply | None:
        holder = self.guards.reporter(
            conn, "ready", req.task, req.epoch, from_session=True, claim=req.claim
        )
        self.board.session_ready(holder, req.task, req.epoch)
        return r.Empty()

    def requeue(self, req: p.Requeue, conn: Connection) -> r.Reply | None:
        agent = self.guards.reporter(conn, "requeue", req.task, req.epoch)
        return r.TaskReply(task=self.board.requeue(agent, req.task, req.epoch, req.reason))

    def subscribe(self, req: p.Subscribe, conn: Connection) -> r.Reply | None:
        self.board.subscribe(conn, req.priority, req.workspace, req.name, req.messages)
        conn.subscriber = True
        return r.Subscribed()

    def send(self, req: p.Send, conn: Connection) -> r.Reply | None:
        return self.bus.send(conn, req.id, req.to, req.text)

    def consumed(self, req: p.Consumed, conn: Connection) -> r.Reply | None:
        self.bus.consumed(conn, req.message, req.consumed)
        return r.Empty()
