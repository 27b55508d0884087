"""colibri.jsonc and the root folder: every setting at the edges of its range, the file itself
(size, encoding, nesting, syntax), and a ``.colibri`` that is not a state folder."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from colibri.config import (
    DURATION_RANGES,
    MAX_CONFIG_BYTES,
    MAX_CONFIG_DEPTH,
    NUMBER_RANGES,
    TEMPLATE,
    WHOLE_RANGES,
    SchedulerSettings,
    ServerSettings,
    find_root,
    init_root,
    load_config,
    resolve_root,
)
from colibri.core.durations import format_duration
from colibri.core.errors import ConfigError, RootError
from colibri.layout import CONFIG_NAME, STATE_DIR
from tests.configs import at, loaded, refused
from tests.helpers import colibri

README = Path(__file__).resolve().parents[1] / "README.md"


def one_setting(name: str, value: str) -> str:
    """colibri.jsonc setting ``name`` (section.key) to ``value`` (JSON5 text), on line 3."""
    section, key = name.split(".")
    return f'{{\n  "{section}": {{\n    "{key}": {value},\n  }},\n}}\n'


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused command prints on stderr, checked: exit 1, no traceback."""
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


def load_message(root: Path) -> str:
    """The ConfigError message for the colibri.jsonc already in ``root`` (one line)."""
    with pytest.raises(ConfigError) as caught:
        load_config(root)
    assert "\n" not in caught.value.message, caught.value.message
    return caught.value.message


# -- durations -------------------------------------------------------------------------------

# What the README's table says, written out again: a change of range must change both.
DURATIONS = {
    "scheduler.tick": ("10ms", "1d"),
    "scheduler.agent_ttl": ("100ms", "1d"),
    "scheduler.ageing": ("1s", "365d"),
    "scheduler.retry_backoff": ("1ms", "1d"),
    "server.line_timeout": ("100ms", "1d"),
    "server.idle_timeout": ("1s", "1d"),
    "server.handshake_timeout": ("100ms", "1h"),
    "store.lease_ttl": ("1s", "1h"),
    "supervisor.crash_window": ("1s", "1d"),
    "supervisor.cool_down": ("1s", "1d"),
    "supervisor.max_backoff": ("1s", "1d"),
    "supervisor.orphan_after": ("1s", "30d"),
}


@pytest.mark.parametrize("name", sorted(DURATIONS))
def test_a_duration_is_accepted_at_its_bounds_and_refused_just_past_them(
    root: Path, name: str
) -> None:
    low, high = DURATIONS[name]
    section, key = name.split(".")
    for value, seconds in ((low, DURATION_RANGES[name][0]), (high, DURATION_RANGES[name][1])):
        config = loaded(root, one_setting(name, f'"{value}"'))
        # store.* settings are the Config's own fields (store itself is the board's location)
        settings = config if section == "store" else getattr(config, section)
        assert getattr(settings, key) == pytest.approx(seconds), (name, value)
    low_ms = DURATION_RANGES[name][0] * 1000
    high_ms = round(DURATION_RANGES[name][1] * 1000)
    # just below, just above (by a millisecond), a bare number of seconds just above, absurd
    for value in (f'"{low_ms - 0.5}ms"', f'"{high_ms + 1}ms"', f"{high_ms / 1000 + 0.001}",
                  '"100000000d"', '"99999999999999999999d"', '"0s"', "0"):  # fmt: skip
        text = one_setting(name, value)
        message = refused(root, text)
        assert message.startswith(at(root, text, key)), message
        assert f"{name}: duration" in message
        assert f"must be from {low} to {high}" in message, message
    # not durations at all: each refused in one line, on its own line
    for value in ("NaN", "Infinity", "-Infinity", "-1", "true", "[1]", '"soon"', '"1e400s"'):
        text = one_setting(name, value)
        message = refused(root, text)
        assert message.startswith(f"{at(root, text, key)} {name}: "), message


