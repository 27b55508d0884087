"""The layers import inward only: core is pure, store sits on core, the daemon stays a server,
and the client side meets the daemon on the socket only."""

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
    function: str | None = None  # the def it is in (``Class.method``), None outside any

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


def _functions(tree: ast.Module) -> dict[int, str]:
    """ids of the nodes inside a def, mapped to the def's name (``Class.method`` in a class)."""
    found: dict[int, str] = {}

    def visit(node: ast.AST, scope: list[str], function: str | None) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                visit(child, [*scope, child.name], ".".join([*scope, child.name]))
            elif isinstance(child, ast.ClassDef):
                visit(child, [*scope, child.name], function)
            else:
                if function is not None:
                    found[id(child)] = function
                visit(child, scope, function)

    visit(tree, [], None)
    return found


def imports_of(package: str) -> list[Import]:
    """Every import statement in every module of ``package`` (a colibri sub-package, or a
    module such as ``colibri.client``)."""
    path = PACKAGE.joinpath(*package.split(".")[1:])
    if path.is_dir():
        files = sorted(path.rglob("*.py"))
    else:
        assert path.with_suffix(".py").is_file(), f"{package} not found at {path}"
        files = [path.with_suffix(".py")]
    result: list[Import] = []
    for path in files:
        current = module_name(path)
        tree = ast.parse(path.read_text(), filename=str(path))
        top = _top_level_nodes(tree)
        functions = _functions(tree)
        rel = str(path.relative_to(PACKAGE.parent))
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Import, ast.ImportFrom)):
                continue
            at = (rel, node.lineno, id(node) in top, functions.get(id(node)))
            if isinstance(node, ast.Import):
                for alias in node.names:
                    result.append(Import(alias.name, *at))
            else:
                base = _resolve(node, current, path.name == "__init__.py")
                result.append(Import(base, *at))
                for alias in node.names:
                    if alias.name != "*" and base:
                        result.append(Import(f"{base}.{alias.name}", *at))
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
    run = [i for i in cli if i.file == "colibri/cli/daemon.py" and i.function == "run"]
    assert any(i.module == "colibri.daemon.app" for i in run)
    assert any(i.module == "colibri.layout" for i in imports_of("colibri.client"))


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


