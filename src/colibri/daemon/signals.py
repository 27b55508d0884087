"""How a daemon is asked to stop: the signals, from the start of ``serve`` to its end."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Iterator

from colibri import host


class StopSignals:
    """SIGINT, SIGTERM and SIGHUP (``host.stop_signals``: a closed terminal stops a foreground
    daemon as Ctrl+C does, its harnesses with it), from the start of ``serve`` to its end: the
    first asks the daemon to stop — at once while it stands by, once it serves if it is still
    building its board, and then cleanly (``on_first``, set by ``app._run_until_stopped``) — and a
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
