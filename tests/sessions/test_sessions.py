"""Sessions run by real harnesses: the task file, session-side out/fail, exits, max_runtime, and
the Claude JSON result parser."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from colibri.agent.claude import claude_result
from colibri.core.errors import BadTaskBody
from colibri.core.lineage import Body, build_body, parse_body
from tests.helpers import Daemon, group_members, online, wait_until
from tests.sessions.support import ECHO, PY, gated

Fleet = Callable[..., Daemon]

#: Copies what it was given to ROOT/seen-TASK (JSON): the task file's name and text, whether the
#: file was there, COLIBRI_EPOCH, stdin. Prints stdin back unchanged.
RECORD = [
    PY,
    "-c",
    "import json, os, sys\n"
    "stdin = sys.stdin.read()\n"
    "path = os.environ['COLIBRI_TASK_FILE']\n"
    "seen = {'file': path, 'body': open(path, encoding='utf-8').read(),\n"
    "        'epoch': os.environ.get('COLIBRI_EPOCH'), 'stdin': stdin,\n"
    "        'claim': os.environ.get('COLIBRI_CLAIM'),\n"
    "        'parent': os.environ.get('COLIBRI_PARENT'),\n"
    "        'workspace': os.environ.get('COLIBRI_WORKSPACE')}\n"
    "out = os.path.join(os.environ['COLIBRI_ROOT'], 'seen-' + os.environ['COLIBRI_TASK_ID'])\n"
    "open(out + '.tmp', 'w').write(json.dumps(seen))\n"
    "os.rename(out + '.tmp', out)\n"
    "sys.stdout.write(stdin)\n",
]


def reporting(*report: str) -> list[str]:
    """A session that runs ``colibri REPORT…`` itself, says so in ROOT/reported-TASK, waits for
    ROOT/go-TASK, prints something that must not become the output, and exits 0."""
    return [
        PY,
        "-c",
        "import os, subprocess, sys, time\n"
        "root, task = os.environ['COLIBRI_ROOT'], os.environ['COLIBRI_TASK_ID']\n"
        "subprocess.run([sys.executable, '-m', 'colibri', *sys.argv[1:]], check=True)\n"
        "open(os.path.join(root, 'reported-' + task), 'w').close()\n"
        "while not os.path.exists(os.path.join(root, 'go-' + task)):\n"
        "    time.sleep(0.02)\n"
        "print('stdout of the session, not its output')\n",
        *report,
    ]


def start(fleet: Fleet, command: list[str], **workspace: Any) -> Daemon:
    """A daemon with one workspace ``w`` running ``command``, its harness online."""
    daemon = fleet({"w": {"session": {"command": command}, **workspace}})
    wait_until(lambda: online(daemon, "w"))
    return daemon


def submit(daemon: Daemon, text: str = "do it", **fields: Any) -> dict[str, Any]:
    fields.setdefault("workspace", "w")
    return daemon.call("submit", text=text, **fields)["task"]


# -- the task body -----------------------------------------------------------------------------


def test_the_task_file_holds_the_body_and_is_removed_after(fleet: Fleet, root: Path) -> None:
    daemon = fleet(
        {
            "api": {"session": {"command": ECHO}, "send_to": ["web"]},
            "web": {"session": {"command": RECORD}},
        }
    )
    wait_until(lambda: online(daemon, "api", "web"))
    parent = submit(daemon, "the parent", workspace="api")
    text = "colibri-task: not a header\n\nline three\n"
    child = submit(daemon, text, workspace="web", parent=parent["id"])
    lone = submit(daemon, "no family", workspace="web")
    for task in (parent, child, lone):
        assert daemon.wait_closed(task["id"])["outcome"] == "done"

    seen = json.loads((root / f"seen-{child['id']}").read_text())
    body = parse_body(seen["body"])
    assert body == Body(
        task=child["id"], text=text, parent=parent["id"], sender="api", workspace="web", epoch=1,
        claim=seen["claim"],
    )  # fmt: skip
    assert seen["claim"] and len(seen["claim"]) == 32  # the claim's secret, also in the file
    assert seen["stdin"] == text  # stdin carries the text alone
    assert seen["epoch"] == "1"
    assert seen["parent"] == parent["id"] and seen["workspace"] == "web"
    # Removed once the session has ended (the report may reach the daemon just before).
    wait_until(lambda: not Path(seen["file"]).exists())
    assert daemon.task(child["id"])["output"] == text

    seen = json.loads((root / f"seen-{lone['id']}").read_text())
    assert parse_body(seen["body"]) == Body(
        task=lone["id"], text="no family", workspace="web", epoch=1, claim=seen["claim"]
    )
    assert seen["parent"] is None
    wait_until(lambda: not Path(seen["file"]).exists())


ids = st.uuids().map(str)
names = st.from_regex(r"[a-z0-9][a-z0-9._:+-]{0,63}", fullmatch=True)


@given(
    task=ids,
    text=st.text(),
    parent=st.none() | ids,
    sender=st.none() | names,
    workspace=st.none() | names,
    epoch=st.none() | st.integers(min_value=0, max_value=2**63),
)
@example(task="t", text="", parent=None, sender=None, workspace=None, epoch=None)
@example(task="t", text="\n\n\n", parent=None, sender=None, workspace=None, epoch=0)
@example(
    task="t",
    text="colibri-task: x\nepoch: 9\nparent: y\nfrom: z\nworkspace: w\n\nnested body\n\n",
    parent="p",
    sender="s",
    workspace="w",
    epoch=3,
)
def test_build_and_parse_body_round_trip(
    task: str,
    text: str,
    parent: str | None,
    sender: str | None,
    workspace: str | None,
    epoch: int | None,
) -> None:
    body = Body(
        task=task, text=text, parent=parent, sender=sender, workspace=workspace, epoch=epoch
    )
    built = build_body(body)
    assert built.startswith(f"colibri-task: {task}\n")
    assert built.endswith(text)
    assert parse_body(built) == body


@pytest.mark.parametrize(
    "data",
    [
        "",
        "just some text",
        "colibri-task: t\nparent: -",
        "parent: p\n\ntext",
        "colibri-task t\n\nx",
    ],
)
def test_parse_body_refuses_what_is_not_a_body(data: str) -> None:
    with pytest.raises(BadTaskBody, match="not a task body"):
        parse_body(data)


# -- how a session reports ---------------------------------------------------------------------


def test_out_from_the_session_is_the_output_and_closes_when_it_exits(
    fleet: Fleet, root: Path
) -> None:
    daemon = start(fleet, reporting("out", "the summary", "--cost", "usd=0.5,tokens_in=10"))
    task = submit(daemon)
    wait_until(lambda: (root / f"reported-{task['id']}").exists())
    # reported, the session still running: done, not closed
    now = daemon.task(task["id"])
    assert (now["state"], now["output"]) == ("done", "the summary")

    (root / f"go-{task['id']}").touch()
    ended = daemon.wait_closed(task["id"])
    assert ended["outcome"] == "done"
    assert ended["output"] == "the summary"
    assert ended["cost"] == {"usd": 0.5, "tokens_in": 10}
    assert ended["attempts"] == 1
    totals = daemon.call("cost", by="workspace")["totals"]
    assert totals == [{"key": "w", "sessions": 1, "usd": 0.5, "tokens_in": 10, "tokens_out": 0}]
    rows = daemon.call("ledger", task=task["id"])["entries"]
    assert [r["to_state"] for r in rows] == ["pending", "running", "done", "closed"]
    assert rows[2]["cost"] == {"usd": 0.5, "tokens_in": 10}


def test_fail_from_the_session_fails_the_task(fleet: Fleet, root: Path) -> None:
    daemon = start(fleet, reporting("fail", "the build is broken upstream"))
    task = submit(daemon)
    wait_until(lambda: (root / f"reported-{task['id']}").exists())
    assert daemon.task(task["id"])["state"] == "failed"
    (root / f"go-{task['id']}").touch()
    ended = daemon.wait_closed(task["id"])
    assert ended["outcome"] == "failed"
    assert ended["error"] == "the build is broken upstream"
    assert not ended.get("output")


def test_a_session_exiting_without_out_fails_with_its_exit_code(fleet: Fleet) -> None:
    command = [PY, "-c", "import sys; sys.stderr.write('went wrong\\n'); sys.exit(3)"]
    daemon = start(fleet, command)
    ended = daemon.wait_closed(submit(daemon)["id"])
    assert ended["outcome"] == "failed"
    assert ended["error"].startswith("exit 3")
    assert "went wrong" in ended["error"]


def test_max_runtime_stops_the_session_and_its_group(fleet: Fleet, root: Path) -> None:
    # the session starts `sleep 30` in its group, writes the group's id, and waits for it
    command = [
        PY,
        "-c",
        "import os, subprocess, sys\n"
        "child = subprocess.Popen(['sleep', '30'])\n"
        "path = os.path.join(sys.argv[1], 'group-' + os.environ['COLIBRI_TASK_ID'])\n"
        "open(path + '.tmp', 'w').write(f'{os.getpgid(0)} {child.pid}')\n"
        "os.rename(path + '.tmp', path)\n"
        "child.wait()\n",
        str(root),
    ]
    daemon = start(fleet, command, max_runtime="1s")
    task = submit(daemon)
    group = root / f"group-{task['id']}"
    wait_until(group.exists)
    pgid, sleeper = map(int, group.read_text().split())
    assert sleeper in group_members(pgid)
    ended = daemon.wait_closed(task["id"], timeout=15)
    assert ended["outcome"] == "failed"
    assert ended["error"].startswith("max_runtime")
    wait_until(lambda: not group_members(pgid), timeout=5)


# -- the Claude JSON result --------------------------------------------------------------------

CLAUDE_SUCCESS = json.dumps(
    {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "duration_ms": 4121,
        "num_turns": 3,
        "result": "Renamed the endpoint and updated the tests.",
        "session_id": "4f0c6a4e-0e6c-4d1c-9d0c-6d2b7f0d2a11",
        "total_cost_usd": 0.0421,
        "usage": {
            "input_tokens": 1200,
            "cache_read_input_tokens": 18000,
            "output_tokens": 310,
        },
    }
)


def test_claude_success_json_gives_result_and_cost() -> None:
    output, cost = claude_result(CLAUDE_SUCCESS + "\n")
    assert output == "Renamed the endpoint and updated the tests."
    assert cost == {"usd": 0.0421, "tokens_in": 1200, "tokens_out": 310}


def test_a_log_line_then_the_json_on_the_last_line() -> None:
    stdout = "warming up\n{not json, a log line}\n" + CLAUDE_SUCCESS + "\n"
    output, cost = claude_result(stdout)
    assert output == "Renamed the endpoint and updated the tests."
    assert cost is not None and cost["usd"] == 0.0421


def test_pretty_printed_json_with_a_model() -> None:
    doc = {"result": "ok", "model": "sonnet", "total_cost_usd": 0.1, "usage": {"output_tokens": 7}}
    output, cost = claude_result(json.dumps(doc, indent=2))
    assert output == "ok"
    assert cost == {"usd": 0.1, "tokens_out": 7, "model": "sonnet"}


def test_an_error_result_keeps_the_cost_and_the_whole_output() -> None:
    stdout = json.dumps({"is_error": True, "result": None, "total_cost_usd": 0.02})
    assert claude_result(stdout) == (stdout, {"usd": 0.02})


@pytest.mark.parametrize(
    "stdout",
    [
        "plain text output\n",
        "",
        json.dumps({"answer": 42, "result": "no cost fields"}) + "\n",
        '{"result": "cut short", "total_cost_usd": 0.1',
        '{"result": "bad", total_cost_usd: oops}',
        "[1, 2, 3]",
        'log line\n{"result": "x", "usage": {"input_tokens": 1}',
    ],
)
def test_anything_else_is_kept_as_it_is_without_cost(stdout: str) -> None:
    assert claude_result(stdout) == (stdout, None)


#: A session that tries to report on another task: the victim's id and epoch come in its text.
FORGES = [
    PY,
    "-c",
    "import json, os, subprocess, sys\n"
    "victim, epoch = sys.stdin.read().split()\n"
    "done = subprocess.run([sys.executable, '-m', 'colibri', 'out', '--task', victim,\n"
    "                       '--epoch', epoch, 'forged output'], capture_output=True, text=True)\n"
    "print(json.dumps([done.returncode, done.stderr.strip()]))\n",
]


def test_a_session_cannot_report_for_another_sessions_task(fleet: Fleet, root: Path) -> None:
    """A session of workspace `other` sends `out` for a running task of `victim` with its id
    and epoch (and so its own claim's secret, which is not the victim's): refused, and the
    victim's task runs on until its own session reports."""
    daemon = fleet({
        "victim": {"session": {"command": gated(root)}},
        "other": {"session": {"command": FORGES}},
    })  # fmt: skip
    wait_until(lambda: online(daemon, "victim", "other"))
    victim = submit(daemon, "the real work", workspace="victim")
    wait_until(lambda: (root / f"started-{victim['id']}").exists())
    forger = submit(daemon, f"{victim['id']} 1", workspace="other")
    code, stderr = json.loads(daemon.wait_closed(forger["id"])["output"])
    assert code == 1 and "does not carry the claim" in stderr, stderr
    assert daemon.task(victim["id"])["state"] == "running"
    (root / f"go-{victim['id']}").write_text("")
    final = daemon.wait_closed(victim["id"])
    assert final["outcome"] == "done" and final["output"].startswith("released")
