"""A PostgreSQL server of the test's own, to restart and stop: the machine's server, which every
other test uses at once, is never touched.

``initdb`` into a fresh directory, ``pg_ctl`` to start, stop (``fast``: a clean shutdown;
``immediate``: every server process killed, as a crash, with WAL recovery at the next start)
and restart it. As root (CI's machines) the server runs as the ``postgres`` user, as PostgreSQL
insists.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from tests.helpers import free_port
from tests.leaks import private_server_marker


def _binaries() -> Path | None:
    initdb = shutil.which("initdb")
    if initdb is not None:
        return Path(os.path.realpath(initdb)).parent
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(found[-1]).parent if found else None


def unavailable() -> str | None:
    """Why no private server can be made here, or None if it can."""
    if _binaries() is None:
        return "no initdb (PostgreSQL's server programs) on this machine"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser, so no server can run as postgres"
    if os.geteuid() == 0:
        import pwd

        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root, and there is no postgres user to run a server as"
    return None


class PrivateServer:
    def __init__(self) -> None:
        binaries = _binaries()
        assert binaries is not None, unavailable()
        self.bin = binaries
        # Not under pytest's tmp_path: as root, that is closed to the postgres user.
        # Named with the run's id: a server a run leaves running is found by it.
        self.base = Path(tempfile.mkdtemp(prefix=private_server_marker()))
        self.data = self.base / "data"
        self.port = free_port()
        self.dsn = f"postgresql://postgres@127.0.0.1:{self.port}/postgres"
        self.running = False
        self._as_postgres: list[str] = []
        if os.geteuid() == 0:
            import pwd

            user = pwd.getpwnam("postgres")
            os.chown(self.base, user.pw_uid, user.pw_gid)
            self._as_postgres = ["runuser", "-u", "postgres", "--"]
        self._run("initdb", "-D", str(self.data), "-U", "postgres", "-A", "trust", "--no-sync",
                  "-E", "UTF8", "--locale", "C")  # fmt: skip

    def _run(self, program: str, *args: str) -> None:
        done = subprocess.run(
            [*self._as_postgres, str(self.bin / program), *args],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise AssertionError(f"{program} {' '.join(args)}: exit {done.returncode}\n"
                                 f"{done.stdout}{done.stderr}")  # fmt: skip

    def start(self, *settings: str) -> None:
        """Start it; ``settings`` are more ``name=value`` of the server's configuration."""
        options = f"-p {self.port} -c listen_addresses=127.0.0.1 -k {self.data} -c fsync=on"
        options += "".join(f" -c {setting}" for setting in settings)
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.base / "server.log"), "-w",
                  "-t", "60", "-o", options, "start")  # fmt: skip
        self.running = True

    def stop(self, mode: str = "fast") -> None:
        """``fast``: a clean shutdown; ``immediate``: killed, as a crash would."""
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "60", "stop")
        self.running = False

    def restart(self, mode: str = "fast", *settings: str) -> None:
        self.stop(mode)
        self.start(*settings)

    def close(self) -> None:
        try:
            if self.running:
                self.stop("immediate")
        finally:
            shutil.rmtree(self.base, ignore_errors=True)
