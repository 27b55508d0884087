"""A git worktree per session: real repositories, real harnesses, real sessions.

Each session of a workspace with ``"isolation": "worktree"`` works on a branch of its own in a
worktree under ``.colibri/worktrees/``; the repository's own checkout never changes."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Daemon, harness_pid, online, wait_until
from tests.sessions.support import PY, alive

Fleet = Callable[..., Daemon]

#: A session that notes what it was given in ROOT/seen-TASK (its worktree variables, its cwd,
#: its task file, the dependencies' file, shared.txt as it found it), then, as its text says:
#: removes its worktree's .git (unlink), adds its id to shared.txt (edit), waits for
#: ROOT/go-TASK (wait), exits 3 (fail).
SESSION = [
    PY,
    "-c",
    "import json, os, sys, time\n"
    "text = sys.stdin.read()\n"
    "root, task = os.environ['COLIBRI_ROOT'], os.environ['COLIBRI_TASK_ID']\n"
    "seen = {k: os.environ.get(k) for k in ('COLIBRI_WORKTREE', 'COLIBRI_BRANCH',\n"
    "        'COLIBRI_BASE', 'COLIBRI_DEPENDENCIES')}\n"
    "seen['cwd'] = os.getcwd()\n"
    "seen['body'] = open(os.environ['COLIBRI_TASK_FILE']).read()\n"
    "deps = seen['COLIBRI_DEPENDENCIES']\n"
    "seen['dependencies'] = json.load(open(deps)) if deps else None\n"
    "seen['shared'] = open('shared.txt').read() if os.path.exists('shared.txt') else None\n"
    "seen['env_file'] = open('.env').read() if os.path.exists('.env') else None\n"
    "out = os.path.join(root, 'seen-' + task)\n"
    "open(out + '.tmp', 'w').write(json.dumps(seen))\n"
    "os.rename(out + '.tmp', out)\n"
    "if 'unlink' in text:\n"
    "    os.remove('.git')\n"
    "if 'edit' in text:\n"
    "    open('shared.txt', 'a').write(task + '\\n')\n"
    "while 'wait' in text and not os.path.exists(os.path.join(root, 'go-' + task)):\n"
    "    time.sleep(0.02)\n"
    "if 'fail' in text:\n"
    "    sys.exit(3)\n"
    "print('finished')\n",
]


def run_git(repo: Path, *args: str) -> str:
    return subprocess.run(
        ["git", "-c", "user.name=t", "-c", "user.email=t@localhost", *args],
        cwd=repo, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip


def make_repo(path: Path, ignored: str = ".env\n") -> str:
    """A repository at ``path`` with one commit holding shared.txt; its HEAD."""
    path.mkdir(parents=True, exist_ok=True)
    run_git(path, "init", "--quiet", "--initial-branch", "main")
    (path / "shared.txt").write_text("first line\n")
    (path / ".gitignore").write_text(ignored)
    run_git(path, "add", "-A")
    run_git(path, "commit", "--quiet", "-m", "start")
    return head(path)


def head(repo: Path, ref: str = "HEAD") -> str:
    return run_git(repo, "rev-parse", ref).strip()


def worktrees_of(repo: Path) -> list[str]:
    listed = run_git(repo, "worktree", "list", "--porcelain")
    return [line.split(" ", 1)[1] for line in listed.splitlines() if line.startswith("worktree ")]


def seen(root: Path, task_id: str) -> dict[str, Any]:
    path = root / f"seen-{task_id}"
    wait_until(path.exists)
    result: dict[str, Any] = json.loads(path.read_text())
    return result


def release(root: Path, task_id: str) -> None:
    (root / f"go-{task_id}").touch()


def workspace(path: str, **worktree: Any) -> dict[str, Any]:
    return {"path": path, "isolation": "worktree", "worktree": worktree,
            "session": {"command": SESSION}}  # fmt: skip


def start(fleet: Fleet, workspaces: dict[str, Any]) -> Daemon:
    daemon = fleet(workspaces)
    wait_until(lambda: online(daemon, *workspaces), timeout=20)
    return daemon


def submit(daemon: Daemon, text: str, where: str = "w", **fields: Any) -> str:
    task_id: str = daemon.submit(text, workspace=where, **fields)["id"]
    return task_id


def test_two_sessions_edit_the_same_file_each_on_its_own_branch(fleet: Fleet, root: Path) -> None:
    repo = root / "repo"
    start_head = make_repo(repo)
    daemon = start(fleet, {"w": {**workspace("repo"), "slots": 2}})
    first, second = submit(daemon, "edit wait one"), submit(daemon, "edit wait two")
    # Both run at once, each in its own worktree, each seeing the file as committed.
    views = {task: seen(root, task) for task in (first, second)}
    assert views[first]["COLIBRI_WORKTREE"] != views[second]["COLIBRI_WORKTREE"]
    for task, view in views.items():
        assert view["shared"] == "first line\n"
        assert view["COLIBRI_BASE"] == start_head
        assert view["cwd"] == view["COLIBRI_WORKTREE"]
        assert Path(view["cwd"]).is_relative_to(root / ".colibri" / "worktrees" / "w")
        assert view["COLIBRI_BRANCH"].startswith(f"colibri/{task[-12:]}-edit-wait-")
        release(root, task)
    changes = {task: daemon.wait_closed(task)["change"] for task in (first, second)}
    for task, change in changes.items():
        assert daemon.task(task)["outcome"] == "done"
        assert change["base"] == start_head and change["head"] != start_head
        assert (change["files"], change["insertions"], change.get("deletions")) == (1, 1, None)
        assert "worktree" not in change  # removed
        assert run_git(repo, "show", f"{change['branch']}:shared.txt") == f"first line\n{task}\n"
        assert head(repo, change["branch"]) == change["head"]
        assert run_git(repo, "log", "-1", "--format=%s", change["branch"]).strip() == (
            daemon.task(task)["text"]
        )
    assert changes[first]["branch"] != changes[second]["branch"]
    # The repository's own checkout is as it was; no worktree is left.
    assert run_git(repo, "status", "--porcelain") == ""
    assert head(repo) == start_head and (repo / "shared.txt").read_text() == "first line\n"
    wait_until(lambda: worktrees_of(repo) == [str(repo)])


def test_a_root_that_is_the_repository_stays_clean(fleet: Fleet, root: Path) -> None:
    """The worktrees live in the root's .colibri/, which the repository then ignores."""
    start_head = make_repo(root, ".env\ncolibri.jsonc\ndaemon.log\nseen-*\n")
    daemon = start(fleet, {"w": workspace(".", copy=[".env", "missing.txt"])})
    (root / ".env").write_text("TOKEN=1\n")
    task = submit(daemon, "edit")
    change = daemon.wait_closed(task)["change"]
    view = seen(root, task)
    assert view["env_file"] == "TOKEN=1\n"  # copied in; the missing one skipped
    assert (change["files"], change["insertions"]) == (1, 1)
    assert run_git(root, "status", "--porcelain") == "" and head(root) == start_head


