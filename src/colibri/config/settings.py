"""The settings of colibri.jsonc, each declared once: in the dataclasses here, its default and
(``setting``) the kind and range of value it takes; ``load_config`` reads them from these."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from colibri.core.durations import DAY, parse_duration
from colibri.core.errors import BadDuration, ConfigError, shown
from colibri.core.model import DEFAULT_MAX_LINE
from colibri.layout import RootLayout

if TYPE_CHECKING:
    from colibri.core.schedules import ScheduleSpec
    from colibri.workspaces import Workspace

#: ``ledger.rotate_mib`` and ``supervisor.harness_log_mib`` bounds: below 1 KiB every append
#: would rotate; 1 TiB is plenty.
MIN_ROTATE_MIB = 0.001
MAX_ROTATE_MIB = 1024 * 1024
#: The metadata key of a field that is a key of colibri.jsonc, holding its ``Setting``.
SETTING = "colibri.setting"
#: Gives the ``file:line: section.key`` an error about a setting begins with (found on error).
AtWhere = Callable[[], str]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Duration:
    """A duration (``90s``, ``15m``, ``1h30m``, ``1d`` or seconds) from ``low`` to ``high``
    seconds; null is the default."""

    low: float
    high: float

    def check(self, value: Any, at: AtWhere) -> float | None:
        """``value`` in seconds (None: the default); ``at()`` begins the message of an error."""
        if value is None:
            return None
        try:
            return parse_duration(value, low=self.low, high=self.high)
        except BadDuration as exc:
            raise ConfigError(f"{at()}: {exc.message}") from None


@dataclass(frozen=True, slots=True)
class Whole:
    """A whole number from ``low`` to ``high``; ``8.0`` is the whole number 8."""

    low: int
    high: int

    def check(self, value: Any, at: AtWhere) -> int:
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 8.5 is refused below
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not self.low <= value <= self.high
        ):
            raise ConfigError(
                f"{at()} must be a whole number from {self.low:,} to {self.high:,}, "
                f"not {shown(value)}"
            )
        return value


@dataclass(frozen=True, slots=True)
class Number:
    """A number from ``low`` to ``high``, fractions allowed."""

    low: float
    high: float

    def check(self, value: Any, at: AtWhere) -> float:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not self.low <= value <= self.high  # NaN is refused here too
        ):
            raise ConfigError(
                f"{at()} must be a number from {_figure(self.low)} to {_figure(self.high)}, "
                f"not {shown(value)}"
            )
        return float(value)


@dataclass(frozen=True, slots=True)
class Rotation(Number):
    """A size in MiB that a file is rotated at: 0 (never) or at least 1 KiB."""

    def check(self, value: Any, at: AtWhere) -> float:
        mib = Number.check(self, value, at)
        if 0 < mib < MIN_ROTATE_MIB:
            raise ConfigError(
                f"{at()} must be 0 (never rotate) or at least {MIN_ROTATE_MIB} (1 KiB)"
            )
        return mib


Rule = Duration | Whole | Number


@dataclass(frozen=True, slots=True)
class Setting:
    """What a field's metadata says of it as a key of colibri.jsonc: the rule ``load_config``
    checks its value by (a kind and a range), or None for one read by code of its own there (a
    group, an address, a path …)."""

    rule: Rule | None = None
    #: Its key in the section, when it is not the field's name.
    key: str = ""


def setting(default: T, rule: Rule | None = None) -> T:
    """A field read from colibri.jsonc: its default, and the rule its value must follow."""
    return field(default=default, metadata={SETTING: Setting(rule)})


def _figure(value: float) -> str:
    """A bound as the README writes it: 1,048,576 or 0.001."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def _twice_the_cpus() -> int:
    return (os.cpu_count() or 1) * 2


@dataclass(frozen=True, slots=True)
class SchedulerSettings:
    tick: float = setting(30.0, Duration(0.01, DAY))
    agent_ttl: float = setting(30.0, Duration(0.1, DAY))
    min_score: float = setting(0.0, Number(0.0, 1.0))
    ageing: float | None = setting(None, Duration(1.0, 365 * DAY))
    retry_backoff: float = setting(5.0, Duration(0.001, DAY))
    #: Most pending tasks a tenant may have; more submissions are refused (quota_exceeded).
    max_pending: int = setting(1_000_000, Whole(1, 10**9))
    #: Most children one task may have.
    max_children: int = setting(10_000, Whole(1, 10**9))
    #: Most ancestors a task may have: a longer hand-off or --parent chain is refused.
    max_depth: int = setting(32, Whole(1, 1000))
    #: MiB of task text the open tasks of one tenant may hold.
    max_pending_mib: float = setting(256.0, Number(0.001, 1024 * 1024))
    #: Most sessions the supervised workspaces of this host run at once.
    max_sessions: int = field(
        default_factory=_twice_the_cpus, metadata={SETTING: Setting(Whole(1, 100_000))}
    )

    @property
    def max_pending_bytes(self) -> int:
        return int(self.max_pending_mib * 1024 * 1024)


