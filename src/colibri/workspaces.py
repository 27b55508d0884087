"""Workspaces and templates from colibri.jsonc: merged, checked, resolved.

A workspace is a directory (``path``, inside the root) plus the agent that works there: its
capabilities, slots and session (the command each task runs). A workspace may ``extends`` a
template; templates may extend templates. Merging is deep: objects merge key by key, lists and
scalars replace. So with

    "templates": { "oneshot": { "session": { "command": ["claude", "-p"], "env": { "A": "1" } } } },
    "workspaces": { "api": { "extends": "oneshot", "session": { "env": { "B": "2" } } } }

``api`` runs ``claude -p`` with both A and B set, while ``"capabilities": [...]`` in ``api``
replaces, never appends to, a template's list.

``send_to`` lists the workspaces a session here may hand child tasks to (lineage edges); those
edges may form no cycle, so every hand-off chain ends.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec

from colibri.core.durations import DAY, parse_duration
from colibri.core.errors import BadDuration, BadRequest, ConfigError, shown
from colibri.core.model import check_name, normalize_names
from colibri.isolation import Isolation, WorktreeSpec, worktree_problem

Duration = str | float

#: What a supervised harness — and so its sessions — inherits from the daemon's environment;
#: nothing else (a token or password the daemon was given stays with it). A workspace adds
#: names with ``session.pass_env`` and values with ``session.env``.
INHERITED_ENV = frozenset({
    "PATH", "HOME", "USER", "LOGNAME", "SHELL", "LANG", "LANGUAGE", "TERM", "TZ", "TMPDIR",
    "VIRTUAL_ENV", "PYTHONPATH", "SSH_AUTH_SOCK",
})  # fmt: skip
INHERITED_PREFIXES = ("LC_", "XDG_")
#: What a name in ``session.env`` and ``session.pass_env`` must look like: a shell variable.
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
#: The harness sets these itself (COLIBRI_TASK_ID, COLIBRI_SOCKET …); a workspace's own value
#: would be overridden in some sessions and not in others (a warm one has no COLIBRI_TASK_ID).
HARNESS_PREFIX = "COLIBRI_"
#: The range of each duration of a workspace, in seconds (docs/WORKSPACES.md).
DURATION_RANGES: dict[str, tuple[float, float]] = {
    "session.ready_timeout": (0.1, DAY),
    "session.idle": (0.1, DAY),
    "max_runtime": (0.1, 365 * DAY),
}


def session_environment(environ: dict[str, str], pass_env: list[str]) -> dict[str, str]:
    """The part of ``environ`` a workspace's harness and sessions may see."""
    passed = set(pass_env)
    return {
        key: value
        for key, value in environ.items()
        if key in INHERITED_ENV or key in passed or key.startswith(INHERITED_PREFIXES)
    }


