"""Roots, paths and settings: the one place that reads colibri.jsonc.

A *root* is a directory holding ``colibri.jsonc`` and the ``.colibri/`` state folder, found like
``.git``: ``--root``/``COLIBRI_ROOT`` (resolved by the CLI), else the nearest ancestor of the
working directory that has ``.colibri/``.
"""

from __future__ import annotations

import os
import re
import stat
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from colibri.core.durations import DAY, format_duration, parse_duration
from colibri.core.errors import BadDuration, ConfigError, RootError, shown
from colibri.core.model import DEFAULT_MAX_LINE
from colibri.layout import CONFIG_NAME, STATE_DIR, RootLayout

if TYPE_CHECKING:
    import pyjson5

    from colibri.core.schedules import ScheduleSpec
    from colibri.workspaces import Workspace

#: AF_UNIX paths are limited to 108 bytes on Linux (104 on the BSDs), terminator included.
MAX_SOCKET_PATH = 103
#: ``ledger.rotate_mib`` bounds: below 1 KiB every append would rotate; 1 TiB is plenty.
MIN_ROTATE_MIB = 0.001
MAX_ROTATE_MIB = 1024 * 1024
#: colibri.jsonc is written by people, and 1 MiB holds thousands of workspaces: a bigger file is
#: a mistake (a log or a dump saved under this name). Refusing it before reading it keeps
#: ``colibri run`` answering within a second, whatever the file holds.
MAX_CONFIG_BYTES = 1 << 20
#: Deepest nesting of objects and arrays read. The deepest real setting is five levels down
#: (workspaces.NAME.session.env.KEY); a file far deeper is a mistake or an attack, and the
#: parser stops at this depth instead of recursing into it.
MAX_CONFIG_DEPTH = 64

#: The range of every duration setting, in seconds (README.md's Configuration table).
DURATION_RANGES: dict[str, tuple[float, float]] = {
    "scheduler.tick": (0.01, DAY),
    "scheduler.agent_ttl": (0.1, DAY),
    "scheduler.ageing": (1.0, 365 * DAY),
    "scheduler.retry_backoff": (0.001, DAY),
    "server.line_timeout": (0.1, DAY),
    "server.idle_timeout": (1.0, DAY),
    "supervisor.crash_window": (1.0, DAY),
    "supervisor.cool_down": (1.0, DAY),
    "supervisor.max_backoff": (1.0, DAY),
}
#: The range of every whole-number setting.
WHOLE_RANGES: dict[str, tuple[int, int]] = {
    "scheduler.max_sessions": (1, 100_000),
    "scheduler.max_pending": (1, 10**9),
    "scheduler.max_children": (1, 10**9),
    "scheduler.max_depth": (1, 1000),
    "server.max_line": (1024, 1 << 30),
    "server.max_connections": (1, 100_000),
    "supervisor.crash_loop": (1, 1000),
    "ledger.keep": (1, 10_000),
}
#: The range of every setting that is a number, fractions allowed.
NUMBER_RANGES: dict[str, tuple[float, float]] = {
    "scheduler.min_score": (0.0, 1.0),
    "scheduler.max_pending_mib": (0.001, 1024 * 1024),
    "ledger.rotate_mib": (0.0, MAX_ROTATE_MIB),
}

