"""Tokens: how an agent or an operator on another machine proves who it is.

A token is ``colibri_<id>_<secret>``: a public id (12 hex digits, what ``token list`` and the
logs name) and a 256-bit secret (43 characters of URL-safe base64). The prefix makes a leaked
token easy to find with a secret scanner. The board keeps the id and the SHA-256 of the secret,
never the secret: a copy of the store file gives nobody a way in. A slow password hash would add
nothing: the secret is random, not something a person chose.

A token is bound to one tenant and one role — ``agent`` (with its agent name and, if given, the
capabilities it may register) or ``operator`` — and may expire; revoking it ends it for good.
"""

from __future__ import annotations

from typing import Literal

import msgspec

PREFIX = "colibri_"
ID_DIGITS = 12
#: The characters of a token's id (lowercase hex).
ID_CHARACTERS = "0123456789abcdef"
SECRET_BYTES = 32
Role = Literal["agent", "operator"]
ROLES: tuple[Role, ...] = ("agent", "operator")


class Token(msgspec.Struct, kw_only=True, omit_defaults=True):
    """A token as the board keeps and lists it: everything but its secret."""

    id: str
    tenant: str
    role: Role
    #: An agent token's agent: the one name it may register under.
    agent: str | None = None
    #: An agent token's capabilities: what it may register with (empty: any).
    capabilities: list[str] = []
    #: An agent token's workspace: the one it may serve (None: it registers with none).
    workspace: str | None = None
    created_at: str
    expires_at: str | None = None
    revoked_at: str | None = None
    last_used_at: str | None = None


class Issued(msgspec.Struct, kw_only=True):
    """A new token: what is stored, and the one string to hand over (printed once)."""

    token: Token
    secret_hash: str
    text: str


# (hashlib, hmac and secrets are loaded when first needed: the CLI loads this module for the
# protocol's token replies)


def digest(secret: str) -> str:
    import hashlib

    return hashlib.sha256(secret.encode()).hexdigest()


def issue(token: Token) -> Issued:
    """A fresh secret for ``token`` (whose ``id`` is replaced by a new one)."""
    import secrets

    token_id = secrets.token_hex(ID_DIGITS // 2)
    secret = secrets.token_urlsafe(SECRET_BYTES)
    made = msgspec.structs.replace(token, id=token_id)
    return Issued(token=made, secret_hash=digest(secret), text=f"{PREFIX}{token_id}_{secret}")


def split(text: str) -> tuple[str, str] | None:
    """``(id, secret)`` of a token's text, or None when it is not shaped like one."""
    if not text.startswith(PREFIX):
        return None
    token_id, sep, secret = text[len(PREFIX) :].partition("_")
    if not sep or len(token_id) != ID_DIGITS or not secret or len(secret) > 100:
        return None
    if any(c not in ID_CHARACTERS for c in token_id):
        return None
    return token_id, secret


def matches(secret: str, secret_hash: str) -> bool:
    """Whether ``secret`` is the one ``secret_hash`` was made from, in constant time."""
    import hmac

    return hmac.compare_digest(digest(secret), secret_hash)
