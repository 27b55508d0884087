"""A3: power loss. The board lives on a file system that loses what was not fsynced.

One seeded run: mount ``lazyfs`` (a FUSE layer that keeps writes in memory until ``fsync``)
over a backing folder, start a daemon whose store is on it, let clients submit and an agent
finish tasks, then cut the power: SIGKILL the file system process (every unsynced write is
gone) and the daemon at once. Remount the backing folder, restart the daemon, and count what
was acknowledged but is missing. Shared by ``test_power_loss.py`` and ``bench/chaos.py``.
"""

from __future__ import annotations

import random
import signal
import sqlite3
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from tests.helpers import PYTHON, Daemon, FakeAgent, wait_until, write_config

REPO = Path(__file__).resolve().parents[2]


def fuse_available() -> str | None:
    """Why power loss cannot be played here, or None when it can."""
    if not Path("/dev/fuse").exists():
        return "no /dev/fuse"
    try:
        import mfusepy  # noqa: F401
    except (ImportError, OSError) as exc:  # OSError: the libfuse shared library is missing
        return f"mfusepy cannot load libfuse: {exc}"
    return None


def mounted(path: Path) -> bool:
    """Listed in the mount table (``os.path.ismount`` fails once the file system died)."""
    with open("/proc/self/mounts") as mounts:
        return any(line.split()[1] == str(path) for line in mounts)


class LazyDisk:
    """``backing`` mounted at ``mount`` through lazyfs; ``cut`` is the power cut."""

    def __init__(self, backing: Path, mount: Path, fail_fsync: Path | None = None) -> None:
        self.backing, self.mount = backing, mount
        #: While this file exists, syncs of a SQLite WAL fail (lazyfs's LAZYFS_FAIL_FSYNC).
        self.fail_fsync = fail_fsync
        backing.mkdir(parents=True, exist_ok=True)
        mount.mkdir(parents=True, exist_ok=True)
        self.process: subprocess.Popen[bytes] | None = None

    def attach(self) -> None:
        import os

        log = open(self.mount.parent / "lazyfs.log", "ab")
        env = {**os.environ, "LAZYFS_FAIL_FSYNC": str(self.fail_fsync or "")}
        self.process = process = subprocess.Popen(
            [PYTHON, "-m", "tests.reliability.lazyfs", str(self.backing), str(self.mount)],
            cwd=REPO,
            stdout=log,
            stderr=log,
            start_new_session=True,
            env=env,
        )
        log.close()
        wait_until(lambda: mounted(self.mount) or process.poll() is not None)
        assert process.poll() is None, (self.mount.parent / "lazyfs.log").read_text()

    def cut(self) -> None:
        """Lose every unsynced write: the file system process dies, its memory with it."""
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(timeout=10)
        self.detach()

    def detach(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)
        if mounted(self.mount):
            subprocess.run(["umount", "-l", str(self.mount)], check=True)


@contextmanager
def lazy_disk(root: Path) -> Iterator[LazyDisk]:
    disk = LazyDisk(root / "disk", root / "mnt")
    try:
        disk.attach()
        yield disk
    finally:
        disk.detach()


class Load:
    """Clients submitting and one agent finishing tasks, each keeping what was acknowledged."""

    def __init__(self, daemon: Daemon, clients: int, seed: int) -> None:
        self.daemon = daemon
        self.submitted: list[str] = []
        self.finished: list[str] = []
        self.stop = threading.Event()
        self.threads = [
            threading.Thread(target=self._submit, args=(n,), daemon=True) for n in range(clients)
        ]
        self.threads.append(threading.Thread(target=self._work, daemon=True))
        self.seed = seed

    def start(self) -> None:
        for thread in self.threads:
            thread.start()

    def _submit(self, n: int) -> None:
        try:
            with self.daemon.client(timeout=10) as client:
                i = 0
                while not self.stop.is_set():
                    reply = client.call("submit", text=f"seed {self.seed} client {n} #{i}",
                                        capabilities=["work"])  # fmt: skip
                    self.submitted.append(reply["task"]["id"])  # acknowledged: committed
                    i += 1
        except Exception:
            return  # the power went: what was not acknowledged may or may not be there

    def _work(self) -> None:
        try:
            agent = FakeAgent(self.daemon, f"worker-{self.seed}", ["work"], slots=1)
        except Exception:
            return
        try:
            while not self.stop.is_set():
                assign = agent.next_assign(timeout=5)
                if agent.out(assign, "done")["ok"]:
                    self.finished.append(assign["task"]["id"])
        except Exception:
            return
        finally:
            agent.close()

    def join(self) -> None:
        self.stop.set()
        for thread in self.threads:
            if thread.ident is not None:  # started
                thread.join(timeout=15)


def stored_states(db: Path) -> dict[str, str]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=10)
    try:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
        return dict(conn.execute("SELECT id, state FROM tasks").fetchall())
    finally:
        conn.close()


def run_power_loss(root: Path, seed: int, durability: str = "full") -> dict[str, Any]:
    """One power cut under load; return the figures (``lost`` must be 0 for ``full``)."""
    rng = random.Random(seed)
    root.mkdir(parents=True, exist_ok=True)
    write_config(root, tick="1s", agent_ttl="2s")
    with lazy_disk(root) as disk:
        store = disk.mount / "colibri.sqlite"
        daemon = Daemon(root, "--store", str(store), "--durability", durability)
        load = Load(daemon, clients=2, seed=seed)
        try:
            daemon.start()
            load.start()
            time.sleep(rng.uniform(0.3, 1.5))
            disk.cut()  # the power goes: the disk's cache and the daemon together
        finally:
            if daemon.process is not None:
                daemon.process.kill()
                daemon.process.wait(timeout=10)
            load.join()
    submitted, finished = list(load.submitted), list(load.finished)
    stored = stored_states(root / "disk" / "colibri.sqlite")  # what the "reboot" finds
    with lazy_disk(root) as disk:
        daemon = Daemon(root, "--store", str(disk.mount / "colibri.sqlite"))
        daemon.start()  # the store recovers from its WAL and the daemon serves again
        try:
            counts = daemon.call("status")["tasks"]
        finally:
            daemon.stop()
    assert sum(counts.values()) == len(stored), (counts, len(stored))
    lost = [t for t in submitted if t not in stored]
    undone = [t for t in finished if stored.get(t) not in ("done", "closed")]
    return {
        "durability": durability,
        "acknowledged": len(submitted),
        "finished": len(finished),
        "lost": len(lost),
        "undone": len(undone),
        "stored": len(stored),
    }