_TEMPLATE = string.Template("""\
// Colibri configuration. JSONC: comments and trailing commas are allowed.
// Durations are written like 90s, 15m, 1h30m or 1d.
{
  "scheduler": {
    // Safety-net pass over the pending tasks. Dispatch itself is event-driven: a task is
    // assigned the moment an agent that fits it has a free slot.
    "tick": "$tick",
    // An agent silent for longer than this is offline (agents may register their own ttl).
    "agent_ttl": "$agent_ttl",
    // Lowest acceptable capability score, 0..1 (1 = every required capability).
    "min_score": $min_score,
    // Optional: a waiting task gains one priority point per this duration, so low
    // priorities never starve. Off when absent.
    // "ageing": "5m",
    // First wait before a retry (tasks with max_attempts > 1); it doubles per attempt.
    "retry_backoff": "$retry_backoff",
    // Most sessions this host's workspaces run at once, whatever their slots (default:
    // twice the CPUs), so a burst of tasks cannot fork-bomb the machine.
    // "max_sessions": 8,
    // Quotas: most pending tasks per tenant, most children per task (quota_exceeded past them),
    // most MiB of task text a tenant's open tasks may hold (fractions allowed), and most
    // ancestors a task may have (a deeper hand-off or --parent chain is refused).
    // "max_pending": $max_pending,
    // "max_children": $max_children,
    // "max_pending_mib": $max_pending_mib,
    // "max_depth": $max_depth,
  },
  "server": {
    // Longest request line accepted on the socket, in bytes.
    "max_line": $max_line,
    // Most concurrent connections; more are told "busy" and closed.
    "max_connections": $max_connections,
    // A connection holding an unfinished request line for longer than this is closed.
    "line_timeout": "$line_timeout",
    // A connection that is neither an agent nor a subscriber, silent this long, is closed.
    // "idle_timeout": "$idle_timeout",
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
    "rotate_mib": $rotate_mib,
    // Rotated files kept (ledger.jsonl.1 … .N); the oldest beyond this are deleted.
    "keep": $keep,
  },
  // Optional, with these defaults: a workspace's harness that exits is started again after
  // 1s, 2s, 4s … up to max_backoff; one that exits crash_loop times within crash_window is
  // marked degraded and left alone for cool_down.
  // "supervisor": { "max_backoff": "$max_backoff", "crash_loop": $crash_loop,
  //                 "crash_window": "$crash_window", "cool_down": "$cool_down" },
}
""")


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
    #: ``COLIBRI_HOST``: how to ask the system about processes and peers (``host.select``).
    host: str = "auto"

    @property
    def layout(self) -> RootLayout:
        return RootLayout(self.root)


def _template() -> str:
    """``colibri init``'s colibri.jsonc: its values are the defaults above, written out."""
    sd, sv, su, ld = SchedulerSettings(), ServerSettings(), SupervisorSettings(), LedgerSettings()
    return _TEMPLATE.substitute(
        tick=format_duration(sd.tick), agent_ttl=format_duration(sd.agent_ttl),
        min_score=f"{sd.min_score:g}", retry_backoff=format_duration(sd.retry_backoff),
        max_pending=sd.max_pending, max_children=sd.max_children,
        max_pending_mib=f"{sd.max_pending_mib:g}", max_depth=sd.max_depth,
        max_line=sv.max_line, max_connections=sv.max_connections,
        line_timeout=format_duration(sv.line_timeout),
        idle_timeout=format_duration(sv.idle_timeout),
        rotate_mib=f"{ld.rotate_mib:g}", keep=ld.keep,
        max_backoff=format_duration(su.max_backoff), crash_loop=su.crash_loop,
        crash_window=format_duration(su.crash_window), cool_down=format_duration(su.cool_down),
    )  # fmt: skip


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
        "max_pending_mib",
        "max_children",
        "max_depth",
    },  # fmt: skip
    "server": {"max_line", "max_connections", "line_timeout", "idle_timeout", "socket_group"},
    "store": {"durability", "path"},
    "supervisor": {"crash_loop", "crash_window", "cool_down", "max_backoff"},
    "ledger": {"rotate_mib", "keep"},
    # names are free in these; each entry is checked as what it is
    "schedules": set(),
    "templates": set(),
    "workspaces": set(),
}
_FREE = {"schedules", "templates", "workspaces"}
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


