"""The error tree: every error class lives in ``core/errors/``, has a code of its own, and
appears in the tree its docstring draws, under its real parent."""

from __future__ import annotations

import ast
import importlib
import pkgutil
import re
from pathlib import Path

import pytest

import colibri
from colibri.core import errors
from colibri.core.errors import BY_CODE, ColibriError, UnexpectedReply, from_wire

#: A line of the drawn tree: its depth is where the branch starts, then the name and the code.
TREE_LINE = re.compile(r"^(?P<indent>(?:│   |    )*)[├└]── (?P<name>\w+)\s+(?P<code>\(group\)|\w+)")
#: Exception classes of our own outside ``core/errors/``, each raised and caught on one side
#: and never reported as such: the board turns a store conflict into ``illegal_transition``;
#: the harness turns a session that could not start into its task's ``fail``.
NOT_REPORTED = {
    "colibri.store.base.StoreConflict",
    "colibri.store.base.BatchRefused",
    "colibri.agent.backends.base.StartFailed",
    # A session's worktree or its dependencies that could not be made or read: its task's fail.
    "colibri.agent.git.GitFailed",
    "colibri.agent.worktrees.WorktreeRefused",
    "colibri.agent.workplace.SetupFailed",
    "colibri.agent.dependencies.DependencyUnread",
    # Turned into psycopg's OperationalError, and so StorageUnavailable, where it is caught.
    "colibri.store.postgres.connection._Silent",
}


def modules() -> list[str]:
    """Every module of the package (``__main__`` runs the CLI: it only imports ``cli.main``)."""
    found = pkgutil.walk_packages(colibri.__path__, "colibri.")
    return [m.name for m in found if not m.name.endswith("__main__")]


def every_subclass() -> list[type[ColibriError]]:
    for name in modules():
        importlib.import_module(name)  # a subclass defined anywhere is now known
    found: list[type[ColibriError]] = []
    todo = [ColibriError]
    while todo:
        for sub in todo.pop().__subclasses__():
            if sub not in found:  # a class in two groups is a subclass of both
                found.append(sub)
                todo.append(sub)
    return found


def groups() -> list[type[ColibriError]]:
    return [cls for cls in every_subclass() if vars(cls).get("group")]


def drawn_tree() -> dict[str, tuple[str, str]]:
    """Each class name in the docstring's tree: (its code, the name of its parent)."""
    assert errors.__doc__ is not None
    tree: dict[str, tuple[str, str]] = {}
    parents = ["ColibriError"]
    for line in errors.__doc__.splitlines():
        match = TREE_LINE.match(line.strip("\n")[4:])  # the tree is indented by four spaces
        if match is None:
            continue
        depth = len(match["indent"]) // 4
        del parents[depth + 1 :]
        tree[match["name"]] = (match["code"], parents[depth])
        parents.append(match["name"])
    return tree


def test_every_error_class_is_in_errors_py_with_a_code_of_its_own() -> None:
    classes = [cls for cls in every_subclass() if cls not in groups()]
    assert len(classes) > 30
    for cls in classes:
        assert cls.__module__ == "colibri.core.errors", f"{cls.__qualname__} is not in errors.py"
        assert cls.code != ColibriError.code, f"{cls.__name__} has no code of its own"
        assert "code" in vars(cls), f"{cls.__name__} inherits its parent's code"
    codes = [cls.code for cls in classes]
    assert len(codes) == len(set(codes)), sorted(c for c in codes if codes.count(c) > 1)
    assert BY_CODE == {cls.code: cls for cls in classes}


def test_the_docstring_draws_exactly_the_tree() -> None:
    drawn = drawn_tree()
    real = {
        cls.__name__: ("(group)" if cls in groups() else cls.code, cls.__bases__[0].__name__)
        for cls in every_subclass()
    }
    assert drawn == real


