"""The daemon's side of tokens: making, listing and revoking them, and checking a login.

Every change is a write in the batch like any other, acknowledged after its commit. A login
that fails says why in terms that give nothing away to a guesser — an unknown id and a wrong
secret get the same answer — and never repeats the token it was given.
"""

from __future__ import annotations

import logging

from colibri.core import tokens
from colibri.core.access import Principal, Tenancy
from colibri.core.errors import AmbiguousToken, BadRequest, Unauthorized, UnknownToken, shown
from colibri.core.model import (
    DEFAULT_TENANT,
    SHORTEST_ID_PART,
    check_name,
    normalize_names,
    rfc3339,
)
from colibri.core.tokens import Issued, Role, Token
from colibri.daemon.clock import Clock
from colibri.store import Store, StoreConflict

log = logging.getLogger(__name__)


class TokenAuthority:
    def __init__(self, store: Store, clock: Clock, tenancy: Tenancy | None = None) -> None:
        self.store = store
        self.clock = clock
        #: The tenants served here: a token of any tenant is made by any daemon of the board
        #: (it records a tenant new to the board, for a sharing daemon to take), but revoked by
        #: the daemon serving its tenant, which closes its connections.
        self.tenancy = tenancy or Tenancy()

    def create(
        self,
        tenant: str,
        role: Role,
        agent: str | None,
        capabilities: list[str],
        expires_in: float | None,
        workspace: str | None = None,
    ) -> Issued:
        tenant = check_name(tenant, "tenant") if tenant else DEFAULT_TENANT
        if role == "agent":
            if agent is None:
                raise BadRequest("an agent token is for one agent: give --agent NAME")
            check_name(agent, "agent name")
            # Agents are known by name across tenants: one name, one tenant.
            for other in self.store.tokens():
                if other.agent == agent and other.tenant != tenant and other.revoked_at is None:
                    raise BadRequest(
                        f"agent name {agent!r} belongs to tenant {other.tenant!r} (token "
                        f"{other.id}); give this tenant's agent another name"
                    )
            if workspace is not None:
                check_name(workspace, "workspace")
        elif agent is not None or capabilities or workspace is not None:
            raise BadRequest(
                "an operator token registers no agent: leave out --agent, --cap and "
                "--workspace (or create it with --role agent)"
            )
        now = self.clock.time()
        issued = tokens.issue(
            Token(
                id="",
                tenant=tenant,
                role=role,
                agent=agent,
                capabilities=normalize_names(capabilities, "capability"),
                workspace=workspace,
                created_at=rfc3339(now),
                expires_at=rfc3339(now + expires_in) if expires_in is not None else None,
            )
        )
        try:
            self.store.insert_token(issued.token, issued.secret_hash)
        except StoreConflict:  # 48 random bits met an old id: say so, nothing was written
            raise BadRequest("that token id is taken by chance; run the command again") from None
        if tenant != DEFAULT_TENANT:
            self.store.ensure_tenant(tenant, issued.token.created_at)
        log.info(
            "token created",
            extra={"event": "token_created", "token": issued.token.id, "tenant": tenant,
                   "role": role, "agent": agent},
        )  # fmt: skip
        return issued

    def list(self) -> list[Token]:
        return [t for t in self.store.tokens() if self.tenancy.serves(t.tenant)]

    def resolve(self, given: str) -> str:
        """The id of the one token whose id starts with ``given`` (in any case), as task ids
        are taken: ``UnknownToken`` when none does, ``AmbiguousToken`` when several do, revoked
        ones counted (a revocation is for good: it is never made on a guess)."""
        prefix = given.lower()
        if self.store.token(prefix) is not None:
            return prefix
        if prefix.strip(tokens.ID_CHARACTERS) or len(prefix) >= tokens.ID_DIGITS:
            raise UnknownToken(given)  # not the start of any id
        if len(prefix) < SHORTEST_ID_PART:
            raise BadRequest(
                f"{shown(given)} is too short to name a token: give at least {SHORTEST_ID_PART} "
                "characters of its id (list them with: colibri token list)"
            )
        found = sorted(t.id for t in self.store.tokens() if t.id.startswith(prefix))
        if not found:
            raise UnknownToken(given)
        if len(found) > 1:
            raise AmbiguousToken(given, found)
        return found[0]

    def revoke(self, token_id: str) -> Token:
        found = self.store.token(token_id)
        if found is None:
            raise UnknownToken(token_id)
        # (There, where its connections are, which a revocation closes.)
        self.tenancy.check(found[0].tenant)
        self.store.revoke_token(token_id, rfc3339(self.clock.time()))
        log.info("token revoked", extra={"event": "token_revoked", "token": token_id})
        stored = self.store.token(token_id)
        assert stored is not None
        return stored[0]

    def authenticate(self, text: str) -> Principal:
        """The principal a token's text stands for; ``Unauthorized`` saying why not."""
        parts = tokens.split(text)
        if parts is None:
            raise Unauthorized(
                "that is not a Colibri token (a token reads colibri_<id>_<secret>; "
                "create one with: colibri token create)"
            )
        token_id, secret = parts
        found = self.store.token(token_id)
        if found is None or not tokens.matches(secret, found[1]):
            raise Unauthorized(f"token {token_id} is not known here, or its secret is wrong")
        token = found[0]
        now = rfc3339(self.clock.time())
        if token.revoked_at is not None:
            raise Unauthorized(f"token {token_id} was revoked at {token.revoked_at}")
        if token.expires_at is not None and token.expires_at <= now:
            raise Unauthorized(f"token {token_id} expired at {token.expires_at}; create a new one")
        self.store.touch_token(token_id, now)
        return Principal.of(token)
