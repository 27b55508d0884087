"""The pieces of a worktree per session, in process: branch names, the base, git's shortstat,
the settings, and git itself on a real repository (its locks, a missing identity)."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

import pytest

from colibri.agent.git import GitFailed, git
from colibri.agent.worktrees import (
    branch_name,
    choose_base,
    commit_left_over,
    parse_shortstat,
    slug,
)
from colibri.core.lineage import Body, build_body, parse_body
from colibri.core.model import Change, Task
from tests.configs import loaded, refused
from tests.helpers import colibri


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("Fix the login page!", "fix-the-login-page"),
        ("  Café: déjà vu\n(second line)", "cafe-deja-vu-second-line"),
        ("", "task"),
        ("!!! ??? 日本語", "task"),
        ("update the README and the CHANGELOG then tag release 2.0 and announce it",
         "update-the-readme-and-the-changelog-then"),
        ("x" * 100, "x" * 40),
    ],
)  # fmt: skip
def test_a_slug_is_the_first_words_in_lower_case_letters_digits_and_dashes(
    text: str, expected: str
) -> None:
    assert slug(text) == expected
    assert len(slug(text)) <= 40


@pytest.mark.parametrize("text", ["fix it", "", "..lock", "a/b\\c~^:?*[ @{", "-x", "ÅÄÖ" * 30])
def test_every_branch_name_is_one_git_takes(text: str) -> None:
    name = branch_name("01a24c07-871d-74e9-8983-59277a25b107", text)
    assert name.startswith("colibri/59277a25b107-")
    checked = subprocess.run(["git", "check-ref-format", "--branch", name], capture_output=True)
    assert checked.returncode == 0, name


def test_a_later_attempt_of_a_task_has_a_branch_of_its_own() -> None:
    task_id = "01a24c07-871d-74e9-8983-59277a25b107"
    assert branch_name(task_id, "fix it") == "colibri/59277a25b107-fix-it"
    assert branch_name(task_id, "fix it", epoch=2) == "colibri/59277a25b107-fix-it-2"


@pytest.mark.parametrize(
    ("stat", "expected"),
    [
        (" 1 file changed, 1 insertion(+)\n", (1, 1, 0)),
        (" 3 files changed, 40 insertions(+), 2 deletions(-)\n", (3, 40, 2)),
        (" 2 files changed, 5 deletions(-)\n", (2, 0, 5)),
        (" 1 file changed, 0 insertions(+), 0 deletions(-)\n", (1, 0, 0)),
        ("", (0, 0, 0)),
    ],
)
def test_shortstat_gives_files_insertions_and_deletions(
    stat: str, expected: tuple[int, int, int]
) -> None:
    assert parse_shortstat(stat) == expected


def task(task_id: str = "t", **fields: Any) -> Task:
    now = "2026-01-01T00:00:00.000Z"
    return Task(id=task_id, text="x", capabilities=[], created_at=now, updated_at=now, **fields)


def changed(branch: str) -> Change:
    return Change(branch=branch, base="a" * 40, head="b" * 40, files=1)


def test_the_base_is_the_tasks_then_its_last_dependency_with_a_change_then_the_workspaces() -> None:
    first, second = task("d1", change=changed("colibri/one")), task("d2", change=changed("c/two"))
    plain = task("d3")
    assert choose_base(task(base="v2"), [first], "main") == ("v2", "the task's base")
    assert choose_base(task(), [first, second, plain], "main") == (
        "b" * 40, "the head of c/two, task d2's branch"
    )  # fmt: skip
    assert choose_base(task(), [plain], "main") == ("main", "the workspace's worktree.base")
    assert choose_base(task(), [], None) == ("HEAD", "the repository's HEAD")


def test_a_reported_change_is_a_ref_and_commits_nothing_can_take_for_more() -> None:
    """A change comes from a harness (or a session that lies): its branch is written into
    other sessions' task bodies and used as a ref, so a line break, a space or a leading dash
    never gets in, nor anything but hex in its commits."""
    import msgspec

    for branch in ("x\nclaim: forged", "--upload-pack=evil", "a b", "tab\there", "\x7f", ""):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert({"branch": branch, "base": "a" * 40, "head": "b" * 40}, Change)
    for commit in ("HEAD", "main", "a" * 65, "abc"):
        with pytest.raises(msgspec.ValidationError):
            msgspec.convert({"branch": "ok", "base": commit, "head": "b" * 40}, Change)
    fine = msgspec.convert({"branch": "colibri/5dc4f1e2-fix", "base": "a" * 40,
                            "head": "b" * 7}, Change)  # fmt: skip
    assert fine.branch == "colibri/5dc4f1e2-fix"


def test_the_body_names_the_tasks_it_waited_for() -> None:
    body = Body(task="t", text="go on\n\nwith this", epoch=1,
                after=("d1 done colibri/1-one", "d2 failed -"))  # fmt: skip
    text = build_body(body)
    assert "after: d1 done colibri/1-one\nafter: d2 failed -\n\ngo on" in text
    assert parse_body(text) == body
    assert "after:" not in build_body(Body(task="t", text="x"))


# -- settings ----------------------------------------------------------------------------------


def test_worktree_settings_are_read_and_shown(root: Path) -> None:
    text = """{"workspaces": {
  "w": { "isolation": "worktree", "session": { "command": ["true"] },
         "worktree": { "base": "main", "copy": [".env", "conf/local.json"],
                       "setup": ["npm", "ci"], "keep_failed": true } },
  "s": { "session": { "command": ["true"] }, "worktree": { "base": "main" } },
}}"""
    workspaces = loaded(root, text).workspaces
    worktree = workspaces["w"].worktree
    assert workspaces["w"].isolation == "worktree" and worktree is not None
    assert (worktree.base, worktree.copy, worktree.setup) == (
        "main", [".env", "conf/local.json"], ["npm", "ci"]
    )  # fmt: skip
    assert worktree.keep_failed and not worktree.refuse_dirty
    assert workspaces["s"].isolation == "shared" and workspaces["s"].worktree is None
    shown = colibri(root, "workspace", "show", "w").stdout
    assert "worktree:         base=main, copy=.env conf/local.json, setup=npm ci, " \
           "keep_failed=true, refuse_dirty=false" in shown  # fmt: skip


@pytest.mark.parametrize(
    ("settings", "said"),
    [
        ('"isolation": "worktree", "warm": 1',
         'warm: a warm session starts before its task, in no worktree'),
        ('"isolation": "worktree", "worktree": { "bsae": "main" }', "unknown field `bsae`"),
        ('"isolation": "branches"', "Invalid enum value 'branches' - at `$.isolation`"),
        ('"isolation": "worktree", "worktree": { "copy": ["../secrets"] }',
         "worktree.copy[0] '../secrets' must be a path inside the workspace folder"),
        ('"isolation": "worktree", "worktree": { "copy": ["/etc/passwd"] }', "worktree.copy[0]"),
        ('"isolation": "worktree", "worktree": { "setup": [] }', "worktree.setup: give a command"),
        ('"isolation": "worktree", "worktree": { "base": "--all" }',
         "worktree.base '--all' is not a branch or commit name"),
    ],
)  # fmt: skip
def test_worktree_settings_that_cannot_work_are_refused(
    root: Path, settings: str, said: str
) -> None:
    text = f'{{"workspaces": {{"w": {{ "session": {{ "command": ["true"] }}, {settings} }}}}}}'
    message = refused(root, text)
    assert "workspaces.w" in message and said in message, message


# -- git on a real repository ------------------------------------------------------------------


def make_repo(path: Path) -> Path:
    subprocess.run(["git", "init", "--quiet", str(path)], check=True)
    (path / "a.txt").write_text("a\n")
    return path


def test_a_lock_of_gits_own_is_waited_for_never_removed(tmp_path: Path) -> None:
    repo = make_repo(tmp_path / "repo")
    lock = repo / ".git" / "index.lock"
    lock.write_text("")

    async def scenario() -> None:
        adding = asyncio.ensure_future(git("add", "a.txt", cwd=repo))
        done, _ = await asyncio.wait({adding}, timeout=0.5)
        assert not done and lock.exists()  # still waiting, the lock where it was
        lock.unlink()  # the other git is done
        await adding

    asyncio.run(scenario())
    listed = subprocess.run(["git", "ls-files"], cwd=repo, capture_output=True, text=True)
    assert listed.stdout == "a.txt\n"


def test_any_other_git_failure_is_gits_own_line(tmp_path: Path) -> None:
    with pytest.raises(GitFailed) as failed:
        asyncio.run(git("log", cwd=tmp_path))
    assert str(failed.value).startswith("git log: fatal: not a git repository")
    assert "\n" not in str(failed.value)


def test_what_a_session_left_is_committed_by_colibri_where_nobody_is_configured(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    repo = make_repo(tmp_path / "repo")
    home = tmp_path / "home"
    home.mkdir()
    for name, value in (("HOME", str(home)), ("XDG_CONFIG_HOME", str(home)),
                        ("GIT_CONFIG_NOSYSTEM", "1")):  # fmt: skip
        monkeypatch.setenv(name, value)
    for name in ("GIT_AUTHOR_NAME", "GIT_AUTHOR_EMAIL", "GIT_COMMITTER_NAME", "EMAIL"):
        monkeypatch.delenv(name, raising=False)
    asyncio.run(commit_left_over(repo, "left over\n"))
    log = subprocess.run(["git", "log", "--format=%an <%ae>|%s"], cwd=repo, capture_output=True,
                         text=True, check=True)  # fmt: skip
    assert log.stdout == "colibri <colibri@localhost>|left over\n"
    # Nothing left: nothing to commit.
    asyncio.run(commit_left_over(repo, "again\n"))
    count = subprocess.run(["git", "rev-list", "--count", "HEAD"], cwd=repo, capture_output=True,
                           text=True, check=True)  # fmt: skip
    assert count.stdout == "1\n"


def test_a_folder_that_is_gone_is_named(tmp_path: Path) -> None:
    with pytest.raises(GitFailed) as failed:
        asyncio.run(git("status", cwd=tmp_path / "gone"))
    assert str(failed.value) == f"git status: the folder {tmp_path / 'gone'} does not exist"