def test_a_worktree_whose_git_is_gone_never_touches_the_checkout_around_it(
    fleet: Fleet, root: Path
) -> None:
    """Without its .git, git would take the root's repository for the worktree's: what the
    session left must not be committed there, nor the operator's own changes with it."""
    start_head = make_repo(root, ".env\ncolibri.jsonc\ndaemon.log\nseen-*\n")
    (root / "shared.txt").write_text("the operator's own edit\n")
    daemon = start(fleet, {"w": workspace(".")})
    final = daemon.wait_closed(submit(daemon, "unlink edit"))
    assert final["outcome"] == "failed" and "is no longer a git worktree" in final["error"]
    assert run_git(root, "status", "--porcelain") == " M shared.txt\n"
    assert head(root) == start_head and run_git(root, "rev-list", "--count", "HEAD") == "1\n"


def test_a_session_that_changes_nothing_says_so(fleet: Fleet, root: Path) -> None:
    repo = root / "repo"
    start_head = make_repo(repo)
    run_git(repo, "branch", "stable")
    (repo / "sub").mkdir()
    (repo / "sub" / "keep").write_text("")
    run_git(repo, "add", "-A")
    run_git(repo, "commit", "--quiet", "-m", "sub")
    daemon = start(fleet, {"w": workspace("repo/sub"), "old": workspace("repo", base="stable")})
    task, old = submit(daemon, "look around"), submit(daemon, "look back", "old")
    final = daemon.wait_closed(task)
    change = final["change"]
    assert final["outcome"] == "done" and final["output"].strip() == "finished"
    assert change["head"] == change["base"] == head(repo) != start_head
    assert change.get("files", 0) == 0
    assert head(repo, change["branch"]) == change["base"]  # the branch is kept
    # A workspace inside the repository: its session starts in that folder of the worktree.
    view = seen(root, task)
    assert view["cwd"] == str(Path(view["COLIBRI_WORKTREE"]) / "sub")
    # A workspace's own base: the branch it names, not HEAD.
    change = daemon.wait_closed(old)["change"]
    assert change["base"] == change["head"] == start_head
    assert seen(root, old)["COLIBRI_BASE"] == start_head


