"""The root folder: a ``.colibri`` that is not a state folder, and a colibri.jsonc that is a
dangling symlink, each refused in one line."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from colibri.config import CONFIG_NAME, STATE_DIR, find_root, init_root, resolve_root
from colibri.core.errors import RootError
from tests.sessions.support import colibri


def one_line_error(result: subprocess.CompletedProcess[str]) -> str:
    """The one line a refused command prints on stderr, checked: exit 1, no traceback."""
    assert result.returncode == 1, (result.returncode, result.stdout, result.stderr)
    assert "Traceback" not in result.stderr, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    return lines[0]


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
