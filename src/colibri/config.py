"""Roots, paths and settings: the one place that reads colibri.jsonc.

A *root* is a directory holding ``colibri.jsonc`` and the ``.colibri/`` state folder, found like
``.git``: ``--root``/``COLIBRI_ROOT`` (resolved by the CLI), else the nearest ancestor of the
working directory that has ``.colibri/``.
"""

from __future__ import annotations

import os
import re
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from colibri.core.durations import parse_duration
from colibri.core.errors import ConfigError, RootError
from colibri.core.model import DEFAULT_MAX_LINE

if TYPE_CHECKING:
    from colibri.core.schedules import ScheduleSpec
    from colibri.workspaces import Workspace

CONFIG_NAME = "colibri.jsonc"
STATE_DIR = ".colibri"
#: AF_UNIX paths are limited to 108 bytes on Linux (104 on the BSDs), terminator included.
MAX_SOCKET_PATH = 103
#: ``ledger.rotate_mib`` bounds: below 1 KiB every append would rotate; 1 TiB is plenty.
MIN_ROTATE_MIB = 0.001
MAX_ROTATE_MIB = 1024 * 1024

TEMPLATE = """\
// Colibri configuration. JSONC: comments and trailing commas are allowed.
// Durations are written like 90s, 15m, 1h30m or 1d.
{
  "scheduler": {
    // Safety-net pass over the pending tasks. Dispatch itself is event-driven: a task is
    // assigned the moment an agent that fits it has a free slot.
    "tick": "30s",
    // An agent silent for longer than this is offline (agents may register their own ttl).
    "agent_ttl": "30s",
    // Lowest acceptable capability score, 0..1 (1 = every required capability).
    "min_score": 0,
    // Optional: a waiting task gains one priority point per this duration, so low
    // priorities never starve. Off when absent.
    // "ageing": "5m",
    // First wait before a retry (tasks with max_attempts > 1); it doubles per attempt.
    "retry_backoff": "5s",
    // Most sessions this host's workspaces run at once, whatever their slots (default:
    // twice the CPUs), so a burst of tasks cannot fork-bomb the machine.
    // "max_sessions": 8,
    // Quotas: most pending tasks per tenant, most children per task (quota_exceeded past them).
    // "max_pending": 1000000,
    // "max_children": 10000,
  },
  "server": {
    // Longest request line accepted on the socket, in bytes.
    "max_line": 1048576,
    // Most concurrent connections; more are told "busy" and closed.
    "max_connections": 256,
    // A connection holding an unfinished request line for longer than this is closed.
    "line_timeout": "30s",
    // A Unix group whose members may use the daemon too (socket 0660, state folder 0710);
    // unset, only the user running the daemon may.
    // "socket_group": "colibri",
  },
  "store": {
    // "full": an acknowledged task survives power loss (fsync per commit).
    // "relaxed": survives a crash of the daemon, not of the machine.
    "durability": "full",
  },
  "ledger": {
    // .colibri/ledger.jsonl past this many MiB (fractions allowed) is renamed ledger.jsonl.1,
    // older files move up one (.1 to .2 …) and a new ledger.jsonl is started. 0: never.
    // `kill -USR1 <daemon pid>` rotates at once (the pid: colibri status).
    "rotate_mib": 256,
    // Rotated files kept (ledger.jsonl.1 … .N); the oldest beyond this are deleted.
    "keep": 5,
  },
  // Optional, with these defaults: a workspace's harness that exits is started again after
  // 1s, 2s, 4s … up to max_backoff; one that exits crash_loop times within crash_window is
  // marked degraded and left alone for cool_down.
  // "supervisor": { "max_backoff": "60s", "crash_loop": 5, "crash_window": "60s",
  //                 "cool_down": "5m" },
}
"""


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
    #: Most sessions the supervised workspaces of this host run at once.
    max_sessions: int = field(default_factory=lambda: (os.cpu_count() or 1) * 2)


@dataclass(frozen=True, slots=True)
class ServerSettings:
    max_line: int = DEFAULT_MAX_LINE
    max_connections: int = 256
    line_timeout: float = 30.0
    #: A Unix group whose members may use the socket too (its gid); None: the owner only.
    socket_group: int | None = None
    socket_group_name: str | None = None


@dataclass(frozen=True, slots=True)
class SupervisorSettings:
    crash_loop: int = 5
    crash_window: float = 60.0
    cool_down: float = 300.0
    max_backoff: float = 60.0


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

    @property
    def state_dir(self) -> Path:
        return self.root / STATE_DIR

    @property
    def socket_path(self) -> Path:
        return self.state_dir / "colibri.sock"

    @property
    def lock_path(self) -> Path:
        return self.state_dir / "daemon.lock"

    @property
    def ledger_path(self) -> Path:
        return self.state_dir / "ledger.jsonl"