def test_store_imports_only_core_store_stdlib_and_its_drivers() -> None:
    """msgspec, and psycopg for the PostgreSQL store only (the SQLite one needs nothing) and
    the copy of a board into it."""
    bad = [
        str(i)
        for i in imports_of("colibri.store")
        if not (
            within(i.module, "colibri.core", "colibri.store")
            or top(i.module) in STDLIB
            or top(i.module) == "msgspec"
            or (
                top(i.module) == "psycopg"
                and (i.file.endswith("store/copy.py") or "store/postgres/" in i.file)
            )
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


#: The client side: what programs, the CLI and the harness use to reach the daemon.
CLIENT_SIDE = ("colibri.client", "colibri.cli", "colibri.agent")

#: The one command that starts a daemon, and so may load it (inside the command only).
STARTS_THE_DAEMON = {
    ("colibri/cli/daemon.py", "run"): ("colibri.daemon.app",),
    # Not a daemon, but the board itself: a PostgreSQL board's daemons, read where no daemon
    # may serve (a standby has no socket).
    ("colibri/cli/hive.py", "list_hive"): ("colibri.store.postgres",),
    # The role the hive's daemons connect as, granted on the board by its tables' owner.
    ("colibri/cli/hive.py", "grant"): ("colibri.store.postgres",),
    ("colibri/cli/hive.py", "_postgres_board"): ("colibri.store.postgres",),
    # A tenant's lease marked for another daemon, on the board itself: no one daemon is asked.
    ("colibri/cli/hive.py", "move"): ("colibri.store.postgres",),
    # Not a daemon either: the copy of an SQLite board into the hive, made while no daemon
    # serves either board (it refuses otherwise).
    ("colibri/cli/store.py", "copy_store"): ("colibri.store.copy",),
    # The ledger of a root whose daemon is not running, read from its SQLite board itself.
    ("colibri/cli/ledger.py", "_ledger_page"): ("colibri.store.offline", "colibri.store.postgres"),
    # The board's file copied where no daemon need serve (SQLite's backup, not the socket).
    ("colibri/cli/daemon.py", "backup"): ("colibri.store.backup",),
}


def daemon_imports_of_the_client_side() -> list[Import]:
    """The client side's imports of the daemon or the store, but those a command that starts
    the daemon makes inside its function."""
    return [
        i
        for package in CLIENT_SIDE
        for i in imports_of(package)
        if within(i.module, "colibri.daemon", "colibri.store")
        and not (
            not i.top_level
            and within(i.module, *STARTS_THE_DAEMON.get((i.file, i.function or ""), ()))
        )
    ]


def test_the_client_side_never_imports_the_daemon_or_the_store() -> None:
    """client/, cli/ and agent/ meet the daemon on the socket only; the commands that start
    a daemon load it inside themselves (and ``hive list`` reads a PostgreSQL board's table of
    daemons itself)."""
    assert [str(i) for i in daemon_imports_of_the_client_side()] == []


def test_the_client_side_rule_sees_a_bad_import(monkeypatch: pytest.MonkeyPatch) -> None:
    """The rule fails on the imports it forbids: at module level in the CLI, inside another
    command, the store from a harness, and more of the daemon than a command may load."""
    code = {
        "colibri/cli/tasks.py": "from colibri.daemon import board\n",
        "colibri/cli/agents.py": "def agents():\n    from colibri.daemon.server import Server\n",
        "colibri/agent/tmux.py": "def f():\n    import colibri.store.sqlite\n",
        "colibri/cli/daemon.py": "def run():\n    from colibri.daemon import board\n",
        "colibri/client/blocking.py": "from colibri.daemon.app import serve\n",
    }
    real = Path.read_text

    def read_text(path: Path, encoding: str | None = None, errors: str | None = None) -> str:
        rel = str(path.relative_to(PACKAGE.parent)) if path.is_relative_to(PACKAGE.parent) else ""
        return code.get(rel) or real(path, encoding, errors)

    monkeypatch.setattr(Path, "read_text", read_text)
    found = {(i.file, i.module) for i in daemon_imports_of_the_client_side()}
    assert found >= {
        ("colibri/cli/tasks.py", "colibri.daemon.board"),
        ("colibri/cli/agents.py", "colibri.daemon.server.Server"),
        ("colibri/agent/tmux.py", "colibri.store.sqlite"),
        ("colibri/cli/daemon.py", "colibri.daemon.board"),
        ("colibri/client/blocking.py", "colibri.daemon.app"),
    }


def test_the_mcp_sdk_loads_only_with_colibri_mcp() -> None:
    """The MCP SDK (the ``mcp`` extra) is imported by ``cli/mcp_server.py`` alone, and that
    module only inside the command that serves it: the CLI starts without it, and works where
    the extra is not installed."""
    everything = imports_of("colibri")
    sdk = [i for i in everything if top(i.module) in ("mcp", "mcp_types", "pydantic")]
    assert sdk, "the scanner finds the SDK's imports"
    assert sorted({i.file for i in sdk}) == ["colibri/cli/mcp_server.py"]
    server = [i for i in everything if within(i.module, "colibri.cli.mcp_server")]
    assert server and all(not i.top_level for i in server), [str(i) for i in server]
    assert {(i.file, i.function) for i in server} == {("colibri/cli/supervise.py", "mcp")}


def test_the_tui_meets_the_daemon_as_a_client() -> None:
    """colibri.tui imports colibri.client and colibri.core (and itself) of colibri: never the
    daemon, the store, the CLI or the agent side."""
    tui = imports_of("colibri.tui")
    assert any(within(i.module, "colibri.client") for i in tui)
    bad = [
        str(i)
        for i in tui
        if top(i.module) == "colibri"
        and not within(i.module, "colibri.client", "colibri.core", "colibri.tui")
    ]
    assert bad == []


def test_the_cli_loads_textual_only_inside_the_commands_that_show_it() -> None:
    """``colibri --help`` and the quick commands never pay for Textual or the TUI."""
    bad = [
        str(i)
        for i in imports_of("colibri.cli")
        if i.top_level and (top(i.module) == "textual" or within(i.module, "colibri.tui"))
    ]
    assert bad == []
    assert any(
        within(i.module, "colibri.tui") and not i.top_level for i in imports_of("colibri.cli")
    )
