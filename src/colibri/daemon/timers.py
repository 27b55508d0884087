"""The daemon's two timers: the tick, which asks for a dispatch pass, and the sweep, which
judges the board's deadlines (agents silent, leases of sessions, waits, expiries) and brings a
store that was away back."""

from __future__ import annotations

import asyncio
import logging

from colibri.core.errors import ColibriError, Internal, StorageUnavailable
from colibri.daemon.board import Board
from colibri.daemon.process import off_loop
from colibri.daemon.server import Server

#: The daemon's records keep the logger they are known by in the logs (the "logger" field).
log = logging.getLogger("colibri.daemon.app")


async def tick(board: Board, server: Server, every: float) -> None:
    """Every ``every`` seconds (``scheduler.tick``), a dispatch pass at the next flush."""
    while True:
        await asyncio.sleep(every)
        board.dispatch_wanted = True
        server.schedule_flush()


async def sweep(board: Board, server: Server, wake: asyncio.Event) -> None:
    """Sweep the board at its next deadline, or when ``wake`` says a new one may be earlier;
    while the store is away, ask whether it answers again instead."""
    loop = asyncio.get_running_loop()
    # At least once a second, however often it is woken: a peer that makes the board set
    # new deadlines again and again (re-registering, say) must not hold the sweep off.
    last = loop.time()
    unreachable = ""  # why the store was last found unreachable, once said
    while True:
        deadline = board.next_deadline()
        due = last + 1.0 if deadline is None else min(last + 1.0, deadline)
        wake.clear()
        try:
            async with asyncio.timeout(max(0.005, due - loop.time())):
                await wake.wait()  # a new, maybe earlier, deadline: recompute
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
                await off_loop(board.store.reachable)
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
