"""Shell completion: the real ``colibri`` program, run as a shell runs it at a Tab (click's
``_COLIBRI_COMPLETE`` and ``COMP_WORDS``/``COMP_CWORD``), against a real daemon; and the scripts
``colibri completions`` prints, loaded into a real bash."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests import prestarted
from tests.helpers import Daemon, FakeAgent, claim_of, wait_until

COLIBRI = prestarted.SCRIPT


def _env(**extra: str) -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("COLIBRI_")} | extra


def complete(
    words: list[str], kind: str = "bash", cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """What ``colibri`` offers for the last of ``words`` (``""``: a Tab after a space)."""
    line = " ".join(["colibri", *words])
    cword = words[-1] if kind == "fish" else str(len(words))
    return prestarted.run(
        [COLIBRI],
        env=_env(
            _COLIBRI_COMPLETE=f"{kind}_complete", COMP_WORDS=line, COMP_CWORD=cword, **(env or {})
        ),
        cwd=cwd or "/",
        timeout=30,
    )


def offered(daemon_or_root: Daemon | Path, *words: str) -> list[str]:
    """The values bash is offered after ``colibri --root ROOT WORDS…``; nothing on stderr."""
    root = daemon_or_root.root if isinstance(daemon_or_root, Daemon) else daemon_or_root
    done = complete(["--root", str(root), *words])
    assert done.returncode == 0 and done.stderr == "", done.stderr
    values = []
    for line in done.stdout.splitlines():
        if not line:  # click ends the list with a newline, even an empty one
            continue
        kind, _, value = line.partition(",")
        assert kind == "plain", line
        values.append(value)
    return values


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A short directory in /tmp that is not inside any root."""
    path = Path(tempfile.mkdtemp(prefix="cbq", dir="/tmp")).resolve()
    yield path
    shutil.rmtree(path, ignore_errors=True)


# -- values from the daemon ----------------------------------------------------------------------


def test_task_ids_complete_by_prefix(daemon: Daemon) -> None:
    ids = sorted(daemon.submit(f"task {n}")["id"] for n in range(3))
    for command in ("show", "why", "cancel"):
        assert offered(daemon, command, "") == ids
    assert offered(daemon, "show", ids[1]) == [ids[1]]
    assert offered(daemon, "show", ids[2][:-1]) == [ids[2]]
    assert offered(daemon, "show", "zz") == []
    assert offered(daemon, "show", "x" * 100) == []  # longer than any id: refused, nothing
    # options that take a task id
    assert offered(daemon, "list", "--parent", "") == ids
    assert offered(daemon, "ledger", "--task", ids[0][:20]) == [
        i for i in ids if i.startswith(ids[0][:20])
    ]
    assert offered(daemon, "submit", "child", "--parent", "") == ids


def test_each_command_is_offered_the_tasks_it_can_act_on(daemon: Daemon) -> None:
    agent = FakeAgent(daemon, "bsd-1", ["freebsd"])
    running = daemon.submit("upgrade zfs", capabilities=["freebsd"])["id"]
    assign = agent.next_assign()
    assert assign["task"]["id"] == running
    asking = daemon.submit("migrate", capabilities=["freebsd"])["id"]
    pending = daemon.submit("waits", capabilities=["nothing-has-this"])["id"]
    ended = daemon.submit("to cancel", capabilities=["nothing-has-this"])["id"]
    daemon.call("cancel", task=ended)
    assert offered(daemon, "cancel", "") == sorted([running, asking, pending])
    assert offered(daemon, "retry", "") == [ended]
    assert offered(daemon, "attach-session", "") == [running]
    assert offered(daemon, "answer", "") == []  # running, but asking nothing

    agent.out(assign)
    second = agent.next_assign()
    assert second["task"]["id"] == asking
    claim = claim_of(daemon, asking, second["epoch"])
    agent.client.send("ask", task=asking, epoch=second["epoch"], claim=claim, question="drop it?")
    wait_until(lambda: daemon.task(asking)["question"])
    assert offered(daemon, "answer", "") == [asking]
    assert offered(daemon, "retry", "") == sorted([running, ended])
    zsh = complete(["--root", str(daemon.root), "answer", ""], kind="zsh")
    assert zsh.stdout.splitlines() == ["plain", asking, "running: drop it?"]
    agent.close()


