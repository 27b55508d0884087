"""The suite's leak checks (tests/leaks.py) fail a run that leaves something behind, name the
test that did, and end what it left: each shown on a planted run of pytest of its own."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.leaks import processes, run_id

pytest_plugins = ["pytester"]

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="the checks read /proc (Linux)"
)

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def planted(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> Callable[[str], pytest.RunResult]:
    """Run a source as a test file under the suite's leak checks, in a pytest of its own."""
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")  # a quicker start

    def run(source: str) -> pytest.RunResult:
        pytester.makepyfile(test_planted=textwrap.dedent(source))
        return pytester.runpytest_subprocess(
            "-p", "tests.leaks", "-p", "no:cacheprovider", "-W", "error",
            timeout=60,
        )  # fmt: skip

    return run


def gone(pid: int) -> bool:
    proc = processes().get(pid)
    return proc is None or not proc.alive


def test_a_process_left_running_fails_its_test_and_is_ended_before_the_next(
    pytester: pytest.Pytester, planted: Callable[[str], pytest.RunResult]
) -> None:
    pids = pytester.path / "pids"
    result = planted(
        f"""
        import os, subprocess

        kept = []

        def test_starts_a_sleep_and_leaves_it():
            kept.append(subprocess.Popen(["sleep", "60"], start_new_session=True))
            with open({str(pids)!r}, "w") as f:
                f.write(str(kept[0].pid))

        def test_next_starts_clean():
            with open({str(pids)!r}) as f:
                assert not os.path.exists(f"/proc/{{f.read()}}")
        """
    )
    result.assert_outcomes(passed=2, errors=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*test_planted.py::test_starts_a_sleep_and_leaves_it left 1 process(es) running: *"
         f"{pids.read_text()} (sleep 60)"]
    )  # fmt: skip
    assert "test_next_starts_clean left" not in result.stdout.str()
    assert gone(int(pids.read_text()))


def test_an_orphan_left_running_is_found_as_well(
    pytester: pytest.Pytester, planted: Callable[[str], pytest.RunResult]
) -> None:
    """A process whose parent has exited (a harness whose daemon was killed) is re-parented to
    the test process, not to init: it is found too."""
    pids = pytester.path / "pids"
    result = planted(
        f"""
        import os, subprocess

        def test_orphans_a_sleep():
            out = subprocess.run(["sh", "-c", "sleep 60 >/dev/null 2>&1 & echo $!"],
                                 capture_output=True, text=True, start_new_session=True,
                                 check=True).stdout
            with open({str(pids)!r}, "w") as f:
                f.write(out.strip())

        def test_next_starts_clean():
            with open({str(pids)!r}) as f:
                assert not os.path.exists(f"/proc/{{f.read()}}")
        """
    )
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["*test_planted.py::test_orphans_a_sleep left 1 process(es) running: "
         f"{pids.read_text()} (sleep 60)"]
    )  # fmt: skip
    assert gone(int(pids.read_text()))


def test_what_a_long_lived_helper_starts_is_checked_the_helper_is_not(
    pytester: pytest.Pytester, planted: Callable[[str], pytest.RunResult]
) -> None:
    """A helper kept for many tests (``tests.prestarted.LONG_LIVED_PIDS``) that starts processes
    on request: it is not blamed, even started by a test; what it starts for a test is."""
    pids = pytester.path / "pids"
    result = planted(
        f"""
        import os, subprocess, sys
        import tests.prestarted

        PIDS = {str(pids)!r}
        SPAWNER = "import subprocess, sys\\n" \\
            "for line in sys.stdin:\\n" \\
            "    p = subprocess.Popen(['sleep', '60'], start_new_session=True)\\n" \\
            "    print(p.pid, flush=True)\\n"
        spawner = []

        def spawn():
            if not spawner:
                spawner.append(subprocess.Popen([sys.executable, "-c", SPAWNER], text=True,
                                                stdin=subprocess.PIPE, stdout=subprocess.PIPE))
                tests.prestarted.LONG_LIVED_PIDS.add(spawner[0].pid)
            spawner[0].stdin.write("go\\n")
            spawner[0].stdin.flush()
            return int(spawner[0].stdout.readline())

        def test_has_the_helper_start_a_sleep_and_leaves_it():
            pid = spawn()
            with open(PIDS, "w") as f:
                f.write(f"{{spawner[0].pid}} {{pid}}")

        def test_the_helper_lives_on_and_the_sleep_is_gone():
            with open(PIDS) as f:
                helper, sleep = (int(pid) for pid in f.read().split())
            assert spawner[0].poll() is None
            try:  # ended: gone, or a zombie the helper has not waited for
                with open(f"/proc/{{sleep}}/stat") as f:
                    assert f.read().rpartition(") ")[2][0] == "Z"
            except FileNotFoundError:
                pass
            spawner[0].stdin.close()
            spawner[0].wait()
        """,
    )
    result.assert_outcomes(passed=2, errors=1)
    result.stdout.fnmatch_lines(
        ["*::test_has_the_helper_start_a_sleep_and_leaves_it left 1 process(es) running: *"]
    )
    assert sys.executable not in result.stdout.str().split("running:")[1].splitlines()[0]