def load_config(root: Path, *, store: str | None = None, durability: str | None = None) -> Config:
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
        start = _key_offset(text, section, 0) if section is not None else 0
        offset = _key_offset(text, key, start)
        line = text.count("\n", 0, offset) + 1 if offset >= 0 else 1
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
                    f"{where(key, section)}: unknown key {section}.{key}; known: "
                    f"{', '.join(sorted(_KNOWN[section]))}"
                )

    def setting(name: str) -> tuple[Callable[[], str], Any]:
        """``name``'s value, and how an error about it begins (found only when needed)."""
        section, key = name.split(".")
        return lambda: f"{where(key, section)}: {name}", raw.get(section, {}).get(key, _ABSENT)

    def duration(name: str, default: float) -> float:
        at, value = setting(name)
        if value is _ABSENT or value is None:
            return default
        low, high = DURATION_RANGES[name]
        try:
            return parse_duration(value, low=low, high=high)
        except BadDuration as exc:
            raise ConfigError(f"{at()}: {exc.message}") from None

    def whole(name: str, default: int) -> int:
        at, value = setting(name)
        if value is _ABSENT:
            return default
        low, high = WHOLE_RANGES[name]
        if isinstance(value, float) and value.is_integer():
            value = int(value)  # 8.0 is the whole number 8; 8.5 is refused below
        if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
            raise ConfigError(
                f"{at()} must be a whole number from {low:,} to {high:,}, not {shown(value)}"
            )
        return value

    def number(name: str, default: float) -> float:
        at, value = setting(name)
        if value is _ABSENT:
            return default
        low, high = NUMBER_RANGES[name]
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not low <= value <= high  # NaN is refused here too
        ):
            raise ConfigError(
                f"{at()} must be a number from {_figure(low)} to {_figure(high)}, "
                f"not {shown(value)}"
            )
        return float(value)

    sd = SchedulerSettings()
    ageing = duration("scheduler.ageing", 0.0)  # 0: absent, so off (its range starts at 1s)
    scheduler = SchedulerSettings(
        tick=duration("scheduler.tick", sd.tick),
        agent_ttl=duration("scheduler.agent_ttl", sd.agent_ttl),
        min_score=number("scheduler.min_score", sd.min_score),
        ageing=ageing or None,
        retry_backoff=duration("scheduler.retry_backoff", sd.retry_backoff),
        max_sessions=whole("scheduler.max_sessions", sd.max_sessions),
        max_pending=whole("scheduler.max_pending", sd.max_pending),
        max_children=whole("scheduler.max_children", sd.max_children),
        max_depth=whole("scheduler.max_depth", sd.max_depth),
        max_pending_mib=number("scheduler.max_pending_mib", sd.max_pending_mib),
    )
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
    sv = ServerSettings()
    server = ServerSettings(
        max_line=whole("server.max_line", sv.max_line),
        max_connections=whole("server.max_connections", sv.max_connections),
        line_timeout=duration("server.line_timeout", sv.line_timeout),
        idle_timeout=duration("server.idle_timeout", sv.idle_timeout),
        socket_group=group_id,
        socket_group_name=group_name,
    )
    su = SupervisorSettings()
    supervisor = SupervisorSettings(
        crash_loop=whole("supervisor.crash_loop", su.crash_loop),
        crash_window=duration("supervisor.crash_window", su.crash_window),
        cool_down=duration("supervisor.cool_down", su.cool_down),
        max_backoff=duration("supervisor.max_backoff", su.max_backoff),
    )
    ld = LedgerSettings()
    rotate_mib = number("ledger.rotate_mib", ld.rotate_mib)
    if 0 < rotate_mib < MIN_ROTATE_MIB:
        raise ConfigError(
            f"{where('rotate_mib', 'ledger')}: ledger.rotate_mib must be 0 (never rotate) or at "
            f"least {MIN_ROTATE_MIB} (1 KiB)"
        )
    ledger = LedgerSettings(rotate_mib=rotate_mib, keep=whole("ledger.keep", ld.keep))
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
        host=host_mode(os.environ),
    )
    if len(os.fsencode(config.layout.socket)) > MAX_SOCKET_PATH:
        raise ConfigError(
            f"the socket path {config.layout.socket} is longer than Unix sockets allow "
            f"({MAX_SOCKET_PATH} bytes); use a root with a shorter path"
        )
    return config


def _key_offset(text: str, key: str, start: int) -> int:
    """Where ``key:`` (quoted or not) first is in ``text`` from ``start``, or -1.

    Found as the literal key first, then checked around it: a pattern that starts with an
    optional quote makes the regular expression engine try every offset, seconds on 1 MiB.
    """
    for match in re.finditer(rf"""{re.escape(key)}["']?\s*:""", text[start:]):
        before = start + match.start() - 1
        if before >= 0 and text[before] in "\"'":
            before -= 1
        if before < 0 or not (text[before].isalnum() or text[before] in "_$-"):
            return start + match.start()
    return -1


def _figure(value: float) -> str:
    """A bound as the README writes it: 1,048,576 or 0.001."""
    return f"{int(value):,}" if float(value).is_integer() else f"{value:g}"


