"""Colibri as a user outside the checkout gets it: the sdist and the wheel built from the
checkout, the wheel installed in a fresh virtual environment, its ``colibri`` run there; and
every ``pip install`` the docs and messages tell a user to run names this distribution
(``colibri-board``: PyPI's ``colibri`` is another project) and extras it has."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import colibri
from tests.cli.conftest import Demo
from tests.cli.test_demo import nothing_left
from tests.helpers import wait_until

REPOSITORY = Path(__file__).parents[2]
PROJECT = tomllib.loads((REPOSITORY / "pyproject.toml").read_text(encoding="utf-8"))["project"]
#: ``pip install [options] NAME[extras]`` as the docs and messages write it.
PIP_INSTALL = re.compile(
    r"pip install (?:-\S+ )*['\"]?(?P<name>[\w.-]+)(?:\[(?P<extras>[\w,-]+)\])?"
)


def told_to_install() -> list[tuple[str, str, str]]:
    """Each (file, name, extras) a doc, an example or the code tells a user to pip install
    that is Colibri itself: by its name, not a path to a checkout or a wheel."""
    files = [REPOSITORY / "README.md", *(REPOSITORY / "docs").rglob("*.md")]
    for folder in ("src", "bench", "contrib", "examples"):
        files += [p for p in (REPOSITORY / folder).rglob("*") if p.is_file()]
    found = []
    for path in files:
        if "__pycache__" in path.parts or ".egg-info" in str(path):
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for match in PIP_INSTALL.finditer(text):
            name = match["name"]
            a_file = name.endswith((".whl", ".tar.gz"))
            if name.lower().replace("_", "-").startswith("colibri") and not a_file:
                where = str(path.relative_to(REPOSITORY))
                found.append((where, name, match["extras"] or ""))
    return found


def test_every_pip_install_of_colibri_names_the_distribution_and_its_extras() -> None:
    told = told_to_install()
    extras = set(PROJECT["optional-dependencies"])
    # The README's and the messages' extras are among them: the search finds what it looks for.
    assert {"postgresql", "mcp"} <= {e for _, _, said in told for e in said.split(",")}
    for where, name, said in told:
        assert name == PROJECT["name"] == "colibri-board", f"{where}: pip install {name}"
        assert set(said.split(",")) <= extras, f"{where}: no extra {said} in pyproject.toml"


@pytest.fixture
def outside() -> Iterator[Path]:
    """A folder outside the checkout, removed afterwards (a virtual environment is large)."""
    path = Path(tempfile.mkdtemp(prefix="cbpkg", dir="/tmp"))
    assert not path.is_relative_to(REPOSITORY)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def package_data() -> set[str]:
    """The files of the package in the checkout that are not Python: the SQL schemas, the
    session script, py.typed — each must reach an installation."""
    package = REPOSITORY / "src" / "colibri"
    return {
        str(p.relative_to(package.parent))
        for p in package.rglob("*")
        if p.is_file() and p.suffix not in (".py", ".pyc") and "__pycache__" not in p.parts
    }


@pytest.mark.slow  # a build, a fresh virtual environment and its dependencies: 20 s and more
@pytest.mark.timeout(900)
def test_the_built_wheel_installs_outside_the_checkout_and_runs_the_demo(
    outside: Path, demo: Callable[..., Demo]
) -> None:
    data = package_data()
    assert {"colibri/py.typed", "colibri/store/sql/sqlite.sql"} <= data
    # python -m build makes the sdist, then the wheel from the sdist: the sdist builds.
    dist = outside / "dist"
    built = subprocess.run(
        [sys.executable, "-m", "build", "--outdir", str(dist), str(REPOSITORY)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    version = PROJECT["version"]
    sdist = dist / f"colibri_board-{version}.tar.gz"
    wheel = dist / f"colibri_board-{version}-py3-none-any.whl"
    with tarfile.open(sdist) as archive:
        prefix = f"colibri_board-{version}/src/"
        in_sdist = {m.name.removeprefix(prefix) for m in archive.getmembers() if m.isfile()}
    assert data <= in_sdist, sorted(data - in_sdist)
    with zipfile.ZipFile(wheel) as archive:
        assert data <= set(archive.namelist()), sorted(data - set(archive.namelist()))

    # A fresh virtual environment, pip reaching the index as this machine configures it; no
    # variable of this run's interpreter (PYTHONPATH, VIRTUAL_ENV) leads back to the checkout.
    venv = outside / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYTHON")},
        "VIRTUAL_ENV": str(venv),
        "PATH": f"{venv / 'bin'}{os.pathsep}{os.environ.get('PATH', os.defpath)}",
    }
    python = str(venv / "bin" / "python")
    installed = subprocess.run(
        [python, "-m", "pip", "install", "-q", str(wheel)],
        capture_output=True, text=True, timeout=600, check=False, env=env, cwd=outside,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout[-3000:] + installed.stderr[-3000:]

    program = str(venv / "bin" / "colibri")
    said = subprocess.run(
        [program, "--version"],
        capture_output=True, text=True, timeout=60, check=True, env=env, cwd=outside,
    )  # fmt: skip
    assert said.stdout.strip() == f"colibri, version {colibri.__version__}"
    where = subprocess.run(
        [python, "-c", "import colibri, importlib.metadata as m; "
         "print(colibri.__file__); print(m.version('colibri-board'))"],
        capture_output=True, text=True, timeout=60, check=True, env=env, cwd=outside,
    )  # fmt: skip
    imported, metadata_version = where.stdout.split()
    assert Path(imported).is_relative_to(venv), imported
    assert metadata_version == version == colibri.__version__

    running = demo(env={"COLUMNS": "200", "PATH": env["PATH"], "VIRTUAL_ENV": str(venv)},
                   program=[program])  # fmt: skip
    wait_until(lambda: running.saw("running → done"), timeout=120)
    running.process.send_signal(signal.SIGINT)
    code = running.process.wait(timeout=60)
    assert running.process.stderr is not None
    assert code == 0, running.process.stderr.read()
    wait_until(lambda: running.lines and "nothing of it keeps running" in running.lines[-1])
    nothing_left(running.target)