def test_a_failed_tasks_worktree_is_kept_with_keep_failed(fleet: Fleet, root: Path) -> None:
    repo = root / "repo"
    make_repo(repo)
    daemon = start(fleet, {"w": workspace("repo", keep_failed=True)})
    task = submit(daemon, "edit fail")
    final = daemon.wait_closed(task)
    assert final["outcome"] == "failed" and final["error"] == "exit 3"
    change = final["change"]
    kept = Path(change["worktree"])
    assert str(kept) in worktrees_of(repo)
    # What it left is committed on its branch, the worktree left at that commit.
    assert run_git(kept, "status", "--porcelain") == ""
    assert (kept / "shared.txt").read_text() == f"first line\n{task}\n"
    assert head(kept) == change["head"] and change["files"] == 1
    assert run_git(repo, "status", "--porcelain") == ""


def test_what_keeps_a_task_from_its_worktree_fails_it_saying_why(fleet: Fleet, root: Path) -> None:
    (root / "plain").mkdir()
    for name in ("w", "strict", "taken", "broken", "clash"):
        make_repo(root / name)
    (root / "strict" / "shared.txt").write_text("not committed\n")
    run_git(root / "clash", "branch", "colibri")  # no branch colibri/… can be made beside it
    setup = [PY, "-c", "import sys; print('installing'); print('no network'); sys.exit(2)"]
    daemon = start(fleet, {
        "plain": workspace("plain"), "w": workspace("w"),
        "strict": workspace("strict", refuse_dirty=True),
        "taken": workspace("taken"), "broken": workspace("broken", setup=setup),
        "clash": workspace("clash"),
    })  # fmt: skip

    def error_of(task: str) -> str:
        final = daemon.wait_closed(task)
        assert final["outcome"] == "failed" and final["change"] is None, final
        return str(final["error"])

    assert "is not in a git repository" in error_of(submit(daemon, "edit", "plain"))
    missing = error_of(submit(daemon, "edit", "w", base="no-such-branch"))
    assert "'no-such-branch' (the task's base) does not exist" in missing
    dirty = error_of(submit(daemon, "edit", "strict"))
    assert "uncommitted changes" in dirty and "refuse_dirty" in dirty
    assert (root / "strict" / "shared.txt").read_text() == "not committed\n"
    # A branch of the name the task would take, made while dispatch is paused.
    daemon.call("toggle-swarm", paused=True)
    task = submit(daemon, "edit it", "taken")
    run_git(root / "taken", "branch", f"colibri/{task[-12:]}-edit-it")
    daemon.call("toggle-swarm", paused=False)
    assert f"the branch colibri/{task[-12:]}-edit-it exists already" in error_of(task)
    # Any other failure of git's: its own line.
    clash = error_of(submit(daemon, "edit", "clash"))
    assert clash.startswith("git worktree: fatal: cannot lock ref 'refs/heads/colibri/"), clash
    # A failing setup: the task fails with its last line; the worktree goes, the branch stays.
    final = daemon.wait_closed(submit(daemon, "edit", "broken"))
    assert final["error"] == "worktree setup failed (exit 2): no network"
    assert final["change"]["head"] == final["change"]["base"]
    for name in ("w", "strict", "taken", "broken", "clash"):
        assert worktrees_of(root / name) == [str(root / name)]
        assert run_git(root / name, "status", "--porcelain") == ("" if name != "strict" else
                                                                  " M shared.txt\n")  # fmt: skip


