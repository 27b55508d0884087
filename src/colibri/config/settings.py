"""The settings of colibri.jsonc: their defaults (the dataclasses here are the one place they
are written) and the range each may take."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from colibri.core.durations import DAY
from colibri.core.model import DEFAULT_MAX_LINE
from colibri.layout import RootLayout

if TYPE_CHECKING:
    from colibri.core.schedules import ScheduleSpec
    from colibri.workspaces import Workspace

#: ``ledger.rotate_mib`` and ``supervisor.harness_log_mib`` bounds: below 1 KiB every append
#: would rotate; 1 TiB is plenty.
MIN_ROTATE_MIB = 0.001
MAX_ROTATE_MIB = 1024 * 1024
#: The range of every duration setting, in seconds (README.md's Configuration table).
DURATION_RANGES: dict[str, tuple[float, float]] = {
    "scheduler.tick": (0.01, DAY),
    "scheduler.agent_ttl": (0.1, DAY),
    "scheduler.ageing": (1.0, 365 * DAY),
    "scheduler.retry_backoff": (0.001, DAY),
    "server.line_timeout": (0.1, DAY),
    "server.idle_timeout": (1.0, DAY),
    "server.handshake_timeout": (0.1, 3600.0),
    "store.lease_ttl": (1.0, 3600.0),
    "supervisor.crash_window": (1.0, DAY),
    "supervisor.cool_down": (1.0, DAY),
    "supervisor.max_backoff": (1.0, DAY),
    "supervisor.orphan_after": (1.0, 30 * DAY),
}
#: The range of every whole-number setting.
WHOLE_RANGES: dict[str, tuple[int, int]] = {
    "scheduler.max_sessions": (1, 100_000),
    "scheduler.max_pending": (1, 10**9),
    "scheduler.max_children": (1, 10**9),
    "scheduler.max_depth": (1, 1000),
    "server.max_line": (1024, 1 << 30),
    "server.max_connections": (1, 100_000),
    "server.auth_failures": (1, 1_000_000),
    "server.remote_connections": (1, 100_000),
    "server.token_connections": (1, 100_000),
    "server.tenant_connections": (1, 100_000),
    "server.token_waits": (1, 10**7),
    "server.tenant_waits": (1, 10**7),
    "server.token_follows": (1, 100_000),
    "server.tenant_follows": (1, 100_000),
    "supervisor.crash_loop": (1, 1000),
    "ledger.keep": (1, 10_000),
}
#: The range of every setting that is a number, fractions allowed.
NUMBER_RANGES: dict[str, tuple[float, float]] = {
    "scheduler.min_score": (0.0, 1.0),
    "scheduler.max_pending_mib": (0.001, 1024 * 1024),
    "ledger.rotate_mib": (0.0, MAX_ROTATE_MIB),
    "supervisor.harness_log_mib": (0.0, MAX_ROTATE_MIB),
}


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    tick: float = 30.0
    agent_ttl: float = 30.0
    min_score: float = 0.0
    ageing: float | None = None
    retry_backoff: float = 5.0
    #: Most pending tasks a tenant may have; more submissions are refused (quota_exceeded).
    max_pending: int = 1_000_000
    #: Most children one task may have.
    max_children: int = 10_000
    #: Most ancestors a task may have: a longer hand-off or --parent chain is refused.
    max_depth: int = 32
    #: MiB of task text the open tasks of one tenant may hold.
    max_pending_mib: float = 256.0
    #: Most sessions the supervised workspaces of this host run at once.
    max_sessions: int = field(default_factory=lambda: (os.cpu_count() or 1) * 2)

    @property
    def max_pending_bytes(self) -> int:
        return int(self.max_pending_mib * 1024 * 1024)


@dataclass(frozen=True, slots=True)
class ServerSettings:
    max_line: int = DEFAULT_MAX_LINE
    max_connections: int = 256
    line_timeout: float = 30.0
    #: An anonymous connection (no agent, no subscriber) silent this long is closed.
    idle_timeout: float = 300.0
    #: A Unix group whose members may use the socket too (its gid); None: the owner only.
    socket_group: int | None = None
    socket_group_name: str | None = None
    #: TCP addresses to listen on too (``tcp://HOST:PORT``), with TLS and tokens.
    listen: tuple[str, ...] = ()
    #: The certificate chain and private key the TLS listener presents (PEM files).
    tls_cert: str | None = None
    tls_key: str | None = None
    #: Plain TCP on a loopback address, for tests; never on any other address.
    insecure_loopback: bool = False
    #: A TCP peer that has not finished its TLS handshake and ``auth`` by then is dropped.
    handshake_timeout: float = 10.0
    #: Failed logins from one address within a minute before its new connections are refused
    #: (``throttled``) until the minute has passed.
    auth_failures: int = 20
    #: TCP peers that have authenticated, every token's together: a budget of their own, apart
    #: from ``max_connections`` (the Unix socket's), so no token can take the owner's room.
    remote_connections: int = 512
    #: Of those, what one token, and all the tokens of one tenant, may hold at once: one
    #: tenant can never fill ``remote_connections`` (``tenant_connections`` is kept below it).
    token_connections: int = 128
    tenant_connections: int = 256
    #: ``wait`` requests still to be answered, of one token and of one tenant's tokens.
    token_waits: int = 1000
    tenant_waits: int = 4000
    #: Connections following the ledger (``ledger --follow``), of one token and one tenant.
    token_follows: int = 8
    tenant_follows: int = 32
    #: ``HOST:PORT`` to serve Prometheus metrics on over plain HTTP (``GET /metrics``); None:
    #: no metrics, and the daemon never loads their library.
    metrics: str | None = None


@dataclass(frozen=True, slots=True)
class SupervisorSettings:
    crash_loop: int = 5
    crash_window: float = 60.0
    cool_down: float = 300.0
    max_backoff: float = 60.0
    #: A harness's log (``.colibri/harness/NAME.log``) past this many MiB becomes ``NAME.log.1``
    #: (the older one deleted) and a new one is started; 0 never.
    harness_log_mib: float = 16.0
    #: A harness the daemon started stops its sessions and exits once no daemon has held its
    #: root this long (its daemon is gone for good; one started again meanwhile adopts it).
    orphan_after: float = 600.0


@dataclass(frozen=True, slots=True)
class LedgerSettings:
    #: ``ledger.jsonl`` is rotated once it passes this size in MiB; 0 never rotates.
    rotate_mib: float = 256.0
    #: Rotated files kept, ``ledger.jsonl.1`` (newest) to ``ledger.jsonl.<keep>``.
    keep: int = 5

    @property
    def rotate_bytes(self) -> int:
        return int(self.rotate_mib * 1024 * 1024)


@dataclass(frozen=True, slots=True)
class Config:
    root: Path
    store: str
    durability: str = "full"
    #: How long a daemon's lease on a PostgreSQL board lasts unrenewed (renewed every third).
    lease_ttl: float = 10.0
    #: The tenants this daemon serves of a PostgreSQL board, each by a lease of its own;
    #: () for the whole board, by one lease.
    tenants: tuple[str, ...] = ()
    #: Whether it shares the board's tenants out with the other sharing daemons instead,
    #: taking and giving back tenants as they come and go.
    share: bool = False
    scheduler: SchedulerSettings = field(default_factory=SchedulerSettings)
    server: ServerSettings = field(default_factory=ServerSettings)
    supervisor: SupervisorSettings = field(default_factory=SupervisorSettings)
    ledger: LedgerSettings = field(default_factory=LedgerSettings)
    #: Schedules defined in colibri.jsonc, by name.
    schedules: dict[str, ScheduleSpec] = field(default_factory=dict)
    #: The zone of schedules that name none: the daemon's local zone.
    default_tz: str = "UTC"
    #: Workspaces of colibri.jsonc, merged with their templates and checked.
    workspaces: dict[str, Workspace] = field(default_factory=dict)
    #: The daemon's environment, read once here; harnesses get only part of it.
    environ: dict[str, str] = field(default_factory=dict)
    #: ``COLIBRI_CRASHPOINT`` (``name:n``), for the crash tests: die at that point.
    crashpoint: str | None = None
    #: ``COLIBRI_HOST``: how to ask the system about processes and peers (``host.select``).
    host: str = "auto"

    @property
    def layout(self) -> RootLayout:
        return RootLayout(self.root)
