"""Shared fixtures: a real daemon process on a temporary root, real sockets, real agents."""

from __future__ import annotations

import os
import shutil
import signal
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# The test modules (rewritten by pytest for its assertions) and colibri's own are kept compiled
# in __pycache__ even where PYTHONDONTWRITEBYTECODE is set: compiled afresh each time, they
# took 12 s of CPU in every test process to collect (4 s with the cache), and about 0.9 s in
# every process that imports colibri before anything had written them.
sys.dont_write_bytecode = False

from tests.helpers import Daemon, write_config  # noqa: E402

#: What every test is checked for leaving behind (processes, sockets, schemas): tests/leaks.py.
pytest_plugins = ["tests.leaks"]


def pytest_configure(config: pytest.Config) -> None:
    """Every process a test starts does so with SIGINT, SIGHUP and SIGTERM at their default
    actions, whatever shell started the tests: a signal ignored here (``trap '' INT``, a
    background job, ``nohup``) is ignored by every child too, and a test that stops one of them
    by that signal would wait for it in vain. A handled signal is reset to its default by
    exec; an ignored one is not."""
    if signal.getsignal(signal.SIGINT) == signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    for signum in (signal.SIGHUP, signal.SIGTERM):
        if signal.getsignal(signum) == signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)
    if getattr(config.option, "numprocesses", None) and not hasattr(config, "workerinput"):
        _compiled_before_the_workers_start(config)


def _compiled_before_the_workers_start(config: pytest.Config) -> None:
    """In a fresh checkout nothing is compiled yet: every xdist worker would rewrite every test
    module for its assertions, and compile colibri, at the same moment (six times the work,
    about 30 s of a first run on two cores). So pytest's own process does it once, first: it
    compiles colibri, and collects the tests in a process of one worker (which writes the
    rewritten modules to ``__pycache__``). Nothing is done when it was done before."""
    import compileall
    import subprocess

    root = Path(str(config.rootpath))
    tag = f"{sys.implementation.cache_tag}-pytest-{pytest.__version__}.pyc"

    def rewritten(module: Path) -> bool:
        cached = module.parent / "__pycache__" / f"{module.stem}.{tag}"
        return cached.exists() and cached.stat().st_mtime >= module.stat().st_mtime

    if all(rewritten(module) for module in (root / "tests").rglob("test_*.py")):
        return
    compileall.compile_dir(root / "src" / "colibri", quiet=1)
    subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist",
         "-p", "no:cacheprovider", "-o", "addopts=", str(root / "tests")],
        cwd=root, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        check=False,
    )  # fmt: skip


#: Where the tests that wait longest live (on daemons, servers, sessions, clocks moved by
#: libfaketime: seconds each, most of it idle), longest first; how they are used: below.
STARTED_FIRST = (
    "tests/postgres/",
    "tests/reliability/",
    "tests/sessions/",
    "tests/tui/",
    "tests/cli/test_init.py",
    "tests/cli/test_demo.py",
    "tests/cli/test_readme.py",
    "tests/daemon/test_schedules.py",
    "tests/remote/",
)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every worker starts on its share of the long waits and ends on short tests.

    xdist's ``worksteal`` hands each of the N workers a contiguous Nth of the tests, and a
    worker that runs out takes the end of another's share. So the tests are dealt out: sorted
    by ``STARTED_FIRST`` (otherwise in the order they were collected), the i-th goes to share
    i mod N. The long waits then overlap one another from the start and the many short tests
    fill the gaps; what is taken at the end is short. (With the modules' names' order, one
    worker was left with a row of PostgreSQL fault tests while the others sat idle: 20 s and
    more of a 180 s run.) Every worker sorts alike, as xdist requires."""

    def rank(item: pytest.Item) -> int:
        where = item.nodeid
        return next(
            (n for n, prefix in enumerate(STARTED_FIRST) if where.startswith(prefix)),
            len(STARTED_FIRST),
        )

    items.sort(key=rank)
    workers = int(getattr(config, "workerinput", {}).get("workercount", 1))
    if workers > 1:
        items[:] = [item for share in range(workers) for item in items[share::workers]]


@pytest.fixture(autouse=True, scope="session")
def _drop_postgresql_boards() -> Iterator[None]:
    """The PostgreSQL boards of ``COLIBRI_TEST_STORE=postgresql`` go with the session."""
    from tests.helpers import PG_BOARDS_TO_DROP

    yield
    while PG_BOARDS_TO_DROP:
        PG_BOARDS_TO_DROP.pop()()


@pytest.fixture(autouse=True)
def _ports_released() -> Iterator[None]:
    """The ports a test's daemons, relays and servers were given (``free_port``) are free
    again after it."""
    from tests.helpers import release_ports

    try:
        yield
    finally:
        release_ports()


@pytest.fixture(autouse=True)
def _clean_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests never see the developer's COLIBRI_* settings."""
    for name in list(os.environ):
        if name.startswith("COLIBRI_"):
            monkeypatch.delenv(name)


@pytest.fixture
def root() -> Iterator[Path]:
    """A fresh root with a short path (AF_UNIX socket paths are limited to ~104 bytes)."""
    from colibri.config import init_root

    path = Path(tempfile.mkdtemp(prefix="cb", dir="/tmp"))
    init_root(path)
    write_config(path)
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A short directory in /tmp that is not inside any root (nor a root itself)."""
    path = Path(tempfile.mkdtemp(prefix="cbc", dir="/tmp")).resolve()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def daemon(root: Path) -> Iterator[Daemon]:
    """A running daemon on ``root``; stopped with SIGTERM afterwards, which must exit 0."""
    d = Daemon(root)
    d.start()
    yield d
    d.stop()
