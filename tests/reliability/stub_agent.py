"""A stub agent: a real process that speaks the protocol with ``colibri.client``, as a harness does.

    python tests/reliability/stub_agent.py --socket S --name N --log L [--slots 2] [--ttl 3]
        [--agents K] [--hold] [--tokens FILE]

Each ``assign`` starts a "session" (a short sleep); the agent appends ``{"task_id", "epoch",
"event": "start"}`` to its log and fsyncs it *before* the session starts, and ``"finish"`` when it
ends, then reports ``out`` with the claim's epoch. Like the real harness it outlives the daemon:
when the connection drops it reconnects, registers again with the sessions it still holds
(``running``), reports those that finished meanwhile, and drops those the daemon rejects. A
``cancel`` stops the session (``"stop"`` in the log) and is answered with ``reclaimed``.

``--agents K`` runs K agents in this one process (``N-0`` … ``N-K-1``), each with its own
connection and registration, sharing the log: a fleet of hundreds of agents then costs tens of
processes, not hundreds. ``--hold`` keeps every session running after its sleep until the process
gets SIGUSR1, so a test can hold work in flight through a daemon kill for as long as it needs.

``--socket tcp://A,tcp://B`` connects over plain TCP on loopback instead (the daemons run with
``--insecure-loopback``), trying the addresses in turn at every reconnect — the daemons of a
PostgreSQL board, of which the serving one listens — each agent authenticated with its own
token from ``--tokens`` (a JSON object: agent name → secret).

The log is the agent's own account, written by a process the daemon cannot roll back: the
history checker counts session starts from it.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import time
from typing import Any

from colibri.client import AsyncClient, Remote
from colibri.core.errors import ColibriError, DaemonNotRunning

#: Replies after which a report is kept and made again after the next registration.
UNSETTLED = {"closed", "not_registered", "storage_unavailable", "internal"}


class Log:
    """The agents' own record: one JSON line per event, fsynced before the agent acts on it."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)

    def record(self, agent: str, task_id: str, epoch: int, event: str) -> None:
        line = {
            "task_id": task_id,
            "epoch": epoch,
            "event": event,
            "agent": agent,
            "t": time.time(),
        }
        os.write(self.fd, json.dumps(line).encode() + b"\n")
        os.fsync(self.fd)