def test_the_next_harness_sweeps_the_worktrees_a_killed_one_left(fleet: Fleet, root: Path) -> None:
    repo = root / "repo"
    make_repo(repo)
    daemon = start(fleet, {"w": {**workspace("repo", keep_failed=True), "slots": 2}})
    kept = daemon.wait_closed(submit(daemon, "edit fail"))["change"]["worktree"]
    task = submit(daemon, "edit wait")
    view = seen(root, task)
    wait_until(lambda: (Path(view["cwd"]) / "shared.txt").read_text().endswith(task + "\n"))
    harness = harness_pid(root, "w")
    assert harness is not None
    os.killpg(harness, signal.SIGKILL)  # mid-session; the supervisor starts another
    final = daemon.wait_closed(task, timeout=40)
    assert final["outcome"] == "failed" and "session lost" in final["error"]
    wait_until(lambda: worktrees_of(repo) == [str(repo), kept], timeout=20)
    assert not Path(view["COLIBRI_WORKTREE"]).exists()
    # What the killed session had written is on its branch all the same.
    branch = view["COLIBRI_BRANCH"]
    assert run_git(repo, "show", f"{branch}:shared.txt") == f"first line\n{task}\n"
    assert run_git(repo, "status", "--porcelain") == ""


def test_a_pipeline_step_starts_from_the_branch_of_the_one_it_waited_for(
    fleet: Fleet, root: Path
) -> None:
    repo = root / "repo"
    make_repo(repo)
    (root / "s").mkdir()
    daemon = start(fleet, {"w": workspace("repo"),
                           "s": {"session": {"command": SESSION}}})  # fmt: skip
    first = submit(daemon, "edit step one")
    second = submit(daemon, "edit step two", after=[first])
    shared = submit(daemon, "report", "s", after=[first, second])
    one, two = daemon.wait_closed(first)["change"], daemon.wait_closed(second)["change"]
    view = seen(root, second)
    assert view["shared"] == f"first line\n{first}\n"  # step one's commit
    assert two["base"] == one["head"] and view["COLIBRI_BASE"] == one["head"]
    assert run_git(repo, "show", f"{two['branch']}:shared.txt") == (
        f"first line\n{first}\n{second}\n"
    )
    assert f"after: {first} done {one['branch']}\n" in view["body"]
    assert view["dependencies"] == [
        {"id": first, "text": "edit step one", "outcome": "done", "output": "finished\n",
         "error": None, "change": one},
    ]  # fmt: skip
    # A workspace that shares its folder is told the same, in after order.
    daemon.wait_closed(shared)
    report = seen(root, shared)
    assert report["COLIBRI_WORKTREE"] is None and report["cwd"] == str(root / "s")
    assert [d["id"] for d in report["dependencies"]] == [first, second]
    assert report["dependencies"][1]["change"] == two
    assert f"after: {second} done {two['branch']}\n" in report["body"]
    # Removed with the task file, once the harness has delivered the report that closed it.
    wait_until(lambda: not Path(report["COLIBRI_DEPENDENCIES"]).exists())


