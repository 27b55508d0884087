"""Holding the board: an SQLite file's lock, or a PostgreSQL board's lease — standing by, its
socket answering ``standby``, while another daemon holds it."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from colibri.config import Config
from colibri.core.errors import StorageUnavailable
from colibri.core.leases import BOARD_LEASE, is_postgres, lease_tenant
from colibri.daemon.process import acquire_store_lock, clear_stale_socket, off_loop
from colibri.store import open_store

if TYPE_CHECKING:
    from colibri.store.postgres import BoardLease

#: The daemon's records keep the logger they are known by in the logs (the "logger" field).
log = logging.getLogger("colibri.daemon.app")
T = TypeVar("T")


class BoardHold:
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
) -> BoardHold | None:
    """The board, held: an SQLite file's lock at once, or a PostgreSQL board's lease — waiting
    as a standby while another daemon holds it (``started("standby")`` once its socket says
    so), and taking over once its lease has expired. None if told to stop while waiting."""
    if not is_postgres(config.store):
        return BoardHold(fd=acquire_store_lock(config.store))
    from colibri.store.postgres import BoardLease

    # The board's tables first (made, or migrated, under the board's lock): the lease is one.
    await off_loop(lambda: open_store(config.store, durability=config.durability).close())
    lease = BoardLease(
        config.store, config.lease_ttl, address, str(config.root), config.tenants,
        sharing=config.share,
    )  # fmt: skip
    if lease.sharing:
        # It serves at once, none of the tenants yet: it takes its share as it keeps its lease.
        await off_loop(lease.beat)
        await off_loop(lease.renew)  # (of no row: when its deadline starts)
        log.info("sharing the board's tenants out", extra={"event": "sharing"})
        return BoardHold(lease=lease)
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


async def _stand_by(lease: BoardLease, stop: asyncio.Event, said: list[str]) -> BoardHold | None:
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
                return BoardHold(lease=lease)
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
            held = "the board" if name == BOARD_LEASE else f"tenant {lease_tenant(name)}"
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
    """``call``'s result, off the loop (``off_loop``); None if ``stop`` is set first — the
    call, hung on a server gone silent perhaps, is left to its thread."""
    called = asyncio.ensure_future(off_loop(call))
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
    from colibri.core.replies import refusal

    try:
        while (line := await reader.readline()).endswith(b"\n"):
            error = Standby(f"this daemon stands by; {said[0].removeprefix('standby: ')}")
            reply = refusal(protocol.request_id(line), error)
            writer.write(msgspec.json.encode(reply) + b"\n")
            await writer.drain()
    except (ConnectionError, ValueError):
        pass
    finally:
        writer.close()
