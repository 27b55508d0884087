"""Who may look at the board in a browser, and what a page may do.

Nobody is let in unsigned, on loopback too. Two ways to sign in:

- on loopback, the one-time URL ``colibri web`` prints (as Jupyter does): its secret signs the
  person who started it in once, as the identity it runs with (the owner on this root's
  socket, or the token it was given), and a new URL is printed for the next browser;
- over TLS, an operator token typed into the sign-in form: the pages then talk to the daemon
  with that token, so a tenant's token sees its tenant only — the daemon decides, not us.

Either way the browser holds a random session id in a cookie (HttpOnly, SameSite=Strict,
Secure under TLS) that expires; the server keeps the session (and any token) in memory only.
Every POST must come from our own origin (``Origin``, else ``Referer``) and carry the
session's CSRF token. Every response forbids inline script and framing (``HEADERS``).
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

if TYPE_CHECKING:
    from starlette.requests import Request

    from colibri.client import Remote

COOKIE = "colibri_session"
#: How long a session lasts from its sign-in.
SESSION_TTL = 12 * 3600.0
#: Failed token sign-ins one address may make within a minute before it is refused for the
#: rest of it (the daemon counts failures by the web server's address: a guesser here would
#: otherwise get every user of the web server throttled there).
SIGN_IN_FAILURES = 10

CSP = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'"
)
HEADERS = [
    (b"content-security-policy", CSP.encode()),
    (b"x-content-type-options", b"nosniff"),
    (b"referrer-policy", b"no-referrer"),
    (b"x-frame-options", b"DENY"),
    (b"cross-origin-opener-policy", b"same-origin"),
]


@dataclass(frozen=True)
class Identity:
    """Whom the daemon sees behind a session: ``key`` names its feed (``owner``, or
    ``token:`` and a digest of the token), ``target`` is how to reach the daemon as it."""

    key: str
    target: Path | Remote
    label: str

    @classmethod
    def of_token(cls, remote: Remote, label: str) -> Identity:
        digest = hashlib.sha256(remote.token.encode()).hexdigest()[:24]
        return cls(f"token:{digest}", remote, label)


@dataclass
class Session:
    id: str
    csrf: str
    identity: Identity
    expires: float


@dataclass
class Sessions:
    ttl: float = SESSION_TTL
    by_id: dict[str, Session] = field(default_factory=dict)

    def new(self, identity: Identity) -> Session:
        session = Session(
            secrets.token_urlsafe(32), secrets.token_urlsafe(32), identity, time.time() + self.ttl
        )
        self.by_id[session.id] = session
        return session

    def get(self, session_id: str | None) -> Session | None:
        if not session_id:
            return None
        session = self.by_id.get(session_id)
        if session is None:
            return None
        if session.expires <= time.time():
            del self.by_id[session_id]
            return None
        return session

    def end(self, session_id: str) -> None:
        self.by_id.pop(session_id, None)

    def sweep(self) -> None:
        now = time.time()
        for session_id in [s.id for s in self.by_id.values() if s.expires <= now]:
            del self.by_id[session_id]

    def keys_in_use(self) -> set[str]:
        return {s.identity.key for s in self.by_id.values()}


class OneTimeSecret:
    """The secret of the sign-in URL: good once, then replaced by a new one."""

    def __init__(self) -> None:
        self.value = secrets.token_urlsafe(32)

    def take(self, given: str) -> bool:
        if not hmac.compare_digest(given.encode(), self.value.encode()):
            return False
        self.value = secrets.token_urlsafe(32)
        return True


@dataclass
class Throttle:
    """Failed token sign-ins by address, over the last minute."""

    failures: dict[str, list[float]] = field(default_factory=dict)

    def blocked(self, address: str) -> bool:
        now = time.monotonic()
        recent = [t for t in self.failures.get(address, []) if now - t < 60]
        self.failures[address] = recent
        return len(recent) >= SIGN_IN_FAILURES

    def failed(self, address: str) -> None:
        self.failures.setdefault(address, []).append(time.monotonic())


def origin_of(request: Request) -> str:
    """This server's origin as the browser sees it (its scheme and the Host it asked for)."""
    host = request.headers.get("host", "")
    return f"{request.url.scheme}://{host}"


def same_origin(request: Request) -> bool:
    """Whether a POST comes from one of our own pages: its ``Origin`` (or, if a browser sent
    none, its ``Referer``) is this server's. Neither: refused."""
    origin = request.headers.get("origin")
    if origin is None:
        referer = request.headers.get("referer")
        if not referer:
            return False
        parts = urlsplit(referer)
        origin = f"{parts.scheme}://{parts.netloc}"
    return hmac.compare_digest(origin.encode(), origin_of(request).encode())


def loopback_host(host: str, port: int) -> bool:
    """Whether a Host header names this loopback server (a page of another site that a DNS
    name made resolve to 127.0.0.1 names its own host: refused, against DNS rebinding)."""
    return host in {f"127.0.0.1:{port}", f"localhost:{port}", f"[::1]:{port}"}


def cookie_header(session: Session | None, *, secure: bool, ttl: float) -> str:
    """The Set-Cookie value that holds ``session`` (None: clears it)."""
    value, age = (session.id, int(ttl)) if session is not None else ("", 0)
    flags = "; Secure" if secure else ""
    return f"{COOKIE}={value}; Path=/; Max-Age={age}; HttpOnly; SameSite=Strict{flags}"