def test_a_group_is_caught_for_each_of_its_codes_and_says_what_the_codes_have_in_common() -> None:
    from colibri.core.errors import Elsewhere, NotFound, Unavailable, Unreached

    def codes(group: type[ColibriError]) -> set[str]:
        return {code for code, cls in BY_CODE.items() if issubclass(cls, group)}

    assert codes(NotFound) == {"unknown_task", "unknown_schedule", "unknown_parent",
                               "unknown_token", "unknown_workspace"}  # fmt: skip
    assert codes(Elsewhere) == {"standby", "not_owner", "lease_lost"}
    assert codes(Unreached) == {"no_daemon", "closed"}
    assert codes(Unavailable) == codes(Elsewhere) | codes(Unreached) | {
        "busy", "throttled", "storage_unavailable"}  # fmt: skip
    # Transient: every Unavailable, and a batch rolled back (internal); nothing else.
    assert {code for code, cls in BY_CODE.items() if cls.transient} == codes(Unavailable) | {
        "internal"}  # fmt: skip
    error = from_wire({"code": "unknown_task", "message": "no task abc"})
    assert isinstance(error, LookupError) and isinstance(error, NotFound)
    assert "group" not in {cls.code for cls in BY_CODE.values()} and len(groups()) == 4


def test_an_error_reply_comes_back_as_its_own_class() -> None:
    for code, cls in BY_CODE.items():
        error = from_wire({"code": code, "message": "as the daemon said it"})
        assert type(error) is cls
        assert error.code == code and error.message == "as the daemon said it"
        assert str(error) == "as the daemon said it"


@pytest.mark.parametrize(
    "error",
    [
        {"code": "no_such_code", "message": "from a daemon of another version"},
        {"code": "error", "message": "the abstract root's code is nobody's"},
        {"code": 7, "message": "x"},
        {"message": "no code"},
        None,
        "a string",
    ],
)
def test_an_error_reply_nobody_lists_is_an_unexpected_reply(error: object) -> None:
    made = from_wire(error)
    assert type(made) is UnexpectedReply and made.code == "unexpected_reply"
    if isinstance(error, dict):
        assert str(error.get("code", "")) in made.message


def test_no_error_is_raised_without_a_class_of_its_own() -> None:
    """Neither the abstract root (code ``error``) nor an exception class of our own outside the
    tree, which no reply or --json output could name."""
    package = colibri.__path__[0]
    for name in modules():
        spec = importlib.util.find_spec(name)
        assert spec is not None and spec.origin is not None
        if not spec.origin.endswith(".py"):
            continue
        tree = ast.parse(Path(spec.origin).read_text(encoding="utf-8"))
        where = spec.origin.removeprefix(package)
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "ColibriError":
                raise AssertionError(f"{where}:{node.lineno} makes a bare ColibriError")
            in_the_tree = name == "colibri.core.errors" or name.startswith("colibri.core.errors.")
            if isinstance(node, ast.ClassDef) and not in_the_tree:
                bases = {getattr(b, "id", getattr(b, "attr", "")) for b in node.bases}
                if bases & {"Exception", "BaseException", "ValueError", "RuntimeError"}:
                    assert f"{name}.{node.name}" in NOT_REPORTED, (
                        f"{where}:{node.lineno}: {node.name} belongs in core/errors/"
                    )


def test_an_errors_index_goes_over_the_wire_and_back() -> None:
    """A refusal about one item of a request (``submit-all``) names it; others name none."""
    from colibri.core.errors import UnknownParent

    error = UnknownParent("t1")
    assert "index" not in error.to_wire()
    error.index = 3
    back = from_wire(error.to_wire())
    assert (type(back), back.index, back.message) == (UnknownParent, 3, error.message)
    for odd in (True, "3", None, 2.0):
        assert from_wire({"code": "unknown_parent", "message": "m", "index": odd}).index is None


def test_the_transient_refusals_are_those_a_request_may_be_taken_after() -> None:
    """One home for which answers a report (or any request that must not be lost) is kept and
    sent again after: the harness, a session's own commands and a registration read
    ``transient``; every other code is the request's own, refused again if sent as it is."""
    transient = {code for code, cls in BY_CODE.items() if cls.transient}
    assert transient == {
        "busy", "storage_unavailable", "lease_lost", "standby", "not_owner", "throttled",
        "internal", "no_daemon", "closed",
    }  # fmt: skip
    assert from_wire({"code": "lease_lost", "message": "m"}).transient
    assert not from_wire({"code": "illegal_transition", "message": "m"}).transient
