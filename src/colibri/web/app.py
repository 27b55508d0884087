"""The web server's state (``Web``: its sessions, its feeds, how it signs people in), the
Starlette application, and the gate every request passes: security headers on every
response, the Host of a loopback server checked, and no page, stream or action without a
signed-in session."""

from __future__ import annotations

import asyncio
import contextlib
import ipaddress
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from jinja2 import Environment, PackageLoader
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from colibri.client import AsyncClient, Remote
from colibri.core.errors import ColibriError, Forbidden
from colibri.core.text import one_line, printable, short_id
from colibri.tui.board import in_zone
from colibri.web import views
from colibri.web.feed import Feed
from colibri.web.security import (
    COOKIE,
    HEADERS,
    SESSION_TTL,
    Identity,
    OneTimeSecret,
    Session,
    Sessions,
    Throttle,
    cookie_header,
    loopback_host,
    same_origin,
)

#: How often expired sessions are dropped, and the feeds no session uses any more stopped.
SWEEP_EVERY = 30.0


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


@dataclass
class Web:
    """``starter``: the identity the one-time URL signs in as (this root's socket: the owner;
    or a ``Remote`` with the token ``colibri web`` was given); None off loopback. ``tokens``:
    the daemon over TCP that typed-in tokens are checked against and used with (its token
    field unused); None: no token sign-in (without TLS)."""

    host: str
    port: int
    tls: bool
    starter: Path | Remote | None
    tokens: Remote | None
    ttl: float = SESSION_TTL
    sessions: Sessions = field(default_factory=Sessions)
    secret: OneTimeSecret = field(default_factory=OneTimeSecret)
    throttle: Throttle = field(default_factory=Throttle)
    feeds: dict[str, Feed] = field(default_factory=dict)
    #: Called with each new sign-in URL (the next one, once one was used).
    on_url: Callable[[str], None] = print
    #: The server is stopping: the open event streams end (``end_streams``).
    stopping: bool = False

    def __post_init__(self) -> None:
        self.sessions.ttl = self.ttl
        self.loopback = is_loopback(self.host)
        env = Environment(loader=PackageLoader("colibri.web", "templates"), autoescape=True)
        env.filters["t"] = views.text
        env.filters["short"] = short_id
        env.filters["line"] = lambda value, width: one_line(str(value or ""), width)
        env.globals.update(when=views.when_of, in_zone=in_zone)
        self.templates = env

    @property
    def base_url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"{'https' if self.tls else 'http'}://{host}:{self.port}"

    def sign_in_url(self) -> str:
        return f"{self.base_url}/login?secret={self.secret.value}"

    def starter_identity(self) -> Identity:
        assert self.starter is not None
        if isinstance(self.starter, Remote):
            return Identity.of_token(self.starter, "colibri web's token")
        return Identity("owner", self.starter, "owner")

    def end_streams(self) -> None:
        """Every open page's stream ends now, as the server stops: the server would otherwise
        wait for them (its graceful shutdown's timeout), and hold up the daemon it runs in."""
        self.stopping = True
        for feed in self.feeds.values():
            for listener in feed.listeners:
                listener.wake.set()

    def feed(self, identity: Identity) -> Feed:
        feed = self.feeds.get(identity.key)
        if feed is None:
            feed = self.feeds[identity.key] = Feed(identity.target, identity.label)
            feed.start()
        return feed

    async def sweep(self) -> None:
        """Sessions past their time go, and the feeds no session needs any more."""
        self.sessions.sweep()
        in_use = self.sessions.keys_in_use()
        for key in [k for k in self.feeds if k not in in_use]:
            await self.feeds.pop(key).stop()

    async def check_token(self, token: str) -> Identity:
        """An operator token, checked with the daemon (raises its refusal)."""
        assert self.tokens is not None
        remote = Remote(self.tokens.addresses, token, self.tokens.ca, self.tokens.insecure_loopback)
        client = await AsyncClient(remote).connect()
        try:
            principal = client.principal or {}
        finally:
            await client.close()
        role, tenant = principal.get("role"), principal.get("tenant")
        if role != "operator":
            raise Forbidden(
                f"this token is an {role}'s: sign in with an operator token "
                "(colibri token create --role operator)"
            )
        return Identity.of_token(remote, f"operator of tenant {tenant}")

    def render(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        html = self.templates.get_template(name).render(**context)
        return HTMLResponse(html, status, headers={"cache-control": "no-store"})

    def fragment(self, name: str, **context: Any) -> str:
        return self.templates.get_template(name).render(**context)


class Gate:
    """Every response gets the security headers; a loopback server answers only requests
    that name it in their Host (against DNS rebinding)."""

    def __init__(self, app: ASGIApp, web: Web) -> None:
        self.app, self.web = app, web

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        host = dict(scope["headers"]).get(b"host", b"").decode("latin-1")
        if self.web.loopback and not loopback_host(host, self.web.port):
            refused = PlainTextResponse(f"misdirected: this server is {self.web.base_url}", 421)
            await refused(scope, receive, self._headed(send))
            return
        await self.app(scope, receive, self._headed(send))

    @staticmethod
    def _headed(send: Send) -> Send:
        async def headed(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), *HEADERS]
            await send(message)

        return headed


