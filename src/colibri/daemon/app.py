"""Wire the daemon together and run it until SIGINT or SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import stat
import threading
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from colibri import host
from colibri.config import Config
from colibri.core.access import Tenancy
from colibri.core.errors import (
    ColibriError,
    Internal,
    LockHeld,
    RootError,
    StorageUnavailable,
)
from colibri.core.events import HarnessExited
from colibri.daemon import crashpoints
from colibri.daemon.board import Board
from colibri.daemon.bus import Bus
from colibri.daemon.clock import BoardClock, Clock, SystemClock
from colibri.daemon.commands import Commands
from colibri.daemon.connection import Connection
from colibri.daemon.gateway import Gateway
from colibri.daemon.ledger import LedgerMirror
from colibri.daemon.schedules import ScheduleRunner
from colibri.daemon.server import Server
from colibri.daemon.supervisor import Supervisor
from colibri.daemon.tokens import TokenAuthority
from colibri.locks import hold_lock, store_lock
from colibri.store import Store, open_store

if TYPE_CHECKING:
    from colibri.core.schedules import ScheduleSpec
    from colibri.daemon.metrics import Metrics, MetricsEndpoint
    from colibri.store.postgres import BoardLease

log = logging.getLogger(__name__)
T = TypeVar("T")


def acquire_lock(path: Path) -> int:
    """Hold ``daemon.lock`` for the life of the process; the kernel drops it if we die."""
    try:
        return hold_lock(path)
    except LockHeld as held:
        raise LockHeld(
            held.holder,
            f"another daemon (pid {held.holder}) is already running for {path.parent.parent}",
        ) from None


class _BoardHold:
    """What makes a board this daemon's: ``<store>.lock`` of an SQLite file, or the lease of a
    PostgreSQL board."""

    def __init__(self, fd: int | None = None, lease: BoardLease | None = None) -> None:
        self.fd = fd
        self.lease = lease

    def release(self) -> None:
        if self.fd is not None:
            os.close(self.fd)
        if self.lease is not None:
            self.lease.release()


async def hold_board(
    config: Config,
    address: str | None,
    stop: asyncio.Event,
    started: Callable[[str], None] = lambda state: None,
) -> _BoardHold | None:
    """The board, held: an SQLite file's lock at once, or a PostgreSQL board's lease — waiting
    as a standby while another daemon holds it (``started("standby")`` once its socket says
    so), and taking over once its lease has expired. None if told to stop while waiting."""
    if not config.store.startswith(("postgresql://", "postgres://")):
        return _BoardHold(fd=acquire_store_lock(config.store))
    from colibri.store.postgres import BoardLease

    # The board's tables first (made, or migrated, under the board's lock): the lease is one.
    await _off_loop(lambda: open_store(config.store, durability=config.durability).close())
    lease = BoardLease(
        config.store, config.lease_ttl, address, str(config.root), config.tenants,
        sharing=config.share,
    )  # fmt: skip
    if lease.sharing:
        # It serves at once, none of the tenants yet: it takes its share as it keeps its lease.
        await _off_loop(lease.beat)
        await _off_loop(lease.renew)  # (of no row: when its deadline starts)
        log.info("sharing the board's tenants out", extra={"event": "sharing"})
        return _BoardHold(lease=lease)
    said = [f"standby: {lease.what} is being taken"]
    # Its root's socket says so meanwhile, rather than leave "no daemon is running" to be said.
    clear_stale_socket(config.layout.socket)
    old_umask = os.umask(0o177)
    try:
        standby = await asyncio.start_unix_server(
            lambda reader, writer: _say_standby(reader, writer, said),
            path=str(config.layout.socket),
        )
    finally:
        os.umask(old_umask)
    started("standby")
    try:
        return await _stand_by(lease, stop, said)
    finally:
        standby.close()
        with contextlib.suppress(FileNotFoundError):
            os.unlink(config.layout.socket)


async def _stand_by(lease: BoardLease, stop: asyncio.Event, said: list[str]) -> _BoardHold | None:
    """Poll the lease (every third of its ttl, or when it is due) until it is taken, saying in
    ``said[0]`` — and in the log, at each change — who serves meanwhile."""
    logged = ""
    while not stop.is_set():
        try:
            polled = await _unless_stopped(lambda: _poll(lease), stop)
            if polled is None:
                return None  # asked to stop while the server kept it waiting
            taken, holder = polled
            if taken:
                log.info(
                    f"took {lease.what} (epoch {lease.epoch}); serving",
                    extra={"event": "lease_taken", "epoch": lease.epoch,
                           "tenants": list(lease.tenants) or None},
                )  # fmt: skip
                return _BoardHold(lease=lease)
        except StorageUnavailable as exc:
            holder, why = None, exc.message
        else:
            why = ""
        left = 0.0 if holder is None else max(0.0, float(holder["left_s"]))
        if why:
            said[0] = why
        elif holder is None:
            said[0] = f"standby: {lease.what} is being taken"
        else:
            where = holder["address"] or "an unknown address"
            name = str(holder["name"])
            held = "the board" if name == "board" else f"tenant {name.removeprefix('tenant/')}"
            said[0] = (
                f"standby: daemon {str(holder['owner'])[:8]} at {where} holds {held} (lease "
                f"epoch {holder['epoch']}); taking over when its lease expires"
            )
        if said[0] != logged:
            log.warning(said[0], extra={"event": "standby"})
            logged = said[0]
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(min(lease.ttl / 3, max(0.05, left + 0.01))):
                await stop.wait()
    lease.close()
    return None


def _poll(lease: BoardLease) -> tuple[bool, dict[str, Any] | None]:
    """A standby's poll: say it is there, take the lease if it is free, else who holds it."""
    lease.beat()
    if lease.take():
        return True, None
    return False, lease.holder()


