"""``colibri mcp``: the board's verbs as the tools of a Model Context Protocol server on stdio.

Loaded only by that command (it needs the ``mcp`` extra). Every tool and resource reaches the
daemon through ``colibri.client`` — the asyncio client, so that a ``wait`` an MCP client gives
up on is cancelled with its connection instead of holding a thread — on a connection of its
own, as a CLI command does. A tool's result is the daemon's reply (``{"task": …}``,
``{"tasks": […], "next": …}`` …) as structured content and as JSON text; a refusal is a tool
error whose content is ``{"ok": false, "error": {"code": …, "message": …}}``, as ``--json``
prints it.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError
from mcp_types import CallToolResult, TextContent, ToolAnnotations
from pydantic import Field

from colibri import __version__
from colibri.client import AsyncClient, Remote
from colibri.core import protocol as p
from colibri.core import replies as r
from colibri.core.errors import BadRequest, ColibriError, ConnectionClosed, OsFailure, UnknownTask
from colibri.core.model import TaskSpec
from colibri.core.request_fields import R
from colibri.core.schedules import ScheduleSpec

INSTRUCTIONS = (
    "Colibri is a task board for a fleet of agents. Submit a task with the capabilities it "
    "needs (or to a workspace); the best-fit agent runs it as a session and reports its "
    "output. Then wait for it, read its output, follow its family (children that sessions "
    "handed to other workspaces), answer a session's question, or cancel a task with its "
    "whole family. A refused call is a tool error carrying {ok: false, error: {code, "
    "message}}: branch on the code."
)

READS = ToolAnnotations(read_only_hint=True, open_world_hint=False)
WRITES = ToolAnnotations(read_only_hint=False, destructive_hint=False, open_world_hint=False)
#: The longest a ``wait`` may be asked to block: a day.
MAX_WAIT = 86_400.0

TaskId = Annotated[
    str,
    Field(
        description="A task's id (the `id` of a task object), or its start or end (at least 4 "
        "characters; the last 8 as colibri attach and the TUI show them) if that names one task."
    ),
]
Names = Annotated[list[str], Field(description="Names (capabilities, labels), lower case.")]


class Board:
    """The daemon this server talks to: a root's socket, or a daemon over TCP."""

    def __init__(self, target: Path | Remote) -> None:
        self.target = target

    async def request(self, req: p.Request[R]) -> R:
        """One request on a connection of its own."""
        client = AsyncClient(self.target if isinstance(self.target, Remote) else str(self.target))
        try:
            await client.connect()
            return await client.request(req)
        except (ConnectionError, TimeoutError) as exc:
            raise ConnectionClosed(f"lost the connection to the daemon ({exc})") from None
        except OSError as exc:
            raise OsFailure(f"{exc.strerror or exc}") from None
        finally:
            await client.close()


def result(reply: dict[str, Any]) -> CallToolResult:
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(reply, ensure_ascii=False))],
        structured_content=reply,
    )


def refused(error: ColibriError) -> CallToolResult:
    """A tool error carrying the error's code and message, as ``--json`` prints them."""
    doc = {"ok": False, "error": error.to_wire()}
    return CallToolResult(
        content=[TextContent(type="text", text=json.dumps(doc, ensure_ascii=False))],
        structured_content=doc,
        is_error=True,
    )


