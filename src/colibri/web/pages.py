"""The pages (the board by state, the list, a task, the agents and workspaces, the schedules,
the hive) and the stream of server-sent events that keeps an open page current: at most four
updates a second, each the HTML of what changed (``web.js`` puts it in place)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlencode

from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse

from colibri.core import protocol as p
from colibri.core.errors import ColibriError
from colibri.core.model import Task
from colibri.core.text import printable
from colibri.tui.board import Filter
from colibri.web import graph, views
from colibri.web.app import Web, session_of
from colibri.web.feed import Feed, Listener
from colibri.web.security import Session

#: How long a page waits for a feed's first load before it says the daemon does not answer.
FIRST_LOAD = 3.0
#: A comment line on an idle stream this often, so proxies and browsers keep it open.
KEEP_ALIVE = 15.0


async def ready(feed: Feed) -> bool:
    if not feed.loaded.is_set():
        try:
            async with asyncio.timeout(FIRST_LOAD):
                await feed.loaded.wait()
        except TimeoutError:
            return False
    return True


def common(feed: Feed, session: Session, view: str, title: str, **stream: str) -> dict[str, Any]:
    return {
        "session": session, "view": view, "title": title,
        "stream": "/events?"
        + urlencode({"view": view, "since": feed.version, "loads": feed.loads, **stream}),
        "hive": feed.hive,
        **header_context(feed),
    }  # fmt: skip


def header_context(feed: Feed) -> dict[str, Any]:
    board = feed.board
    return {"counts": views.header(board, board.now()), "paused": board.paused,
            "lost": feed.lost, "why": feed.why}  # fmt: skip


async def offline(web: Web, feed: Feed, session: Session, view: str) -> Response:
    context = common(feed, session, view, "no daemon")
    return web.render("offline.html", 503, why=feed.why or "connecting…", **context)


async def board(web: Web, request: Request, session: Session) -> Response:
    feed = web.feed(session.identity)
    if not await ready(feed):
        return await offline(web, feed, session, "board")
    q = request.query_params.get("q", "")
    columns = views.columns(feed.board, feed.board.now(), Filter.parse(q))
    context = common(feed, session, "board", "board", q=q)
    return web.render("board.html", columns=columns, q=q, cap=views.CARDS, **context)


async def task_list(web: Web, request: Request, session: Session) -> Response:
    feed = web.feed(session.identity)
    if not await ready(feed):
        return await offline(web, feed, session, "list")
    q = request.query_params.get("q", "")
    try:
        page_no = max(0, int(request.query_params.get("page", "0")))
    except ValueError:
        page_no = 0
    spec = Filter.parse(q)
    shown = feed.board.shown(spec)
    start = page_no * views.ROWS
    now = feed.board.now()
    rows = [views.card(feed.board, t, now) for t in shown[start : start + views.ROWS]]
    context = common(feed, session, "list", "tasks", q=q)
    return web.render("list.html", rows=rows, q=q, page=page_no, cap=views.ROWS,
                      more=len(shown) > start + views.ROWS,
                      listed=listed(len(shown), len(feed.board.tasks), q), **context)  # fmt: skip


def listed(matching: int, total: int, q: str) -> str:
    return f"{matching} of {total} tasks (filter: {printable(q)})" if q else f"{total} tasks"


async def task_page(web: Web, request: Request, session: Session) -> Response:
    feed = web.feed(session.identity)
    if not await ready(feed):  # (a page opened first after signing in: the feed connects)
        return await offline(web, feed, session, "task")
    task_id = request.path_params["task_id"]
    try:
        task = (await feed.request(p.Get(task=task_id))).task
        detail = await detail_context(feed, task)
    except ColibriError as exc:
        context = common(feed, session, "task", "unknown task")
        return web.render("missing.html", 404, message=f"{exc.code}: {exc.message}", **context)
    context = common(feed, session, "task", f"task {task.id[:8]}", task=task.id)
    return web.render("task.html", **detail, **context)


async def detail_context(feed: Feed, task: Task) -> dict[str, Any]:
    """A task in full: its fields, what it waits for (transitively) and what waits for it, with
    their states, its ledger rows, its family."""
    board = feed.board
    feed.board.put(task)
    ledger = (await feed.request(p.Ledger(task=task.id, limit=1000))).entries
    family = (await feed.request(p.Family(task=task.id))).tasks

    async def get(task_id: str) -> Task | None:
        try:
            return (await feed.request(p.Get(task=task_id))).task
        except ColibriError:  # gone, or never this identity's to see
            return None

    after, after_more = await graph.waits_for(board, task, get)
    waiting, waiting_more = graph.waiting_on(board, task.id)
    depths: dict[str, int] = {}
    members = []
    for member in family:
        depth = depths[member.id] = depths.get(member.parent or "", -1) + 1
        members.append((depth, member, views.state_word(member)))
    return {"task": task, "c": views.card(board, task, board.now()), "fields": fields(task),
            "after": after, "after_more": after_more, "waiting": waiting,
            "waiting_more": waiting_more, "ledger": ledger, "family": members}  # fmt: skip


def fields(task: Task) -> list[tuple[str, str]]:
    shown = [
        ("capabilities", ", ".join(task.capabilities)),
        ("workspace", task.workspace or ""),
        ("agent", task.agent or ""),
        ("parent", task.parent or ""),
        ("tenant", task.tenant),
        ("priority", str(task.priority)),
        ("attempts", f"{task.attempts} of {task.max_attempts}"),
        ("schedule", task.schedule or ""),
        ("base", task.base or ""),
    ]
    if task.change is not None:
        kept = f"; worktree kept at {task.change.worktree}" if task.change.worktree else ""
        shown.append(("change", task.change.describe() + kept))
    if task.cost is not None:
        cost = task.cost
        shown.append(("cost", f"${cost.usd:.4f} ({cost.tokens_in} in, {cost.tokens_out} out)"))
    if task.budget_usd is not None:
        shown.append(("budget", f"${task.budget_usd:.2f}"))
    shown += [("created", task.created_at), ("updated", task.updated_at)]
    return [(name, value) for name, value in shown if value]


async def agents(web: Web, request: Request, session: Session) -> Response:
    feed = web.feed(session.identity)
    if not await ready(feed):
        return await offline(web, feed, session, "agents")
    context = common(feed, session, "agents", "agents")
    return web.render("agents.html", **agents_context(feed), **context)


def agents_context(feed: Feed) -> dict[str, Any]:
    board = feed.board
    return {"agents": views.agent_rows(board), "workspaces": views.workspace_rows(board)}


async def schedules(web: Web, request: Request, session: Session) -> Response:
    feed = web.feed(session.identity)
    if not await ready(feed):
        return await offline(web, feed, session, "schedules")
    listed_ = sorted(feed.board.schedules.values(), key=lambda s: s.name)
    context = common(feed, session, "schedules", "schedules")
    return web.render("schedules.html", schedules=listed_, **context)


async def hive(web: Web, request: Request, session: Session) -> Response:
    """The daemons of a PostgreSQL board, their leases and tenants: the owner's (a token is
    refused here, not sent to the daemon, whose refusal would close the feed's connection)."""
    feed = web.feed(session.identity)
    if feed.remote:
        context = common(feed, session, "hive", "hive")
        message = ("forbidden: the hive is every tenant's: only the daemon's owner may see it, "
                   f"not {session.identity.label}")  # fmt: skip
        return web.render("missing.html", 404, message=message, **context)
    if not await ready(feed):
        return await offline(web, feed, session, "hive")
    try:
        daemons = (await feed.request(p.Hive())).daemons
    except ColibriError as exc:
        context = common(feed, session, "hive", "no hive")
        return web.render("missing.html", 404, message=f"{exc.code}: {exc.message}", **context)
    return web.render("hive.html", daemons=daemons, **common(feed, session, "hive", "hive"))


