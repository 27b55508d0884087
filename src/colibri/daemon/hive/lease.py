"""Keeping a PostgreSQL board's lease: renewed from a thread of its own while the daemon
serves — and while it builds its board —, the daemon stopped by its own deadline once renewals
fail, and after each renewal its beat and a step of sharing the tenants out."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from colibri.core.errors import StorageUnavailable
from colibri.daemon.hive.sharing import share_out
from colibri.daemon.process import off_loop

if TYPE_CHECKING:
    from colibri.daemon.server import Server
    from colibri.store.postgres import BoardLease

#: The daemon's records keep the logger they are known by in the logs (the "logger" field).
log = logging.getLogger("colibri.daemon.app")


@contextlib.contextmanager
def renewed_while_building(lease: BoardLease | None) -> Iterator[list[str]]:
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


def keeper_ended(keeper: asyncio.Task[None], server: Server) -> None:
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
    beating.add_done_callback(lambda ended: keeper_ended(ended, server))
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
            await off_loop(lease.beat)
            server.board.tenancy.elsewhere = lease.elsewhere
            if retenant is not None and not server.closed and not stopping():
                # Bounded: tenants taken one at a time for a third of the ttl at most (always
                # one), then planned again from the leases as they are by then.
                until = loop.time() + lease.ttl / 3
                await share_out(lease, server.board.tenancy, retenant, pinned, until)