def test_agent_workspace_and_schedule_names(daemon: Daemon) -> None:
    config = json.loads((daemon.root / "colibri.jsonc").read_text())
    session = {"command": ["true"]}  # (the daemon, started before, runs none of them)
    config["workspaces"] = {"api": {"capabilities": ["python"], "session": session},
                            "web": {"session": session}}  # fmt: skip
    (daemon.root / "colibri.jsonc").write_text(json.dumps(config))
    builder = FakeAgent(daemon, "build-1", ["python"])
    other = FakeAgent(daemon, "bsd-1", ["freebsd"], workspace="ops")
    daemon.call(
        "schedule-add", name="nightly", schedule={"every": "1h", "task": {"text": "nightly build"}}
    )
    daemon.call(
        "schedule-add", name="sweep", schedule={"every": "15m", "task": {"text": "clean caches"}}
    )

    assert offered(daemon, "submit", "x", "--agent", "") == ["bsd-1", "build-1"]
    assert offered(daemon, "list", "--agent", "bu") == ["build-1"]
    assert offered(daemon, "schedule", "add", "n", "t", "--agent", "b") == ["bsd-1", "build-1"]
    # colibri.jsonc's, and those the daemon's agents serve
    assert offered(daemon, "submit", "x", "--workspace", "") == ["api", "ops", "web"]
    assert offered(daemon, "send", "--to", "w") == ["web"]
    assert offered(daemon, "workspace", "show", "") == ["api", "ops", "web"]
    assert offered(daemon, "agent", "--workspace", "a") == ["api"]
    for command in ("show", "run", "rm", "pause", "resume"):
        assert offered(daemon, "schedule", command, "") == ["nightly", "sweep"]
    assert offered(daemon, "schedule", "show", "sw") == ["sweep"]
    fish = complete(["--root", str(daemon.root), "schedule", "show", "n"], kind="fish")
    assert fish.stdout.splitlines() == ["plain,nightly\tnightly build"]
    builder.close()
    other.close()


def test_token_ids_that_are_not_revoked(daemon: Daemon) -> None:
    kept = daemon.call("token-create", tenant="default", role="agent", agent="build-7")["token"]
    gone = daemon.call("token-create", tenant="default", role="operator")["token"]
    daemon.call("token-revoke", token=gone["id"])
    assert offered(daemon, "token", "revoke", "") == [kept["id"]]
    zsh = complete(["--root", str(daemon.root), "token", "revoke", kept["id"][:3]], kind="zsh")
    assert zsh.stdout.splitlines() == ["plain", kept["id"], "agent of default, agent build-7"]


def test_paths_are_left_to_the_shell(root: Path) -> None:
    """``--root`` completes directories and ``--tls-ca`` files, by the shell's own means (bash:
    ``compopt -o dirnames``)."""
    assert complete(["--root", "/tm"]).stdout == "dir,/tm\n"
    assert complete(["--tls-ca", ""]).stdout == "file,\n"
    assert complete(["show", "--tls-ca", "ca"]).stdout == "file,ca\n"


def test_a_root_found_from_the_environment_or_the_working_directory(daemon: Daemon) -> None:
    task = daemon.submit()["id"]
    by_env = complete(["show", ""], env={"COLIBRI_ROOT": str(daemon.root)})
    assert by_env.stdout == f"plain,{task}\n"
    by_cwd = complete(["show", ""], cwd=daemon.root)
    assert by_cwd.stdout == f"plain,{task}\n"


def test_the_connection_options_after_the_command_win(daemon: Daemon) -> None:
    """``--connect`` given after the command's name points the completion there too: at a
    port where nothing listens, nothing is offered (not this root's tasks)."""
    daemon.submit()
    done = complete(["--root", str(daemon.root), "show", "--connect", "tcp://127.0.0.1:1",
                     "--token", "t", "--insecure-loopback", ""])  # fmt: skip
    assert (done.returncode, done.stdout, done.stderr) == (0, "\n", "")


# -- nothing to ask: nothing offered, no error, no wait ----------------------------------------


def test_without_a_daemon_nothing_is_offered_and_nothing_printed(root: Path, scratch: Path) -> None:
    for words in (["show", ""], ["submit", "x", "--agent", ""], ["schedule", "rm", ""]):
        assert offered(root, *words) == []  # a root, no daemon
        outside = complete(words, cwd=scratch)  # no root at all
        assert (outside.returncode, outside.stdout, outside.stderr) == (0, "\n", "")
    no_token = complete(["--connect", "tcp://127.0.0.1:1", "show", ""])
    assert (no_token.returncode, no_token.stdout, no_token.stderr) == (0, "\n", "")
    # a bad colibri.jsonc: the workspaces of the daemon only (none here), no error
    (root / "colibri.jsonc").write_text("{ not json")
    assert offered(root, "submit", "x", "--workspace", "") == []


