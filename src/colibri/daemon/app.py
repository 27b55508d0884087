"""The composition root: wire the daemon together and run it until SIGINT or SIGTERM.

Its parts live elsewhere: the process's chores in ``process``, the stop signals in
``signals``, the board held, its lease kept and its tenants shared out in ``hive/``, the tick
and the sweep in ``timers``."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from colibri import host
from colibri.config import Config
from colibri.core.errors import ColibriError, StorageUnavailable
from colibri.core.events import HarnessExited
from colibri.daemon import crashpoints
from colibri.daemon.board import Board
from colibri.daemon.bus import Bus
from colibri.daemon.clock import BoardClock, Clock, SystemClock
from colibri.daemon.commands import Commands
from colibri.daemon.connection import Connection
from colibri.daemon.gateway import Gateway
from colibri.daemon.hive.lease import RELEASE_WAIT, keep_lease, keeper_ended, renewed_while_building
from colibri.daemon.hive.sharing import serve_tenants, served_schedules
from colibri.daemon.hive.standby import BoardHold, hold_board
from colibri.daemon.mirrors import LedgerMirrors
from colibri.daemon.process import (
    acquire_lock,
    check_state_dir,
    clear_stale_socket,
    open_to_group,
    run_loop,
)
from colibri.daemon.schedules import ScheduleRunner
from colibri.daemon.server import Server
from colibri.daemon.signals import StopSignals
from colibri.daemon.supervisor import Supervisor
from colibri.daemon.timers import sweep, tick
from colibri.daemon.tokens import TokenAuthority
from colibri.store import Store, open_store
from colibri.store.base import LeasedStore

if TYPE_CHECKING:
    from colibri.daemon.metrics import Metrics, MetricsEndpoint
    from colibri.store.postgres import BoardLease

__all__ = ["Daemon", "compose", "run_loop", "serve"]

log = logging.getLogger(__name__)


@dataclass(eq=False)
class Daemon:
    """The daemon's parts, wired: each gets its collaborators here and nowhere else."""

    config: Config
    board: Board
    server: Server
    bus: Bus
    schedules: ScheduleRunner
    supervisor: Supervisor
    commands: Commands
    #: A PostgreSQL board's lease, renewed while the daemon serves (None for SQLite).
    lease: BoardLease | None = None
    #: Prometheus metrics (``server.metrics``, ``--metrics``); None: not asked for.
    metrics: Metrics | None = None


def compose(
    config: Config,
    store: Store,
    mirror: LedgerMirrors,
    clock: Clock,
    schedule_clock: Clock | None = None,
) -> Daemon:
    """Build the daemon over an open store and ledger mirror (inside the running loop);
    its schedules fire by ``schedule_clock`` (a PostgreSQL board's: ``BoardClock``)."""
    send_to = {name: ws.send_to for name, ws in config.workspaces.items()}
    budgets = {
        name: ws.budget_usd_daily
        for name, ws in config.workspaces.items()
        if ws.budget_usd_daily is not None
    }
    board = Board(store, config.scheduler, clock, send_to, budgets)
    server = Server(config, board, mirror)
    bus = Bus(board.audience, server.loop, server.schedule_flush)
    schedules = ScheduleRunner(board, board.batch, config.default_tz, schedule_clock)

    def announce(event: HarnessExited) -> None:
        board.broadcast(event)
        server.schedule_flush()

    supervisor = Supervisor(config, clock, announce)
    tokens = TokenAuthority(store, clock, board.tenancy)
    commands = Commands(board, server, bus, schedules, supervisor, tokens)
    server.attach(commands.handle, bus, schedules.reload)
    metrics = None
    if config.server.metrics is not None:
        # Only now: a daemon without metrics never loads prometheus_client.
        from colibri.daemon.metrics import Metrics

        metrics = Metrics(board, schedules, supervisor)
        server.on_committed = metrics.committed
    return Daemon(config, board, server, bus, schedules, supervisor, commands, metrics=metrics)