def test_a_socket_left_open_or_to_the_garbage_collector_fails_its_test(
    pytester: pytest.Pytester, planted: Callable[[str], pytest.RunResult]
) -> None:
    result = planted(
        """
        import socket

        kept = []

        def test_keeps_a_socket_open():
            kept.append(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
            kept[0].bind(("127.0.0.1", 0))

        class Holder:
            pass

        def test_leaves_a_socket_to_the_garbage_collector():
            holder = Holder()
            holder.sock, holder.me = socket.socket(socket.AF_UNIX), holder

        def test_closes_its_socket():
            a, b = socket.socketpair()
            a.close()
            b.close()
        """,
    )
    result.assert_outcomes(passed=3, errors=2)
    result.stdout.fnmatch_lines(
        [
            "*::test_keeps_a_socket_open left 1 socket(s) open: fd * AF_INET ('127.0.0.1', *)",
            "*::test_leaves_a_socket_to_the_garbage_collector left to the garbage collector: "
            "unclosed <socket.socket * family=1*",
        ]
    )
    assert "test_closes_its_socket left" not in result.stdout.str()


def test_a_clean_run_passes_with_what_wider_fixtures_keep(
    planted: Callable[[str], pytest.RunResult],
) -> None:
    """Sockets and processes of module- and session-scoped fixtures, set up before a test or
    from inside one, are theirs: the tests pass, and so does the run."""
    result = planted(
        """
        import socket, subprocess
        import pytest

        @pytest.fixture(scope="module")
        def pair():
            a, b = socket.socketpair()
            yield a, b
            a.close()
            b.close()

        @pytest.fixture(scope="session")
        def sleeper():
            process = subprocess.Popen(["sleep", "60"], start_new_session=True)
            yield process
            process.kill()
            process.wait()

        @pytest.fixture(scope="session")
        def listener():
            with socket.socket() as sock:
                sock.bind(("127.0.0.1", 0))
                sock.listen()
                yield sock

        def test_uses_the_module_pair(pair):
            pair[0].sendall(b"x")
            assert pair[1].recv(1) == b"x"

        def test_sets_up_the_session_fixtures_from_inside(request):
            assert request.getfixturevalue("sleeper").poll() is None
            assert request.getfixturevalue("listener").getsockname()[1]
            assert request.getfixturevalue("pair")

        def test_and_again(pair, sleeper):
            assert sleeper.poll() is None
        """,
    )
    result.assert_outcomes(passed=3)
    assert result.ret == pytest.ExitCode.OK


def test_a_schema_or_private_server_left_fails_the_run(
    pytester: pytest.Pytester, planted: Callable[[str], pytest.RunResult]
) -> None:
    """At the end of the run: a schema of the run left in the test database, a private
    PostgreSQL server of the run left running (here a stand-in, named as one)."""
    psycopg = pytest.importorskip("psycopg")
    from tests.store.conftest import PG_DSN

    try:
        psycopg.connect(PG_DSN, connect_timeout=3).close()
    except psycopg.Error:
        pytest.skip(f"no PostgreSQL at {PG_DSN}")
    left = pytester.path / "left"
    result = planted(
        f"""
        import subprocess, sys, tempfile
        import pytest
        from tests.leaks import private_server_marker
        from tests.store.conftest import pg_schema

        @pytest.fixture(scope="session")
        def server():
            base = tempfile.mkdtemp(prefix=private_server_marker())
            process = subprocess.Popen(
                [sys.executable, "-c", "import time; time.sleep(60)", base + "/data"],
                start_new_session=True)
            yield process  # never stopped

        def test_makes_a_schema_and_leaves_it(server):
            dsn, drop = pg_schema()
            with open({str(left)!r}, "w") as f:
                f.write(f"{{dsn.rpartition('%3D')[2]}} {{server.pid}}")
        """,
    )
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    schema, pid = left.read_text().split()
    result.stdout.fnmatch_lines(
        [
            "*left behind by this run*",
            f"private PostgreSQL server process {pid} (* */colibri-pg-*/data)",
            f"PostgreSQL schema {schema} (dropped now)",
        ]
    )
    assert gone(int(pid))
    with psycopg.connect(PG_DSN) as conn:
        assert not conn.execute(
            "SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,)
        ).fetchall()
    assert run_id() not in schema  # the planted run was a run of its own
