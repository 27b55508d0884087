"""What a page may do: submit, cancel, retry, answer, pause and resume — the requests the CLI
makes, on the feed's connection, so as the identity signed in. A page's script sends a form
with ``X-Requested-With`` and shows the reply in place (``{"message": …}``, or the daemon's
one-line ``{"error": "code: message"}``); without the script a success goes back to where
the form was and an error is a page of one line."""

from __future__ import annotations

import re
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response

from colibri.core import protocol as p
from colibri.core.errors import ColibriError
from colibri.core.request_fields import R
from colibri.core.text import printable, short_id
from colibri.web.app import Web
from colibri.web.pages import common
from colibri.web.security import Session


async def ask(web: Web, session: Session, req: p.Request[R]) -> R:
    return await web.feed(session.identity).request(req)


def answered(request: Request, message: str, back: str) -> Response:
    if request.headers.get("x-requested-with") == "colibri":
        return JSONResponse({"message": printable(message)})
    return RedirectResponse(back, 303)


def refused(web: Web, request: Request, session: Session, error: str) -> Response:
    line = printable(error)
    if request.headers.get("x-requested-with") == "colibri":
        return JSONResponse({"error": line}, 400)
    feed = web.feed(session.identity)
    return web.render("missing.html", 400, message=line,
                      **common(feed, session, "error", "refused"))  # fmt: skip


async def act(
    web: Web, request: Request, session: Session, req: p.Request[Any], say: Any, back: str
) -> Response:
    """Send ``req``; ``say(reply)``: the line that tells how it went."""
    try:
        reply = await ask(web, session, req)
    except ColibriError as exc:
        return refused(web, request, session, f"{exc.code}: {exc.message}")
    return answered(request, say(reply), back)


def ids(text: str) -> list[str]:
    return [part for part in re.split(r"[\s,]+", text) if part]


async def submit(web: Web, request: Request, session: Session) -> Response:
    form = await request.form()

    def field(name: str) -> str:
        return str(form.get(name, "")).strip()

    text = str(form.get("text", ""))
    if not text.strip():
        return refused(web, request, session, "bad_request: a task needs a text")
    priority = field("priority")
    try:
        level = int(priority) if priority else 0
    except ValueError:
        why = f"bad_request: priority must be a whole number, not {priority!r}"
        return refused(web, request, session, why)
    req = p.Submit(
        text=text,
        capabilities=[c.strip() for c in field("capabilities").split(",") if c.strip()],
        workspace=field("workspace") or None,
        parent=field("parent") or None,
        after=ids(field("after")),
        priority=level,
    )
    try:
        task = (await ask(web, session, req)).task
    except ColibriError as exc:
        return refused(web, request, session, f"{exc.code}: {exc.message}")
    if request.headers.get("x-requested-with") == "colibri":
        return JSONResponse({"message": f"submitted {short_id(task.id)}", "task": task.id})
    return RedirectResponse(f"/tasks/{task.id}", 303)


async def cancel(web: Web, request: Request, session: Session) -> Response:
    task_id = request.path_params["task_id"]
    req = p.Cancel(task=task_id, reason="cancelled from the web")

    def say(reply: Any) -> str:
        return f"cancelled {len(reply.cancelled)} task(s)"

    return await act(web, request, session, req, say, f"/tasks/{task_id}")


async def retry(web: Web, request: Request, session: Session) -> Response:
    """An ended task submitted again, as a new task (the page links to it)."""
    task_id = request.path_params["task_id"]
    try:
        task = (await ask(web, session, p.Retry(task=task_id))).task
    except ColibriError as exc:
        return refused(web, request, session, f"{exc.code}: {exc.message}")
    if request.headers.get("x-requested-with") == "colibri":
        return JSONResponse({"message": f"retried as {short_id(task.id)}", "task": task.id})
    return RedirectResponse(f"/tasks/{task.id}", 303)


async def answer(web: Web, request: Request, session: Session) -> Response:
    task_id = request.path_params["task_id"]
    text = str((await request.form()).get("text", ""))
    if not text.strip():
        return refused(web, request, session, "bad_request: an answer needs a text")

    def say(reply: Any) -> str:
        return f"answered {short_id(reply.task.id)}"

    req = p.Answer(task=task_id, text=text)
    return await act(web, request, session, req, say, f"/tasks/{task_id}")


async def pause(web: Web, request: Request, session: Session) -> Response:
    paused = str((await request.form()).get("paused", "1")) == "1"
    feed = web.feed(session.identity)

    def say(reply: Any) -> str:
        feed.paused(reply.paused)
        return "dispatch paused" if reply.paused else "dispatch resumed"

    back = request.headers.get("referer") or "/"
    return await act(web, request, session, p.ToggleSwarm(paused=paused), say, _local(back))


def _local(url: str) -> str:
    """Only a path of this server to go back to (never another site's)."""
    from urllib.parse import urlsplit

    parts = urlsplit(url)
    path = parts.path if parts.path.startswith("/") and not parts.path.startswith("//") else "/"
    return path + (f"?{parts.query}" if parts.query else "")
