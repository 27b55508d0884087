"""Every tenant's ledger mirror: ``ledger.jsonl`` for the default tenant's rows,
``ledger.<tenant>.jsonl`` for another's (``daemon/ledger.py`` says what each file keeps)."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from colibri.core.model import DEFAULT_TENANT, LedgerEntry
from colibri.daemon.clock import Clock, SystemClock
from colibri.daemon.ledger import LedgerMirror
from colibri.store import Store


class LedgerMirrors:
    """The mirror of every tenant the store holds rows of (those the daemon serves): a file
    each, opened at start-up (or at a tenant's first row) and caught up from the store."""

    def __init__(
        self, path: Path, rotate_bytes: int = 0, keep: int = 5, clock: Clock | None = None
    ) -> None:
        #: The default tenant's file; another tenant's is named after it (``path_of``).
        self.path = path
        self.rotate_bytes = rotate_bytes
        self.keep = keep
        self.clock: Clock = clock or SystemClock()
        self.mirrors: dict[str, LedgerMirror] = {}

    def path_of(self, tenant: str) -> Path:
        if tenant == DEFAULT_TENANT:
            return self.path
        return self.path.with_name(f"{self.path.stem}.{tenant}{self.path.suffix}")

    def _mirror(self, tenant: str) -> LedgerMirror:
        mirror = self.mirrors.get(tenant)
        if mirror is None:
            path = self.path_of(tenant)
            mirror = LedgerMirror(path, self.rotate_bytes, self.keep, self.clock, tenant)
            self.mirrors[tenant] = mirror
        return mirror

    def open(self, store: Store) -> int:
        """Open every tenant's mirror and catch it up from ``store``; rows appended. The
        default tenant's file is there from the start, rows or not."""
        tenants = {DEFAULT_TENANT, *self.mirrors, *store.ledger_heads()}
        return sum(self._mirror(tenant).open(store) for tenant in sorted(tenants))

    def repair(self, store: Store) -> int:
        """Open again the mirrors that failed (or are new) and catch them up; rows appended.
        ``StorageUnavailable`` if the store cannot be read: they are tried again later."""
        broken = [mirror for mirror in self.mirrors.values() if mirror.broken]
        return sum(mirror.open(store) for mirror in broken)

    @property
    def broken(self) -> bool:
        return any(mirror.broken for mirror in self.mirrors.values())

    def repair_due(self, now: float) -> bool:
        return any(mirror.repair_due(now) for mirror in self.mirrors.values())

    def append(self, entries: Iterable[LedgerEntry]) -> None:
        """Append rows just committed, each to its tenant's file. A tenant this daemon has
        had no rows of yet gets its file at the next ``repair`` (due at once), caught up from
        the store, these rows among others: its file may hold rows from before (another
        daemon served the tenant), which only the store can say how to follow."""
        by_tenant: dict[str, list[LedgerEntry]] = {}
        for entry in entries:
            by_tenant.setdefault(entry.tenant, []).append(entry)
        for tenant, rows in by_tenant.items():
            mirror = self.mirrors.get(tenant)
            if mirror is None:
                mirror = self._mirror(tenant)
                mirror.broken, mirror.retry_at = True, 0.0
            mirror.append(rows)

    def rotate(self) -> bool:
        """Rotate every tenant's file; whether any was."""
        return any([mirror.rotate() for mirror in self.mirrors.values()])

    def close(self) -> None:
        for mirror in self.mirrors.values():
            mirror.close()