def build(board: Board) -> MCPServer[Any]:
    """The server: its tools and resources, each a request to ``board``."""
    server: MCPServer[Any] = MCPServer(
        "colibri", version=__version__, instructions=INSTRUCTIONS, log_level="WARNING"
    )

    async def ask(req: p.Request[Any]) -> CallToolResult:
        try:
            return result(r.fields(await board.request(req)))
        except ColibriError as exc:
            return refused(exc)

    @server.tool(annotations=WRITES)
    async def submit(
        text: Annotated[str, Field(description="What to do.", min_length=1)],
        capabilities: Annotated[
            list[str], Field(description="Capabilities the agent must have (best fit).")
        ] = [],  # noqa: B006 (pydantic copies defaults)
        workspace: Annotated[
            str | None, Field(description="Only agents of this workspace may take it.")
        ] = None,
        agent: Annotated[str | None, Field(description="Pin it to this agent instead.")] = None,
        parent: Annotated[str | None, Field(description="The task it is a child of.")] = None,
        priority: Annotated[int, Field(description="Higher runs first.")] = 0,
        min_score: Annotated[float | None, Field(ge=0, le=1)] = None,
        labels: Names = [],  # noqa: B006
        max_attempts: Annotated[int, Field(ge=1, le=100, description="Sessions to try.")] = 1,
        idempotency_key: Annotated[
            str | None, Field(description="The same key again returns the same task.")
        ] = None,
        budget_usd: Annotated[float | None, Field(gt=0)] = None,
        tenant: str | None = None,
        after: Annotated[
            list[str],
            Field(description="Ids of tasks that must end done before this one runs."),
        ] = [],  # noqa: B006
        if_dependency_fails: Annotated[
            Literal["cancel", "run", "wait"],
            Field(
                description="When one of `after` fails: cancel this task, run it anyway, "
                "or wait for a retry of that task."
            ),
        ] = "cancel",  # fmt: skip
        base: Annotated[
            str | None,
            Field(description="In a workspace of worktrees: the branch or commit to start from."),
        ] = None,
    ) -> CallToolResult:
        """Submit a task; the best-fit agent (by capability, within the workspace) runs it,
        once every task of `after` has ended done. Returns {task}: keep task.id."""
        fields: dict[str, Any] = dict(
            text=text, capabilities=capabilities, workspace=workspace, parent=parent,
            priority=priority, min_score=min_score, labels=labels, max_attempts=max_attempts,
            idempotency_key=idempotency_key, budget_usd=budget_usd, tenant=tenant, after=after,
            if_dependency_fails=if_dependency_fails, base=base,
        )  # fmt: skip
        return await ask(p.CreateTask(agent=agent, **fields) if agent else p.Submit(**fields))

    @server.tool(name="list", annotations=READS)
    async def list_tasks(
        state: Literal["pending", "running", "done", "failed", "cancelled", "closed"] | None = None,
        agent: str | None = None,
        workspace: str | None = None,
        parent: Annotated[str | None, Field(description="Only children of this task.")] = None,
        tenant: str | None = None,
        limit: Annotated[int, Field(ge=1, le=10_000)] = 100,
        after: Annotated[str | None, Field(description="The previous page's `next`.")] = None,
    ) -> CallToolResult:
        """List tasks, oldest first. Returns {tasks, next}: `next` pages on (as `after`)."""
        return await ask(
            p.ListTasks(state=state, agent=agent, workspace=workspace, parent=parent,
                        tenant=tenant, limit=limit, after=after)
        )  # fmt: skip

    @server.tool(annotations=READS)
    async def show(
        task_id: TaskId,
        family: Annotated[bool, Field(description="The task's whole family instead.")] = False,
    ) -> CallToolResult:
        """One task: {task}; with family, {tasks, complete}: the task's family, each task
        with its parent."""
        return await ask(p.Family(task=task_id) if family else p.Get(task=task_id))

    @server.tool(annotations=READS)
    async def wait(
        task_id: TaskId,
        timeout_seconds: Annotated[
            float | None,
            Field(gt=0, le=MAX_WAIT, description="Give up after this long (default: never)."),
        ] = None,
    ) -> CallToolResult:
        """Block until the task has ended (done, failed or cancelled). Returns {task, ended}:
        read task.outcome, task.output, task.error; ended is false when timeout_seconds
        passed first (task is then as it stands)."""
        try:
            async with asyncio.timeout(timeout_seconds):
                reply = await board.request(p.Wait(task=task_id))
            return result({**r.fields(reply), "ended": True})
        except TimeoutError:
            return await as_it_stands(task_id)
        except ColibriError as exc:
            return refused(exc)

    async def as_it_stands(task_id: str) -> CallToolResult:
        try:
            reply = await board.request(p.Get(task=task_id))
            return result({**r.fields(reply), "ended": False})
        except ColibriError as exc:
            return refused(exc)

    @server.tool(annotations=ToolAnnotations(destructive_hint=True, open_world_hint=False))
    async def cancel(
        task_id: TaskId,
        reason: Annotated[str | None, Field(description="Why; kept in the ledger.")] = None,
    ) -> CallToolResult:
        """Cancel a task and every open descendant. Returns {cancelled: [ids]}."""
        return await ask(p.Cancel(task=task_id, reason=reason))

    @server.tool(annotations=WRITES)
    async def answer(
        task_id: TaskId, text: Annotated[str, Field(description="The answer.")]
    ) -> CallToolResult:
        """Answer the question a running task's session asks (its task.question)."""
        return await ask(p.Answer(task=task_id, text=text))

    @server.tool(annotations=READS)
    async def why(task_id: TaskId) -> CallToolResult:
        """Where a task stands: every agent, its score, what it lacks, why it cannot take it."""
        return await ask(p.Why(task=task_id))

    @server.tool(annotations=READS)
    async def cost(
        by: Literal["agent", "workspace", "tenant", "day"] = "agent",
        since: Annotated[
            str | None, Field(description="A date (2026-11-30) or an RFC 3339 instant.")
        ] = None,
    ) -> CallToolResult:
        """What the sessions cost, summed per agent, workspace, tenant or UTC day: {totals}."""
        return await ask(p.CostTotals(by=by, since=since))

    @server.tool(annotations=READS)
    async def status() -> CallToolResult:
        """The daemon and the board at a glance: tasks per state, agents, slots, paused."""
        return await ask(p.Status())

    @server.tool(annotations=READS)
    async def agents() -> CallToolResult:
        """The agents: capabilities, slots, online, the tasks they run: {agents}."""
        return await ask(p.Agents())

    schedules(server, ask)
    resources(server, board)
    return server


