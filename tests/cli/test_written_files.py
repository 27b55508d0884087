"""The files the CLI writes for its user keep the mode their content calls for whatever the
umask (here 000, under which a plain ``open`` makes 0666): the ledger, a board and private keys
0600; what others may read (a certificate, a skill, the configuration) never writable by
them. Real ``colibri`` processes."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

from tests.helpers import Daemon


def under_umask_000(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "colibri", *args], capture_output=True, text=True, timeout=60,
        umask=0, cwd=cwd, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def test_a_ledger_export_is_private(daemon: Daemon, tmp_path: Path) -> None:
    daemon.submit("a task")
    for fmt in ("jsonl", "csv"):
        out = tmp_path / f"ledger.{fmt}"
        under_umask_000("--root", str(daemon.root), "ledger", "export", "--format", fmt,
                        "--out", str(out))  # fmt: skip
        assert mode(out) == 0o600, fmt
        assert '"submitted"' in out.read_text() or ",submitted," in out.read_text()


def test_a_backup_is_private(daemon: Daemon, tmp_path: Path) -> None:
    under_umask_000("--root", str(daemon.root), "backup", str(tmp_path / "copy.sqlite"))
    assert mode(tmp_path / "copy.sqlite") == 0o600


def test_init_and_tls_init_give_no_one_else_a_write(tmp_path: Path) -> None:
    under_umask_000("init", str(tmp_path / "r"))
    assert mode(tmp_path / "r" / "colibri.jsonc") == 0o644  # it says what sessions run
    assert mode(tmp_path / "r" / ".colibri") == 0o700
    under_umask_000("tls", "init", str(tmp_path / "tls"))
    for name in os.listdir(tmp_path / "tls"):
        expected = 0o600 if name.endswith(".key") else 0o644
        assert mode(tmp_path / "tls" / name) == expected, name


def test_an_exported_skill_is_not_writable_by_others(tmp_path: Path) -> None:
    out = tmp_path / "skills" / "SKILL.md"
    under_umask_000("export-skill", "--out", str(out), cwd=tmp_path)
    assert mode(out) & 0o022 == 0


def test_the_demos_files_are_never_writable_by_others(tmp_path: Path) -> None:
    """The demo's worker is what every one of its sessions runs, its colibri.jsonc says so:
    under umask 000 another user could have rewritten either (0666 before)."""
    from colibri.cli.demo import lay_out

    before = os.umask(0)
    try:
        worker = lay_out(tmp_path / "demo")
    finally:
        os.umask(before)
    assert mode(worker) == 0o644
    assert mode(tmp_path / "demo" / "colibri.jsonc") == 0o644


def test_export_skill_with_force_replaces_a_link_at_its_path_and_never_writes_through_it(
    tmp_path: Path,
) -> None:
    """A link planted at ``--out`` (a folder others may write): ``--force`` replaced what it
    pointed to before; now the link itself is replaced by the file, the target untouched."""
    target = tmp_path / "elsewhere.txt"
    target.write_text("not yours to change\n")
    out = tmp_path / "skills" / "SKILL.md"
    out.parent.mkdir()
    out.symlink_to(target)
    under_umask_000("export-skill", "--out", str(out), "--force", cwd=tmp_path)
    assert target.read_text() == "not yours to change\n"
    assert not out.is_symlink() and "colibri" in out.read_text()
    assert mode(out) == 0o644