async def serve(config: Config, started: Callable[[str], None] = lambda state: None) -> int:
    """Run the daemon until it is stopped; its exit code. ``started`` is told ``"serving"``
    once its socket answers, or ``"standby"`` once it stands by (``run --detach`` waits for
    it)."""
    # SIGUSR1 rotates the ledger once the daemon runs; until then (lock, store, catch-up) its
    # default action would end the process.
    signal.signal(signal.SIGUSR1, signal.SIG_IGN)
    # SIGINT, SIGTERM and SIGHUP from here on: never the default action, which would end the
    # daemon midway through building its board, a PostgreSQL lease held, its harnesses left
    # running with nobody to stop them.
    signals = StopSignals(asyncio.get_running_loop())
    host.select(config.host)
    crashpoints.arm(config.crashpoint)
    if crashpoints.armed is not None:
        log.warning(
            "crash point armed: this daemon will SIGKILL itself (for crash tests only)",
            extra={"event": "crashpoint_armed", "crashpoint": config.crashpoint},
        )
    config.layout.state.mkdir(mode=0o700, exist_ok=True)
    check_state_dir(config.layout.state, config.server.socket_group)
    lock_fd = acquire_lock(config.layout.daemon_lock)
    store = None
    board_hold: BoardHold | None = None
    bound = False  # the socket path is ours to remove only once we created it
    clock = SystemClock()
    mirror = LedgerMirrors(
        config.layout.ledger, config.ledger.rotate_bytes, config.ledger.keep, clock
    )
    keeper: asyncio.Task[None] | None = None
    endpoint: MetricsEndpoint | None = None
    try:
        advertised = config.server.listen[0] if config.server.listen else None
        board_hold = await hold_board(config, advertised, signals.asked, started)
        if board_hold is None:
            log.info("stopped while standing by", extra={"event": "stopped"})
            return 0
        with renewed_while_building(board_hold.lease) as lost, signals.while_building():
            log.debug("building the board", extra={"event": "building"})
            store = open_store(
                config.store,
                durability=config.durability,
                lease_ttl=None if board_hold.lease is None else board_hold.lease.ttl,
            )
            daemon = _build(config, board_hold, store, mirror, clock)
        if lost:
            log.critical(lost[0], extra={"event": "fatal", "error": lost[0]})
            return 1
        board, server = daemon.board, daemon.server
        if server.fatal_error is not None:
            return 1
        if daemon.metrics is not None and config.server.metrics is not None:
            from colibri.daemon.metrics import MetricsEndpoint

            endpoint = MetricsEndpoint(daemon.metrics, config.server.metrics)
            await endpoint.start()  # a port in use stops the daemon here, before it serves
            server.metrics_url = endpoint.url
            log.info(
                f"serving metrics at {endpoint.url}",
                extra={"event": "metrics", "url": endpoint.url},
            )
        clear_stale_socket(config.layout.socket)
        old_umask = os.umask(0o177)  # the socket is born 0600: no window with wider modes
        try:
            unix_server = await server.loop.create_unix_server(
                lambda: Connection(server), path=str(config.layout.socket), backlog=1024
            )
            bound = True
        finally:
            os.umask(old_umask)
        open_to_group(config)
        gateway = Gateway(server, config.server)
        gateway.start()
        server.listening = [str(a) for a in gateway.bound]
        for address in gateway.bound:
            log.info(
                f"listening on {address}" + (" (TLS)" if gateway.context else " (plain TCP)"),
                extra={"event": "listening", "address": str(address)},
            )
        log.info(
            "daemon ready",
            extra={
                "event": "ready",
                "socket": str(config.layout.socket),
                "listen": [str(a) for a in gateway.bound],
                "metrics": server.metrics_url,
                "pid": os.getpid(),
                "store": store.location,
                "open_tasks": len(board.tasks),
            },
        )
        started("serving")
        if (lease := daemon.lease) is not None:

            def retenant() -> None:
                serve_tenants(lease, server, daemon.schedules, config)

            keeper = asyncio.create_task(
                keep_lease(lease, server, retenant, signals.asked.is_set), name="lease"
            )
            keeper.add_done_callback(lambda done: keeper_ended(done, server))
        await _run_until_stopped(daemon, signals)
        unix_server.close()
        gateway.close()
        if server.fatal_error is not None:
            return 1  # as after a crash: harnesses and their sessions keep running
        server.close_all()
        await asyncio.sleep(0)  # let the closed connections report in
        server.flush()
        server.closed = True
        if server.fatal_error is not None:
            return 1
        log.info("daemon stopped", extra={"event": "stopped"})
        return 0
    finally:
        if keeper is not None:
            keeper.cancel()
        if endpoint is not None:
            endpoint.close()
        try:
            if bound:
                os.unlink(config.layout.socket)
        except FileNotFoundError:
            pass
        mirror.close()
        if store is not None:
            store.close()
        if board_hold is not None:
            # Bounded: a server gone silent must not keep the process from exiting (the
            # leases then expire by themselves).
            releasing = threading.Thread(target=board_hold.release, daemon=True)
            releasing.start()
            releasing.join(RELEASE_WAIT)
        os.close(lock_fd)


