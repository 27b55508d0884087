"""The layers import inward only: core is pure, store sits on core, the daemon stays a server."""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

import colibri

PACKAGE = Path(colibri.__file__).parent
STDLIB = sys.stdlib_module_names


@dataclass(frozen=True)
class Import:
    module: str  # the absolute module imported (for ``from a import b``: "a.b" and "a" both count)
    file: str
    line: int
    top_level: bool  # a statement of the module body, not inside a function or class

    def __str__(self) -> str:
        return f"{self.file}:{self.line} imports {self.module}"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(node: ast.ImportFrom, current: str, is_package: bool) -> str:
    if node.level == 0:
        return node.module or ""
    base = current.split(".")
    if not is_package:
        base.pop()
    if node.level > 1:
        base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, node.module] if node.module else base)


def _top_level_nodes(tree: ast.Module) -> set[int]:
    """ids of import nodes at module level (including under if/try, but not in def/class)."""
    found: set[int] = set()

    def visit(body: list[ast.stmt]) -> None:
        for stmt in body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                found.add(id(stmt))
            elif isinstance(stmt, ast.If):
                # ``if TYPE_CHECKING:`` imports never run; they are not a dependency.
                test = stmt.test
                name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
                if name != "TYPE_CHECKING":
                    visit(stmt.body)
                visit(stmt.orelse)
            elif isinstance(stmt, ast.Try):
                visit(stmt.body)
                for handler in stmt.handlers:
                    visit(handler.body)
                visit(stmt.orelse)
                visit(stmt.finalbody)
            elif isinstance(stmt, (ast.With, ast.AsyncWith)):
                visit(stmt.body)

    visit(tree.body)
    return found


def imports_of(package: str) -> list[Import]:
    """Every import statement in every module of ``package`` (a colibri sub-package)."""
    directory = PACKAGE.joinpath(*package.split(".")[1:])
    assert directory.is_dir(), f"{package} not found at {directory}"
    result: list[Import] = []
    for path in sorted(directory.rglob("*.py")):
        current = module_name(path)
        tree = ast.parse(path.read_text(), filename=str(path))
        top = _top_level_nodes(tree)
        rel = str(path.relative_to(PACKAGE.parent))
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                for alias in node.names:
                    result.append(Import(alias.name, rel, node.lineno, id(node) in top))
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(node, current, path.name == "__init__.py")
                result.append(Import(base, rel, node.lineno, id(node) in top))
                for alias in node.names:
                    if alias.name != "*" and base:
                        result.append(
                            Import(f"{base}.{alias.name}", rel, node.lineno, id(node) in top)
                        )
    return result


def within(module: str, *prefixes: str) -> bool:
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def top(module: str) -> str:
    return module.split(".")[0]


def test_the_scanner_sees_imports() -> None:
    """Guard against a scanner that silently finds nothing."""
    core = imports_of("colibri.core")
    assert any(i.module == "colibri.core.errors" for i in core)
    daemon = imports_of("colibri.daemon")
    assert any(top(i.module) == "asyncio" for i in daemon)
    cli = imports_of("colibri.cli")
    assert any(not i.top_level for i in cli)


def test_core_imports_nothing_of_colibri_outside_core() -> None:
    bad = [
        str(i)
        for i in imports_of("colibri.core")
        if top(i.module) == "colibri" and not within(i.module, "colibri.core")
    ]
    assert bad == []


@pytest.mark.parametrize("forbidden", ["asyncio", "sqlite3", "socket", "subprocess", "os", "time"])
def test_core_does_no_io(forbidden: str) -> None:
    bad = [str(i) for i in imports_of("colibri.core") if top(i.module) == forbidden]
    assert bad == []


def test_store_imports_only_core_store_stdlib_and_msgspec() -> None:
    bad = [
        str(i)
        for i in imports_of("colibri.store")
        if not (
            within(i.module, "colibri.core", "colibri.store")
            or top(i.module) in STDLIB
            or top(i.module) == "msgspec"
        )
    ]
    assert bad == []


def test_daemon_does_not_import_cli_or_agent() -> None:
    bad = [
        str(i)
        for i in imports_of("colibri.daemon")
        if within(i.module, "colibri.cli", "colibri.agent")
    ]
    assert bad == []


def test_cli_does_not_import_the_daemon_internals_at_module_level() -> None:
    """The CLI starts fast: board, server and store load only inside the commands using them."""
    bad = [
        str(i)
        for i in imports_of("colibri.cli")
        if i.top_level
        and within(
            i.module,
            "colibri.daemon.board",
            "colibri.daemon.server",
            "colibri.daemon.store",
            "colibri.store",
        )
    ]
    assert bad == []