class SessionSpec(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    backend: Literal["subprocess", "tmux"] = "subprocess"
    command: list[str] = []
    env: dict[str, str] = {}
    #: Names of the daemon's environment variables its sessions may see beyond the usual ones
    #: (PATH, HOME, LANG …), such as ANTHROPIC_API_KEY.
    pass_env: list[str] = []
    #: A session that is not ready within this long is killed; its task waits again.
    ready_timeout: Duration = "120s"
    #: A ready session with nothing to do is reclaimed after this long.
    idle: Duration = "60s"
    #: tmux: a regular expression that, once on the screen, means the session is ready.
    ready_pattern: str | None = None
    #: Most bytes of output kept per task; the rest is cut (and marked).
    output_limit: Annotated[int, msgspec.Meta(ge=1024)] = 1 << 20


class WorkspaceSpec(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    extends: str | None = None
    path: str | None = None
    capabilities: list[str] = []
    slots: Annotated[int, msgspec.Meta(ge=1, le=1000)] = 1
    session: SessionSpec = msgspec.field(default_factory=SessionSpec)
    send_to: list[str] = []
    #: Sessions kept started and ready before any task comes.
    warm: Annotated[int, msgspec.Meta(ge=0, le=100)] = 0
    #: A task running longer than this is stopped and fails.
    max_runtime: Duration | None = None
    #: Dollars the workspace's sessions may spend per UTC day; past it, dispatch to it pauses.
    budget_usd_daily: Annotated[float, msgspec.Meta(gt=0)] | None = None
    #: Whether its sessions share its folder, or each works in a git worktree of its own.
    isolation: Isolation = "shared"
    worktree: WorktreeSpec = msgspec.field(default_factory=WorktreeSpec)


class Workspace(msgspec.Struct, kw_only=True):
    """A resolved workspace: merged, checked, paths absolute, durations in seconds."""

    name: str
    path: str
    capabilities: list[str]
    slots: int
    backend: str
    command: list[str]
    env: dict[str, str]
    pass_env: list[str]
    ready_timeout: float
    idle: float
    ready_pattern: str | None
    output_limit: int
    send_to: list[str]
    warm: int
    max_runtime: float | None
    budget_usd_daily: float | None = None
    isolation: str = "shared"
    #: With isolation "worktree": how each session's worktree is made (None: shared).
    worktree: WorktreeSpec | None = None


def deep_merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    """Objects merge key by key; lists and scalars in ``over`` replace those in ``base``."""
    merged = dict(base)
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = deep_merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def _expand(
    name: str,
    raw: dict[str, Any],
    templates: dict[str, Any],
    where: Callable[[str], str],
    expanded: dict[str, dict[str, Any]],
) -> dict[str, Any]:
    """Follow ``extends`` through the templates, refusing unknown names and cycles.

    ``expanded`` keeps each template merged with its own chain, so every template is merged
    once however many workspaces extend it (a long chain extended by many workspaces would
    otherwise cost their product).
    """
    chain: list[str] = []
    seen: set[str] = set()
    parent = raw.get("extends")
    while parent is not None and not (isinstance(parent, str) and parent in expanded):
        if not isinstance(parent, str) or parent not in templates:
            known = _listed(templates) or "none defined"
            raise ConfigError(
                f"{where(name)}: {name} extends unknown template {shown(parent)} "
                f"(templates: {known})"
            )
        if parent in seen:
            cycle = " → ".join([*chain, parent])
            raise ConfigError(f"{where(parent)}: templates extend each other in a cycle: {cycle}")
        chain.append(parent)
        seen.add(parent)
        template = templates[parent]
        if not isinstance(template, dict):
            raise ConfigError(f"{where(parent)}: template {parent!r} must be an object")
        parent = template.get("extends")
    merged: dict[str, Any] = {} if parent is None else expanded[parent]
    for template_name in reversed(chain):
        merged = deep_merge(merged, templates[template_name])
        merged.pop("extends", None)
        expanded[template_name] = merged
    merged = deep_merge(merged, raw)
    merged.pop("extends", None)
    return merged


def resolve(
    raw_workspaces: dict[str, Any],
    templates: dict[str, Any],
    root: Path,
    where: Callable[[str], str],
) -> dict[str, Workspace]:
    """Every workspace of colibri.jsonc, or a ConfigError saying ``file:line: what is wrong``."""
    real_root = os.path.realpath(root)
    resolved: dict[str, Workspace] = {}
    expanded: dict[str, dict[str, Any]] = {}
    for name, raw in raw_workspaces.items():
        try:
            check_name(name, "workspace name")
        except BadRequest as exc:
            raise ConfigError(f"{where(name)}: {exc.message}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{where(name)}: workspace {name!r} must be an object")
        merged = _expand(name, raw, templates, where, expanded)
        try:
            spec = msgspec.convert(merged, WorkspaceSpec)
            capabilities = normalize_names(spec.capabilities, "capability")
        except msgspec.ValidationError as exc:
            raise ConfigError(f"{where(name)}: workspaces.{name}: {exc}") from None
        except BadRequest as exc:
            raise ConfigError(f"{where(name)}: workspaces.{name}: {exc.message}") from None
        ready_timeout = _seconds(spec.session.ready_timeout, "session.ready_timeout", name, where)
        idle = _seconds(spec.session.idle, "session.idle", name, where)
        max_runtime = (
            None
            if spec.max_runtime is None
            else _seconds(spec.max_runtime, "max_runtime", name, where)
        )
        if not spec.session.command:
            raise ConfigError(
                f"{where(name)}: workspace {name!r} has no session.command (give it one, or "
                "extends a template that has one)"
            )
        problem = _session_problem(spec.session) or worktree_problem(
            spec.isolation, spec.worktree, spec.warm
        )
        if problem:
            raise ConfigError(f"{where(name)}: workspaces.{name}.{problem}")
        relative = spec.path if spec.path is not None else name
        if Path(relative).is_absolute():
            raise ConfigError(
                f"{where(name)}: workspace {name!r}: path must be relative to the root"
            )
        # Strings, not Paths: thousands of workspaces are checked in well under a second.
        full = os.path.realpath(os.path.join(real_root, relative))
        if full != real_root and not full.startswith(real_root.rstrip(os.sep) + os.sep):
            raise ConfigError(
                f"{where(name)}: workspace {name!r}: path {relative!r} leads outside the root"
            )
        resolved[name] = Workspace(
            name=name, path=full, capabilities=capabilities, slots=spec.slots,
            backend=spec.session.backend, command=spec.session.command, env=spec.session.env,
            pass_env=spec.session.pass_env,
            ready_timeout=ready_timeout, idle=idle, ready_pattern=spec.session.ready_pattern,
            output_limit=spec.session.output_limit, send_to=list(dict.fromkeys(spec.send_to)),
            warm=spec.warm, max_runtime=max_runtime, budget_usd_daily=spec.budget_usd_daily,
            isolation=spec.isolation,
            worktree=spec.worktree if spec.isolation == "worktree" else None,
        )  # fmt: skip
    for workspace in resolved.values():
        for target in workspace.send_to:
            if target not in resolved:
                raise ConfigError(
                    f"{where(workspace.name)}: workspace {workspace.name!r} sends to "
                    f"{target!r}, which is not a workspace (workspaces: "
                    f"{_listed(resolved)})"
                )
    cycle = _send_to_cycle(resolved)
    if cycle:
        raise ConfigError(
            f"{where(cycle[0])}: send_to edges form a cycle: {' → '.join(cycle)}; a chain of "
            "hand-offs must end, so they may form none"
        )
    return resolved


def _listed(names: Iterable[str], most: int = 20) -> str:
    """Names for a message, sorted; past ``most`` the rest are counted, not listed."""
    ordered = sorted(names)
    if len(ordered) <= most:
        return ", ".join(ordered)
    return f"{', '.join(ordered[:most])} … ({len(ordered)} in all)"


def _seconds(value: Duration, field: str, name: str, where: Callable[[str], str]) -> float:
    low, high = DURATION_RANGES[field]
    try:
        return parse_duration(value, low=low, high=high)
    except BadDuration as exc:
        raise ConfigError(f"{where(name)}: workspaces.{name}.{field}: {exc.message}") from None


def _session_problem(session: SessionSpec) -> str | None:
    """What in ``session`` would make every task of the workspace fail to start, if anything:
    ``session.FIELD: what is wrong``. Each of these is refused by the process table (a NUL, a
    name with '='), by exec (an empty program) or by the regular expression engine."""
    for i, arg in enumerate(session.command):
        if i == 0 and not arg:
            return "session.command: the program (its first element) is empty"
        problem = _process_text(arg)
        if problem:
            return f"session.command[{i}] {shown(arg)} {problem}"
    for key, value in session.env.items():
        if not ENV_NAME.fullmatch(key):
            return (
                f"session.env: {shown(key)} is not a variable name (letters, digits and _, "
                "not starting with a digit)"
            )
        if key.startswith(HARNESS_PREFIX):
            return (
                f"session.env: {key} is not yours to set: the harness sets the COLIBRI_* "
                "variables of a session itself (COLIBRI_TASK_ID, COLIBRI_SOCKET …)"
            )
        problem = _process_text(value)
        if problem:
            return f"session.env.{key}: the value {shown(value)} {problem}"
    for key in session.pass_env:
        if not ENV_NAME.fullmatch(key):
            return (
                f"session.pass_env: {shown(key)} is not a variable name (letters, digits and _, "
                "not starting with a digit)"
            )
        if key.startswith(HARNESS_PREFIX):
            return (
                f"session.pass_env: {key} is not the daemon's to pass on: the harness sets the "
                "COLIBRI_* variables of a session itself"
            )
    if session.ready_pattern is not None:
        try:
            re.compile(session.ready_pattern)
        except re.error as exc:
            return (
                f"session.ready_pattern {shown(session.ready_pattern)} is not a regular "
                f"expression: {exc}"
            )
    return None


def _process_text(text: str) -> str | None:
    """Why ``text`` cannot be an argument or environment value of a process, if it cannot.

    (A lone surrogate, which no file system encoding writes, never gets here: the parser
    refuses it.)"""
    if "\0" in text:
        return "holds a NUL character, which no argument or environment value can"
    return None


def _send_to_cycle(workspaces: dict[str, Workspace]) -> list[str] | None:
    """A cycle of send_to edges (``[a, b, a]``), starting at the one of its workspaces that
    comes first in the file, or None if the hand-off graph is acyclic."""
    order = {name: i for i, name in enumerate(workspaces)}
    done: set[str] = set()
    for start in workspaces:
        if start in done:
            continue
        # Depth-first without recursion: a chain of thousands of workspaces is fine.
        path: list[str] = [start]
        on_path = {start}
        pending = [iter(workspaces[start].send_to)]
        while pending:
            target = next(pending[-1], None)
            if target is None:
                pending.pop()
                done.add(path[-1])
                on_path.discard(path.pop())
            elif target in on_path:
                loop = path[path.index(target) :]
                first = min(range(len(loop)), key=lambda i: order[loop[i]])
                loop = loop[first:] + loop[:first]
                return [*loop, loop[0]]
            elif target not in done:
                path.append(target)
                on_path.add(target)
                pending.append(iter(workspaces[target].send_to))
    return None