def _build(
    config: Config, hold: BoardHold, store: Store, mirror: LedgerMirrors, clock: Clock
) -> Daemon:
    """The daemon's parts on the board just held, the board built from the store: every open
    task read back (a while, on a large board), the schedules loaded and what that changed
    committed."""
    if hold.lease is not None:
        # Written under the leases' fence; reading and writing only their tenants' rows.
        assert isinstance(store, LeasedStore)  # leases are held on PostgreSQL boards only
        store.fence, store.tenants = hold.lease.fence, hold.lease.named
    caught_up = mirror.open(store)
    if caught_up:
        log.info(
            "ledger mirror caught up from the store",
            extra={"event": "ledger_caught_up", "rows": caught_up},
        )
    lease = hold.lease
    on_board = None if lease is None else BoardClock(lambda: lease.clock_offset)
    daemon = compose(config, store, mirror, clock, on_board)
    daemon.lease = daemon.commands.lease = hold.lease
    tenancy = daemon.board.tenancy
    if hold.lease is not None:
        if config.tenants or config.share:
            tenancy.served = frozenset(hold.lease.tenants)
        tenancy.elsewhere = hold.lease.elsewhere
        tenancy.ttl = hold.lease.ttl
    try:
        daemon.board.rebuild()
        daemon.schedules.load(served_schedules(config, tenancy))
    except ColibriError:
        raise
    except Exception as exc:
        log.debug("loading the board failed", exc_info=True)
        raise StorageUnavailable(
            f"the board in {store.location} could not be loaded ({exc!r}); nothing was changed"
        ) from None
    daemon.server.flush()  # commit what loading the schedules changed
    return daemon


async def _run_until_stopped(daemon: Daemon, signals: StopSignals) -> None:
    config, board, server = daemon.config, daemon.board, daemon.server
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def stopping(signum: int) -> None:
        log.info("stopping", extra={"event": "stopping", "signal": signal.Signals(signum).name})
        stop.set()

    signals.on_first = stopping
    if signals.asked.is_set():  # the first came while the board was being built
        stopping(signal.SIGTERM)
    server.on_fatal = stop.set

    def rotate_ledger() -> None:
        if not server.mirror.rotate():
            log.warning(
                "SIGUSR1: ledger mirror not rotated (it is empty, or failing and being repaired)",
                extra={"event": "ledger_not_rotated"},
            )

    # SIGUSR1 as nginx reopens its logs; SIGHUP keeps its meaning (a closed terminal stops a
    # foreground daemon: StopSignals).
    loop.add_signal_handler(signal.SIGUSR1, rotate_ledger)

    sweep_wake = asyncio.Event()
    board.set_wake(sweep_wake.set)

    async with asyncio.TaskGroup() as group:
        tasks = [
            group.create_task(tick(board, server, config.scheduler.tick), name="tick"),
            group.create_task(sweep(board, server, sweep_wake), name="sweep"),
            group.create_task(
                daemon.schedules.run(server.schedule_flush, server.fail_batch), name="schedules"
            ),
            group.create_task(daemon.supervisor.run(), name="supervisor"),
        ]
        await stop.wait()
        for task in tasks:
            task.cancel()
    # Harnesses are stopped while the socket still serves, so their last reports land.
    if server.fatal_error is None:
        await daemon.supervisor.stop_all()