def test_the_readme_table_has_the_ranges_the_code_enforces() -> None:
    """Every row of README.md's ranges table is what the code enforces."""
    table = README.read_text()
    rows = dict(re.findall(r"^\| `([a-z_]+\.[a-z_]+)` \| [^|]+ \| ([^|]+) \|$", table, re.M))
    for name, (low, high) in DURATION_RANGES.items():
        assert rows[name].strip() == f"{format_duration(low)} to {format_duration(high)}", name
    for name, (low, high) in WHOLE_RANGES.items():
        assert rows[name].strip() == f"{low:,} to {high:,}", name
    assert rows["scheduler.max_pending_mib"].strip() == "0.001 to 1,048,576"
    assert set(DURATIONS) == set(DURATION_RANGES)


# -- whole numbers ---------------------------------------------------------------------------

WHOLE = {
    "scheduler.max_sessions": (1, 100_000),
    "scheduler.max_pending": (1, 10**9),
    "scheduler.max_children": (1, 10**9),
    "scheduler.max_depth": (1, 1000),
    "server.max_line": (1024, 1 << 30),
    "server.max_connections": (1, 100_000),
    "server.auth_failures": (1, 1_000_000),
    "supervisor.crash_loop": (1, 1000),
    "ledger.keep": (1, 10_000),
}


@pytest.mark.parametrize("name", sorted(WHOLE))
def test_a_whole_number_is_accepted_at_its_bounds_and_nothing_else(root: Path, name: str) -> None:
    low, high = WHOLE[name]
    assert WHOLE_RANGES[name] == (low, high)
    section, key = name.split(".")
    for value in (low, high):
        settings = getattr(loaded(root, one_setting(name, str(value))), section)
        assert getattr(settings, key) == value
        assert type(getattr(settings, key)) is int
    # written with a point, a whole number is still that number
    settings = getattr(loaded(root, one_setting(name, f"{low}.0")), section)
    assert getattr(settings, key) == low and type(getattr(settings, key)) is int
    for bad in (low - 1, high + 1, f"{low}.5", "1.5", "true", "false", "null", f'"{low}"',
                "NaN", "Infinity", "[1]", "1e400", "9" * 30):  # fmt: skip
        text = one_setting(name, str(bad))
        message = refused(root, text)
        assert message.startswith(at(root, text, key)), (bad, message)
        if bad != "1e400":  # too large for the parser, which says so itself
            assert f"{name} must be a whole number from {low:,} to {high:,}" in message, message


def test_the_new_scheduler_and_server_settings_have_their_defaults(root: Path) -> None:
    config = loaded(root, "{}")
    assert config.scheduler.max_depth == 32 == SchedulerSettings().max_depth
    assert config.scheduler.max_pending_mib == 256.0
    assert config.scheduler.max_pending_bytes == 256 * 1024 * 1024
    assert config.server.idle_timeout == 300.0 == ServerSettings().idle_timeout


def test_a_tenants_share_stays_below_the_tcp_room_and_a_tokens_within_its_tenants(
    root: Path,
) -> None:
    """One tenant can never fill server.remote_connections, nor one token hold more than its
    tenant may: a share set too large is refused naming both settings; one left unset shrinks
    to fit the setting it is a share of."""
    server = loaded(root, "{}").server
    assert (server.remote_connections, server.tenant_connections, server.token_connections) == (
        512, 256, 128)  # fmt: skip
    assert (server.token_waits, server.tenant_waits) == (1000, 4000)
    assert (server.token_follows, server.tenant_follows) == (8, 32)
    text = '{"server": {"remote_connections": 10, "tenant_connections": 10}}'
    message = refused(root, text)
    assert "server.tenant_connections is 10, more than server.remote_connections (10)" in message
    assert "one tenant always leaves room for the others" in message
    message = refused(root, '{"server": {"token_waits": 5000}}')
    assert "server.token_waits is 5000, more than server.tenant_waits (4000) allows" in message
    shrunk = loaded(root, '{"server": {"remote_connections": 10}}').server
    assert (shrunk.tenant_connections, shrunk.token_connections) == (9, 9)
    assert loaded(root, '{"server": {"tenant_follows": 3}}').server.token_follows == 3
    single = loaded(root, '{"server": {"remote_connections": 1}}').server
    assert single.tenant_connections == 1  # one place: nothing to leave room in


