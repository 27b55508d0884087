"""Sharing a PostgreSQL board's tenants out among its daemons (``core.sharing`` plans each
step), and serving the tenants this daemon's leases hold once they change."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

from colibri.config import Config
from colibri.core.access import Tenancy
from colibri.core.errors import StorageUnavailable
from colibri.daemon.process import off_loop
from colibri.store.base import LeasedStore

if TYPE_CHECKING:
    from colibri.core.schedules import ScheduleSpec
    from colibri.daemon.schedules import ScheduleRunner
    from colibri.daemon.server import Server
    from colibri.store.postgres import BoardLease

#: The daemon's records keep the logger they are known by in the logs (the "logger" field).
log = logging.getLogger("colibri.daemon.app")


async def share_out(
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
            await off_loop(lambda: lease.make_known(wanted))
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

    survey = await off_loop(lease.survey)
    if "*" in survey.owners:
        return  # a daemon serves the whole board: no tenant is free while it does
    chosen = sharing.plan(lease.owner, survey.tenants, survey.owners, survey.sharing,
                          survey.handovers, frozenset(pinned),
                          frozenset(survey.reserved))  # fmt: skip
    if chosen.give:
        held = lease.drop(chosen.give)
        retenant()  # serving them no more, written under a fence without them
        await off_loop(lambda: lease.release_rows(held))
        pinned.difference_update(chosen.give)
        log.info(
            f"gave back tenant{'s' * (len(chosen.give) > 1)} {', '.join(chosen.give)}; serving "
            f"{', '.join(lease.tenants) or 'none'}",
            extra={"event": "tenants_given", "tenants": list(chosen.give),
                   "serving": list(lease.tenants)},
        )  # fmt: skip
    elif chosen.take:
        taken = await off_loop(lambda: lease.take_tenants(chosen.take, until))
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


def serve_tenants(
    lease: BoardLease, server: Server, schedules: ScheduleRunner, config: Config
) -> None:
    """Serve the tenants the daemon's leases hold now (a sharing daemon took or gave some):
    at a batch boundary — what the batch holds commits first, under the fence it began with —
    the store names the new set and writes under its fence, the board is built from its
    tenants' rows (as after a failed batch: connected agents stay), colibri.jsonc's schedules
    of tenants gained are brought in, the connections of tenants no longer served are
    closed (they connect again, and are sent on), and their agents forgotten."""
    board = server.board
    server.flush()
    if server.closed:
        return
    store = board.store
    assert isinstance(store, LeasedStore)  # leases are held on PostgreSQL boards only
    store.fence, store.tenants = lease.fence, lease.named
    board.tenancy.served = frozenset(lease.tenants)
    if server.unavailable is None:
        try:
            # (keep_lease's renewer renews meanwhile, on its own thread.)
            store.rollback()
            board.rebuild()
            schedules.load(served_schedules(config, board.tenancy))
        except StorageUnavailable as exc:
            server.unavailable = exc.message  # the sweep's recover() builds it once it is back
        except Exception as exc:
            log.debug("rebuild failed", exc_info=True)
            server.fatal(f"the board could not be built for its new tenants ({exc!r})")
            return
    server.close_unserved()
    board.forget_unserved()
    server.schedule_flush()


def served_schedules(config: Config, tenancy: Tenancy) -> dict[str, ScheduleSpec]:
    """colibri.jsonc's schedules of the tenants served here: the others' daemons fire theirs."""
    return {n: s for n, s in config.schedules.items() if tenancy.serves(s.task.tenant)}
