"""``from colibri import Client, …``: the public names (pinned, loaded lazily), the typed calls
docs/CLIENT.md shows, and its examples run as they are against a real daemon and agent."""

from __future__ import annotations

import asyncio
import socket
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import colibri
from colibri.core.errors import UnknownTask
from tests.helpers import (
    PYTHON,
    Daemon,
    FakeAgent,
    error_code,
    harness,
    online,
    stop_process,
    wait_until,
)

REPO = Path(__file__).parent.parent
EXAMPLES = REPO / "examples"
RUN_TASK = str(EXAMPLES / "run-task.sh")

#: The public names, as docs/CLIENT.md lists them.
PUBLIC = [
    "AsyncClient",
    "Client",
    "ColibriError",
    "Remote",
    "Task",
    "__version__",
    "errors",
    "events",
    "protocol",
    "replies",
]


def run_example(name: str, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PYTHON, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture
def fleet(daemon: Daemon) -> Iterator[Daemon]:
    """The daemon, with a real agent (the harness running examples/run-task.sh) for ``python``."""
    process = harness(daemon.root, "py-1", ["python"], [RUN_TASK])
    try:
        wait_until(lambda: online(daemon, "py-1"))
        yield daemon
    finally:
        stop_process(process)


# -- the names --------------------------------------------------------------------------------


def test_the_public_names_are_pinned_and_documented() -> None:
    assert colibri.__all__ == PUBLIC
    doc = (REPO / "docs" / "CLIENT.md").read_text()
    for name in PUBLIC:
        assert f"`{name}`" in doc, f"docs/CLIENT.md does not name {name}"
    from colibri import client
    from colibri.core import errors, events, model, protocol, replies

    assert colibri.Client is client.Client
    assert colibri.AsyncClient is client.AsyncClient
    assert colibri.Remote is client.Remote
    assert colibri.ColibriError is errors.ColibriError
    assert colibri.Task is model.Task
    assert colibri.errors is errors and colibri.events is events
    assert colibri.protocol is protocol and colibri.replies is replies
    assert set(PUBLIC) <= set(dir(colibri))


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="has no attribute 'Board'"):
        _ = colibri.Board
    with pytest.raises(ImportError):
        from colibri import Daemon  # noqa: F401


