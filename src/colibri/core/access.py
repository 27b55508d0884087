"""Who may do what: the principal behind a connection, and the rules for each role.

On the Unix socket the peer is the daemon's owner (or a member of ``server.socket_group``),
checked by the kernel: it may do everything, in every tenant. Over TCP a connection is anonymous
until its ``auth`` request names a token; the token's role then decides which requests it may
send, and its tenant is the only one it sees — another tenant's task is as unknown to it as a
task that does not exist, so ids cannot be probed across tenants.

- ``agent``: what a harness and the sessions it runs need — register (under the token's name,
  within its capabilities), heartbeat, report, ask, and submit children, read and wait on its
  tenant's tasks.
- ``operator``: submit, read, wait, cancel, retry, answer within its tenant; never register.
- Anything that changes the whole daemon — pausing dispatch, schedules, skills' descriptions,
  tokens, the message bus — is the owner's, on the Unix socket.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from colibri.core import protocol as p
from colibri.core.errors import Forbidden, NotOwner, UnknownTask, shown
from colibri.core.model import DEFAULT_TENANT, check_name
from colibri.core.tokens import Token

Kind = Literal["owner", "agent", "operator"]

#: What a token of either role may send.
_SHARED: frozenset[type[p.Request[Any]]] = frozenset({
    p.Ping, p.Auth, p.Status, p.Submit, p.IntakeTask, p.CreateTask, p.SubmitAll, p.Get, p.ListTasks,
    p.Family, p.CostTotals, p.Why, p.Wait, p.Agents, p.Ledger, p.ScheduleList, p.ScheduleGet,
})  # fmt: skip
ALLOWED: dict[Kind, frozenset[type[p.Request[Any]]]] = {
    "agent": _SHARED
    | {p.RegisterAgent, p.Heartbeat, p.Out, p.Fail, p.Reclaimed, p.Ready, p.Ask, p.Requeue},
    "operator": _SHARED | {p.Cancel, p.Retry, p.Answer},
}


@dataclass(frozen=True, slots=True)
class Principal:
    kind: Kind
    #: The one tenant it acts in; None for the owner, who acts in all.
    tenant: str | None = None
    #: An agent token's: the name it registers under, what it may offer (empty: anything).
    agent: str | None = None
    capabilities: frozenset[str] = field(default_factory=frozenset)
    #: An agent token's one workspace (None: none).
    workspace: str | None = None
    #: The token's id (what revoking it finds its connections by) and expiry.
    token: str | None = None
    expires_at: str | None = None

    @classmethod
    def of(cls, token: Token) -> Principal:
        return cls(
            kind=token.role,
            tenant=token.tenant,
            agent=token.agent,
            capabilities=frozenset(token.capabilities),
            workspace=token.workspace,
            token=token.id,
            expires_at=token.expires_at,
        )

    @property
    def is_owner(self) -> bool:
        return self.kind == "owner"

    def check(self, req: p.Request[Any]) -> None:
        """Raise ``Forbidden`` unless this principal may send ``req`` at all."""
        if self.kind == "owner" or type(req) in ALLOWED[self.kind]:
            return
        cmd = req.__struct_config__.tag
        if self.kind == "operator" and type(req) in ALLOWED["agent"]:
            why = "agents' requests need an agent token (colibri token create --role agent)"
        elif type(req) in ALLOWED["operator"]:
            why = "it needs an operator token (colibri token create --role operator)"
        else:
            why = "only the daemon's owner may, on its Unix socket"
        raise Forbidden(f"{cmd}: not allowed with a{'n' * (self.kind == 'agent')} "
                        f"{self.kind} token; {why}")  # fmt: skip

    def tenant_for(self, requested: str | None) -> str | None:
        """The tenant a request acts in: the token's own (a request naming another is refused),
        or, for the owner, whatever it asked (None: the default)."""
        if self.tenant is None or requested is None or requested == self.tenant:
            return self.tenant if self.tenant is not None else requested
        raise Forbidden(
            f"this token acts in tenant {self.tenant!r} only, not {shown(requested)}; "
            "leave --tenant out or use a token of that tenant"
        )

    def sees(self, tenant: str) -> bool:
        return self.tenant is None or self.tenant == tenant

    def visible(self, task_id: str, tenant: str) -> None:
        """Raise ``UnknownTask`` for a task of another tenant: to a token it does not exist."""
        if not self.sees(tenant):
            raise UnknownTask(task_id)

    def check_registration(
        self, name: str, capabilities: list[str], workspace: str | None = None
    ) -> None:
        if self.kind == "owner":
            return
        if workspace != self.workspace:
            allowed = f"workspace {self.workspace!r} only" if self.workspace else "no workspace"
            raise Forbidden(
                f"this token serves {allowed}, not {shown(workspace)}; create a token with "
                "--workspace for the one this agent serves"
            )
        if name != self.agent:
            raise Forbidden(
                f"this token registers agent {self.agent!r} only, not {shown(name)}; "
                "give --name as the token says, or create a token for that name"
            )
        if self.capabilities:
            extra = sorted(set(capabilities) - self.capabilities)
            if extra:
                raise Forbidden(
                    f"this token does not allow the capabilities {', '.join(extra)} (it allows "
                    f"{', '.join(sorted(self.capabilities))}); create a token that does"
                )


OWNER = Principal(kind="owner")


@dataclass(slots=True)
class Tenancy:
    """The tenants a daemon serves of its board: every one (``served`` None), or — on a
    PostgreSQL board several daemons serve at once — some, each by a lease of its own. A
    request for another tenant is refused ``not_owner``, saying where it is served."""

    served: frozenset[str] | None = None
    #: The other daemons' tenants as last read from the board's leases: tenant → the serving
    #: daemon's address ("*": one serving the whole board).
    elsewhere: dict[str, str | None] = field(default_factory=dict)
    #: Tenants asked for that no daemon serves: made known to the board (its ``tenants``), so
    #: that a sharing daemon takes them.
    wanted: set[str] = field(default_factory=set)
    #: The daemon's lease ttl in seconds (said with ``not_owner``: a takeover of the tenant
    #: is over within about two of them, so a client knows how long to wait).
    ttl: float | None = None

    def serves(self, tenant: str | None) -> bool:
        return self.served is None or (tenant or DEFAULT_TENANT) in self.served

    def check(self, tenant: str | None) -> None:
        """Raise ``NotOwner`` unless this daemon serves ``tenant`` (None: the default);
        ``BadRequest`` for a name that is not one (``*`` or ``a,b`` would name others)."""
        name = check_name(tenant, "tenant") if tenant else DEFAULT_TENANT
        if self.serves(name):
            return
        served = sorted(self.served or ())
        here = f"tenant{'s' * (len(served) != 1)} {', '.join(served)}" if served else "no tenant"
        key = name if name in self.elsewhere else "*" if "*" in self.elsewhere else None
        if key is None:
            self.wanted.add(name)
            raise NotOwner(
                f"this daemon serves {here}, and no daemon serves tenant {name!r} now (a "
                "sharing daemon takes it within seconds, or start one with --tenants); try again",
                tenant=name, ttl=self.ttl,
            )  # fmt: skip
        address = self.elsewhere[key]
        if address is None:
            raise NotOwner(
                f"tenant {name!r} is served by another daemon of this board, which listens on no "
                "TCP address; use that daemon's root",
                tenant=name, ttl=self.ttl,
            )  # fmt: skip
        raise NotOwner(
            f"tenant {name!r} is served by another daemon of this board, at {address}; "
            "connect there",
            address, tenant=name, ttl=self.ttl,
        )  # fmt: skip
