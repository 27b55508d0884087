"""Settings: the one place that reads colibri.jsonc, and the face of its parts.

settings   the settings, each declared once: default, kind and range (``Config`` …)
template   what ``colibri init`` writes
roots      finding, checking and creating a root
jsonc      reading the file: its size, depth and syntax errors
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from colibri.config.jsonc import (
    MAX_CONFIG_BYTES,
    MAX_CONFIG_DEPTH,
    key_offset,
    parse_jsonc,
    read_config_text,
)
from colibri.config.roots import check_state_entry, find_root, init_root, resolve_root
from colibri.config.settings import (
    DURATION_RANGES,
    MAX_ROTATE_MIB,
    MIN_ROTATE_MIB,
    NUMBER_RANGES,
    SECTIONS,
    WHOLE_RANGES,
    Config,
    LedgerSettings,
    SchedulerSettings,
    ServerSettings,
    SupervisorSettings,
    keys,
)
from colibri.config.template import TEMPLATE
from colibri.config.tenancy import served_tenants, shares_tenants
from colibri.core.errors import ConfigError, shown
from colibri.core.leases import is_postgres
from colibri.layout import CONFIG_NAME, RootLayout

if TYPE_CHECKING:
    from colibri.core.schedules import ScheduleSpec

__all__ = [
    "DURATION_RANGES",
    "HOST_ENV",
    "MAX_CONFIG_BYTES",
    "MAX_CONFIG_DEPTH",
    "MAX_ROTATE_MIB",
    "MIN_ROTATE_MIB",
    "NUMBER_RANGES",
    "TEMPLATE",
    "WHOLE_RANGES",
    "Config",
    "LedgerSettings",
    "SchedulerSettings",
    "ServerSettings",
    "SupervisorSettings",
    "check_state_entry",
    "find_root",
    "host_mode",
    "init_root",
    "load_config",
    "local_zone_name",
    "parse_jsonc",
    "read_config_text",
    "replace_config_text",
    "resolve_root",
]

#: AF_UNIX paths are limited to 108 bytes on Linux (104 on the BSDs), terminator included.
MAX_SOCKET_PATH = 103


#: Sections whose keys are names of one's own choosing; each entry is checked as what it is.
_FREE = ("schedules", "templates", "workspaces")
_KNOWN = sorted([*SECTIONS, *_FREE])
_ABSENT = object()


HOST_ENV = "COLIBRI_HOST"


def host_mode(environ: Mapping[str, str]) -> str:
    """How the daemon and harnesses ask the system about processes and socket peers
    (``host.MODES``): ``COLIBRI_HOST``, ``auto`` when unset. ``portable`` forces the calls
    that work on any Unix, as on FreeBSD; ``portable-processes`` and ``portable-peers`` force
    one of the two."""
    from colibri.host import MODES

    mode = environ.get(HOST_ENV) or "auto"
    if mode not in MODES:
        raise ConfigError(f"{HOST_ENV}={shown(mode)} is not a mode; modes: {', '.join(MODES)}")
    return mode


def load_config(
    root: Path,
    *,
    store: str | None = None,
    durability: str | None = None,
    listen: tuple[str, ...] = (),
    tls_cert: str | None = None,
    tls_key: str | None = None,
    insecure_loopback: bool = False,
    lease_ttl: str | None = None,
    metrics: str | None = None,
    tenants: str | None = None,
    share: bool = False,
) -> Config:
    """Read and validate ``root/colibri.jsonc``; errors say ``file:line: what is wrong``."""
    path = root / CONFIG_NAME
    raw: dict[str, Any] = {}
    text = read_config_text(path)
    if text is not None:
        loaded = parse_jsonc(path, text)
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}:1: the file must hold one object {{ … }}")
        raw = loaded
    else:
        text = ""

    def where(key: str, section: str | None = None) -> str:
        """``file:line`` of ``key`` (the first after ``section``'s, when given)."""
        start = key_offset(text, section, 0) if section is not None else 0
        offset = key_offset(text, key, start)
        line = text.count("\n", 0, offset) + 1 if offset >= 0 else 1
        return f"{path}:{line}"

    for section, value in raw.items():
        if section not in _KNOWN:
            raise ConfigError(
                f"{where(section)}: unknown section {section!r}; known: {', '.join(_KNOWN)}"
            )
        if not isinstance(value, dict):
            raise ConfigError(f"{where(section)}: {section!r} must be an object")
        if section in _FREE:
            continue
        known = keys(section)
        for key in value:
            if key not in known:
                raise ConfigError(
                    f"{where(key, section)}: unknown key {section}.{key}; known: "
                    f"{', '.join(sorted(known))}"
                )

    def setting(name: str) -> tuple[Callable[[], str], Any]:
        """``name``'s value, and how an error about it begins (found only when needed)."""
        section, key = name.split(".")
        return lambda: f"{where(key, section)}: {name}", raw.get(section, {}).get(key, _ABSENT)

    def ruled(section: str, options: Mapping[str, str | None] | None = None) -> dict[str, Any]:
        """The section's settings that have a rule and a value, checked. ``options`` holds the
        values given on the command line by key (``--lease-ttl`` for ``lease_ttl``): one given
        is the key's value, and its error begins with the option."""
        checked: dict[str, Any] = {}
        for key, (name, declared) in keys(section).items():
            given = (options or {}).get(key)
            at, value = setting(f"{section}.{key}") if given is None else _option(key, given)
            if declared.rule is None or value is _ABSENT:
                continue
            value = declared.rule.check(value, at)
            if value is not None:  # a duration set to null: its default
                checked[name] = value
        return checked

    scheduler = SchedulerSettings(**ruled("scheduler"))
    group_name = raw.get("server", {}).get("socket_group")
    group_id = None
    if group_name is not None:
        import grp

        if not isinstance(group_name, str) or not group_name or "\0" in group_name:
            raise ConfigError(
                f"{where('socket_group', 'server')}: server.socket_group must be a group name"
            )
        try:
            group_id = grp.getgrnam(group_name).gr_gid
        except KeyError:
            raise ConfigError(
                f"{where('socket_group', 'server')}: server.socket_group: there is no group "
                f"{shown(group_name)} on this host (create it with groupadd, or see getent group)"
            ) from None
    at_listen, configured_listen = setting("server.listen")
    if configured_listen is _ABSENT:
        configured_listen = []
    if isinstance(configured_listen, str):
        configured_listen = [configured_listen]
    if not isinstance(configured_listen, list) or not all(
        isinstance(a, str) for a in configured_listen
    ):
        raise ConfigError(f'{at_listen()} must be a list of addresses like "tcp://0.0.0.0:7433"')
    addresses = tuple(dict.fromkeys([*configured_listen, *listen]))
    cert = tls_cert or _path_setting(raw, "tls_cert", where, root)
    key = tls_key or _path_setting(raw, "tls_key", where, root)
    from colibri.endpoints import check_listeners, parse_metrics_address

    check_listeners(addresses, cert, key, insecure_loopback)
    at_metrics, configured_metrics = setting("server.metrics")
    if metrics is None and configured_metrics not in (_ABSENT, None):
        if not isinstance(configured_metrics, str):
            raise ConfigError(f'{at_metrics()} must be an address like "127.0.0.1:9464"')
        try:
            parse_metrics_address(configured_metrics)
        except ConfigError as exc:
            raise ConfigError(f"{at_metrics()}: {exc.message}") from None
        metrics = configured_metrics
    elif metrics is not None:
        try:
            parse_metrics_address(metrics)
        except ConfigError as exc:
            raise ConfigError(f"--metrics {exc.message}") from None
    server = ServerSettings(
        **ruled("server"),
        socket_group=group_id,
        socket_group_name=group_name,
        listen=addresses,
        tls_cert=cert,
        tls_key=key,
        insecure_loopback=insecure_loopback,
        metrics=metrics,
    )
    # One tenant must leave room for the others, and one token fit within its tenant's share:
    # a share left unset shrinks to fit; one set too large is refused.
    for part, share_of in (
        ("tenant_connections", "remote_connections"),
        ("token_connections", "tenant_connections"),
        ("token_waits", "tenant_waits"),
        ("token_follows", "tenant_follows"),
    ):
        small, large = getattr(server, part), getattr(server, share_of)
        below = share_of == "remote_connections" and large > 1
        most = large - 1 if below else large
        if small <= most:
            continue
        at, given = setting(f"server.{part}")
        if given is _ABSENT:
            server = dataclasses.replace(server, **{part: most})
            continue
        why = (
            "below it, so that one tenant always leaves room for the others"
            if below
            else "at most that: it is what all the tokens of one tenant hold together"
        )
        raise ConfigError(f"{at()} is {small}, more than server.{share_of} ({large}) allows; "
                          f"keep it {why}")  # fmt: skip
    supervisor = SupervisorSettings(**ruled("supervisor"))
    ledger = LedgerSettings(**ruled("ledger"))
    chosen_durability = durability or raw.get("store", {}).get("durability", "full")
    if chosen_durability not in ("full", "relaxed"):
        raise ConfigError(
            f"{where('durability', 'store')}: store.durability must be full or relaxed"
        )
    configured_path = raw.get("store", {}).get("path")
    if configured_path is not None and (
        not isinstance(configured_path, str) or not configured_path or "\0" in configured_path
    ):
        raise ConfigError(
            f"{where('path', 'store')}: store.path must be the path of a file, not "
            f"{shown(configured_path)}"
        )
    store_path = store or configured_path or str(RootLayout(root).store)
    if not is_postgres(store_path):
        store_path = os.path.expanduser(store_path)
        if not os.path.isabs(store_path):
            store_path = str(root / store_path)
    from colibri.workspaces import resolve as resolve_workspaces

    workspaces = resolve_workspaces(
        raw.get("workspaces", {}), raw.get("templates", {}), root, where
    )
    default_tz = local_zone_name()
    schedules = _schedules(raw.get("schedules", {}), where, default_tz)
    config = Config(
        root=root,
        store=store_path,
        durability=chosen_durability,
        **ruled("store", {"lease_ttl": lease_ttl or None}),
        tenants=served_tenants(tenants, raw.get("store", {}).get("tenants"), store_path, where),
        share=shares_tenants(share, raw.get("store", {}), tenants, store_path, where),
        scheduler=scheduler,
        server=server,
        supervisor=supervisor,
        ledger=ledger,
        schedules=schedules,
        default_tz=default_tz,
        workspaces=workspaces,
        crashpoint=os.environ.get("COLIBRI_CRASHPOINT") or None,
        environ=dict(os.environ),
        host=host_mode(os.environ),
    )
    if len(os.fsencode(config.layout.socket)) > MAX_SOCKET_PATH:
        raise ConfigError(
            f"the socket path {config.layout.socket} is longer than Unix sockets allow "
            f"({MAX_SOCKET_PATH} bytes); use a root with a shorter path"
        )
    return config


def replace_config_text(root: Path, old: str, new: str, refused: str) -> Config:
    """Write ``new`` as the root's colibri.jsonc in place of ``old``, and load it; if it does
    not load, ``old`` is written back and the ConfigError says ``refused: what is wrong``."""
    file = root / CONFIG_NAME
    file.write_text(new, encoding="utf-8")
    try:
        return load_config(root)  # the whole file must still be valid
    except ConfigError as exc:
        file.write_text(old, encoding="utf-8")
        raise ConfigError(f"{refused}, the file is unchanged: {exc.message}") from None


def _option(key: str, value: str) -> tuple[Callable[[], str], str]:
    """A command-line option's value, and how an error about it begins: ``--lease-ttl``."""
    return lambda: f"--{key.replace('_', '-')}", value


def _path_setting(
    raw: dict[str, Any], key: str, where: Callable[[str, str], str], root: Path
) -> str | None:
    value = raw.get("server", {}).get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value or "\0" in value:
        raise ConfigError(f"{where(key, 'server')}: server.{key} must be the path of a file")
    path = Path(value).expanduser()
    return str(path if path.is_absolute() else root / path)


def _schedules(
    raw: dict[str, Any], where: Callable[[str], str], default_tz: str
) -> dict[str, ScheduleSpec]:
    """Check every schedule of colibri.jsonc now, so a mistake stops ``run`` with its line."""
    import time

    import msgspec

    from colibri.core import schedules as schedule_math
    from colibri.core.errors import BadRequest
    from colibri.core.schedules import ScheduleSpec

    specs: dict[str, ScheduleSpec] = {}
    for name, body in raw.items():
        try:
            spec = msgspec.convert(body, ScheduleSpec)
            schedule_math.build(name, spec, now=time.time(), default_tz=default_tz)
        except msgspec.ValidationError as exc:
            raise ConfigError(f"{where(name)}: schedules.{name}: {exc}") from None
        except BadRequest as exc:
            raise ConfigError(f"{where(name)}: schedules.{name}: {exc.message}") from None
        specs[name] = spec
    return specs


def local_zone_name() -> str:
    """The machine's IANA zone name (TZ, then /etc/localtime, then /etc/timezone), else UTC."""
    candidates: list[str] = []
    if os.environ.get("TZ"):
        candidates.append(os.environ["TZ"].lstrip(":"))
    try:
        link = os.readlink("/etc/localtime")
        if "zoneinfo/" in link:
            candidates.append(link.split("zoneinfo/", 1)[1])
    except OSError:
        pass
    try:
        candidates.append(Path("/etc/timezone").read_text().strip())
    except OSError:
        pass
    from zoneinfo import ZoneInfo

    for name in candidates:
        try:
            ZoneInfo(name)
        except (ValueError, KeyError, OSError):
            continue
        return name
    return "UTC"