class StubAgent:
    def __init__(
        self,
        *,
        socket: str | Remote,
        name: str,
        log: Log,
        slots: int,
        ttl: float,
        work: tuple[float, float],
        seed: int | str,
        release: asyncio.Event | None = None,
    ) -> None:
        self.socket = socket
        self.name = name
        self.log = log
        self.slots = slots
        self.ttl = ttl
        self.work = work
        self.random = random.Random(seed)
        #: Set when held sessions may end (``--hold``); None: sessions end after their sleep.
        self.release = release
        self.client: AsyncClient | None = None
        #: Sessions started and not yet settled with the daemon: task id → epoch.
        self.held: dict[str, int] = {}
        #: The secret of each claim held, from its assign (registering again shows it).
        self.claims: dict[str, str] = {}
        #: Sessions that finished and whose ``out`` the daemon has not acknowledged yet.
        self.finished: dict[str, int] = {}
        self.sessions: dict[str, asyncio.Task[None]] = {}

    def record(self, task_id: str, epoch: int, event: str) -> None:
        self.log.record(self.name, task_id, epoch, event)

    # -- events --------------------------------------------------------------------------------

    def on_event(self, message: dict[str, Any]) -> None:
        kind = message["event"]
        if kind == "assign":
            task_id, epoch = message["task"]["id"], message["epoch"]
            self.held[task_id] = epoch
            self.claims[task_id] = message["claim"]
            self.record(task_id, epoch, "start")
            self.sessions[task_id] = asyncio.create_task(self.session(task_id, epoch))
        elif kind == "cancel":
            task_id, epoch = message["task"], message["epoch"]
            session = self.sessions.pop(task_id, None)
            if session is not None:
                session.cancel()
                self.record(task_id, epoch, "stop")
            self.finished.pop(task_id, None)
            asyncio.create_task(self.settle(task_id, epoch, "reclaimed"))
        elif kind == "expired" and self.client is not None:
            asyncio.create_task(self.client.close())  # reconnect and register again

    async def session(self, task_id: str, epoch: int) -> None:
        await asyncio.sleep(self.random.uniform(*self.work))
        if self.release is not None:
            await self.release.wait()
        self.sessions.pop(task_id, None)
        self.record(task_id, epoch, "finish")
        self.finished[task_id] = epoch
        await self.settle(task_id, epoch, "out")

    async def settle(self, task_id: str, epoch: int, cmd: str) -> None:
        """Report ``out``/``reclaimed``; if the connection is gone, the next one reports it."""
        client = self.client
        if client is None or client.closed.is_set():
            return
        fields: dict[str, Any] = {"task": task_id, "epoch": epoch}
        if cmd == "out":
            fields["output"] = f"done by {self.name}"
        try:
            await client.call(cmd, **fields)
        except ColibriError as exc:
            if exc.code in UNSETTLED:
                return  # unknown outcome: registering again settles it
        if self.held.get(task_id) == epoch:
            del self.held[task_id]
        if self.finished.get(task_id) == epoch:
            del self.finished[task_id]

    # -- the connection ------------------------------------------------------------------------

    async def run(self) -> None:
        while True:
            try:
                client = await AsyncClient(self.socket, self.on_event).connect()
            except (DaemonNotRunning, OSError, ColibriError):
                # (Over TCP: no address answered, or a daemon that stops refused.)
                await asyncio.sleep(0.05)
                continue
            try:
                await self.serve(client)
            except (ColibriError, OSError):
                pass
            finally:
                self.client = None
                await client.close()
            await asyncio.sleep(0.05)

    async def serve(self, client: AsyncClient) -> None:
        running = [
            {"task": t, "epoch": e, "claim": self.claims[t]} for t, e in sorted(self.held.items())
        ]
        reply = await client.call(
            "register-agent", name=self.name, slots=self.slots, ttl=self.ttl, running=running
        )
        self.client = client
        for rejected in reply["rejected"]:
            task_id = rejected["task"]
            session = self.sessions.pop(task_id, None)
            if session is not None:
                session.cancel()
                self.record(task_id, rejected["epoch"], "stop")
            self.held.pop(task_id, None)
            self.finished.pop(task_id, None)
        for task_id, epoch in list(self.finished.items()):
            asyncio.create_task(self.settle(task_id, epoch, "out"))
        beat = float(reply["heartbeat"])
        while not client.closed.is_set():
            try:
                async with asyncio.timeout(beat):
                    await client.closed.wait()
            except TimeoutError:
                await client.call("heartbeat")


async def run_agents(args: argparse.Namespace) -> None:
    release = None
    if args.hold:
        release = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGUSR1, release.set)
    log = Log(args.log)
    names = [args.name] if args.agents == 1 else [f"{args.name}-{i}" for i in range(args.agents)]
    tokens: dict[str, str] = {}
    if args.tokens:
        with open(args.tokens) as f:
            tokens = json.load(f)

    def target(name: str) -> str | Remote:
        if not args.socket.startswith("tcp://"):
            return str(args.socket)
        return Remote.parse(args.socket, token=tokens[name], insecure_loopback=True)

    agents = [
        StubAgent(
            socket=target(name),
            name=name,
            log=log,
            slots=args.slots,
            ttl=args.ttl,
            work=(args.work_min, args.work_max),
            seed=args.seed if args.agents == 1 else f"{args.seed}-{i}",
            release=release,
        )
        for i, name in enumerate(names)
    ]
    await asyncio.gather(*(agent.run() for agent in agents))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--socket", required=True)
    parser.add_argument("--name", required=True)
    parser.add_argument("--log", required=True)
    parser.add_argument("--slots", type=int, default=2)
    parser.add_argument("--ttl", type=float, default=3.0)
    parser.add_argument("--work-min", type=float, default=0.0)
    parser.add_argument("--work-max", type=float, default=0.02)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--agents", type=int, default=1, help="agents in this process")
    parser.add_argument("--hold", action="store_true", help="sessions end only after SIGUSR1")
    parser.add_argument("--tokens", help="over TCP: a JSON file of agent name → token")
    args = parser.parse_args()
    if args.agents < 1:
        parser.error(f"--agents must be at least 1, got {args.agents}")
    try:
        asyncio.run(run_agents(args))
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    main()