def _modules_after(code: str) -> set[str]:
    """The modules of colibri, msgspec and asyncio that ``code`` left loaded, in a fresh
    interpreter."""
    done = subprocess.run(
        [PYTHON, "-c", f"{code}\nimport sys\nprint(' '.join(sys.modules), file=sys.stderr)"],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    loaded = done.stderr.strip().splitlines()[-1].split()
    return {m for m in loaded if m.split(".")[0] in ("colibri", "msgspec", "asyncio")}


def test_import_colibri_loads_nothing_until_a_name_is_used() -> None:
    assert _modules_after("import colibri") == {"colibri"}
    used = _modules_after("import colibri\ncolibri.Client")
    assert {"colibri.client", "msgspec"} <= used and "asyncio" not in used


def test_colibri_help_does_not_load_the_client() -> None:
    loaded = _modules_after(
        "import sys\nfrom colibri.cli.main import main\nsys.argv = ['colibri', '--help']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass"
    )
    assert "colibri.cli.main" in loaded and "colibri.cli.completion" in loaded
    assert "colibri.client" not in loaded and "asyncio" not in loaded


# -- the typed calls ----------------------------------------------------------------------------


def test_wait_and_family_give_tasks(daemon: Daemon) -> None:
    agent = FakeAgent(daemon, "bsd-1", ["freebsd"])
    with colibri.Client.for_root(daemon.root, timeout=10) as board:
        parent = board.submit("release", capabilities=["freebsd"])
        child = board.submit("notes", capabilities=["nothing-has-this"], parent=parent.id)
        agent.out(agent.next_assign(), output="tagged")
        ended = board.wait(parent.id)
        assert isinstance(ended, colibri.Task)
        # (done, or closed already if the wait came after the close)
        assert (ended.id, ended.outcome, ended.output) == (parent.id, "done", "tagged")
        family = board.family(child.id)  # any member: the whole family, from the top
        assert [(t.id, t.parent) for t in family] == [(parent.id, None), (child.id, parent.id)]
        assert all(isinstance(t, colibri.Task) for t in family)
        board.call("cancel", task=child.id)
        assert board.wait(child.id).state == "closed"  # already ended: at once
        assert error_code(lambda: board.wait("no-such-task")) == "unknown_task"
        with pytest.raises(colibri.errors.UnknownTask):
            board.family("no-such-task")
    agent.close()


def test_a_task_after_another_through_the_client(daemon: Daemon) -> None:
    agent = FakeAgent(daemon, "bsd-1", ["freebsd"])
    try:
        with colibri.Client.for_root(daemon.root, timeout=10) as board:
            first = board.submit("build", capabilities=["freebsd"])
            then = board.submit("publish", capabilities=["freebsd"], after=[first.id])
            assert then.after == [first.id] and then.if_dependency_fails == "cancel"
            assert agent.next_assign()["task"]["id"] == first.id
            agent.out(agent.events[-1], output="built")
            assert agent.next_assign()["task"]["id"] == then.id  # once the first is done
            agent.out(agent.events[-1])
            assert board.wait(then.id).outcome == "done"
    finally:
        agent.close()


def test_the_async_client_as_a_context_with_typed_calls(daemon: Daemon) -> None:
    agent = FakeAgent(daemon, "bsd-1", ["freebsd"], slots=2)

    async def scenario() -> None:
        async with colibri.AsyncClient.for_root(daemon.root) as board:
            first, second = await asyncio.gather(
                board.submit("one", capabilities=["freebsd"]),
                board.submit("two", capabilities=["freebsd"]),
            )
            waits = asyncio.gather(board.wait(first.id), board.wait(second.id))
            assigns = await asyncio.to_thread(lambda: [agent.next_assign() for _ in range(2)])
            for assign in assigns:
                await asyncio.to_thread(agent.out, assign)
            ended = await waits
            assert [(t.id, t.outcome) for t in ended] == [(first.id, "done"), (second.id, "done")]
            assert (await board.get(first.id)).state in ("done", "closed")
            assert [t.id for t in await board.family(second.id)] == [second.id]
            with pytest.raises(UnknownTask):
                await board.wait("no-such-task")
        assert board.closed.is_set()

    asyncio.run(scenario())
    agent.close()


def test_a_cancelled_call_leaves_nothing_behind_and_its_late_reply_is_ignored(
    daemon: Daemon,
) -> None:
    """A ``wait`` given up by its caller keeps no place among the calls in flight; the daemon's
    answer to it, when the task ends later, is dropped, and the connection serves on."""
    task = daemon.submit("nobody takes this", capabilities=["nobody"])

    async def scenario() -> None:
        async with colibri.AsyncClient.for_root(daemon.root) as board:
            waiting = asyncio.create_task(board.wait(task["id"]))
            assert (await board.call("ping"))["pong"]  # the wait is the daemon's now
            assert len(board._pending) == 1
            waiting.cancel()
            with pytest.raises(asyncio.CancelledError):
                await waiting
            assert board._pending == {}
            # The task ends: the daemon answers the wait (before the cancel's own reply).
            await board.call("cancel", task=task["id"])
            assert (await board.call("ping"))["pong"]
            assert board._pending == {} and board._events.empty()
            assert not board.closed.is_set()

    asyncio.run(scenario())


def test_the_async_client_without_a_daemon(root: Path) -> None:
    async def scenario() -> str:
        try:
            async with colibri.AsyncClient.for_root(root):
                return "connected"
        except colibri.ColibriError as exc:
            return exc.code

    assert asyncio.run(scenario()) == "no_daemon"


def test_a_folder_that_is_no_root_is_said_to_be_none_as_the_cli_says(
    root: Path, scratch: Path
) -> None:
    """``Client.for_root`` of a folder that is not a root (missing, or without ``.colibri``)
    says so, as ``colibri --root`` does, rather than that no daemon is running; a real root
    without a daemon still says that."""
    from click.testing import CliRunner

    from colibri.cli import agents  # noqa: F401 (registers ``status``, as ``main`` does)
    from colibri.cli.main import cli

    async def refusal(folder: Path) -> colibri.ColibriError:
        with pytest.raises(colibri.ColibriError) as caught:
            await colibri.AsyncClient.for_root(folder).connect()
        return caught.value

    for folder in (scratch / "nonexistent", scratch):
        with pytest.raises(colibri.ColibriError) as caught:
            colibri.Client.for_root(folder, timeout=10)
        said = CliRunner().invoke(cli, ["--root", str(folder), "status"])
        assert said.exit_code == 1
        assert said.output == f"colibri: {caught.value.message}\n"
        assert caught.value.code == "root_error"
        assert caught.value.message == (
            f"{folder} is not a Colibri root (create one with: colibri init {folder})"
        )
        by_async = asyncio.run(refusal(folder))
        assert (by_async.code, by_async.message) == ("root_error", caught.value.message)
    with pytest.raises(colibri.ColibriError) as caught:
        colibri.Client.for_root(root, timeout=10)
    assert caught.value.code == "no_daemon"
    assert caught.value.message.startswith(f"no daemon is running for {root} ")


# -- the examples, as they are ------------------------------------------------------------------


def test_example_submit_wait(fleet: Daemon) -> None:
    done = run_example("client_submit_wait.py", str(fleet.root))
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    host = socket.gethostname()
    assert lines[0].startswith("submitted ") and lines[0].endswith(": pending")
    assert lines[1] == f"done: {host} did: run the test suite"
    assert lines[2:5] == ["release 2.0: done", "  write the notes: done", "  tag the commit: done"]
    assert lines[5].startswith("unknown_task: no task with id no-such-task")
    assert len(lines) == 6


def test_example_events(fleet: Daemon) -> None:
    done = run_example("client_events.py", str(fleet.root))
    assert done.returncode == 0, done.stderr
    moves = [line for line in done.stdout.splitlines() if "->" in line]
    assert moves == ["new -> pending", "pending -> running", "running -> done"]
    assert done.stdout.splitlines()[-1] == f"out: {socket.gethostname()} did: lint the repository"


def test_example_async(fleet: Daemon) -> None:
    done = run_example("client_async.py", str(fleet.root))
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == [f"test shard {n}: done" for n in range(3)]


def test_the_examples_without_a_daemon_fail_with_no_daemon(root: Path) -> None:
    for name in ("client_submit_wait.py", "client_events.py", "client_async.py"):
        done = run_example(name, str(root))
        assert done.returncode == 1
        assert "DaemonNotRunning" in done.stderr and "colibri run" in done.stderr


def test_a_remote_past_a_lost_daemon_tries_the_next_addresses_first() -> None:
    remote = colibri.Remote.parse("tcp://a:1,tcp://b:2,tcp://c:3", token="t")
    assert [str(a) for a in remote.past("tcp://b:2").addresses] == [
        "tcp://c:3", "tcp://a:1", "tcp://b:2"
    ]  # fmt: skip
    assert [str(a) for a in remote.past("tcp://c:3").addresses] == [
        "tcp://a:1", "tcp://b:2", "tcp://c:3"
    ]  # fmt: skip
    assert remote.past("tcp://elsewhere:4") is remote
