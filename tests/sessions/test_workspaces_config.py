"""Workspaces in colibri.jsonc: templates, deep merge, and every mistake refused with its line."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from colibri.config import SupervisorSettings, load_config
from colibri.layout import CONFIG_NAME
from colibri.workspaces import Workspace, deep_merge
from tests.configs import at, loaded, refused
from tests.helpers import colibri


def load(root: Path, text: str) -> dict[str, Workspace]:
    return loaded(root, text).workspaces


# -- merging -----------------------------------------------------------------------------------


def test_deep_merge_merges_objects_and_replaces_lists_and_scalars() -> None:
    base: dict[str, Any] = {
        "session": {"command": ["claude", "-p"], "env": {"A": "1", "B": "1"}},
        "capabilities": ["python", "docs"],
        "slots": 2,
        "send_to": ["web"],
    }
    over: dict[str, Any] = {
        "session": {"env": {"B": "2", "C": "3"}},
        "capabilities": ["go"],
        "slots": 5,
        "send_to": {"odd": True},
    }
    merged = deep_merge(base, over)
    assert merged == {
        "session": {"command": ["claude", "-p"], "env": {"A": "1", "B": "2", "C": "3"}},
        "capabilities": ["go"],
        "slots": 5,
        "send_to": {"odd": True},
    }
    # neither input is changed
    assert base["session"]["env"] == {"A": "1", "B": "1"}
    assert over["session"] == {"env": {"B": "2", "C": "3"}}


def test_the_documented_example(root: Path) -> None:
    """The example of colibri.workspaces: env merges, a capabilities list replaces."""
    text = """{
  "templates": {
    "oneshot": { "session": { "command": ["claude", "-p"], "env": { "A": "1" } },
                 "capabilities": ["python", "docs"], "slots": 3 },
  },
  "workspaces": {
    "api": { "extends": "oneshot", "session": { "env": { "B": "2" } }, "capabilities": ["go"] },
  },
}"""
    api = load(root, text)["api"]
    assert api.command == ["claude", "-p"]
    assert api.env == {"A": "1", "B": "2"}
    assert api.capabilities == ["go"]  # replaced, never appended to
    assert api.slots == 3  # inherited
    assert api.path == str(root.resolve() / "api")  # the name is the default path
    assert api.send_to == [] and api.max_runtime is None


def test_a_workspace_command_replaces_the_template_command(root: Path) -> None:
    text = """{
  "templates": { "t": { "session": { "command": ["claude", "-p", "--verbose"] } } },
  "workspaces": { "w": { "extends": "t", "session": { "command": ["codex"] } } },
}"""
    assert load(root, text)["w"].command == ["codex"]


def test_a_chain_of_templates_merges_nearest_last(root: Path) -> None:
    text = """{
  "templates": {
    "base": { "session": { "command": ["run"], "env": { "A": "base", "B": "base" } },
              "slots": 2, "capabilities": ["base"], "max_runtime": "10m" },
    "mid": { "extends": "base", "session": { "env": { "B": "mid", "C": "mid" } },
             "max_runtime": "1m" },
    "top": { "extends": "mid", "session": { "env": { "C": "top" } }, "capabilities": ["top"] },
  },
  "workspaces": {
    "svc": { "extends": "top", "path": "services/svc", "session": { "env": { "D": "own" } } },
    "plain": { "extends": "base" },
  },
}"""
    resolved = load(root, text)
    svc, plain = resolved["svc"], resolved["plain"]
    assert svc.command == ["run"]
    assert svc.env == {"A": "base", "B": "mid", "C": "top", "D": "own"}
    assert svc.capabilities == ["top"]
    assert svc.slots == 2
    assert svc.max_runtime == 60.0
    assert svc.path == str(root.resolve() / "services" / "svc")
    # the templates themselves are untouched by the merge
    assert plain.env == {"A": "base", "B": "base"}
    assert plain.capabilities == ["base"] and plain.max_runtime == 600.0


# -- templates refused ---------------------------------------------------------------------------


def test_a_cycle_in_extends_is_named_with_its_line(root: Path) -> None:
    text = """{
  "templates": {
    "one": { "extends": "two", "session": { "command": ["x"] } },
    "two": { "extends": "three" },
    "three": { "extends": "one" },
  },
  "workspaces": {
    "w": { "extends": "one" },
  },
}"""
    message = refused(root, text)
    assert message.startswith(at(root, text, '"one": {'))
    assert "cycle" in message
    assert "one → two → three → one" in message


def test_a_template_extending_itself_is_a_cycle(root: Path) -> None:
    text = """{
  "templates": {
    "loop": { "extends": "loop", "session": { "command": ["x"] } },
  },
  "workspaces": { "w": { "extends": "loop" } },
}"""
    message = refused(root, text)
    assert message.startswith(at(root, text, '"loop": {'))
    assert "loop → loop" in message


def test_an_unknown_template_is_named(root: Path) -> None:
    text = """{
  "templates": { "known": { "session": { "command": ["x"] } } },
  "workspaces": {
    "w": { "extends": "missing" },
  },
}"""
    message = refused(root, text)
    assert message.startswith(at(root, text, '"w": {'))
    assert "'missing'" in message and "known" in message


def test_a_template_extending_an_unknown_template_is_named(root: Path) -> None:
    text = """{
  "templates": {
    "known": { "extends": "ghost", "session": { "command": ["x"] } },
  },
  "workspaces": { "w": { "extends": "known" } },
}"""
    message = refused(root, text)
    assert "'ghost'" in message
    assert message.startswith(f"{root / CONFIG_NAME}:")


# -- workspaces refused --------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ('{ "colour": "red", "session": { "command": ["x"] } }', "colour"),
        ('{ "session": { "comand": ["x"] } }', "comand"),
        ('{ "session": { "command": ["x"] }, "slots": "two" }', "slots"),
        ('{ "session": { "command": ["x"] }, "max_runtime": "soon" }', "soon"),
    ],
)
def test_an_unknown_key_or_bad_value_names_it_with_the_line(
    root: Path, body: str, field: str
) -> None:
    text = '{\n  "workspaces": {\n    "other": { "session": { "command": ["x"] } },\n'
    text += f'    "bad": {body},\n  }},\n}}'
    message = refused(root, text)
    assert message.startswith(at(root, text, '"bad": {'))
    assert field in message


@pytest.mark.parametrize("path", ["../x", "/etc", "a/../../b", "..", "/tmp"])
def test_a_path_outside_the_root_is_refused(root: Path, path: str) -> None:
    text = f"""{{
  "workspaces": {{
    "w": {{ "path": "{path}", "session": {{ "command": ["x"] }} }},
  }},
}}"""
    message = refused(root, text)
    assert message.startswith(at(root, text, '"w": {'))
    assert "path" in message and "root" in message


def test_a_symlink_leading_out_of_the_root_is_refused(root: Path) -> None:
    os.symlink("/tmp", root / "out")
    text = '{ "workspaces": { "w": { "path": "out/w", "session": { "command": ["x"] } } } }'
    assert "outside the root" in refused(root, text)


def test_a_path_that_stays_inside_is_resolved(root: Path) -> None:
    text = '{ "workspaces": { "w": { "path": "a/../b/./c", "session": { "command": ["x"] } } } }'
    assert load(root, text)["w"].path == str(root.resolve() / "b" / "c")


@pytest.mark.parametrize("name", ["..", "A B", "-lead", "a" * 70, "Api", "a/b"])
def test_a_workspace_name_that_is_not_allowed_is_refused(root: Path, name: str) -> None:
    text = f"""{{
  "workspaces": {{
    "{name}": {{ "session": {{ "command": ["x"] }} }},
  }},
}}"""
    message = refused(root, text)
    assert message.startswith(at(root, text, f'"{name}": {{'))
    assert "invalid workspace name" in message and repr(name) in message


def test_the_longest_allowed_name_is_accepted(root: Path) -> None:
    name = "a" * 64
    text = f'{{ "workspaces": {{ "{name}": {{ "session": {{ "command": ["x"] }} }} }} }}'
    assert list(load(root, text)) == [name]


def test_send_to_a_workspace_that_does_not_exist_is_named(root: Path) -> None:
    text = """{
  "workspaces": {
    "web": { "session": { "command": ["x"] } },
    "api": { "session": { "command": ["x"] }, "send_to": ["web", "ghost"] },
  },
}"""
    message = refused(root, text)
    assert message.startswith(at(root, text, '"api": {'))
    assert "'ghost'" in message and "api, web" in message


def test_send_to_is_kept_in_order_without_duplicates(root: Path) -> None:
    text = """{
  "workspaces": {
    "a": { "session": { "command": ["x"] }, "send_to": ["c", "b", "c"] },
    "b": { "session": { "command": ["x"] } },
    "c": { "session": { "command": ["x"] } },
  },
}"""
    assert load(root, text)["a"].send_to == ["c", "b"]


@pytest.mark.parametrize(
    "body",
    [
        "{}",
        '{ "session": { "env": { "A": "1" } } }',
        '{ "extends": "t", "session": { "command": [] } }',  # a list replaces, even when empty
    ],
)
def test_a_missing_session_command_is_refused(root: Path, body: str) -> None:
    text = f"""{{
  "templates": {{ "t": {{ "session": {{ "command": ["x"] }} }} }},
  "workspaces": {{
    "w": {body},
  }},
}}"""
    message = refused(root, text)
    assert message.startswith(at(root, text, '"w": '))
    assert "session.command" in message


def test_run_stops_with_file_and_line(root: Path) -> None:
    text = """{
  // two workspaces; one of them hands work to a workspace nobody defined
  "workspaces": {
    "web": { "session": { "command": ["x"] } },
    "api": { "session": { "command": ["x"] }, "send_to": ["nowhere"] },
  },
}"""
    (root / CONFIG_NAME).write_text(text)
    result = colibri(root, "run")
    assert result.returncode == 1, result.stderr
    assert at(root, text, '"api": {') in result.stderr
    assert "'nowhere'" in result.stderr
    assert not (root / ".colibri" / "colibri.sock").exists()


# -- supervisor settings -----------------------------------------------------------------------


def test_supervisor_settings_default_and_read(root: Path) -> None:
    (root / CONFIG_NAME).write_text("{}")
    assert load_config(root).supervisor == SupervisorSettings()
    text = """{
  "supervisor": { "crash_loop": 3, "crash_window": "10s", "cool_down": "1h",
                  "max_backoff": "1s" },
}"""
    (root / CONFIG_NAME).write_text(text)
    assert load_config(root).supervisor == SupervisorSettings(
        crash_loop=3, crash_window=10.0, cool_down=3600.0, max_backoff=1.0
    )


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ('"crash_loop": 0', "crash_loop"),
        ('"crash_loop": 2.5', "crash_loop"),
        ('"cool_down": "later"', "cool_down"),
        ('"restarts": 3', "restarts"),
    ],
)
def test_bad_supervisor_settings_are_refused(root: Path, body: str, needle: str) -> None:
    text = '{\n  "supervisor": {\n    ' + body + ",\n  },\n}"
    message = refused(root, text)
    assert message.startswith(at(root, text, needle))
    assert needle in message


def test_the_init_template_loads_with_default_supervisor_settings(root: Path) -> None:
    from colibri.config import TEMPLATE

    (root / CONFIG_NAME).write_text(TEMPLATE)
    assert '"supervisor"' in TEMPLATE
    assert load_config(root).supervisor == SupervisorSettings()


# -- what would crash every task later -----------------------------------------------------------


#: How the line of workspace ``w`` starts.
W = '"w": {'


def quoted(name: str) -> str:
    return f'"{name}": {{'


def one_workspace(session: str, extra: str = "") -> str:
    """colibri.jsonc with workspace ``w`` (on line 4) whose session is ``session`` (JSON5)."""
    return (
        '{\n  "workspaces": {\n    "other": { "session": { "command": ["x"] } },\n'
        f'    "w": {{ "session": {session}{extra} }},\n  }},\n}}\n'
    )


@pytest.mark.parametrize(
    ("session", "words"),
    [
        ('{ "command": ["x"], "env": { "A": "a\\u0000b" } }',
         "session.env.A: the value 'a\\x00b' holds a NUL character"),
        ('{ "command": ["x"], "env": { "A=B": "1" } }', "session.env: 'A=B' is not a"),
        ('{ "command": ["x"], "env": { "": "1" } }', "session.env: '' is not a variable name"),
        ('{ "command": ["x"], "env": { "A\\u0000": "1" } }',
         "session.env: 'A\\x00' is not a variable name"),
        ('{ "command": ["x"], "env": { "1A": "1" } }', "session.env: '1A' is not a variable name"),
        ('{ "command": ["x"], "env": { "A-B": "1" } }', "session.env: 'A-B' is not a"),
        ('{ "command": ["x"], "env": { "COLIBRI_TASK_ID": "1" } }',
         "session.env: COLIBRI_TASK_ID is not yours to set: the harness sets"),
        ('{ "command": ["x"], "env": { "COLIBRI_SOCKET": "/tmp/s" } }',
         "session.env: COLIBRI_SOCKET is not yours to set"),
        ('{ "command": ["claude", "-p\\u0000"] }',
         "session.command[1] '-p\\x00' holds a NUL character"),
        ('{ "command": [""] }', "session.command: the program (its first element) is empty"),
        ('{ "command": ["x"], "pass_env": ["API_KEY", "A=B"] }',
         "session.pass_env: 'A=B' is not a variable name"),
        ('{ "command": ["x"], "pass_env": [""] }', "session.pass_env: '' is not a variable name"),
        ('{ "command": ["x"], "pass_env": ["COLIBRI_ROOT"] }',
         "session.pass_env: COLIBRI_ROOT is not the daemon's to pass on"),
        ('{ "command": ["x"], "backend": "tmux", "ready_pattern": "(" }',
         "session.ready_pattern '(' is not a regular expression: missing )"),
        ('{ "command": ["x"], "ready_pattern": "[a-" }', "session.ready_pattern '[a-'"),
    ],
)  # fmt: skip
def test_a_session_that_could_never_start_is_refused(root: Path, session: str, words: str) -> None:
    text = one_workspace(session)
    message = refused(root, text)
    assert message.startswith(at(root, text, W) + " workspaces.w."), message
    assert words in message, message


def test_the_values_a_session_may_have_are_accepted(root: Path) -> None:
    text = one_workspace(
        '{ "command": ["claude", "", "-p"], "env": { "_A1": "", "colibri_x": "1" }, '
        '"pass_env": ["ANTHROPIC_API_KEY", "_x"], "ready_pattern": "^> $" }'
    )
    w = load(root, text)["w"]
    assert w.command == ["claude", "", "-p"]  # an empty argument is an argument
    assert w.env == {"_A1": "", "colibri_x": "1"}
    assert w.pass_env == ["ANTHROPIC_API_KEY", "_x"]
    # a template's env is checked too, once merged
    text = """{
  "templates": { "t": { "session": { "command": ["x"], "env": { "COLIBRI_AGENT": "me" } } } },
  "workspaces": {
    "w": { "extends": "t" },
  },
}"""
    assert refused(root, text).startswith(at(root, text, W) + " workspaces.w.session.env:")


@pytest.mark.parametrize(
    ("field", "low", "high"),
    [("session.ready_timeout", "100ms", "1d"), ("session.idle", "100ms", "1d"),
     ("max_runtime", "100ms", "365d")],
)  # fmt: skip
def test_a_workspace_duration_is_accepted_at_its_bounds_and_refused_past_them(
    root: Path, field: str, low: str, high: str
) -> None:
    def with_value(value: str) -> str:
        if field.startswith("session."):
            return one_workspace(f'{{ "command": ["x"], "{field[8:]}": {value} }}')
        return one_workspace('{ "command": ["x"] }', f', "{field}": {value}')

    attribute = field.removeprefix("session.")
    assert getattr(load(root, with_value(f'"{low}"'))["w"], attribute) == pytest.approx(0.1)
    seconds = 86400.0 if high == "1d" else 365 * 86400.0
    assert getattr(load(root, with_value(f'"{high}"'))["w"], attribute) == seconds
    for value in ('"99ms"', f'"{high}1ms"', '"0s"', "NaN", '"100000000d"'):
        text = with_value(value)
        message = refused(root, text)
        assert message.startswith(f"{at(root, text, W)} workspaces.w.{field}: "), message
        assert f"must be from {low} to {high}" in message or "finite" in message, message


@pytest.mark.parametrize(
    ("edges", "cycle"),
    [
        ({"api": ["api"]}, "api → api"),
        ({"api": ["web"], "web": ["api"]}, "api → web → api"),
        ({"web": ["db"], "api": ["web"], "db": ["api"]}, "web → db → api → web"),
        # the cycle is found past an acyclic start, and named from its first workspace
        ({"a": ["b"], "b": ["c"], "c": ["d"], "d": ["c"]}, "c → d → c"),
    ],
)
def test_send_to_edges_that_form_a_cycle_are_refused(
    root: Path, edges: dict[str, list[str]], cycle: str
) -> None:
    lines = [
        f'    "{name}": {{ "session": {{ "command": ["x"] }}, "send_to": {json_list(targets)} }},'
        for name, targets in edges.items()
    ]
    text = '{\n  "workspaces": {\n' + "\n".join(lines) + "\n  },\n}\n"
    message = refused(root, text)
    first = cycle.split(" → ")[0]
    assert (
        message == f"{at(root, text, quoted(first))} send_to edges form a cycle: {cycle}; "
        "a chain of hand-offs must end, so they may form none"
    )


def json_list(items: list[str]) -> str:
    return "[" + ", ".join(f'"{item}"' for item in items) + "]"


def test_send_to_edges_that_meet_without_a_cycle_are_accepted(root: Path) -> None:
    """A diamond (api → web, api → db, web → db) and a long chain are not cycles."""
    chain = ", ".join(
        f'"w{i}": {{ "session": {{ "command": ["x"] }}, "send_to": ["w{i + 1}"] }}'
        for i in range(2000)
    )
    text = f"""{{
  "workspaces": {{
    "api": {{ "session": {{ "command": ["x"] }}, "send_to": ["web", "db"] }},
    "web": {{ "session": {{ "command": ["x"] }}, "send_to": ["db"] }},
    "db": {{ "session": {{ "command": ["x"] }}, "send_to": ["w0"] }},
    {chain}, "w2000": {{ "session": {{ "command": ["x"] }}, "send_to": LAST }},
  }},
}}"""
    # the chain's end sends to itself: refused, named as the one cycle there is
    assert "send_to edges form a cycle: w2000 → w2000" in refused(
        root, text.replace("LAST", '["w2000"]')
    )
    resolved = load(root, text.replace("LAST", "[]"))
    assert resolved["api"].send_to == ["web", "db"] and resolved["w1999"].send_to == ["w2000"]
