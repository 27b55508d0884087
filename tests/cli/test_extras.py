"""A module a feature needs that is not installed: one line naming what to install, never "a
bug in colibri" with a traceback. Each module is made unimportable in a real ``colibri``
process (``sys.modules[name] = None`` from a ``sitecustomize`` on its path), as where the extra
is not installed."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from colibri.extras import OPTIONAL
from tests.helpers import colibri, one_line
from tests.test_layers import imports_of, top

PG = "postgresql://127.0.0.1:5432/test"

# (the module made unimportable, the command, what the one line says)
CASES = [
    ("psycopg", ["run", "--store", PG], "pip install 'colibri-board[postgresql]'"),
    ("psycopg", ["hive", "list", "--store", PG], "pip install 'colibri-board[postgresql]'"),
    ("psycopg", ["store", "copy", "--help"], None),  # help needs no driver
    ("psycopg", ["backup", "copy.sqlite", "--store", PG], "pg_dump"),  # not the driver's work
    ("mcp", ["mcp"], "pip install 'colibri-board[mcp]'"),
    ("pydantic", ["mcp"], "pip install 'colibri-board[mcp]'"),
    ("cryptography", ["tls", "init", "{tmp}/tls"], "pip install 'cryptography>=42'"),
    ("prometheus_client", ["run", "--metrics", "127.0.0.1:0"], "pip install 'prometheus-client"),
    ("uvloop", ["run", "--loop", "uvloop"], "pip install uvloop"),
]


def without(tmp_path: Path, module: str) -> dict[str, str]:
    """The environment of a process in which ``module`` cannot be imported."""
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "sitecustomize.py").write_text(f"import sys\nsys.modules[{module!r}] = None\n")
    return {"PYTHONPATH": str(shadow)}


@pytest.mark.parametrize(("module", "args", "says"), CASES, ids=lambda c: str(c))
def test_a_missing_module_is_one_line_naming_what_to_install(
    root: Path, tmp_path: Path, module: str, args: list[str], says: str | None
) -> None:
    args = [a.replace("{tmp}", str(tmp_path)) for a in args]
    done = colibri(root, *args, env=without(tmp_path, module))
    if says is None:
        assert done.returncode == 0, done.stderr
        return
    assert done.returncode == 1, done.stderr
    line = one_line(done.stderr)
    assert says in line and "a bug" not in line, line
    if module in OPTIONAL and "pip install" in says:
        extra = OPTIONAL[module]
        assert line == (
            f"colibri: {extra.needed_by} needs {extra.what}, which is not installed: "
            f"{extra.install}"
        )


def test_every_module_imported_lazily_is_known() -> None:
    """Every module outside the standard library and Colibri that is imported only inside a
    function (or under a condition) has its line: a new optional import cannot be added
    without saying what installs it."""
    lazy = {
        top(i.module)
        for i in imports_of("colibri")
        if not i.top_level
        and top(i.module) != "colibri"
        and top(i.module) not in sys.stdlib_module_names
    }
    assert lazy, "the scanner finds the lazy imports"
    # msgspec, click, rich, pyjson5 and cronsim are imported at the top of modules too: they
    # come with colibri itself and never load late alone.
    always = {"msgspec", "click", "rich", "pyjson5", "cronsim"}
    assert lazy - always - set(OPTIONAL) == set()


def test_an_installed_module_that_cannot_be_loaded_is_said_so() -> None:
    """Not missing but too old or broken (a name it lacks): the line says what it said."""
    from colibri.extras import missing

    error = missing(ImportError("cannot import name 'pipeline' from 'psycopg'", name="psycopg"))
    assert error is not None and error.message == (
        "the PostgreSQL store needs psycopg, which cannot be loaded (cannot import name "
        "'pipeline' from 'psycopg'): pip install 'colibri-board[postgresql]'"
    )
    assert missing(ModuleNotFoundError("No module named 'yaml'", name="yaml")) is None
