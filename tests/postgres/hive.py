"""What the hive's tests and long runs share: daemons of one PostgreSQL board, and a TCP relay
to the server that can be cut."""

from __future__ import annotations

import asyncio
import os
import subprocess
import threading
from pathlib import Path

from tests.helpers import Daemon, free_port, wait_until


class Member(Daemon):
    """A daemon of the board, on its own root and TCP port (plain TCP on loopback)."""

    def __init__(
        self,
        root: Path,
        board: str,
        *,
        ttl: str = "2s",
        env: dict[str, str] | None = None,
        log_level: str = "info",
        tenants: str | None = None,
        share: bool = False,
    ) -> None:
        root.mkdir()
        self.port = free_port()
        self.address = f"tcp://127.0.0.1:{self.port}"
        serving = ("--tenants", tenants) if tenants else ("--share",) if share else ()
        super().__init__(root, "--store", board, "--lease-ttl", ttl, "--listen", self.address,
                         "--insecure-loopback", *serving, env=env,
                         log_level=log_level)  # fmt: skip

    def stand_by(self) -> None:
        """Start it while another serves: it waits, without a socket, until it takes over."""
        log = open(self.log_path, "ab")
        self.process = subprocess.Popen(self.command(), stdin=subprocess.DEVNULL, stdout=log,
                                        stderr=log, start_new_session=True,
                                        env={**os.environ, **self.env})  # fmt: skip
        log.close()
        wait_until(lambda: "standby: daemon" in self.log(), timeout=30)

    def serving(self) -> bool:
        try:
            self.call("ping")
        except Exception:
            return False
        return True


def tcp_agent(connect: str, token: object, state: str) -> subprocess.Popen[bytes]:
    """A real harness over plain TCP on loopback: agent ``far`` (capability ``far``) with
    ``token``, given the daemons' addresses ``connect``, running each task with ``cat``."""
    from tests.helpers import PYTHON

    return subprocess.Popen(
        [PYTHON, "-m", "colibri", "agent", "--connect", connect, "--insecure-loopback",
         "--name", "far", "--cap", "far", "--state-dir", state, "--", "cat"],
        env={**os.environ, "COLIBRI_TOKEN": str(token)}, stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
    )  # fmt: skip


class Relay:
    """127.0.0.1:port → the PostgreSQL server, in a thread of its own; ``cut`` and ``restore``.
    While ``deaf`` is set, what the server says is dropped: the client's statements still reach
    it (and commit), their answers never come back."""

    def __init__(self, target: tuple[str, int], delay: float = 0.0) -> None:
        self.target = target
        #: Seconds every chunk waits, each way: the server that much further away.
        self.delay = delay
        self.port = free_port()
        self.loop = asyncio.new_event_loop()
        self.server: asyncio.Server | None = None
        self.writers: set[asyncio.StreamWriter] = set()
        self.deaf = False
        #: While set, nothing passes either way: a partition (the statements never arrive).
        self.silent = False
        #: Once a client's bytes contain this, the relay turns ``deaf`` and sets ``deafened``.
        self.deaf_after: bytes | None = None
        self.deafened = threading.Event()
        #: Each client's connection to the server, and those ``strand`` keeps open.
        self.upstream: dict[asyncio.StreamWriter, asyncio.StreamWriter] = {}
        self.held: set[asyncio.StreamWriter] = set()
        #: Every connection it ever made, both sides: all are closed by ``close``.
        self.every: set[asyncio.StreamWriter] = set()
        #: Set by ``close``: a connection accepted but not yet handled is closed, not relayed.
        self.closing = False
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.restore()

    def _run(self, coroutine: object) -> None:
        asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(10)  # type: ignore[arg-type]

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *, answers: bool = False
    ) -> None:
        try:
            while data := await reader.read(65536):
                if (answers and self.deaf) or self.silent:
                    continue
                if self.delay:
                    # In order: each chunk is due later than the one read before it.
                    self.loop.call_later(self.delay, writer.write, data)
                    continue
                writer.write(data)
                if not answers and self.deaf_after is not None and self.deaf_after in data:
                    self.deaf, self.deaf_after = True, None
                    self.deafened.set()
                await writer.drain()
        except (ConnectionError, asyncio.CancelledError):
            pass
        finally:
            if answers or writer not in self.held:
                writer.close()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        if self.closing:  # accepted as the relay closed: its handler ran only now
            writer.transport.abort()
            return
        self.every.add(writer)
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.target)
        except OSError:
            writer.transport.abort()  # the server is away: so is this connection
            return
        self.every.add(up_writer)
        if self.closing:  # closed while it connected upstream
            writer.transport.abort()
            up_writer.transport.abort()
            return
        self.writers |= {writer, up_writer}
        self.upstream[writer] = up_writer
        await asyncio.gather(
            self._pipe(reader, up_writer), self._pipe(up_reader, writer, answers=True)
        )

    def restore(self) -> None:
        async def start() -> None:
            self.server = await asyncio.start_server(self._client, "127.0.0.1", self.port)

        self._run(start())

    def cut(self) -> None:
        async def stop() -> None:
            assert self.server is not None
            self.server.close()
            for writer in list(self.writers):
                writer.transport.abort()
            self.writers.clear()

        self._run(stop())

    def drop(self) -> None:
        """Break every connection through it; new ones are let through."""

        async def abort() -> None:
            for writer in list(self.writers):
                writer.transport.abort()
            self.writers.clear()

        self._run(abort())

    def strand(self) -> None:
        """Break every client's side of its connection while its server side stays open and
        silent: the server's backends wait on, in whatever transaction they were in, as
        behind a network that dropped the client without telling the server."""

        async def abort() -> None:
            for client, server in list(self.upstream.items()):
                if client in self.writers:
                    self.held.add(server)
                    client.transport.abort()
                    self.writers.discard(client)

        self._run(abort())

    def close(self) -> None:
        async def shut() -> None:
            self.closing = True
            if self.server is not None:
                self.server.close()
            for writer in self.every:
                writer.transport.abort()
            # Handlers of connections accepted just before, not yet run, run now and close
            # theirs; those of aborted connections end.
            others = [task for task in asyncio.all_tasks() if task is not asyncio.current_task()]
            if others:
                await asyncio.wait(others, timeout=5)
            # Aborted transports close their sockets in a callback of the loop's next turn:
            # let it run, or the sockets are left for the garbage collector to find open.
            await asyncio.sleep(0)
            await asyncio.sleep(0)

        self._run(shut())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)
        self.loop.close()


def relayed(dsn: str, delay: float = 0.0) -> tuple[Relay, str]:
    """A relay to the server of ``dsn`` (``delay`` seconds each way), and ``dsn`` through it."""
    from psycopg.conninfo import conninfo_to_dict

    parts = conninfo_to_dict(dsn)
    port = int(parts.get("port") or 5432)
    relay = Relay((str(parts.get("host") or "127.0.0.1"), port), delay)
    through = dsn.replace(f":{port}/", f":{relay.port}/", 1)
    assert through != dsn
    return relay, through