def read_config_text(path: Path) -> str | None:
    """The text of colibri.jsonc, or None if there is none; a ConfigError for a file that is
    too big, not UTF-8, not a regular file or unreadable, each in one line."""
    try:
        # O_NONBLOCK: a named pipe of this name must not hang the open; it is refused below.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        if os.path.islink(path):
            raise ConfigError(
                f"{path}:1: a symbolic link to {os.readlink(path)}, which does not exist"
            ) from None
        return None
    except OSError as exc:
        raise ConfigError(f"{path}:1: cannot read it: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise ConfigError(f"{path}:1: {_kind(info.st_mode)}, not a file of settings")
    with os.fdopen(fd, "rb") as file:
        try:
            # One byte past the cap tells a file that is too big, however it grows meanwhile.
            data = file.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"{path}:1: cannot read it: {exc.strerror}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{path}:1: the file has {max(info.st_size, len(data)):,} bytes; colibri.jsonc may "
            f"have at most {MAX_CONFIG_BYTES:,} (1 MiB)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError(
            f"{path}:{line}: byte 0x{data[exc.start]:02x} at column {column} is not UTF-8; "
            "colibri.jsonc must be UTF-8 text"
        ) from None


def parse_jsonc(path: Path, text: str) -> Any:
    """``text`` parsed as JSONC (JSON5: comments, trailing commas, unquoted keys …), at most
    MAX_CONFIG_DEPTH deep; a syntax error is a ConfigError ``file:line: what is wrong``.

    pyjson5 parses in C: a 1 MiB file takes milliseconds, where the pure-Python json5 took
    seconds, and it stops at the depth cap instead of recursing into the file.
    """
    import pyjson5

    try:
        return pyjson5.decode(text, maxdepth=MAX_CONFIG_DEPTH)
    except pyjson5.Json5DecoderException as exc:
        offset, message = _syntax_error(exc, text)
        line = text.count("\n", 0, offset) + 1
        column = offset - text.rfind("\n", 0, offset)
        raise ConfigError(f"{path}:{line}: {message} (column {column})") from None


#: What pyjson5 calls the things it expected, as our messages say them.
_NAMES = {
    "comma": "','",
    "colon": "':'",
    "JSON5Value": "a value",
    "IdentifierStart": "a key",
    "IdentifierName": "key",
    "UnicodeEscapeSequence": "a \\u escape",
    "hexadecimal character": "a hexadecimal digit",
}


def _syntax_error(exc: pyjson5.Json5DecoderException, text: str) -> tuple[int, str]:
    """Where in ``text`` pyjson5's error is, and what it says, in one line.

    pyjson5 says ``Expected b'comma' or U+007d near 12, found U+0022``; its offset is just past
    the character it stopped at (for extra data, just past the value before them).
    """
    import pyjson5

    said = str(exc.args[0]) if exc.args else type(exc).__name__
    near = re.search(r" (?:starting )?near (\d+)", said)
    position = int(near[1]) if near else 0
    offset = max(position - 1, 0)
    if isinstance(exc, pyjson5.Json5NestingTooDeep):
        return offset, f"nested deeper than {MAX_CONFIG_DEPTH} levels of objects and arrays"
    if isinstance(exc, pyjson5.Json5ExtraData):
        offset = _next_content(text, position)
        return offset, f"{_char(text[offset])} after the end of the settings' object"
    if said.startswith("No JSON data"):
        return offset, "no settings: the file must hold one object { … }"
    if "NumericLiteral" in said:
        return offset, "a number that cannot be read (malformed, or too large)"
    unclosed = re.match(r"Unclosed b'([^']*)'", said)
    if unclosed:
        return offset, f"the {_NAMES.get(unclosed[1], unclosed[1])} that starts here is not closed"
    said = said.replace(near[0], "") if near else said
    said = re.sub(r"b'([^']*)'", lambda m: _NAMES.get(m[1], m[1]), said)
    said = re.sub(r"U\+([0-9a-fA-F]{4,6})", lambda m: _char(chr(int(m[1], 16))), said)
    said = " ".join(said.split())
    return offset, said[:1].lower() + said[1:]


def _char(c: str) -> str:
    return repr(c) if c.isprintable() and not c.isspace() else f"U+{ord(c):04X}"


def _next_content(text: str, i: int) -> int:
    """The offset of the first character at or after ``i`` that is not blank or a comment."""
    n = len(text)
    while i < n:
        if text[i].isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        else:
            return i
    return max(n - 1, 0)


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


#: What ``colibri init`` writes.
TEMPLATE = _template()