@dataclass(frozen=True, slots=True)
class ServerSettings:
    max_line: int = setting(DEFAULT_MAX_LINE, Whole(1024, 1 << 30))
    max_connections: int = setting(256, Whole(1, 100_000))
    line_timeout: float = setting(30.0, Duration(0.1, DAY))
    #: An anonymous connection (no agent, no subscriber) silent this long is closed.
    idle_timeout: float = setting(300.0, Duration(1.0, DAY))
    #: A Unix group whose members may use the socket too (its gid); None: the owner only.
    socket_group: int | None = setting(None)
    socket_group_name: str | None = None
    #: TCP addresses to listen on too (``tcp://HOST:PORT``), with TLS and tokens.
    listen: tuple[str, ...] = setting(())
    #: The certificate chain and private key the TLS listener presents (PEM files).
    tls_cert: str | None = setting(None)
    tls_key: str | None = setting(None)
    #: Plain TCP on a loopback address, for tests; never on any other address.
    insecure_loopback: bool = False
    #: A TCP peer that has not finished its TLS handshake and ``auth`` by then is dropped.
    handshake_timeout: float = setting(10.0, Duration(0.1, 3600.0))
    #: Failed logins from one address within a minute before its new connections are refused
    #: (``throttled``) until the minute has passed.
    auth_failures: int = setting(20, Whole(1, 1_000_000))
    #: TCP peers that have authenticated, every token's together: a budget of their own, apart
    #: from ``max_connections`` (the Unix socket's), so no token can take the owner's room.
    remote_connections: int = setting(512, Whole(1, 100_000))
    #: Of those, what one token, and all the tokens of one tenant, may hold at once: one
    #: tenant can never fill ``remote_connections`` (``tenant_connections`` is kept below it).
    token_connections: int = setting(128, Whole(1, 100_000))
    tenant_connections: int = setting(256, Whole(1, 100_000))
    #: ``wait`` requests still to be answered, of one token and of one tenant's tokens.
    token_waits: int = setting(1000, Whole(1, 10**7))
    tenant_waits: int = setting(4000, Whole(1, 10**7))
    #: Connections following the ledger (``ledger --follow``), of one token and one tenant.
    token_follows: int = setting(8, Whole(1, 100_000))
    tenant_follows: int = setting(32, Whole(1, 100_000))
    #: ``HOST:PORT`` to serve Prometheus metrics on over plain HTTP (``GET /metrics``); None:
    #: no metrics, and the daemon never loads their library.
    metrics: str | None = setting(None)


@dataclass(frozen=True, slots=True)
class SupervisorSettings:
    crash_loop: int = setting(5, Whole(1, 1000))
    crash_window: float = setting(60.0, Duration(1.0, DAY))
    cool_down: float = setting(300.0, Duration(1.0, DAY))
    max_backoff: float = setting(60.0, Duration(1.0, DAY))
    #: A harness's log (``.colibri/harness/NAME.log``) past this many MiB becomes ``NAME.log.1``
    #: (the older one deleted) and a new one is started; 0 never.
    harness_log_mib: float = setting(16.0, Rotation(0.0, MAX_ROTATE_MIB))
    #: A harness the daemon started stops its sessions and exits once no daemon has held its
    #: root this long (its daemon is gone for good; one started again meanwhile adopts it).
    orphan_after: float = setting(600.0, Duration(1.0, 30 * DAY))


@dataclass(frozen=True, slots=True)
class LedgerSettings:
    #: ``ledger.jsonl`` is rotated once it passes this size in MiB; 0 never rotates.
    rotate_mib: float = setting(256.0, Rotation(0.0, MAX_ROTATE_MIB))
    #: Rotated files kept, ``ledger.jsonl.1`` (newest) to ``ledger.jsonl.<keep>``.
    keep: int = setting(5, Whole(1, 10_000))

    @property
    def rotate_bytes(self) -> int:
        return int(self.rotate_mib * 1024 * 1024)


@dataclass(frozen=True, slots=True)
class Config:
    root: Path
    store: str = field(metadata={SETTING: Setting(key="path")})
    durability: str = setting("full")
    #: How long a daemon's lease on a PostgreSQL board lasts unrenewed (renewed every third).
    lease_ttl: float = setting(10.0, Duration(1.0, 3600.0))
    #: The tenants this daemon serves of a PostgreSQL board, each by a lease of its own;
    #: () for the whole board, by one lease.
    tenants: tuple[str, ...] = setting(())
    #: Whether it shares the board's tenants out with the other sharing daemons instead,
    #: taking and giving back tenants as they come and go.
    share: bool = setting(False)
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


#: The sections of colibri.jsonc whose keys are fields of a class here (``store`` the Config's).
SECTIONS: dict[str, type] = {
    "scheduler": SchedulerSettings,
    "server": ServerSettings,
    "store": Config,
    "supervisor": SupervisorSettings,
    "ledger": LedgerSettings,
}


def keys(section: str) -> dict[str, tuple[str, Setting]]:
    """The keys of ``section``, each with the name of its field and its ``Setting``."""
    found: dict[str, tuple[str, Setting]] = {}
    for each in fields(SECTIONS[section]):
        declared = each.metadata.get(SETTING)
        if declared is not None:
            found[declared.key or each.name] = (each.name, declared)
    return found


#: The rule of every ``section.key`` that has one.
RULES: dict[str, Rule] = {
    f"{section}.{key}": declared.rule
    for section in SECTIONS
    for key, (_name, declared) in keys(section).items()
    if declared.rule is not None
}
#: The range of every duration setting, in seconds (README.md's Configuration table).
DURATION_RANGES: dict[str, tuple[float, float]] = {
    name: (rule.low, rule.high) for name, rule in RULES.items() if isinstance(rule, Duration)
}
#: The range of every whole-number setting.
WHOLE_RANGES: dict[str, tuple[int, int]] = {
    name: (rule.low, rule.high) for name, rule in RULES.items() if isinstance(rule, Whole)
}
#: The range of every setting that is a number, fractions allowed.
NUMBER_RANGES: dict[str, tuple[float, float]] = {
    name: (rule.low, rule.high) for name, rule in RULES.items() if isinstance(rule, Number)
}