def find_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` that has a ``.colibri/`` folder.

    A ``.colibri`` that is a symlink counts too, so that ``resolve_root`` refuses it rather than
    passing on to a root further up; a plain file of that name is someone else's, not a root.
    """
    start = start.resolve()
    for candidate in (start, *start.parents):
        try:
            mode = os.lstat(candidate / STATE_DIR).st_mode
        except OSError:
            continue
        if stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
            return candidate
    return None


def check_state_entry(root: Path) -> bool:
    """Whether ``root/.colibri`` exists; a RootError if it is anything but a real directory.

    The daemon refuses such a state folder too (daemon.app.check_state_dir); saying so here
    stops ``init``, ``run`` and every other command with what is there and what to do.
    """
    path = root / STATE_DIR
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):  # NotADirectory: ``root`` is a file
        return False
    except OSError as exc:
        raise RootError(f"cannot look at {path}: {exc.strerror}") from None
    if stat.S_ISDIR(mode):
        return True
    if stat.S_ISLNK(mode):
        raise RootError(
            f"{path} is a symlink (to {os.readlink(path)}); a root's state folder must be a "
            "real directory: remove the link (or put the folder itself there) and try again"
        )
    raise RootError(
        f"{path} is {_kind(mode)}, where a Colibri root keeps its state folder: move it away "
        "(or remove it) and try again"
    )


def _kind(mode: int) -> str:
    if stat.S_ISREG(mode):
        return "a file"
    if stat.S_ISFIFO(mode):
        return "a named pipe"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISDIR(mode):
        return "a directory"
    return "a device"


def resolve_root(explicit: str | None, cwd: Path) -> Path:
    if explicit:
        root = Path(explicit).expanduser().resolve()
        if not check_state_entry(root):
            raise RootError(f"{root} is not a Colibri root (create one with: colibri init {root})")
        return root
    found = find_root(cwd)
    if found is None:
        raise RootError(
            f"no Colibri root at or above {cwd} (create one with: colibri init, or pass --root)"
        )
    check_state_entry(found)
    return found


def init_root(target: Path, *, force: bool = False) -> bool:
    """Create a root at ``target``; False if it already was one. Refuse inside another root."""
    target = target.expanduser().resolve()
    if check_state_entry(target):
        return False
    enclosing = find_root(target.parent) if target.parent != target else None
    if enclosing is not None and not force:
        raise RootError(
            f"{target} is inside the Colibri root {enclosing}; use that root, "
            "or pass --force to create a nested one"
        )
    if os.path.lexists(target) and not target.is_dir():
        raise RootError(f"{target} is {_kind(os.stat(target).st_mode)}, not a directory")
    try:
        target.mkdir(parents=True, exist_ok=True)
        (target / STATE_DIR).mkdir(mode=0o700)
    except OSError as exc:
        raise RootError(f"cannot create a Colibri root at {target}: {exc.strerror}") from None
    config = target / CONFIG_NAME
    try:
        # O_EXCL|O_NOFOLLOW: an existing colibri.jsonc, or a symlink of that name (even one
        # leading nowhere), is left alone; write_text would follow it and create its target.
        fd = os.open(config, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666)
    except FileExistsError:
        return True
    except OSError as exc:
        raise RootError(f"cannot create {config}: {exc.strerror}") from None
    with os.fdopen(fd, "w", encoding="utf-8") as out:
        out.write(TEMPLATE)
    return True


_KNOWN: dict[str, set[str]] = {
    "scheduler": {
        "tick",
        "agent_ttl",
        "min_score",
        "ageing",
        "retry_backoff",
        "max_sessions",
        "max_pending",
        "max_children",
    },  # fmt: skip
    "server": {"max_line", "max_connections", "line_timeout", "socket_group"},
    "store": {"durability", "path"},
    "supervisor": {"crash_loop", "crash_window", "cool_down", "max_backoff"},
    "ledger": {"rotate_mib", "keep"},
    # names are free in these; each entry is checked as what it is
    "schedules": set(),
    "templates": set(),
    "workspaces": set(),
}
_FREE = {"schedules", "templates", "workspaces"}


def load_config(root: Path, *, store: str | None = None, durability: str | None = None) -> Config:
    """Read and validate ``root/colibri.jsonc``; errors say ``file:line: what is wrong``."""
    path = root / CONFIG_NAME
    raw: dict[str, Any] = {}
    text = ""
    if path.exists():
        import json5

        text = path.read_text(encoding="utf-8")
        try:
            loaded = json5.loads(text)
        except ValueError as exc:
            found = re.match(r"<string>:(\d+) (.*)", str(exc), re.S)
            line, message = found.groups() if found else ("1", str(exc))
            raise ConfigError(f"{path}:{line}: {message}") from None
        if not isinstance(loaded, dict):
            raise ConfigError(f"{path}:1: the file must hold one object {{ … }}")
        raw = loaded

    def where(key: str) -> str:
        match = re.search(rf'["\']?{re.escape(key)}["\']?\s*:', text)
        line = text.count("\n", 0, match.start()) + 1 if match else 1
        return f"{path}:{line}"

    for section, value in raw.items():
        if section not in _KNOWN:
            raise ConfigError(
                f"{where(section)}: unknown section {section!r}; known: {', '.join(sorted(_KNOWN))}"
            )
        if not isinstance(value, dict):
            raise ConfigError(f"{where(section)}: {section!r} must be an object")
        for key in value:
            if section not in _FREE and key not in _KNOWN[section]:
                raise ConfigError(
                    f"{where(key)}: unknown key {section}.{key}; known: "
                    f"{', '.join(sorted(_KNOWN[section]))}"
                )

    def duration(section: str, key: str, default: float | None) -> float | None:
        value = raw.get(section, {}).get(key)
        if value is None:
            return default
        try:
            seconds = parse_duration(value)
        except ValueError as exc:
            raise ConfigError(f"{where(key)}: {section}.{key}: {exc}") from None
        if seconds <= 0:
            raise ConfigError(f"{where(key)}: {section}.{key} must be longer than 0s")
        return seconds

    def number(section: str, key: str, default: float, low: float, high: float) -> float:
        value = raw.get(section, {}).get(key, default)
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not low <= value <= high
        ):
            raise ConfigError(
                f"{where(key)}: {section}.{key} must be a number from {low} to {high}"
            )
        return value

    defaults = SchedulerSettings()
    scheduler = SchedulerSettings(
        tick=duration("scheduler", "tick", defaults.tick) or defaults.tick,
        agent_ttl=duration("scheduler", "agent_ttl", defaults.agent_ttl) or defaults.agent_ttl,
        min_score=number("scheduler", "min_score", 0.0, 0.0, 1.0),
        ageing=duration("scheduler", "ageing", None),
        retry_backoff=duration("scheduler", "retry_backoff", defaults.retry_backoff)
        or defaults.retry_backoff,
        max_sessions=int(number("scheduler", "max_sessions", defaults.max_sessions, 1, 100_000)),
        max_pending=int(number("scheduler", "max_pending", defaults.max_pending, 1, 10**9)),
        max_children=int(number("scheduler", "max_children", defaults.max_children, 1, 10**9)),
    )
    group_name = raw.get("server", {}).get("socket_group")
    group_id = None
    if group_name is not None:
        import grp

        if not isinstance(group_name, str) or not group_name:
            raise ConfigError(f"{where('socket_group')}: server.socket_group must be a group name")
        try:
            group_id = grp.getgrnam(group_name).gr_gid
        except KeyError:
            raise ConfigError(
                f"{where('socket_group')}: server.socket_group: there is no group "
                f"{group_name!r} on this host (create it with groupadd, or see getent group)"
            ) from None
    server = ServerSettings(
        max_line=int(number("server", "max_line", DEFAULT_MAX_LINE, 1024, 1 << 30)),
        max_connections=int(number("server", "max_connections", 256, 1, 100_000)),
        line_timeout=duration("server", "line_timeout", 30.0) or 30.0,
        socket_group=group_id,
        socket_group_name=group_name,
    )
    sv = SupervisorSettings()
    crash_loop = number("supervisor", "crash_loop", sv.crash_loop, 1, 1000)
    if crash_loop != int(crash_loop):
        raise ConfigError(f"{where('crash_loop')}: supervisor.crash_loop must be a whole number")
    supervisor = SupervisorSettings(
        crash_loop=int(crash_loop),
        crash_window=duration("supervisor", "crash_window", None) or sv.crash_window,
        cool_down=duration("supervisor", "cool_down", None) or sv.cool_down,
        max_backoff=duration("supervisor", "max_backoff", None) or sv.max_backoff,
    )
    ld = LedgerSettings()
    rotate_mib = number("ledger", "rotate_mib", ld.rotate_mib, 0, MAX_ROTATE_MIB)
    if 0 < rotate_mib < MIN_ROTATE_MIB:
        raise ConfigError(
            f"{where('rotate_mib')}: ledger.rotate_mib must be 0 (never rotate) or at least "
            f"{MIN_ROTATE_MIB} (1 KiB)"
        )
    keep = number("ledger", "keep", ld.keep, 1, 10_000)
    if keep != int(keep):
        raise ConfigError(f"{where('keep')}: ledger.keep must be a whole number")
    ledger = LedgerSettings(rotate_mib=rotate_mib, keep=int(keep))
    chosen_durability = durability or raw.get("store", {}).get("durability", "full")
    if chosen_durability not in ("full", "relaxed"):
        raise ConfigError(f"{where('durability')}: store.durability must be full or relaxed")
    store_path = (
        store or raw.get("store", {}).get("path") or str(root / STATE_DIR / "colibri.sqlite")
    )
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
        scheduler=scheduler,
        server=server,
        supervisor=supervisor,
        ledger=ledger,
        schedules=schedules,
        default_tz=default_tz,
        workspaces=workspaces,
        crashpoint=os.environ.get("COLIBRI_CRASHPOINT") or None,
        environ=dict(os.environ),
    )
    if len(os.fsencode(config.socket_path)) > MAX_SOCKET_PATH:
        raise ConfigError(
            f"the socket path {config.socket_path} is longer than Unix sockets allow "
            f"({MAX_SOCKET_PATH} bytes); use a root with a shorter path"
        )
    return config


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
