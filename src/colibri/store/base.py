"""The Store contract. Every implementation passes ``tests/store/test_contract.py``.

A store is used by one daemon thread as a unit of work: writes open a transaction, and nothing
is durable — nor may be acknowledged — until ``commit`` returns. Each task change is written
together with its ledger row, so the two can never disagree. The rules (which transitions are
legal) live in ``colibri.core.states``; the store only applies a change by compare-and-set.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from colibri.core.model import Agent, LedgerEntry, Task
from colibri.core.schedules import Schedule


class StoreConflict(Exception):
    """A write the stored rows refuse; nothing of the call that raised it was written.

    ``update_task``: the row moved under the compare-and-set (another state or epoch, or no
    such task). ``insert_task``: the task's id, or its tenant's idempotency key, is taken.
    A backend raises it ``from`` the driver's own error, which never passes the store.

    Internal, not a ``ColibriError``: it has no code and never reaches a client. The board
    turns a conflicting transition into ``IllegalTransition``; a conflicting insert means the
    board's own checks (``find_idempotent`` first, fresh UUIDv7 ids) were bypassed, a bug, which
    the server answers as ``internal`` and rolls the batch back for.
    """


@dataclass(frozen=True, slots=True)
class TaskFilter:
    state: str | None = None
    agent: str | None = None
    workspace: str | None = None
    parent: str | None = None
    tenant: str | None = None
    after: str | None = None
    limit: int = 100


class Store(Protocol):
    location: str

    def close(self) -> None: ...

    def commit(self) -> None:
        """Make every write since the last commit durable.

        :raises StorageUnavailable: the disk is full or read-only; the writes were rolled back.
        """

    def rollback(self) -> None: ...

    def insert_task(
        self, task: Task, entry: LedgerEntry, fingerprint: str | None = None
    ) -> LedgerEntry:
        """Write a new task and its first ledger row; return the row with its ``seq``.

        ``fingerprint`` is kept with the task (not part of it): what the submission asked
        for, read back by ``fingerprint`` when its idempotency key comes again."""

    def update_task(
        self,
        task: Task,
        expected_state: str,
        expected_epoch: int,
        entry: LedgerEntry,
        *more: LedgerEntry,
    ) -> LedgerEntry:
        """Write ``task`` over the row if it still has ``expected_state`` and ``expected_epoch``.

        ``entry`` and then ``more`` are appended to the ledger (their ``seq`` set in place);
        ``entry`` is returned.

        :raises StoreConflict: the row had moved; nothing was written.
        """

    def get_task(self, task_id: str) -> Task | None: ...

    def find_idempotent(self, tenant: str, key: str) -> Task | None:
        """The tenant's task with this idempotency key, whatever its state; a key names one
        task for as long as the store keeps it."""

    def claim_key(self) -> bytes:
        """The board's secret that signs claims (made once, kept forever; committed before
        it is returned, so no claim is ever signed with a key that could be lost)."""

    def fingerprint(self, task_id: str) -> str | None:
        """The fingerprint the task was inserted with; None if none (or no such task)."""

    def list_tasks(self, query: TaskFilter) -> list[Task]: ...

    def children(self, task_id: str) -> list[Task]: ...

    def count_children(self, task_id: str) -> int: ...

    def open_family(self, task_id: str) -> list[Task]:
        """The task and its descendants at any depth that are pending or running, root first."""

    def open_tasks(self) -> list[Task]:
        """Every task not yet closed, oldest first: the daemon rebuilds from these."""

    def count_by_state(self) -> dict[str, int]: ...

    def ledger(self, after: int, limit: int, task: str | None = None) -> list[LedgerEntry]: ...

    def max_ledger_seq(self) -> int: ...

    def upsert_agent(self, agent: Agent, registered_at: str) -> None: ...

    def agents(self) -> list[Agent]: ...

    def ensure_tenant(self, name: str, at: str) -> None: ...

    def ensure_skills(self, names: list[str]) -> None: ...

    def describe_skill(self, name: str, description: str) -> None: ...

    def skills(self) -> list[tuple[str, str, int]]:
        """``(name, description, number of known agents that have it)``, by name."""

    def upsert_schedule(self, schedule: Schedule) -> None: ...

    def get_schedule(self, name: str) -> Schedule | None: ...

    def schedules(self) -> list[Schedule]: ...

    def delete_schedule(self, name: str) -> bool: ...

    def record_fire(
        self,
        schedule: str,
        nominal: str,
        outcome: str,
        task: str | None,
        at: str,
        reason: str | None = None,
    ) -> bool:
        """Record one nominal fire time (fired, skipped, missed, refused) once, ever.

        Unique on (schedule, nominal): returns False, writing nothing, if it was recorded
        before — which makes a double fire impossible rather than unlikely. ``reason`` says why
        a fire was refused.
        """

    def fire_recorded(self, schedule: str, nominal: str) -> bool:
        """Whether ``record_fire`` has recorded this nominal time (a read; no write)."""

    def fires(self, schedule: str, limit: int) -> list[dict[str, Any]]:
        """The latest ``limit`` fire records, newest nominal time first: ``schedule``,
        ``nominal``, ``outcome``, ``task``, ``at``, ``reason``."""

    def append_ledger(self, entry: LedgerEntry) -> LedgerEntry: ...

    def cost_totals(self, by: str, since: str) -> list[dict[str, Any]]:
        """Sessions, usd, tokens_in and tokens_out since ``since``, per agent, workspace,
        tenant or day (``by``), from the ledger rows that carry a cost."""

    def set_question(self, task_id: str, question: str | None) -> None:
        """Set or clear a running task's pending question; not a transition, no ledger row."""