def test_max_pending_mib_takes_fractions_within_its_range(root: Path) -> None:
    low, high = NUMBER_RANGES["scheduler.max_pending_mib"]
    assert (low, high) == (0.001, 1024 * 1024)
    small = loaded(root, one_setting("scheduler.max_pending_mib", "0.001")).scheduler
    assert small.max_pending_mib == 0.001 and small.max_pending_bytes == 1048
    big = loaded(root, one_setting("scheduler.max_pending_mib", "1048576")).scheduler
    assert big.max_pending_bytes == 1 << 40
    half = loaded(root, one_setting("scheduler.max_pending_mib", "0.5")).scheduler
    assert half.max_pending_bytes == 1 << 19
    for value in ("0.0009", "0", "1048576.5", "-1", "NaN", "Infinity", "true", '"256"'):
        text = one_setting("scheduler.max_pending_mib", value)
        message = refused(root, text)
        assert message.startswith(at(root, text, "max_pending_mib")), message
        assert "scheduler.max_pending_mib must be a number from 0.001 to 1,048,576" in message


def test_the_init_template_names_the_new_settings_and_loads_to_the_defaults(root: Path) -> None:
    for name in ("max_depth", "max_pending_mib", "idle_timeout"):
        assert f'// "{name}": ' in TEMPLATE
    config = loaded(root, TEMPLATE)
    assert config.scheduler.max_depth == 32 and config.scheduler.max_pending_mib == 256.0
    assert config.server.idle_timeout == 300.0
    # uncommented, the template's examples are the defaults too
    text = TEMPLATE
    for name in ("max_depth", "max_pending_mib", "idle_timeout"):
        text = text.replace(f'// "{name}"', f'"{name}"')
    config = loaded(root, text)
    assert (config.scheduler.max_depth, config.scheduler.max_pending_mib) == (32, 256.0)
    assert config.server.idle_timeout == 300.0


# -- other values ----------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["5", '"a\\u0000b"', "[]", "{}", "true"])
def test_store_path_must_be_a_path(root: Path, value: str) -> None:
    text = one_setting("store.path", value)
    message = refused(root, text)
    assert message.startswith(at(root, text, "path")), message
    assert "store.path must be the path of a file" in message


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ('"acme"', "store.tenants must be a list of tenant names"),
        ("[]", "store.tenants must be a list of tenant names"),
        ("[7]", "store.tenants must be a list of tenant names"),
        ('["Acme Inc"]', "store.tenants: invalid tenant 'Acme Inc'"),
        ('["acme"]', "a daemon serves some tenants only of a PostgreSQL board"),
    ],
)
def test_store_tenants_must_name_tenants_of_a_postgresql_board(
    root: Path, value: str, said: str
) -> None:
    text = one_setting("store.tenants", value)
    message = refused(root, text)
    assert message.startswith(at(root, text, "tenants")) and said in message, message


def test_store_tenants_of_a_postgresql_board_are_served_in_order_once(root: Path) -> None:
    (root / CONFIG_NAME).write_text(
        '{ "store": { "path": "postgresql://h/db", "tenants": ["beta", "acme", "beta"] } }'
    )
    assert load_config(root).tenants == ("acme", "beta")
    assert load_config(root, tenants="gamma").tenants == ("gamma",)  # --tenants wins
    assert load_config(root, store="postgresql://h/db2").tenants == ("acme", "beta")


def test_a_socket_group_with_a_nul_is_refused(root: Path) -> None:
    text = one_setting("server.socket_group", '"wheel\\u0000"')
    message = refused(root, text)
    assert message.startswith(at(root, text, "socket_group")), message
    assert "server.socket_group must be a group name" in message