Ask = Callable[[p.Request[Any]], Awaitable[CallToolResult]]


def schedules(server: MCPServer[Any], ask: Ask) -> None:
    @server.tool(annotations=READS)
    async def schedule_list() -> CallToolResult:
        """The schedules with their next fire time: {schedules}."""
        return await ask(p.ScheduleList())

    @server.tool(annotations=WRITES)
    async def schedule_add(
        name: str,
        text: Annotated[str, Field(description="The text of each task it submits.")],
        cron: Annotated[str | None, Field(description="Five-field cron, or @daily …")] = None,
        tz: Annotated[str | None, Field(description="IANA time zone of the cron.")] = None,
        every: Annotated[str | None, Field(description="An interval: 90s, 15m, 1h30m, 1d.")] = None,
        at: Annotated[str | None, Field(description="Once: an ISO 8601 instant.")] = None,
        capabilities: Names = [],  # noqa: B006
        workspace: str | None = None,
        agent: str | None = None,
        priority: int = 0,
        labels: Names = [],  # noqa: B006
        max_attempts: Annotated[int, Field(ge=1, le=100)] = 1,
        catch_up: Literal["one", "all", "none"] = "one",
        overlap: Literal["skip", "allow", "replace"] = "skip",
        jitter: str | None = None,
        paused: bool = False,
        replace: bool = False,
    ) -> CallToolResult:
        """Add a schedule that submits a task on a cron, an interval (every) or once (at):
        exactly one of the three. Returns {schedule, next}."""
        if sum(x is not None for x in (cron, every, at)) != 1:
            return refused(BadRequest("give exactly one of cron, every or at"))
        # Built as they are, not converted: the daemon checks them, and says what is wrong.
        task = TaskSpec(
            text=text, capabilities=capabilities, priority=priority, labels=labels,
            max_attempts=max_attempts, workspace=workspace, agent=agent,
        )  # fmt: skip
        spec = ScheduleSpec(
            cron=cron, tz=tz, every=every, at=at, catch_up=catch_up, overlap=overlap,
            jitter=jitter, paused=paused, task=task,
        )  # fmt: skip
        return await ask(p.ScheduleAdd(name=name, schedule=spec, replace=replace))

    @server.tool(annotations=WRITES)
    async def schedule_pause(name: str) -> CallToolResult:
        """Pause a schedule: it does not fire until resumed."""
        return await ask(p.SchedulePause(name=name))

    @server.tool(annotations=WRITES)
    async def schedule_resume(name: str) -> CallToolResult:
        """Resume a schedule from now on (times passed while paused are not fired)."""
        return await ask(p.ScheduleResume(name=name))


def resources(server: MCPServer[Any], board: Board) -> None:
    """The board to read: the tasks, one task, the agents, the status; each as JSON."""

    async def read(req: p.Request[Any]) -> str:
        try:
            reply = r.fields(await board.request(req))
        except ColibriError as exc:
            kind = ResourceNotFoundError if isinstance(exc, UnknownTask) else ResourceError
            raise kind(f"{exc.code}: {exc.message}") from None
        return json.dumps(reply, ensure_ascii=False)

    @server.resource("colibri://tasks", name="tasks", mime_type="application/json")
    async def tasks() -> str:
        """The first 100 tasks, oldest first ({tasks, next})."""
        return await read(p.ListTasks(limit=100))

    @server.resource("colibri://tasks/{task_id}", name="task", mime_type="application/json")
    async def task(task_id: str) -> str:
        """One task by id ({task})."""
        return await read(p.Get(task=task_id))

    @server.resource("colibri://agents", name="agents", mime_type="application/json")
    async def agent_list() -> str:
        """The agents ({agents})."""
        return await read(p.Agents())

    @server.resource("colibri://status", name="status", mime_type="application/json")
    async def board_status() -> str:
        """The daemon and the board at a glance."""
        return await read(p.Status())


def serve(target: Path | Remote) -> None:
    """Serve on stdin and stdout until the client closes them."""
    build(Board(target)).run("stdio")