def test_a_cancelled_or_stopped_session_leaves_its_work_on_its_branch(
    fleet: Fleet, root: Path
) -> None:
    """Every ending — cancelled, past max_runtime, stopped with its harness — commits what the
    session left and reports it."""
    for name in ("w", "slow"):
        make_repo(root / name)
    daemon = start(fleet, {"w": {**workspace("w"), "slots": 2},
                           "slow": {**workspace("slow"), "max_runtime": "1s"}})  # fmt: skip

    def edited(task: str) -> None:
        cwd = Path(seen(root, task)["cwd"])
        wait_until(lambda: (cwd / "shared.txt").read_text().endswith(task + "\n"))

    cancelled, timed_out = submit(daemon, "edit wait"), submit(daemon, "edit wait", "slow")
    edited(cancelled)
    daemon.call("cancel", task=cancelled)
    final = daemon.wait_closed(cancelled)
    assert final["outcome"] == "cancelled" and final["change"]["files"] == 1
    final = daemon.wait_closed(timed_out)
    assert final["error"].startswith("max_runtime") and final["change"]["files"] == 1
    stopped = submit(daemon, "edit wait")
    edited(stopped)
    daemon.stop()
    daemon.start()
    final = daemon.task(stopped)
    assert final["outcome"] == "failed" and final["error"] == "agent w stopped"
    change = final["change"]
    assert run_git(root / "w", "show", f"{change['branch']}:shared.txt").endswith(stopped + "\n")
    for name in ("w", "slow"):
        assert worktrees_of(root / name) == [str(root / name)]
        assert run_git(root / name, "status", "--porcelain") == ""


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_a_tmux_session_that_reported_by_itself_has_its_change_reported(
    fleet: Fleet, root: Path
) -> None:
    make_repo(root / "w")
    reports_itself = (
        "import os, subprocess, sys\n"
        "subprocess.run([sys.executable, '-m', 'colibri', 'ready'], check=True)\n"
        "line = input()\n"
        "open('shared.txt', 'a').write(line + '\\n')\n"
        "subprocess.run([sys.executable, '-m', 'colibri', 'out', 'wrote ' + line], check=True)\n"
    )
    daemon = start(fleet, {"w": {"path": "w", "isolation": "worktree", "session": {
        "backend": "tmux", "command": [PY, "-c", reports_itself]}}})  # fmt: skip
    try:
        final = daemon.wait_closed(submit(daemon, "a line"), timeout=20)
        assert final["outcome"] == "done" and final["output"] == "wrote a line"
        change = final["change"]
        assert change["files"] == 1 and change["insertions"] == 1
        assert run_git(root / "w", "show", f"{change['branch']}:shared.txt") == (
            "first line\na line\n"
        )
    finally:
        for sock in (root / ".colibri" / "tmux").glob("*.sock"):
            subprocess.run(["tmux", "-S", str(sock), "kill-server"], capture_output=True)


def test_a_harness_killed_while_it_makes_a_worktree_leaves_none_behind(
    fleet: Fleet, root: Path
) -> None:
    """Killed during the worktree's setup (after ``git worktree add``, before the session):
    the next harness sweeps the half-made worktree, and stops the setup's process group, as a
    session's (marked while it runs), even one that has shed the session's environment."""
    repo = root / "repo"
    make_repo(repo)
    # It drops its environment (exec with none), so only its process group can tell it apart.
    setup = [PY, "-c", "import os, shutil\n"
             "marker = os.path.join(os.environ['COLIBRI_ROOT'], 'in-setup')\n"
             "open(marker, 'w').write(str(os.getpid()))\n"
             "os.execve(shutil.which('sleep'), ['sleep', '600'], {})\n"]  # fmt: skip
    daemon = start(fleet, {"w": workspace("repo", setup=setup)})
    task = submit(daemon, "edit")
    marker = root / "in-setup"
    wait_until(marker.exists)
    wait_until(lambda: marker.read_text() != "")
    made = [w for w in worktrees_of(repo) if w != str(repo)]
    assert len(made) == 1
    harness = harness_pid(root, "w")
    assert harness is not None
    os.killpg(harness, signal.SIGKILL)
    final = daemon.wait_closed(task, timeout=40)
    assert final["outcome"] == "failed" and "session lost" in final["error"]
    wait_until(lambda: worktrees_of(repo) == [str(repo)], timeout=20)
    assert not Path(made[0]).exists()
    setup_pid = int(marker.read_text())
    wait_until(lambda: not alive(setup_pid), timeout=20)
    assert run_git(repo, "status", "--porcelain") == ""


