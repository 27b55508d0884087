"""S1/S3 with ``server.socket_group``: members of one Unix group share the daemon, nobody else.

Run as root: the peers are real processes of uid 65534 with a chosen gid — "nogroup" (65534)
for a member, "daemon" (1) for an outsider.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.helpers import NOBODY, Daemon, connect_as_nobody, one_line, run_as_nobody, run_refused

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="peers of another uid need root")

MEMBER_GID = NOBODY  # "nogroup"
OUTSIDER_GID = 1  # "daemon"

READER = """
import json, os, sys
found = {}
for path in sys.argv[1:]:
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            open(path, "rb").close()
        found[path] = "ok"
    except OSError as exc:
        found[path] = exc.__class__.__name__
print(json.dumps(found))
"""


def config(root: Path, group: str) -> None:
    (root / "colibri.jsonc").write_text(
        json.dumps({"scheduler": {"tick": "30s"}, "server": {"socket_group": group}}, indent=2)
    )


@pytest.fixture
def shared(root: Path) -> Iterator[Daemon]:
    config(root, "nogroup")
    os.chmod(root, 0o755)
    daemon = Daemon(root)
    daemon.start()
    yield daemon
    daemon.stop()


def peer(daemon: Daemon, request: dict[str, object], gid: int) -> dict[str, object]:
    result = connect_as_nobody(daemon.socket, json.dumps(request), group=gid)
    if "reply" in result:
        result["reply"] = json.loads(str(result["reply"]))
    return result


def test_socket_and_folder_open_to_the_group_and_no_further(shared: Daemon) -> None:
    sock = os.lstat(shared.socket)
    assert stat.S_IMODE(sock.st_mode) == 0o660 and sock.st_gid == MEMBER_GID
    folder = os.lstat(shared.socket.parent)
    assert stat.S_IMODE(folder.st_mode) == 0o710 and folder.st_gid == MEMBER_GID
    # Every file in the folder stays the owner's alone.
    for path in shared.socket.parent.iterdir():
        if path.is_file():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path


def test_a_member_submits_and_the_ledger_names_its_uid(shared: Daemon) -> None:
    result = peer(shared, {"cmd": "submit", "id": 1, "text": "from a member"}, MEMBER_GID)
    reply = result["reply"]
    assert isinstance(reply, dict) and reply["ok"] is True, result
    task = reply["task"]["id"]
    (row,) = shared.call("ledger", task=task)["entries"]
    assert row["uid"] == NOBODY and row["pid"] not in (None, os.getpid())


def test_an_outsider_cannot_even_connect(shared: Daemon) -> None:
    result = peer(shared, {"cmd": "ping", "id": 1}, OUTSIDER_GID)
    assert result == {"connect": "PermissionError"}


def test_an_outsider_is_refused_by_the_daemon_when_the_files_are_opened_by_hand(
    shared: Daemon,
) -> None:
    os.chmod(shared.socket.parent, 0o711)
    os.chmod(shared.socket, 0o666)
    result = peer(shared, {"cmd": "ping", "id": 1}, OUTSIDER_GID)
    reply = result["reply"]
    assert isinstance(reply, dict) and reply["ok"] is False, result
    assert reply["error"]["code"] == "forbidden"
    assert "members of group 'nogroup'" in reply["error"]["message"]
    assert shared.call("status")["ledger_at"] == ""


def test_a_member_cannot_read_the_board_or_list_the_folder(shared: Daemon) -> None:
    state = shared.socket.parent
    paths = [str(state), str(state / "colibri.sqlite"), str(state / "ledger.jsonl")]
    done = run_as_nobody(READER, *paths, group=MEMBER_GID)
    assert done.returncode == 0, done.stderr.decode()
    assert set(json.loads(done.stdout).values()) == {"PermissionError"}


def test_an_unknown_group_is_a_one_line_error(root: Path) -> None:
    config(root, "no-such-group-here")
    done = run_refused(root)
    assert done.returncode != 0
    line = one_line(done.stderr)
    assert "colibri.jsonc:" in line and "no-such-group-here" in line, line
    assert not (root / ".colibri" / "colibri.sock").exists()


HOLDER = """
import json, os, socket, sys, time
path, n, said, done = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
held, refusals = [], []
for _ in range(n):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    try:
        s.sendall(b'{"id": 1, "cmd": "ledger", "after": "", "follow": true}' + b"\\n")
    except OSError:
        pass  # refused at once: the refusal is there to read
    reply = json.loads(s.makefile("rb").readline())
    if reply.get("ok"):
        held.append(s)
    else:
        refusals.append(reply["error"])
        s.close()
with open(said + ".part", "w") as out:
    json.dump({"held": len(held), "refusals": refusals}, out)
os.rename(said + ".part", said)
while not os.path.exists(done):
    time.sleep(0.05)
"""


def test_a_socket_groups_members_never_take_the_owners_last_places(root: Path) -> None:
    """A member of the socket group follows the ledger on as many connections as it can: it
    gets ``max_connections`` less the owner's reserve (an eighth: 2 of 16), then ``busy``
    saying so; the owner is still let in, twice. Before, the member filled the socket and
    the owner was told ``busy``."""
    import threading

    from tests.helpers import wait_until

    (root / "colibri.jsonc").write_text(
        json.dumps({"scheduler": {"tick": "30s"},
                    "server": {"socket_group": "nogroup", "max_connections": 16}})
    )  # fmt: skip
    os.chmod(root, 0o755)
    talk = root.parent / f"{root.name}-talk"
    talk.mkdir()
    os.chmod(talk, 0o777)
    said, done = talk / "said.json", talk / "done"
    daemon = Daemon(root)
    daemon.start()
    holding = threading.Thread(
        target=run_as_nobody,
        args=(HOLDER, str(daemon.socket), "20", str(said), str(done)),
        kwargs={"timeout": 120},
        daemon=True,
    )
    try:
        holding.start()
        wait_until(said.exists, timeout=60)
        found = json.loads(said.read_text())
        assert found["held"] == 14, found
        assert len(found["refusals"]) == 6
        assert all(r["code"] == "busy" for r in found["refusals"])
        assert "kept for the daemon's owner" in found["refusals"][0]["message"]
        # The owner's two places, taken at once: 16 connections, the whole socket.
        with daemon.client() as first, daemon.client() as second:
            assert first.call("ping")["pong"] and second.call("ping")["pong"]
            assert first.call("ping")["pong"]
    finally:
        done.touch()
        holding.join(60)
        daemon.stop()