def test_an_error_names_the_key_in_its_section_not_an_earlier_one(root: Path) -> None:
    text = """{
  "workspaces": { "w": { "session": { "command": ["x"], "env": { "keep": "1" } } } },
  "ledger": {
    "keep": 0,
  },
}"""
    assert refused(root, text).startswith(at(root, text, '"keep": 0'))


# -- the file itself -------------------------------------------------------------------------


def realistic(size: int) -> str:
    """A commented config of ``size`` bytes, in the JSON5 the docs use: the template, then
    workspaces (unquoted keys, single quotes, trailing commas …), then blanks."""
    parts = [TEMPLATE.rstrip().rstrip("}"), "  templates: { 'oneshot': { session: "
             '{ "command": ["claude", "-p"], "env": { "MAX_TURNS": "30" } } } },\n'
             '  "workspaces": {\n']  # fmt: skip
    total, n = sum(len(part.encode()) for part in parts), 0
    while True:
        entry = (
            f"    // workspace {n}: its own service\n"
            f'    "svc-{n}": {{ extends: "oneshot", \'path\': "services/svc-{n}", '
            f'"capabilities": ["python", "docs",], "slots": 2, "max_runtime": "1h",\n'
            f'      "session": {{ "env": {{ "SERVICE": "svc-{n}" }}, "idle": "5m", }} }},\n'
        )
        if total + len(entry) + 10 > size:
            break
        parts.append(entry)
        total += len(entry)
        n += 1
    parts.append("  },\n}\n")
    text = "".join(parts)
    return text + " " * (size - len(text.encode()))


# How fast these are answered is measured by bench/config_load.py (docs/PERFORMANCE.md); the
# timeouts here only catch a hang (json5 took ~15 s for the 1 MiB file; a pipe hung for good).


@pytest.mark.timeout(30)
def test_a_file_of_1_mib_is_read_whole(root: Path) -> None:
    text = realistic(MAX_CONFIG_BYTES)
    assert len(text.encode()) == MAX_CONFIG_BYTES
    (root / CONFIG_NAME).write_text(text)
    config = load_config(root)
    assert len(config.workspaces) > 3000
    assert config.workspaces["svc-7"].env == {"MAX_TURNS": "30", "SERVICE": "svc-7"}
    # a mistake in its last workspace: found at once too, with its line
    last = text.rfind('"slots": 2')
    bad = text[:last] + '"slots": 0' + text[last + len('"slots": 0') :]
    message = refused(root, bad)
    assert message.startswith(f"{root / CONFIG_NAME}:{bad.count(chr(10), 0, last) + 1}: ")
    assert "slots" in message


@pytest.mark.timeout(30)
def test_a_file_over_1_mib_is_refused_before_it_is_read(root: Path) -> None:
    text = realistic(MAX_CONFIG_BYTES) + " "
    message = refused(root, text)
    assert message.startswith(f"{root / CONFIG_NAME}:1: ")
    assert f"{MAX_CONFIG_BYTES + 1:,} bytes" in message and "1 MiB" in message
    # 50 MB: the same, at once
    (root / CONFIG_NAME).write_bytes(b"{" + b" " * 50_000_000 + b"}")
    message = load_message(root)
    assert "50,000,002 bytes" in message


def nested(depth: int) -> str:
    """A config whose deepest value is ``depth`` objects and arrays down, on line 3."""
    arrays = depth - 3  # the file's object, schedules, the schedule
    return '{\n  "schedules": { "s": { "task":\n' + "[" * arrays + "]" * arrays + " } },\n}\n"


@pytest.mark.timeout(30)
def test_nesting_up_to_the_cap_is_read_and_deeper_is_refused(root: Path) -> None:
    assert MAX_CONFIG_DEPTH == 64
    # 64 deep: parsed, then refused for what it is (a schedule's task is not an array)
    message = refused(root, nested(64))
    assert "nested" not in message and "schedules.s" in message, message
    message = refused(root, nested(65))
    assert message.startswith(f"{root / CONFIG_NAME}:3: "), message
    assert "nested deeper than 64 levels" in message
    message = refused(root, "[" * 100_000)
    assert message.startswith(f"{root / CONFIG_NAME}:1: ") and "nested deeper than 64" in message