def test_a_full_disk_fails_the_task_with_gits_words_and_leaves_the_checkout(
    fleet: Fleet, root: Path
) -> None:
    """The worktrees' disk is full (a small tmpfs filled to its last block): the task fails
    with git's own one line, nothing of the checkout changes, and no worktree is left."""
    import errno

    from tests.reliability.test_storage_faults import tmpfs

    repo = root / "repo"
    start_head = make_repo(repo)
    place = root / ".colibri" / "worktrees"
    place.mkdir(parents=True, mode=0o700, exist_ok=True)
    with tmpfs(place, "1m"):
        try:
            with open(place / "filler", "wb") as filler:
                while True:
                    filler.write(b"\0" * 65536)
                    filler.flush()
        except OSError as exc:
            assert exc.errno == errno.ENOSPC, exc
        daemon = start(fleet, {"w": workspace("repo")})
        final = daemon.wait_closed(submit(daemon, "edit"), timeout=30)
        assert final["outcome"] == "failed"
        assert "No space left on device" in final["error"], final["error"]
        assert "\n" not in final["error"]
        assert head(repo) == start_head and run_git(repo, "status", "--porcelain") == ""
        assert worktrees_of(repo) == [str(repo)]
        daemon.stop()


def test_a_session_that_switched_branches_leaves_its_work_on_the_tasks_branch(
    fleet: Fleet, root: Path
) -> None:
    """Its commits are where the task's branch ends, not on a branch of its own nor on none."""
    repo = root / "repo"
    start_head = make_repo(repo)
    moves = {"elsewhere": "git checkout -q -b mine", "detached": "git checkout -q --detach"}
    commit = ("echo work > done.txt && git add done.txt && "
              "git -c user.name=t -c user.email=t@localhost commit -qm 'the work'")  # fmt: skip
    for name, move in moves.items():
        session = {"command": ["sh", "-c", f"{move} && {commit}"]}
        daemon = start(fleet, {"w": {"path": "repo", "isolation": "worktree", "session": session}})
        final = daemon.wait_closed(submit(daemon, f"switch {name}"), timeout=30)
        assert final["outcome"] == "done", final
        change = final["change"]
        assert change["files"] == 1 and change["base"] == start_head
        assert head(repo, change["branch"]) == change["head"], name
        assert run_git(repo, "show", f"{change['branch']}:done.txt") == "work\n"
        assert head(repo) == start_head and run_git(repo, "status", "--porcelain") == ""
        daemon.stop()


def test_a_worktree_half_removed_by_a_killed_harness_is_swept_at_the_next_start(
    fleet: Fleet, root: Path
) -> None:
    """A harness killed while it removed a worktree leaves a folder git half forgot (its
    ``.git`` file gone, some files left) and git's own record of it: the next harness drops the
    folder and ``git worktree prune`` the record, before any task."""
    repo = root / "repo"
    make_repo(repo)
    place = root / ".colibri" / "worktrees" / "w"
    place.mkdir(parents=True, mode=0o700)
    half = place / "0123456789ab-half-gone"
    run_git(repo, "worktree", "add", "--quiet", "-b", "colibri/0123456789ab-half-gone", str(half))
    (half / ".git").unlink()  # where `git worktree remove` was cut short
    assert len(worktrees_of(repo)) == 2
    start(fleet, {"w": workspace("repo")})
    wait_until(lambda: not half.exists(), timeout=20)
    wait_until(lambda: worktrees_of(repo) == [str(repo)], timeout=20)
    assert run_git(repo, "status", "--porcelain") == ""
    assert head(repo, "colibri/0123456789ab-half-gone") == head(repo)  # the branch is kept
