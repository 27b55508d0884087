"""Hand-offs between workspaces along send_to: refused off the edges, families, cancel, the CLI,
and a whole hand-off run by real harnesses and sessions."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from colibri.core.errors import ColibriError
from tests.helpers import Daemon, colibri, online, wait_until
from tests.sessions.support import ECHO, PY

Fleet = Callable[..., Daemon]

#: api may hand work to web, web to docs; docs to nobody.
CHAIN = {
    "api": {"session": {"command": ECHO}, "send_to": ["web"]},
    "web": {"session": {"command": ECHO}, "send_to": ["docs"]},
    "docs": {"session": {"command": ECHO}},
}


@pytest.fixture
def board(fleet: Fleet) -> Daemon:
    """Three workspaces online, dispatch paused so tasks stay where they are put."""
    daemon = fleet(CHAIN)
    wait_until(lambda: online(daemon, "api", "web", "docs"))
    daemon.call("toggle-swarm", paused=True)
    return daemon


def submit(daemon: Daemon, text: str, workspace: str, parent: str | None = None) -> dict[str, Any]:
    return daemon.call("submit", text=text, workspace=workspace, parent=parent)["task"]


def refusal(daemon: Daemon, **fields: Any) -> ColibriError:
    with pytest.raises(ColibriError) as caught:
        daemon.call("submit", **fields)
    return caught.value


def in_env(root: Path, **env: str) -> dict[str, str]:
    return {"COLIBRI_ROOT": str(root), **env}


def test_a_hand_off_along_send_to_carries_the_sender(board: Daemon) -> None:
    top = submit(board, "add the endpoint", "api")
    child = submit(board, "update the client", "web", top["id"])
    grandchild = submit(board, "document it", "docs", child["id"])
    assert (child["parent"], child["sender"], child["workspace"]) == (top["id"], "api", "web")
    assert (grandchild["sender"], grandchild["workspace"]) == ("web", "docs")
    assert top.get("sender") is None
    # kept in the store, not just in the reply
    stored = board.call("get", task=child["id"])["task"]
    assert (stored["parent"], stored["sender"]) == (top["id"], "api")
    # a child in its own workspace, or in none, is no hand-off
    assert submit(board, "more api work", "api", top["id"])["sender"] == "api"
    assert board.call("submit", text="anyone", parent=top["id"])["task"]["sender"] == "api"


def test_a_hand_off_off_the_edges_is_refused_naming_the_allowed(board: Daemon) -> None:
    web = submit(board, "a web task", "web")
    api = submit(board, "an api task", "api")
    before = len(board.call("list")["tasks"])

    error = refusal(board, text="back to api", workspace="api", parent=web["id"])
    assert error.code == "handoff_refused"
    assert "'web'" in error.message and "'api'" in error.message
    assert error.message.endswith("allows: docs")

    error = refusal(board, text="skip a step", workspace="docs", parent=api["id"])
    assert error.code == "handoff_refused"
    assert error.message.endswith("allows: web")

    docs = submit(board, "a docs task", "docs")
    error = refusal(board, text="anything", workspace="web", parent=docs["id"])
    assert error.code == "handoff_refused" and error.message.endswith("allows: none")
    assert len(board.call("list")["tasks"]) == before + 1  # only the docs task was added


def test_family_returns_the_root_and_every_member(board: Daemon) -> None:
    top = submit(board, "top", "api")
    child = submit(board, "child", "web", top["id"])
    sibling = submit(board, "sibling", "web", top["id"])
    grandchild = submit(board, "grandchild", "docs", child["id"])
    other = submit(board, "another family", "api")
    members = [top["id"], child["id"], sibling["id"], grandchild["id"]]
    for member in members:
        reply = board.call("family", task=member)
        assert reply["root"] == top["id"]
        ids = [t["id"] for t in reply["tasks"]]
        assert sorted(ids) == sorted(members)
        assert ids[0] == top["id"]  # parents first
        assert ids.index(child["id"]) < ids.index(grandchild["id"])
    assert [t["id"] for t in board.call("family", task=other["id"])["tasks"]] == [other["id"]]


def test_cancelling_the_root_cancels_the_family_one_ledger_row_each(board: Daemon) -> None:
    top = submit(board, "top", "api")
    child = submit(board, "child", "web", top["id"])
    grandchild = submit(board, "grandchild", "docs", child["id"])
    bystander = submit(board, "not family", "web")
    family = {top["id"], child["id"], grandchild["id"]}

    assert set(board.call("cancel", task=top["id"])["cancelled"]) == family
    for task_id in family:
        task = board.call("get", task=task_id)["task"]
        assert (task["state"], task["outcome"]) == ("closed", "cancelled")
        rows = board.call("ledger", task=task_id)["entries"]
        assert [r["to_state"] for r in rows].count("cancelled") == 1
    assert board.call("get", task=bystander["id"])["task"]["state"] == "pending"
    # a child of a cancelled task is refused
    error = refusal(board, text="late", workspace="web", parent=top["id"])
    assert error.code == "parent_cancelled"


#: A session of `api` that hands work on from inside itself, as an agent would, and writes
#: what each attempt got: (exit code, stdout, stderr).
HANDS_ON = [
    PY,
    "-c",
    "import json, os, subprocess, sys\n"
    "def run(*args, **env):\n"
    "    done = subprocess.run([sys.executable, '-m', 'colibri', 'submit', *args],\n"
    "        capture_output=True, text=True, env={**os.environ, **env})\n"
    "    return [done.returncode, done.stdout.strip(), done.stderr.strip()]\n"
    "got = {\n"
    "    'along': run('--to', 'web', 'update the client'),\n"
    "    'across': run('--to', 'docs', 'skip a step'),\n"
    "    'nowhere': run('no target given'),\n"
    "    'elsewhere': run('--parent', 'someone-else', '--to', 'web', 'adopt me'),\n"
    "    'forged': run('--to', 'web', 'forged', COLIBRI_CLAIM='0' * 32),\n"
    "}\n"
    "out = os.path.join(os.environ['COLIBRI_ROOT'], 'handoffs-' + os.environ['COLIBRI_TASK_ID'])\n"
    "open(out + '.tmp', 'w').write(json.dumps(got))\n"
    "os.rename(out + '.tmp', out)\n",
]


def test_submit_inside_a_session_is_a_hand_off_along_send_to_only(
    fleet: Callable[..., Daemon], root: Path
) -> None:
    """Inside a session every `colibri submit` hands a child of the session's own task on,
    proved by its claim: along send_to it is taken; to another workspace, to none, under
    another parent or with a wrong claim it is refused."""
    daemon = fleet({
        "api": {"session": {"command": HANDS_ON}, "send_to": ["web"]},
        "web": {"session": {"command": ECHO}},
        "docs": {"session": {"command": ECHO}},
    })  # fmt: skip
    wait_until(lambda: online(daemon, "api", "web", "docs"))
    top = submit(daemon, "hand the client work on", "api")
    daemon.wait_closed(top["id"])
    got = json.loads((root / f"handoffs-{top['id']}").read_text())
    code, child_id, err = got["along"]
    assert code == 0, err
    child = daemon.call("get", task=child_id)["task"]
    assert (child["parent"], child["workspace"], child["sender"]) == (top["id"], "web", "api")
    assert child["text"] == "update the client"
    code, _, err = got["across"]
    assert code == 1 and "may not hand work to 'docs'" in err and "allows: web" in err, err
    code, _, err = got["nowhere"]
    assert code == 1 and "names the workspace it goes to" in err, err
    code, _, err = got["elsewhere"]
    assert code == 2 and "child of its task" in err, err
    code, _, err = got["forged"]
    assert code == 1 and "does not carry the claim" in err, err
    children = daemon.call("list", parent=top["id"])["tasks"]
    assert [c["id"] for c in children] == [child_id]


def test_a_forged_claim_cannot_hand_off_from_a_task_it_does_not_run(board: Daemon) -> None:
    """A hand-off's claim must be the one of its parent's running session: a pending
    parent, or a wrong secret, is refused, and nothing is stored."""
    top = submit(board, "not running", "api")
    error = refusal(board, text="x", parent=top["id"], workspace="web", claim="0" * 32)
    assert error.code == "bad_claim"
    assert board.call("list", parent=top["id"])["tasks"] == []
    error = refusal(board, text="x", workspace="web", claim="0" * 32)
    assert error.code == "bad_request" and "give parent too" in error.message


def test_submit_to_outside_a_session_needs_a_parent(board: Daemon, root: Path) -> None:
    top = submit(board, "the session's task", "api")
    outside = colibri(None, "submit", "--to", "web", "no session here", env=in_env(root))
    assert outside.returncode == 2
    assert "--to" in outside.stderr and "--parent" in outside.stderr
    # outside a session, --parent names the parent
    given = colibri(root, "submit", "--to", "web", "by hand", "--parent", top["id"])
    assert given.returncode == 0, given.stderr
    assert board.call("get", task=given.stdout.strip())["task"]["parent"] == top["id"]


def tree_lines(output: str, *ids: str) -> list[str]:
    """The lines of a tree printout that show the given tasks, in the order printed."""
    return [line for line in output.splitlines() if any(i in line for i in ids)]


def test_list_tree_and_show_family_indent_children(board: Daemon, root: Path) -> None:
    top = submit(board, "top", "api")
    child = submit(board, "child", "web", top["id"])
    grandchild = submit(board, "grandchild", "docs", child["id"])
    ids = (top["id"], child["id"], grandchild["id"])

    listed = colibri(root, "list", "--tree")
    assert listed.returncode == 0, listed.stderr
    lines = tree_lines(listed.stdout, *ids)
    assert lines[0].startswith(f"{top['id']}  pending @api")
    assert lines[1].startswith(f"└─ {child['id']}  pending @web")
    assert lines[2].startswith(f"   └─ {grandchild['id']}  pending @docs")

    shown = colibri(root, "show", child["id"], "--family")
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert len(lines) == 3
    assert lines[0].startswith(top["id"]) and not lines[0].endswith("◀")
    assert lines[1].startswith(f"└─ {child['id']}") and lines[1].endswith("◀")
    assert lines[2].startswith(f"   └─ {grandchild['id']}")

    as_json = colibri(root, "show", grandchild["id"], "--family", "--json")
    assert [t["id"] for t in json.loads(as_json.stdout)] == list(ids)


#: api's session: hands a child to web, logs a line, then ends with a Claude-style result.
API_SESSION = [
    PY,
    "-c",
    "import json, subprocess, sys\n"
    "text = sys.stdin.read()\n"
    "child = subprocess.run(\n"
    "    [sys.executable, '-m', 'colibri', 'submit', '--to', 'web', 'notes for: ' + text],\n"
    "    check=True, capture_output=True, text=True).stdout.strip()\n"
    "print('handed on', child)\n"
    "print(json.dumps({'result': 'api done, handed on ' + child, 'total_cost_usd': 0.25,\n"
    "                  'usage': {'input_tokens': 100, 'output_tokens': 20}}))\n",
]
WEB_SESSION = [PY, "-c", "import sys; print(sys.stdin.read().upper())"]


def test_a_hand_off_end_to_end(fleet: Fleet, root: Path) -> None:
    daemon = fleet(
        {
            "api": {"session": {"command": API_SESSION}, "send_to": ["web"]},
            "web": {"session": {"command": WEB_SESSION}},
        }
    )
    wait_until(lambda: online(daemon, "api", "web"))
    submitted = colibri(root, "submit", "add the endpoint", "--workspace", "api")
    assert submitted.returncode == 0, submitted.stderr
    top_id = submitted.stdout.strip()

    top = daemon.wait_closed(top_id, timeout=20)
    family = daemon.call("family", task=top_id)["tasks"]
    assert len(family) == 2
    child = daemon.wait_closed(family[1]["id"], timeout=20)
    assert top["outcome"] == "done" and child["outcome"] == "done"
    assert top["output"] == f"api done, handed on {child['id']}"
    assert (child["parent"], child["sender"], child["workspace"]) == (top_id, "api", "web")
    assert child["output"] == "NOTES FOR: ADD THE ENDPOINT\n"

    listed = colibri(root, "list", "--tree")
    lines = tree_lines(listed.stdout, top_id, child["id"])
    assert lines[0].startswith(f"{top_id}  closed/done @api")
    assert lines[1].startswith(f"└─ {child['id']}  closed/done @web")

    cost = colibri(root, "cost", "--json")
    assert cost.returncode == 0, cost.stderr
    assert json.loads(cost.stdout) == [
        {"key": "api", "sessions": 1, "usd": 0.25, "tokens_in": 100, "tokens_out": 20}
    ]
    by_workspace = json.loads(colibri(root, "cost", "--by", "workspace", "--json").stdout)
    assert [row["key"] for row in by_workspace] == ["api"]
