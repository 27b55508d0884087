"""``colibri init --scan``: the projects under a folder, proposed as workspaces.

A *project* is a folder with a file that names its language — pyproject.toml, package.json,
Cargo.toml, go.mod, pom.xml, Gemfile … (``MARKERS``) — or a git repository (``.git``, a folder,
or the file of a worktree or submodule). Its capabilities are read from those files, and from a
few that add one without making a project (tsconfig.json: typescript; a Dockerfile: docker).

The walk is bounded, whatever the tree:

- it never follows a symbolic link, so a link loop, or one leading out of the root (where no
  workspace may be), is never entered;
- it skips hidden folders and those that hold what is installed or built (``SKIPPED``);
- it does not go into a project that has a marker file: its subfolders are its own;
- it does go into a git repository with no marker of its own (a repository of several projects,
  say ``backend/`` and ``frontend/``): the projects found in it are proposed instead of it, and
  the repository itself only when none is;
- it goes at most ``MAX_DEPTH`` folders down and reads at most ``MAX_ENTRIES`` directory
  entries in all, and says where it stopped.
"""

from __future__ import annotations

import os
import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from colibri.core.model import NAME_PATTERN

#: Files that make a folder a project, and the capability each says it needs.
MARKERS: dict[str, str] = {
    "pyproject.toml": "python", "setup.py": "python", "setup.cfg": "python",
    "requirements.txt": "python", "Pipfile": "python",
    "package.json": "javascript",
    "Cargo.toml": "rust",
    "go.mod": "go",
    "pom.xml": "java", "build.gradle": "java", "build.gradle.kts": "kotlin",
    "Gemfile": "ruby",
    "composer.json": "php",
    "mix.exs": "elixir",
    "Package.swift": "swift",
    "CMakeLists.txt": "c++",
}  # fmt: skip
#: Files that add a capability to a project without making a folder one.
EXTRAS: dict[str, str] = {
    "tsconfig.json": "typescript",
    "Dockerfile": "docker", "compose.yaml": "docker", "compose.yml": "docker",
    "docker-compose.yml": "docker", "docker-compose.yaml": "docker",
}  # fmt: skip
#: Folders never walked into, besides hidden ones: dependencies, environments, build output.
SKIPPED = frozenset({"node_modules", "venv", "target", "dist", "build", "__pycache__"})
#: How many folders down from the root the walk goes (the root is 0).
MAX_DEPTH = 6
#: How many directory entries the walk reads in all before it stops.
MAX_ENTRIES = 50_000

_NAME = re.compile(NAME_PATTERN)
_NOT_IN_NAME = re.compile(r"[^a-z0-9._:+-]+")


@dataclass(frozen=True, slots=True)
class Project:
    #: Relative to the root, with ``/``; ``.`` for the root itself.
    path: str
    capabilities: tuple[str, ...]


@dataclass(slots=True)
class Walk:
    projects: list[Project] = field(default_factory=list)
    #: Why the walk stopped before the end of the tree, if it did.
    stopped: str | None = None
    #: Folders that were not walked into because of MAX_DEPTH.
    too_deep: int = 0
    #: Folders that could not be read (relative paths).
    unreadable: list[str] = field(default_factory=list)


def capabilities_of(names: set[str]) -> tuple[tuple[str, ...], bool]:
    """The capabilities the files ``names`` of a folder say, and whether one of them makes the
    folder a project. tsconfig.json makes a JavaScript project a TypeScript one."""
    found = [MARKERS[n] for n in sorted(names) if n in MARKERS]
    is_project = bool(found)
    found += [EXTRAS[n] for n in sorted(names) if n in EXTRAS]
    if "typescript" in found:
        found = [c for c in found if c != "javascript"]
    return tuple(dict.fromkeys(found)), is_project


def find_projects(
    root: Path, *, max_depth: int = MAX_DEPTH, max_entries: int = MAX_ENTRIES
) -> Walk:
    """The projects under ``root`` (itself included), sorted by path."""
    walk = Walk()
    repositories: list[Project] = []  # git repositories without a marker: proposed if empty
    queue: deque[tuple[str, int]] = deque([(".", 0)])
    read = 0
    while queue:
        relative, depth = queue.popleft()
        folder = root if relative == "." else root / relative
        files: set[str] = set()
        folders: list[str] = []
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    read += 1
                    if read > max_entries:
                        walk.stopped = (
                            f"stopped after reading {max_entries:,} directory entries, in "
                            f"{relative}; scan a smaller folder to see the rest"
                        )
                        break
                    if entry.is_dir(follow_symlinks=False):
                        folders.append(entry.name)
                    elif not entry.is_symlink() or entry.is_file():
                        files.add(entry.name)  # a marker that links to a file counts too
        except OSError:
            walk.unreadable.append(relative)
            continue
        if walk.stopped:
            break
        capabilities, is_project = capabilities_of(files)
        is_git = ".git" in files or ".git" in folders
        if is_project:
            walk.projects.append(Project(relative, capabilities))
            continue
        if is_git:
            repositories.append(Project(relative, capabilities))
        below = sorted(n for n in folders if not n.startswith(".") and n not in SKIPPED)
        if depth >= max_depth:
            walk.too_deep += len(below)
            continue
        for name in below:
            queue.append((name if relative == "." else f"{relative}/{name}", depth + 1))
    for repository in repositories:
        inside = "" if repository.path == "." else repository.path + "/"
        if not any(p.path.startswith(inside) for p in walk.projects):
            walk.projects.append(repository)
    walk.projects.sort(key=lambda p: p.path)
    return walk


def workspace_name(folder: str) -> str:
    """A valid workspace name made from a folder's name: lower case, runs of other characters
    as one ``-``, starting with a letter or digit, at most 64 characters."""
    name = _NOT_IN_NAME.sub("-", folder.lower()).lstrip("._:+-")[:64].rstrip("-")
    return name if _NAME.fullmatch(name) else "project"


def unique_name(name: str, taken: set[str]) -> str:
    """``name``, or ``name-2``, ``name-3`` … (cut to stay within 64), whichever is not taken."""
    n = 1
    candidate = name
    while candidate in taken:
        n += 1
        suffix = f"-{n}"
        candidate = name[: 64 - len(suffix)].rstrip("-") + suffix
    return candidate


@dataclass(frozen=True, slots=True)
class Proposal:
    name: str
    path: str
    capabilities: tuple[str, ...]
    #: The workspace of colibri.jsonc that is this project's folder already, if one is.
    exists: bool


def propose(root: Path, projects: list[Project], existing: dict[str, str]) -> list[Proposal]:
    """A workspace for each project: the one ``existing`` (name → absolute real path) has for
    its folder, or a new one named after the folder, unique among them all."""
    by_path = {path: name for name, path in existing.items()}
    taken = set(existing)
    real_root = os.path.realpath(root)
    proposals: list[Proposal] = []
    for project in projects:
        full = os.path.realpath(os.path.join(real_root, project.path))
        if full in by_path:
            proposals.append(Proposal(by_path[full], project.path, project.capabilities, True))
            continue
        folder = Path(real_root).name if project.path == "." else project.path.rsplit("/", 1)[-1]
        name = unique_name(workspace_name(folder), taken)
        taken.add(name)
        proposals.append(Proposal(name, project.path, project.capabilities, False))
    return proposals