def test_a_file_that_is_not_utf8_is_refused_with_its_line(root: Path) -> None:
    (root / CONFIG_NAME).write_bytes(
        b'{\n  "scheduler": {\n    // caf\xe9\n    "tick": "1s" },\n}\n'
    )
    message = load_message(root)
    assert message.startswith(f"{root / CONFIG_NAME}:3: "), message
    assert "0xe9" in message and "UTF-8" in message


@pytest.mark.parametrize(
    ("text", "needle", "words"),
    [
        ('{\n  "scheduler": {\n    "tick": "1s"\n    "agent_ttl": "1s",\n  },\n}\n',
         '"agent_ttl"', "expected ',' or '}'"),
        # a line break inside a string: the old message held that line break
        ('{\n  "store": {\n    "path": "a\nb",\n  },\n}\n', '"path"', "string"),
        ('{\n  "scheduler": {},\n}\n}\n', "}", "after the end"),
        ('{\n  "scheduler": {\n    "tick": @,\n  },\n}\n', "@", "expected a value, found '@'"),
        ('{\n  "scheduler": {\n    "tick": "1s",\n', '"scheduler"', "not closed"),
        ("", "", "no settings"),
    ],
)  # fmt: skip
def test_a_syntax_error_is_one_line_with_its_line(
    root: Path, text: str, needle: str, words: str
) -> None:
    message = refused(root, text)
    if needle == "}":
        assert message.startswith(f"{root / CONFIG_NAME}:4: "), message
    elif needle:
        assert message.startswith(at(root, text, needle)), message
    else:
        assert message.startswith(f"{root / CONFIG_NAME}:1: "), message
    assert words in message, message


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ('{"schedules": {"n": {"every": "1h", "task": {"text": "a\\u0000b"}}}}',
         "schedules.n.task.text"),
        ('{"schedules": {"n": {"every": "1h", "task": {"text": "x", "labels": ["\\0"]}}}}',
         "schedules.n.task.labels[0]"),
        ('{"schedules": {"n\\x00": {"every": "1h", "task": {"text": "x"}}}}', "schedules.n\x00"),
    ],
)  # fmt: skip
def test_a_nul_anywhere_in_the_file_is_refused_in_one_line_naming_where(
    root: Path, text: str, where: str
) -> None:
    """A schedule holding a NUL was taken, and on PostgreSQL each of its fires lost its batch;
    a request holding one is refused, and so is the file."""
    message = refused(root, text)
    assert message == (
        f"{root / CONFIG_NAME}:1: {where} holds a NUL character (\\u0000, \\0), which the "
        "board does not store: remove it"
    )


@pytest.mark.timeout(20)  # before, a named pipe hung the load
def test_a_config_that_is_not_a_file_is_refused(root: Path) -> None:
    path = root / CONFIG_NAME
    path.unlink()
    path.mkdir()
    message = load_message(root)
    assert message.startswith(f"{path}:1: ") and "a directory" in message
    path.rmdir()
    os.mkfifo(path)
    message = load_message(root)  # never opened for reading: nothing to wait for
    assert message.startswith(f"{path}:1: ") and "a named pipe" in message
    path.unlink()
    os.symlink(root / "elsewhere.jsonc", path)  # leads nowhere: not "no file, so defaults"
    message = load_message(root)
    assert message.startswith(f"{path}:1: ") and "does not exist" in message


def test_run_stops_on_a_bad_value_with_one_line_and_no_traceback(root: Path) -> None:
    text = one_setting("scheduler.retry_backoff", '"100000000d"')
    (root / CONFIG_NAME).write_text(text)
    line = one_line_error(colibri(root, "run"))
    assert line == (
        f"colibri: {at(root, text, 'retry_backoff')} scheduler.retry_backoff: duration "
        "'100000000d' must be from 1ms to 1d"
    )
    assert not (root / STATE_DIR / "colibri.sock").exists()