def session_of(web: Web, request: Request) -> Session | None:
    return web.sessions.get(request.cookies.get(COOKIE))


Handler = Callable[[Web, Request, Session], Awaitable[Response]]


def page(web: Web, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """A page: unsigned, the sign-in page instead."""

    async def endpoint(request: Request) -> Response:
        session = session_of(web, request)
        if session is None:
            return RedirectResponse("/login", 303)
        return await handler(web, request, session)

    return endpoint


def action(web: Web, handler: Handler) -> Callable[[Request], Awaitable[Response]]:
    """A POST: from another origin, refused (403); unsigned, refused (401); without the
    session's CSRF token, refused (403)."""
    import hmac

    async def endpoint(request: Request) -> Response:
        if not same_origin(request):
            return PlainTextResponse("forbidden: a request from another site", 403)
        session = session_of(web, request)
        if session is None:
            return PlainTextResponse("unauthorized: sign in first", 401)
        form = await request.form()
        given = str(form.get("csrf", ""))
        if not hmac.compare_digest(given.encode(), session.csrf.encode()):
            return PlainTextResponse("forbidden: the form's CSRF token is missing or stale", 403)
        return await handler(web, request, session)

    return endpoint


async def login_page(web: Web, request: Request) -> Response:
    given = request.query_params.get("secret")
    if given is not None:
        if web.starter is not None and web.secret.take(given):
            web.on_url(web.sign_in_url())
            return signed_in(web, web.sessions.new(web.starter_identity()))
        return login_form(web, "that sign-in URL was used already or is not this server's: "
                               "open the last one colibri web printed", 403)  # fmt: skip
    return login_form(web)


async def login(web: Web, request: Request) -> Response:
    """A token typed into the form."""
    if not same_origin(request):
        return PlainTextResponse("forbidden: a request from another site", 403)
    if web.tokens is None:
        return login_form(web, "this server signs in by its one-time URL only", 403)
    address = request.client.host if request.client else "?"
    if web.throttle.blocked(address):
        return login_form(web, f"too many failed sign-ins from {address}: wait a minute", 429)
    token = str((await request.form()).get("token", "")).strip()
    try:
        identity = await web.check_token(token)
    except Forbidden as exc:  # a good token, of the wrong role
        return login_form(web, f"{exc.code}: {exc.message}", 403)
    except ColibriError as exc:
        web.throttle.failed(address)
        return login_form(web, f"{exc.code}: {exc.message}", 401)
    except OSError as exc:
        return login_form(web, f"no_daemon: {exc}", 502)
    return signed_in(web, web.sessions.new(identity))


def signed_in(web: Web, session: Session) -> Response:
    response = RedirectResponse("/", 303)
    response.headers["set-cookie"] = cookie_header(session, secure=web.tls, ttl=web.ttl)
    return response


def login_form(web: Web, error: str | None = None, status: int = 200) -> Response:
    return web.render("login.html", status, error=printable(error) if error else None,
                      tokens=web.tokens is not None, loopback=web.starter is not None)  # fmt: skip


async def logout(web: Web, request: Request, session: Session) -> Response:
    web.sessions.end(session.id)
    await web.sweep()
    response = RedirectResponse("/login", 303)
    response.headers["set-cookie"] = cookie_header(None, secure=web.tls, ttl=0)
    return response


def build(web: Web) -> Starlette:
    from colibri.web import actions, pages

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        async def sweeping() -> None:
            while True:
                await asyncio.sleep(SWEEP_EVERY)
                await web.sweep()

        sweeper = asyncio.create_task(sweeping())
        try:
            yield
        finally:
            sweeper.cancel()
            for feed in list(web.feeds.values()):
                await feed.stop()

    def bound(fn: Callable[[Web, Request], Awaitable[Response]]) -> Any:
        async def endpoint(request: Request) -> Response:
            return await fn(web, request)

        return endpoint

    static = StaticFiles(packages=[("colibri.web", "static")])
    routes = [
        Route("/", page(web, pages.board)),
        Route("/tasks", page(web, pages.task_list)),
        Route("/tasks/{task_id}", page(web, pages.task_page)),
        Route("/agents", page(web, pages.agents)),
        Route("/schedules", page(web, pages.schedules)),
        Route("/hive", page(web, pages.hive)),
        Route("/events", bound(pages.stream)),
        Route("/login", bound(login_page)),
        Route("/login", bound(login), methods=["POST"]),
        Route("/logout", action(web, logout), methods=["POST"]),
        Route("/submit", action(web, actions.submit), methods=["POST"]),
        Route("/pause", action(web, actions.pause), methods=["POST"]),
        Route("/tasks/{task_id}/cancel", action(web, actions.cancel), methods=["POST"]),
        Route("/tasks/{task_id}/retry", action(web, actions.retry), methods=["POST"]),
        Route("/tasks/{task_id}/answer", action(web, actions.answer), methods=["POST"]),
        Mount("/static", static, name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    return Gate(app, web)  # type: ignore[return-value]