async def _unless_stopped(call: Callable[[], T], stop: asyncio.Event) -> T | None:
    """``call``'s result, off the loop (``_off_loop``); None if ``stop`` is set first — the
    call, hung on a server gone silent perhaps, is left to its thread."""
    called = asyncio.ensure_future(_off_loop(call))
    stopped = asyncio.ensure_future(stop.wait())
    try:
        await asyncio.wait({called, stopped}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        stopped.cancel()
    if not called.done():
        called.cancel()
        return None
    return called.result()


async def _say_standby(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, said: list[str]
) -> None:
    """The standby's socket: every request is answered ``standby``, saying who serves."""
    from colibri.core import protocol
    from colibri.core.errors import Standby

    try:
        while (line := await reader.readline()).endswith(b"\n"):
            error = Standby(f"this daemon stands by; {said[0].removeprefix('standby: ')}")
            reply = {"id": protocol.request_id(line), "ok": False, "error": error.to_wire()}
            writer.write(msgspec.json.encode(reply) + b"\n")
            await writer.drain()
    except (ConnectionError, ValueError):
        pass
    finally:
        writer.close()


def acquire_store_lock(store: str) -> int:
    """Hold ``<store>.lock`` too: another root's daemon may have been pointed at this board."""
    try:
        return hold_lock(store_lock(store), own_folder=False)
    except LockHeld as held:
        raise LockHeld(
            held.holder,
            f"another daemon (pid {held.holder}) already has the board {store} open; one daemon "
            "per board: stop it, or give this root a board of its own (--store, store.path)",
        ) from None


def check_state_dir(path: Path, group: int | None = None) -> None:
    """Refuse a state folder someone else could tamper with; tighten our own to 0700.

    With a socket group the folder also gets that group now, and its traverse bit only once the
    socket is in place (``open_to_group``), so nobody reaches a half-made socket."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise RootError(f"{path} must be a real directory, not a symlink or a file")
    if info.st_uid != os.getuid():
        raise RootError(f"{path} belongs to uid {info.st_uid}, not to us (uid {os.getuid()})")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)
    if group is not None and info.st_gid != group:
        try:
            os.chown(path, -1, group)
        except PermissionError:
            raise RootError(
                f"cannot give {path} to group {group} (server.socket_group): the user running "
                "the daemon must be a member of that group"
            ) from None


def open_to_group(config: Config) -> None:
    """Let ``server.socket_group`` in: the socket 0660 in a folder its members may traverse
    (0710: they reach the socket by name, list nothing, and every file in it is 0600)."""
    group = config.server.socket_group
    if group is None:
        return
    os.chown(config.layout.socket, -1, group)
    os.chmod(config.layout.socket, 0o660)
    os.chmod(config.layout.state, 0o710)


def clear_stale_socket(path: Path) -> None:
    """We hold the lock, so a socket left at ``path`` is from a dead daemon: remove it."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise RootError(f"{path} exists and is not a socket; refusing to remove it")
    os.unlink(path)


def run_loop(main: Coroutine[Any, Any, int], loop: str = "auto") -> int:
    """Run the daemon's loop: uvloop when it is installed (faster sockets), else asyncio's."""
    try:
        if loop == "asyncio":
            raise ImportError
        import uvloop
    except ImportError:
        if loop == "uvloop":
            main.close()
            raise  # the CLI says what to install (colibri.extras)
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


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
    mirror: LedgerMirror,
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
    board_hold: _BoardHold | None = None
    bound = False  # the socket path is ours to remove only once we created it
    mirror = LedgerMirror(config.layout.ledger, config.ledger.rotate_bytes, config.ledger.keep)
    keeper: asyncio.Task[None] | None = None
    endpoint: MetricsEndpoint | None = None
    try:
        advertised = config.server.listen[0] if config.server.listen else None
        board_hold = await hold_board(config, advertised, signals.asked, started)
        if board_hold is None:
            log.info("stopped while standing by", extra={"event": "stopped"})
            return 0
        with _renewed_while_building(board_hold.lease) as lost, signals.while_building():
            log.debug("building the board", extra={"event": "building"})
            store = open_store(
                config.store,
                durability=config.durability,
                lease_ttl=None if board_hold.lease is None else board_hold.lease.ttl,
            )
            daemon = _build(config, board_hold, store, mirror)
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
        if daemon.lease is not None:
            keeper = asyncio.create_task(
                keep_lease(
                    daemon.lease, server, lambda: serve_tenants(daemon), signals.asked.is_set
                ),
                name="lease",
            )
            keeper.add_done_callback(lambda done: _keeper_ended(done, server))
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


def _build(config: Config, hold: _BoardHold, store: Store, mirror: LedgerMirror) -> Daemon:
    """The daemon's parts on the board just held, the board built from the store: every open
    task read back (a while, on a large board), the schedules loaded and what that changed
    committed."""
    if hold.lease is not None:
        # Written under the leases' fence; reading and writing only their tenants' rows.
        store.fence = hold.lease.fence  # type: ignore[attr-defined]
        store.tenants = hold.lease.named  # type: ignore[attr-defined]
    caught_up = mirror.open(store)
    if caught_up:
        log.info(
            "ledger mirror caught up from the store",
            extra={"event": "ledger_caught_up", "rows": caught_up},
        )
    lease = hold.lease
    on_board = None if lease is None else BoardClock(lambda: lease.clock_offset)
    daemon = compose(config, store, mirror, SystemClock(), on_board)
    daemon.lease = hold.lease
    tenancy = daemon.board.tenancy
    if hold.lease is not None:
        if config.tenants or config.share:
            tenancy.served = frozenset(hold.lease.tenants)
        tenancy.elsewhere = hold.lease.elsewhere
        tenancy.ttl = hold.lease.ttl
    try:
        daemon.board.rebuild()
        daemon.schedules.load(_served_schedules(config, tenancy))
    except ColibriError:
        raise
    except Exception as exc:
        log.debug("loading the board failed", exc_info=True)
        raise StorageUnavailable(
            f"the board in {store.location} could not be loaded ({exc!r}); nothing was changed"
        ) from None
    daemon.server.flush()  # commit what loading the schedules changed
    return daemon


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP (``host.stop_signals``: a closed terminal stops a foreground
    daemon as Ctrl+C does, its harnesses with it), from the start of ``serve`` to its end: the
    first asks the daemon to stop — at once while it stands by, once it serves if it is still
    building its board, and then cleanly (``on_first``, set by ``_run_until_stopped``) — and a
    second ends the process at once (``os._exit(1)``), at any moment."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.signals = host.stop_signals()
        self.seen = 0
        #: Set by the first signal.
        self.asked = asyncio.Event()
        #: What the first signal does besides; the running daemon sets its stop here.
        self.on_first: Callable[[int], None] = lambda signum: None
        for signum in self.signals:
            loop.add_signal_handler(signum, self.received, signum)

    def received(self, signum: int) -> None:
        self.seen += 1
        if self.seen > 1:
            os._exit(1)
        self.asked.set()
        self.on_first(signum)

    @contextlib.contextmanager
    def while_building(self) -> Iterator[None]:
        """While the board is built the loop runs nothing, so its signal handlers cannot
        either: a signal would wait for the build to end. Meanwhile Python's own handlers take
        them, which run at once; the loop's wakeup fd is set aside, so that no signal reaches
        both (counted twice, one would be taken for a second)."""
        noted: list[int] = []

        def on_signal(signum: int, frame: object) -> None:
            noted.append(signum)
            if self.seen + len(noted) > 1:
                os._exit(1)

        previous = {signum: signal.signal(signum, on_signal) for signum in self.signals}
        wakeup = signal.set_wakeup_fd(-1)
        try:
            yield
        finally:
            # The loop's own again: its handlers (still registered with it) and its wakeup fd.
            if wakeup != -1:
                signal.set_wakeup_fd(wakeup, warn_on_full_buffer=False)
            for signum in self.signals:
                signal.signal(signum, previous[signum])
            if noted:
                self.received(noted[0])


async def _off_loop(call: Callable[[], T]) -> T:
    """``call``'s result, run on a daemon thread of its own. Not ``asyncio.to_thread``: the
    executor's threads are joined when the loop ends, and a lease call hung on a server gone
    silent would keep a daemon that stopped by its deadline from exiting."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def run() -> None:
        try:
            result = call()
        except BaseException as exc:
            error = exc
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(settle, lambda: future.set_exception(error))
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, lambda: future.set_result(result))

    threading.Thread(target=run, name="colibri-off-loop", daemon=True).start()
    return await future


@contextlib.contextmanager
def _renewed_while_building(lease: BoardLease | None) -> Iterator[list[str]]:
    """While the board is built — on the loop's thread, which ``keep_lease`` cannot run on
    meanwhile — renew a PostgreSQL lease from a thread of its own, every third of its ttl (or
    ``RENEW_RETRY`` after a failure): a board that takes longer than the ttl to build is not
    given up for it. Yields a list that holds why, if the lease passed to another daemon."""
    lost: list[str] = []
    if lease is None:
        yield lost
        return
    done = threading.Event()

    def renew() -> None:
        wait = lease.ttl / 3
        while not done.wait(wait):
            try:
                if not lease.renew():
                    lost.append(f"{lease.what} passed to another daemon while the board was "
                                "being built; stopping")  # fmt: skip
                    return
                wait = lease.ttl / 3
            except StorageUnavailable:
                wait = min(lease.ttl / 3, RENEW_RETRY)

    renewer = threading.Thread(target=renew, name="lease-while-building", daemon=True)
    renewer.start()
    try:
        yield lost
    finally:
        done.set()
        # (A renewal hanging on the network is not waited for beyond the ttl: keep_lease's
        # own deadline judges the lease from here on.)
        renewer.join(lease.ttl)


#: How soon a renewal that failed is tried again (seconds; a third of the ttl if that is less).
RENEW_RETRY = 0.2
#: How long a stopping daemon waits to give its leases back (they expire by themselves).
RELEASE_WAIT = 5.0


def _keeper_ended(keeper: asyncio.Task[None], server: Server) -> None:
    """``keep_lease`` (and its beat) ends only by the daemon's stop (cancelled) or its fatal
    error: a bug that ended it otherwise would leave the daemon serving with nobody renewing
    its leases (or saying it is there, and sharing the tenants out)."""
    if keeper.cancelled() or server.fatal_error is not None:
        return
    exc = keeper.exception()
    log.error("the lease keeper ended", exc_info=exc, extra={"event": "internal_error"})
    server.fatal(f"renewing the leases failed ({exc!r})")


async def keep_lease(
    lease: BoardLease,
    server: Server,
    retenant: Callable[[], None] | None = None,
    stopping: Callable[[], bool] = lambda: False,
) -> None:
    """Renew the board's lease every third of its ttl, for as long as the daemon runs — through
    its stopping too, when the harnesses' last reports are still written. Stop serving by this
    daemon's own deadline (when the last statement that renewed it was sent + ttl - margin, on
    the monotonic clock) when renewals fail or hang, and at once when the lease has passed to
    another. After each renewal the daemon beats and — sharing — takes and gives back tenants
    (``retenant`` serving the lease's tenants anew), in a task of its own: renewals come every
    third of the ttl whatever that work takes, on a thread and a connection of their own —
    whatever holds the loop up, a board rebuilt for new tenants included — and no other
    daemon's taking holds them up (``BoardLease``)."""
    loop = asyncio.get_running_loop()  # its time() is time.monotonic(), as lease.held_since
    margin = min(1.0, lease.ttl / 10)

    def deadline() -> float:
        return lease.held_since + lease.ttl - margin

    # The store's waits on the loop end by the deadline too: one begun just before it (a batch
    # meeting a server gone silent) would hold the loop, and this check, up to half the ttl.
    server.board.store.heed_deadline(deadline)
    why = ["PostgreSQL did not answer in time, or this daemon was held up past it"]
    lost: list[str] = []
    done = threading.Event()
    heard = asyncio.Event()  # the renewer's word: a renewal made, or the lease lost
    renewed_now = asyncio.Event()

    def tell(renewed: bool) -> None:
        def told() -> None:
            heard.set()
            if renewed:
                renewed_now.set()

        with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
            loop.call_soon_threadsafe(told)

    def renewing() -> None:
        """On a thread of its own, never waiting for the loop: a loop held up by its batches'
        round trips (a server far away, the writers' lock) must not keep the leases from being
        renewed. The loop judges the deadline; this thread only renews."""
        due = time.monotonic()  # the first at once: building the board took some of the ttl
        while not done.wait(max(0.0, due - time.monotonic())):
            if time.monotonic() >= deadline():
                tell(False)  # past it: the loop stops the daemon
                return
            try:
                renewed = lease.renew()
            except StorageUnavailable as exc:
                why[0] = exc.message
                # Again soon, not a third of the ttl later: a server back after a restart or a
                # blip must find the lease renewed well before the deadline.
                due = time.monotonic() + min(lease.ttl / 3, RENEW_RETRY)
                continue
            except Exception as exc:  # the connection closed under it as the daemon stops
                if done.is_set():
                    return
                why[0] = f"renewing failed ({exc!r})"
                due = time.monotonic() + min(lease.ttl / 3, RENEW_RETRY)
                continue
            if not renewed:
                lost.append(f"{lease.what} has passed to another daemon (or expired)")
                tell(False)
                return
            # A third of the ttl from when this one was sent, whatever the loop does meanwhile.
            due = lease.held_since + lease.ttl / 3
            tell(True)

    renewer = threading.Thread(target=renewing, name="colibri-lease", daemon=True)
    renewer.start()
    beating = asyncio.create_task(_keep_beating(lease, server, renewed_now, retenant, stopping))
    beating.add_done_callback(lambda ended: _keeper_ended(ended, server))
    try:
        while True:
            heard.clear()
            # Woken by the renewer, or at the deadline, whichever comes first: failing or hung
            # renewals must not carry the daemon past it (the lease could be another's).
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(max(0.0, deadline() - loop.time())):
                    await heard.wait()
            if lost:
                server.fatal(lost[0])
                return
            if loop.time() >= deadline():
                server.fatal(
                    f"{lease.what} could not be renewed within its ttl ({why[0]}); "
                    "stopping, so that another daemon may take the board"
                )
                return
    finally:
        done.set()
        beating.cancel()


async def _keep_beating(
    lease: BoardLease,
    server: Server,
    renewed: asyncio.Event,
    retenant: Callable[[], None] | None,
    stopping: Callable[[], bool],
) -> None:
    """After each renewal: the daemon's beat, then a step of sharing the tenants out. A turn
    that takes longer than a third of the ttl (a server far away, another daemon's taking to
    wait for) lets renewals go on meanwhile; the next turn follows the renewal after it. A
    beat or step hung on a silent server ends by its connection's bound on silence."""
    pinned: set[str] = set()  # tenants handed to this daemon (hive move): given back last
    loop = asyncio.get_running_loop()
    while True:
        await renewed.wait()
        renewed.clear()
        with contextlib.suppress(StorageUnavailable):
            lease.agents = sum(a.online for a in server.board.agents.values())
            await _off_loop(lease.beat)
            server.board.tenancy.elsewhere = lease.elsewhere
            if retenant is not None and not server.closed and not stopping():
                # Bounded: tenants taken one at a time for a third of the ttl at most (always
                # one), then planned again from the leases as they are by then.
                until = loop.time() + lease.ttl / 3
                await _share_out(lease, server.board.tenancy, retenant, pinned, until)


async def _share_out(
    lease: BoardLease,
    tenancy: Tenancy,
    retenant: Callable[[], None],
    pinned: set[str],
    until: float | None = None,
) -> None:
    """One step of sharing the board's tenants out (``core.sharing``): record the tenants asked
    for that nobody serves; then, for a sharing daemon, read the leases and daemons, and give
    tenants back — once this daemon no longer serves them — or take free ones and serve them.
    A step that fails is tried again after the next renewal."""
    try:
        if tenancy.wanted:
            # A copy: the loop adds to the set meanwhile, and those are recorded next time.
            wanted = set(tenancy.wanted)
            await _off_loop(lambda: lease.make_known(wanted))
            tenancy.wanted -= wanted
        if lease.sharing:
            await _share_step(lease, retenant, pinned, until)
    except StorageUnavailable:
        pass
    except Exception:
        log.exception("sharing the tenants out failed", extra={"event": "sharing_failed"})
    if lease.sharing and set(lease.tenants) != set(tenancy.served or ()):
        # A step that failed half-way (a lease taken, its tenant not yet served): served now,
        # so that no lease is held for a tenant nobody serves.
        retenant()


async def _share_step(
    lease: BoardLease, retenant: Callable[[], None], pinned: set[str], until: float | None = None
) -> None:
    """Plan and make one step of sharing: give tenants back, or take free ones — one at a time,
    as many as there is time for before ``until`` (at least one)."""
    from colibri.core import sharing

    survey = await _off_loop(lease.survey)
    if "*" in survey.owners:
        return  # a daemon serves the whole board: no tenant is free while it does
    chosen = sharing.plan(lease.owner, survey.tenants, survey.owners, survey.sharing,
                          survey.handovers, frozenset(pinned),
                          frozenset(survey.reserved))  # fmt: skip
    if chosen.give:
        held = lease.drop(chosen.give)
        retenant()  # serving them no more, written under a fence without them
        await _off_loop(lambda: lease.release_rows(held))
        pinned.difference_update(chosen.give)
        log.info(
            f"gave back tenant{'s' * (len(chosen.give) > 1)} {', '.join(chosen.give)}; serving "
            f"{', '.join(lease.tenants) or 'none'}",
            extra={"event": "tenants_given", "tenants": list(chosen.give),
                   "serving": list(lease.tenants)},
        )  # fmt: skip
    elif chosen.take:
        taken = await _off_loop(lambda: lease.take_tenants(chosen.take, until))
        if not taken:
            return
        pinned.update(t for t in taken if survey.handovers.get(t) == lease.owner)
        retenant()
        log.info(
            f"took tenant{'s' * (len(taken) > 1)} {', '.join(taken)} (epoch {lease.epoch}); "
            f"serving {', '.join(lease.tenants)}",
            extra={"event": "tenants_taken", "tenants": taken, "serving": list(lease.tenants),
                   "epoch": lease.epoch},
        )  # fmt: skip


def serve_tenants(daemon: Daemon) -> None:
    """Serve the tenants the daemon's leases hold now (a sharing daemon took or gave some):
    at a batch boundary — what the batch holds commits first, under the fence it began with —
    the store names the new set and writes under its fence, the board is built from its
    tenants' rows (as after a failed batch: connected agents stay), colibri.jsonc's schedules
    of tenants gained are brought in, the connections of tenants no longer served are
    closed (they connect again, and are sent on), and their agents forgotten."""
    lease, server, board = daemon.lease, daemon.server, daemon.board
    assert lease is not None
    server.flush()
    if server.closed:
        return
    store = board.store
    store.fence, store.tenants = lease.fence, lease.named  # type: ignore[attr-defined]
    board.tenancy.served = frozenset(lease.tenants)
    if server.unavailable is None:
        try:
            # (keep_lease's renewer renews meanwhile, on its own thread.)
            store.rollback()
            board.rebuild()
            daemon.schedules.load(_served_schedules(daemon.config, board.tenancy))
        except StorageUnavailable as exc:
            server.unavailable = exc.message  # the sweep's recover() builds it once it is back
        except Exception as exc:
            log.debug("rebuild failed", exc_info=True)
            server.fatal(f"the board could not be built for its new tenants ({exc!r})")
            return
    server.close_unserved()
    board.forget_unserved()
    server.schedule_flush()


def _served_schedules(config: Config, tenancy: Tenancy) -> dict[str, ScheduleSpec]:
    """colibri.jsonc's schedules of the tenants served here: the others' daemons fire theirs."""
    return {n: s for n, s in config.schedules.items() if tenancy.serves(s.task.tenant)}


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

    async def tick() -> None:
        while True:
            await asyncio.sleep(config.scheduler.tick)
            board.dispatch_wanted = True
            server.schedule_flush()

    sweep_wake = asyncio.Event()
    board.set_wake(sweep_wake.set)

    async def sweep() -> None:
        # At least once a second, however often it is woken: a peer that makes the board set
        # new deadlines again and again (re-registering, say) must not hold the sweep off.
        last = loop.time()
        unreachable = ""  # why the store was last found unreachable, once said
        while True:
            deadline = board.next_deadline()
            due = last + 1.0 if deadline is None else min(last + 1.0, deadline)
            sweep_wake.clear()
            try:
                async with asyncio.timeout(max(0.005, due - loop.time())):
                    await sweep_wake.wait()  # a new, maybe earlier, deadline: recompute
                if loop.time() < due:
                    continue
            except TimeoutError:
                pass
            last = loop.time()
            if server.unavailable is not None:
                try:
                    # Asked off the loop: a server still away, or silent, would hold it up
                    # as long as connecting to it takes, every second. (What the daemon says
                    # meanwhile stays why it became unavailable.)
                    await _off_loop(board.store.reachable)
                except StorageUnavailable as exc:
                    if exc.message != unreachable:
                        unreachable = exc.message
                        log.warning(exc.message, extra={"event": "storage_unreachable"})
                    continue
                unreachable = ""
                if not server.recover():
                    continue  # nothing is judged, expired or fired while the store is away
            try:
                board.sweep()
            except Exception as exc:
                # A write of the sweep (an agent gone offline, its sessions dropped) may send
                # the batch, and meet what sending it met: the batch fails, the daemon serves on.
                log.exception("the sweep failed; its batch is rolled back",
                              extra={"event": "sweep_failed", "error": str(exc)})  # fmt: skip
                server.fail_batch(exc if isinstance(exc, ColibriError) else Internal(repr(exc)))
            server.close_stalled()
            server.schedule_flush()

    async with asyncio.TaskGroup() as group:
        tasks = [
            group.create_task(tick(), name="tick"),
            group.create_task(sweep(), name="sweep"),
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