def test_run_stops_on_a_file_that_is_not_utf8(root: Path) -> None:
    (root / CONFIG_NAME).write_bytes(b"{\n\xff}\n")
    line = one_line_error(colibri(root, "run"))
    assert f"{root / CONFIG_NAME}:2: " in line and "UTF-8" in line


# -- the root --------------------------------------------------------------------------------


@pytest.fixture
def bare(root: Path) -> Path:
    """A directory that is not a root (the root fixture's, without its .colibri/)."""
    shutil.rmtree(root / STATE_DIR)
    (root / CONFIG_NAME).unlink()
    return root


def test_a_state_folder_that_is_a_file_is_refused_everywhere(bare: Path) -> None:
    (bare / STATE_DIR).write_text("not a folder")
    for attempt in (lambda: init_root(bare), lambda: resolve_root(str(bare), bare)):
        with pytest.raises(RootError) as caught:
            attempt()
        assert f"{bare / STATE_DIR} is a file" in caught.value.message
        assert "move it away" in caught.value.message
    # a plain file of that name is not a root: the search goes on above it
    assert find_root(bare) is None
    assert not (bare / CONFIG_NAME).exists()


@pytest.mark.parametrize("target", ["dangling", "folder"])
def test_a_state_folder_that_is_a_symlink_is_refused_everywhere(bare: Path, target: str) -> None:
    (bare / "folder").mkdir()
    os.symlink(bare / target, bare / STATE_DIR)
    assert find_root(bare) == bare  # found, so that it is refused, not passed over
    for attempt in (
        lambda: init_root(bare),
        lambda: resolve_root(str(bare), bare),
        lambda: resolve_root(None, bare),
    ):
        with pytest.raises(RootError) as caught:
            attempt()
        assert f"{bare / STATE_DIR} is a symlink (to" in caught.value.message
        assert "real directory" in caught.value.message


def test_init_does_not_follow_a_dangling_config_symlink(bare: Path) -> None:
    os.symlink(bare / "elsewhere.jsonc", bare / CONFIG_NAME)
    assert init_root(bare) is True
    assert (bare / STATE_DIR).is_dir()
    assert not (bare / "elsewhere.jsonc").exists()
    assert os.path.islink(bare / CONFIG_NAME)