def test_a_daemon_that_never_answers_costs_a_moment_not_a_hang(scratch: Path) -> None:
    from colibri.config import init_root
    from colibri.layout import RootLayout

    init_root(scratch)
    silent = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    silent.bind(str(RootLayout(scratch).socket))
    silent.listen(8)  # accepts connections (the kernel does), never reads or answers
    try:
        start = time.monotonic()
        done = complete(["--root", str(scratch), "show", ""])
        took = time.monotonic() - start
    finally:
        silent.close()
    assert (done.returncode, done.stdout, done.stderr) == (0, "\n", "")
    assert took < 20  # the command's timeout is 30 s; the completion gives up after 1 s


def test_replies_not_as_expected_offer_nothing(scratch: Path) -> None:
    """A peer on the socket that answers every request ``ok`` but without the fields asked for
    (a daemon of another version): nothing offered, no traceback."""
    import threading

    from colibri.config import init_root
    from colibri.layout import RootLayout

    init_root(scratch)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(RootLayout(scratch).socket))
    server.listen(8)

    def answer_everything_ok() -> None:
        while True:
            try:
                peer, _ = server.accept()
            except OSError:
                return  # the test closed the socket
            with peer, peer.makefile("rwb") as lines:
                for line in lines:
                    request = json.loads(line)
                    lines.write(json.dumps({"id": request["id"], "ok": True}).encode() + b"\n")
                    lines.flush()

    threading.Thread(target=answer_everything_ok, daemon=True).start()
    try:
        for words in (["show", ""], ["show", "01"], ["submit", "x", "--agent", ""],
                      ["submit", "x", "--workspace", ""], ["schedule", "rm", ""],
                      ["token", "revoke", ""]):  # fmt: skip
            done = complete(["--root", str(scratch), *words])
            assert (done.returncode, done.stdout, done.stderr) == (0, "\n", ""), words
    finally:
        server.close()


def test_a_finished_daemon_socket_left_behind_offers_nothing(daemon: Daemon) -> None:
    daemon.submit()
    daemon.kill()
    assert offered(daemon, "show", "") == []


# -- the scripts ------------------------------------------------------------------------------


def _bash(script: str, **env: str) -> subprocess.CompletedProcess[str]:
    path = f"{Path(COLIBRI).parent}:{os.environ['PATH']}"
    return subprocess.run(
        ["bash", "--norc", "--noprofile", "-c", script],
        env=_env(PATH=path, **env),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def _bash_tab(words: str) -> str:
    """bash code: load the script, then press Tab after ``words`` (a bash array's items)."""
    return (
        "source <(colibri completions bash)\n"
        f"COMP_WORDS=({words}); COMP_CWORD=$((${{#COMP_WORDS[@]}} - 1))\n"
        "_colibri_completion colibri\n"
        'printf "%s\\n" "${COMPREPLY[@]}"\n'
    )


def test_the_bash_script_loads_and_completes(daemon: Daemon) -> None:
    registered = _bash("source <(colibri completions bash) && complete -p colibri")
    assert registered.returncode == 0, registered.stderr
    assert "_colibri_completion" in registered.stdout
    commands = _bash(_bash_tab("colibri s"))
    assert commands.returncode == 0 and commands.stderr == "", commands.stderr
    assert commands.stdout.split() == [
        "schedule",
        "send",
        "show",
        "skills",
        "status",
        "stop",
        "store",
        "submit",
    ]
    task = daemon.submit()["id"]
    ids = _bash(_bash_tab(f"colibri --root {daemon.root} show ''"))
    assert ids.stdout.split() == [task]
    shells = _bash(_bash_tab("colibri completions ''"))
    assert shells.stdout.split() == ["bash", "zsh", "fish"]


@pytest.mark.parametrize(("shell", "marks"), [
    ("bash", ["complete -o nosort -F _colibri_completion colibri", "bash_complete"]),
    ("zsh", ["#compdef colibri", "zsh_complete"]),
    ("fish", ["complete --no-files --command colibri", "fish_complete"]),
])  # fmt: skip
def test_each_shell_gets_its_script(shell: str, marks: list[str]) -> None:
    done = prestarted.run([COLIBRI, "completions", shell], env=_env(), timeout=30)
    assert done.returncode == 0 and done.stderr == ""
    for mark in [*marks, "_COLIBRI_COMPLETE"]:
        assert mark in done.stdout
    if shutil.which(shell) and shell != "bash":  # a syntax check where the shell is installed
        flag = "--no-execute" if shell == "fish" else "-n"
        checked = subprocess.run([shell, flag], input=done.stdout, capture_output=True, text=True)
        assert checked.returncode == 0, checked.stderr


def test_an_unknown_shell_is_a_usage_error() -> None:
    done = prestarted.run([COLIBRI, "completions", "tcsh"], env=_env(), timeout=30)
    assert done.returncode == 2 and done.stdout == ""
    assert "'tcsh' is not one of 'bash', 'zsh', 'fish'" in done.stderr