# -- the stream ---------------------------------------------------------------------------


async def stream(web: Web, request: Request) -> Response:
    session = session_of(web, request)
    if session is None:
        return PlainTextResponse("unauthorized: sign in first", 401)
    feed = web.feed(session.identity)
    view = request.query_params.get("view", "board")
    q = request.query_params.get("q", "")
    task_id = request.query_params.get("task", "")
    try:  # what the page was drawn from: its stream goes on from there
        drawn = (int(request.query_params["since"]), int(request.query_params["loads"]))
    except (KeyError, ValueError):
        drawn = (feed.version, feed.loads)
    follower = Follower(web, feed, session, view, q, task_id, drawn)
    return StreamingResponse(
        follower.lines(),
        media_type="text/event-stream",
        headers={"cache-control": "no-store", "x-accel-buffering": "no"},
    )


class Follower:
    """One open page: what it shows, and what it was last sent."""

    def __init__(
        self, web: Web, feed: Feed, session: Session, view: str, q: str, task: str,
        drawn: tuple[int, int],
    ) -> None:  # fmt: skip
        self.web, self.feed, self.session, self.view = web, feed, session, view
        self.spec, self.q, self.task = Filter.parse(q), q, task
        self.header = ""
        #: The feed's version and loads the page was drawn at.
        self.drawn, self.loads = drawn

    async def lines(self) -> AsyncIterator[str]:
        listener = self.feed.listen()
        # What changed between the page's drawing and its stream's opening comes first.
        missed = self.feed.since(self.drawn)
        if missed is None:
            self.loads = -1  # too long ago to tell: the page is made again
        elif missed:
            listener.tasks(missed)
        if missed is None or missed:
            listener.other()
        try:
            yield "retry: 1000\n\n"
            while True:
                try:
                    async with asyncio.timeout(KEEP_ALIVE):
                        await listener.wake.wait()
                except TimeoutError:
                    yield ": still here\n\n"
                if self.web.stopping:
                    return
                if self.web.sessions.get(self.session.id) is None:
                    yield _data({"signed_out": True})
                    return
                update = await self.update(listener)
                if update:
                    yield _data(update)
        finally:
            self.feed.forget(listener)

    async def update(self, listener: Listener) -> dict[str, Any]:
        changed, others = listener.take()
        feed, board = self.feed, self.feed.board
        if feed.loads != self.loads:  # loaded afresh (a daemon back): the page is made again
            self.loads = feed.loads
            return {"reload": True}
        update: dict[str, Any] = {}
        replace: dict[str, str] = {}
        if changed or others:
            header = self.web.fragment("_header.html", **header_context(feed))
            if header != self.header:
                self.header = replace["header"] = header
        now = board.now()
        if self.view in ("board", "list") and changed:
            upsert, remove = [], []
            for task_id in sorted(changed):
                task = board.tasks.get(task_id)
                if task is None or not self.spec.matches(task):
                    remove.append(task_id)
                    continue
                card = views.card(board, task, now)
                if self.view == "board":
                    into, html = f"col-{card.column}", self.web.fragment("_card.html", c=card)
                else:
                    into, html = "rows", self.web.fragment("_row.html", c=card)
                upsert.append({"id": task_id, "into": into, "html": html})
            update.update(upsert=upsert, remove=remove)
            if self.view == "board":
                counts = feed.column_counts(self.spec, self.q)
                update["counts"] = {f"count-{c}": counts.get(c, 0) for c in views.COLUMNS}
        elif self.view == "task" and self._about_the_task(changed):
            try:
                task = (await feed.request(p.Get(task=self.task))).task
                detail = await detail_context(feed, task)
            except ColibriError:
                return update
            replace["task-detail"] = self.web.fragment(
                "_detail.html", **detail, session=self.session
            )
        elif self.view == "agents" and others:
            replace["agents"] = self.web.fragment("_agents.html", **agents_context(feed))
        elif self.view == "schedules" and others:
            listed_ = sorted(board.schedules.values(), key=lambda s: s.name)
            replace["schedules"] = self.web.fragment("_schedules.html", schedules=listed_)
        if replace:
            update["replace"] = replace
        return update if any(update.values()) else {}

    def _about_the_task(self, changed: set[str]) -> bool:
        """Whether one of ``changed`` is shown on the task page: the task, its parent, what it
        waits for (to the depth shown), what waits for it, or its children."""
        tasks = self.feed.board.tasks
        task = tasks.get(self.task)
        about = {self.task}
        if task is not None:
            about |= {task.parent or ""}
            level = set(task.after)
            for _ in range(graph.DEPTH):
                about |= level
                level = {a for i in level if (t := tasks.get(i)) is not None for a in t.after}
        if changed & about:
            return True
        return any(
            (t := tasks.get(i)) is not None and (t.parent == self.task or self.task in t.after)
            for i in changed
        )


def _data(update: dict[str, Any]) -> str:
    return f"data: {json.dumps(update, separators=(',', ':'))}\n\n"