def _init_at_once(target: Path, commands: int) -> tuple[list[bool], list[BaseException]]:
    """``init_root(target)`` by ``commands`` threads let go at the same moment: what each
    returned, and what any raised."""
    import threading

    made: list[bool] = []
    failed: list[BaseException] = []
    go = threading.Barrier(commands)

    def make() -> None:
        go.wait()
        try:
            made.append(init_root(target, config="{}\n"))
        except BaseException as exc:  # any failure is the finding
            failed.append(exc)

    threads = [threading.Thread(target=make) for _ in range(commands)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return made, failed


def test_commands_making_one_root_at_once_make_it_once_and_whole(bare: Path) -> None:
    """Two ``run --detach`` (or ``init``) on a fresh folder at the same moment: one makes the
    root, the others find it made, none fails, and colibri.jsonc is never half written."""
    for n in range(40):
        target = bare / f"root-{n}"
        made, failed = _init_at_once(target, 4)
        assert failed == [] and sorted(made) == [False, False, False, True], (n, made, failed)
        assert (target / CONFIG_NAME).read_text() == "{}\n"
        assert (target / STATE_DIR).is_dir()
        assert [p.name for p in target.iterdir() if p.name.startswith(".colibri.jsonc.")] == []


def test_init_on_a_file_is_refused(bare: Path) -> None:
    (bare / "file").write_text("x")
    with pytest.raises(RootError, match="is a file, not a directory"):
        init_root(bare / "file")
    with pytest.raises(RootError, match="cannot create a Colibri root"):
        init_root(bare / "file" / "below")


def test_colibri_init_with_a_state_file_says_so_in_one_line(bare: Path) -> None:
    (bare / STATE_DIR).write_text("not a folder")
    line = one_line_error(colibri(None, "init", str(bare)))
    assert line.startswith(f"colibri: {bare / STATE_DIR} is a file"), line
    line = one_line_error(colibri(None, "--root", str(bare), "run"))
    assert line.startswith(f"colibri: {bare / STATE_DIR} is a file"), line
    assert (bare / STATE_DIR).read_text() == "not a folder"


def test_the_readme_table_says_the_defaults_and_ranges_the_code_has() -> None:
    """The settings' defaults live in the dataclasses and their ranges in *_RANGES; the
    README's Configuration table is written by hand, so this reads it back against them."""
    from colibri.config import (
        DURATION_RANGES,
        MIN_ROTATE_MIB,
        NUMBER_RANGES,
        WHOLE_RANGES,
        LedgerSettings,
        SchedulerSettings,
        ServerSettings,
        SupervisorSettings,
    )
    from colibri.core.durations import parse_duration

    readme = (Path(__file__).parents[1] / "README.md").read_text()
    rows = {
        m.group(1): (m.group(2).strip(), m.group(3).strip())
        for m in re.finditer(r"^\| `([a-z_]+\.[a-z_]+)` \| ([^|]+) \| ([^|]+) \|$", readme, re.M)
    }
    from colibri.config import Config

    sections = {"scheduler": SchedulerSettings(), "server": ServerSettings(),
                "supervisor": SupervisorSettings(), "ledger": LedgerSettings(),
                "store": Config(root=Path("."), store="")}  # fmt: skip

    def number(text: str) -> float:
        return float(text.replace(",", ""))

    checked = 0
    for name, (default, span) in rows.items():
        section, key = name.split(".")
        if section not in sections or default in ("off", "none", "twice the CPUs"):
            continue
        if section == "store" and name not in DURATION_RANGES:
            continue  # store.durability and store.path are words, not numbers
        value = getattr(sections[section], key)
        low_text, _, high_text = span.removeprefix("0 (never), or ").partition(" to ")
        if name in DURATION_RANGES:
            assert parse_duration(default) == value, name
            assert (parse_duration(low_text), parse_duration(high_text)) == DURATION_RANGES[name]
        elif name in WHOLE_RANGES:
            assert number(default) == value, name
            assert (number(low_text), number(high_text)) == WHOLE_RANGES[name], name
        else:
            assert number(default) == value, name
            low, high = NUMBER_RANGES[name]
            assert number(high_text) == high, name
            if name in ("ledger.rotate_mib", "supervisor.harness_log_mib"):  # 0, or from the min
                assert number(low_text) == MIN_ROTATE_MIB and low == 0.0
            else:
                assert number(low_text) == low, name
        checked += 1
    unstated = {"scheduler.ageing", "scheduler.max_sessions"}  # off; twice the CPUs
    ranged = {*DURATION_RANGES, *WHOLE_RANGES, *NUMBER_RANGES} - unstated
    assert checked == len(ranged) and ranged <= set(rows)


def test_the_tcp_listener_settings_are_read_and_checked(root: Path, tmp_path: Path) -> None:
    cert, key = tmp_path / "s.pem", tmp_path / "s.key"
    cert.write_text("x")
    key.write_text("x")
    text = json.dumps({"server": {"listen": ["tcp://0.0.0.0:7433", "tcp://[::1]:7433"],
                                  "tls_cert": str(cert), "tls_key": str(key)}})  # fmt: skip
    server = loaded(root, text).server
    assert server.listen == ("tcp://0.0.0.0:7433", "tcp://[::1]:7433")
    assert (server.tls_cert, server.tls_key) == (str(cert), str(key))
    for bad, says in (
        ({"listen": "0.0.0.0:7433"}, "tcp://HOST:PORT"),
        ({"listen": [7433]}, "server.listen must be a list"),
        ({"listen": ["tcp://0.0.0.0:7433"]}, "needs TLS"),
        ({"listen": ["tcp://0.0.0.0:7433"], "tls_cert": str(cert)}, "together"),
        ({"tls_cert": "", "tls_key": str(key)}, "server.tls_cert must be the path of a file"),
    ):
        message = refused(root, json.dumps({"server": bad}))
        assert says in message, message
