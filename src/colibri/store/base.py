"""The Store contract. Every implementation passes ``tests/store/test_contract.py``.

A second backend is written against this text alone; the contract suite checks it, and calls
every method of ``Store`` (``tests/store/test_every_method.py`` fails otherwise).

**One writer, one unit of work.** A store is one connection, used by one thread (the daemon's
loop; a commit made aside, ``commit_aside``, runs on the store's own). The first write after a
``commit`` or ``rollback`` opens a batch (a transaction, taken for writing at once, so two writers
queue instead of deadlocking); every later write joins it. Nothing is durable — nor may be
acknowledged — until ``commit`` returns; ``rollback`` discards the whole batch. Reads through the
same store see the batch's writes at once (the daemon checks one request against the writes of the
requests before it in the batch); another store on the same board sees only what was committed.

**Atomic.** Each write method applies all of its rows or none: a task change together with its
ledger rows, so the two can never disagree. When a write raises, nothing of that call was written,
and the batch's earlier writes stand (``StoreConflict``) or the whole batch is gone
(``StorageUnavailable``; and any refusal of a held write, below). A backend whose driver aborts a
whole transaction on a failed statement must use a savepoint to keep this promise.

**Writes held back.** A store over a network (``defers_writes``: PostgreSQL) holds the batch's
task writes (``insert_task``, ``update_task``, ``set_question``, ``set_after``), its ledger rows
(``append_ledger`` and those of the task writes), ``ensure_tenant``, ``ensure_skills`` and
``touch_token``, and sends them together — one round trip a batch, not one a write — when the
batch is *sent*: at its next read, its next write of another method (those are sent at once, after
what is held, so the batch's order is kept), or its commit. Reads see them all the same. Two
things then come later than the call: a ledger row's ``seq``, set on its entry when the batch is
sent (so by the time a read of the batch, or ``commit``, returns); and a refusal — a task id or
idempotency key taken, a compare-and-set that found the row moved — raised as ``BatchRefused`` (or
the lease's fence, ``LeaseLost``) by the read, write or ``commit`` that sends it, and then the
*whole* batch is lost: every later call of it raises that error again until ``rollback``. A store
with ``defers_writes`` False (SQLite) applies each write when it is called, as the rest of this
text says. The daemon meets a refusal only through a bug of its own (its memory holds the open
tasks; it looks a key up before it inserts), and one found as a batch is committed rolls the batch
back, as a failed commit does.

**Rules live elsewhere.** Which transitions are legal is ``colibri.core.states``' business; the
store applies a change by compare-and-set and checks nothing else about it (state names, outcomes,
who may do what). Values are stored as given and read back equal (``==``).

**Errors.** Every write may raise ``StorageUnavailable`` (``storage_unavailable``): the storage,
not the statement, failed (disk full, read-only, I/O error, the board locked for too long). The
batch is then lost: every later write and ``commit`` raise it again, so that no part of the batch
can commit on its own, until ``rollback`` starts a new one. Besides that only ``StoreConflict``,
where a method says so. A driver's own exceptions never pass the store for those cases; one that
does is a bug (a statement that does not compile) and the daemon answers it as ``internal``. Reads
raise nothing of their own but for the ledger's (``ledger``, ``ledger_heads``, ``cost_totals``):
a store may keep the batch's ledger rows until the commit and write them before such a read, which
may then raise ``StorageUnavailable`` as a write does. In SQLite a read that meets a storage fault
passes the driver's error on, and the next write or ``commit`` after it refuses the batch if that
fault rolled it back.

**Values.** Times are RFC 3339 UTC strings as ``colibri.core.model.rfc3339`` writes them
(``2026-01-02T03:04:05.678Z``: fixed width, so string order is time order); the store compares
them as strings and never parses them. Task ids are compared and ordered byte by byte (in
PostgreSQL: ``COLLATE "C"``), as are all names. A ``limit`` is a count of at least 1.

**The ledger's ``seq``** is each tenant's, set by the store as a row is written: 1, then one
more than the tenant's highest, in order, never twice, no gaps (a rolled-back row gives its
number back); writers of different tenants never wait for each other. Readers rely on it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from concurrent.futures import Future
from typing import Any, Protocol, runtime_checkable

from colibri.core.model import Agent, LedgerEntry, Task
from colibri.core.schedules import Schedule
from colibri.core.tokens import Token
from colibri.store.task_query import TaskFilter as TaskFilter


class BatchRefused(Exception):
    """A write held back by a store that ``defers_writes``, refused by the stored rows when the
    batch was sent (a task id or idempotency key taken, a compare-and-set that found the row
    moved), or a batch the server aborted as it was sent: the whole batch is lost, and every
    later call of it raises this again until ``rollback``.

    Not a ``StoreConflict``: the call that raises it is not the one refused (it only sent the
    batch), and nothing of the batch stands. Internal, like ``StoreConflict``: the daemon rolls
    the batch back and answers its requests ``internal``.
    """


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


@runtime_checkable
class LeasedStore(Protocol):
    """A store a daemon writes under its leases of the board (``PostgresStore``; an SQLite
    board is held by its file's lock), which the daemon sets at a batch boundary. ``fence``:
    the ``(owner, lease rows, their epochs)`` every batch checks first, holding the rows until
    it ends so that no takeover commits in between (``LeaseLost`` once one passed); None: none.
    ``tenants``: whose rows every transaction names for row-level security, and so sees and
    writes, comma-separated (``*`` every tenant, ``-`` none)."""

    fence: tuple[str, list[str], list[int]] | None
    tenants: str


class Store(Protocol):
    """The board's storage. "Every tenant" below is every tenant the store serves: all of the
    board's on SQLite; on PostgreSQL those its ``tenants`` name (``LeasedStore``: a daemon
    serving some reads and writes only theirs) — except tokens, read whatever their tenant."""

    #: Where the board is, as it was opened: a file's path for SQLite. Shown to operators
    #: (``status``, error messages); never parsed.
    location: str
    #: Whether the store holds some writes back until the batch is sent (see the module's
    #: "Writes held back"): False for SQLite, True for PostgreSQL.
    defers_writes: bool

    # -- unit of work ----------------------------------------------------------------------------

    def close(self) -> None:
        """Roll back an uncommitted batch and let the connection go.

        Closing a closed store does nothing; no other method may be called after it."""

    def commit(self) -> None:
        """Make every write since the last commit or rollback durable, all of it at once.

        With nothing written it does nothing. Once it returns, the batch survives a crash of
        the process (and, with ``durability="full"``, of the machine), and other stores see it.

        :raises StorageUnavailable: the batch could not be made durable, or was lost earlier
            (see the module's "Errors"); none of it is stored.
        """

    def commit_aside(self) -> Future[float] | None:
        """Commit as ``commit`` does, off the caller's thread where the store can: the future
        gives the commit's seconds or raises its error; None once it committed here (SQLite),
        or with nothing written. The next batch may be written meanwhile; nothing of it, nor
        of this one, is acknowledged before the future says this one committed."""

    def rollback(self) -> None:
        """Discard every write since the last commit; with nothing written, do nothing.

        The store is usable again afterwards, also after ``StorageUnavailable``."""

    def heed_deadline(self, deadline: Callable[[], float]) -> None:
        """Give up any wait for the store's server past ``deadline()``, a monotonic time asked
        anew as the wait goes on (the daemon's lease deadline, which each renewal moves): a
        wait on the daemon's loop begun just before it must not keep the daemon serving past
        it. The waits given up are answered as a silence is (``StorageUnavailable``).
        SQLite: nothing to wait for."""

    def reachable(self) -> None:
        """Whether the store could be used now, asked without touching its batch or the
        connection in use (a store may keep the one it asked on, for ``rollback`` to take in
        place of a lost one): safe on another thread while the store is used. The daemon
        asks it off its loop before reading the board again after ``StorageUnavailable``, so
        that a server still away (or silent) holds the loop up no longer than this call would.

        :raises StorageUnavailable: it cannot be reached (SQLite: never raised)."""

    # -- tasks -----------------------------------------------------------------------------------

    def insert_task(
        self, task: Task, entry: LedgerEntry, fingerprint: str | None = None
    ) -> LedgerEntry:
        """Write a new task and its first ledger row, ``entry``, together.

        Every field of ``task`` is stored as given (the store does not check that it is
        ``pending``). ``entry`` gets its ``seq`` set in place and is returned; its other fields
        are stored as given. ``fingerprint`` is kept beside the task, not in it: what a
        submission with an idempotency key asked for, read back by ``fingerprint``.

        :raises StoreConflict: a task with this id exists (in any tenant), or the task has an
            ``idempotency_key`` and its tenant already has a task with that key (tasks without
            a key never collide). Neither the task nor ``entry`` was written; the rest of the
            batch stands.
        """

    def update_task(
        self,
        task: Task,
        expected_state: str,
        expected_epoch: int,
        entry: LedgerEntry,
        *more: LedgerEntry,
    ) -> LedgerEntry:
        """Write ``task`` over its row if the row still has ``expected_state`` and
        ``expected_epoch``: the compare-and-set every transition goes through.

        Only the fields a transition changes are written: ``state``, ``outcome``, ``agent``,
        ``output``, ``error``, ``cost``, ``attempts``, ``epoch``, ``not_before``, ``question``,
        ``updated_at`` (each set as given, None included). The others stay as inserted, whatever
        ``task`` says. ``entry`` and then ``more`` are appended to the ledger in that order
        (their ``seq`` set in place, consecutive); ``entry`` is returned.

        :raises StoreConflict: the row has another state or epoch, or there is no task with
            this id; nothing was written (no task change, no ledger row)."""

    def get_task(self, task_id: str) -> Task | None:
        """The task with this id, whatever its state and tenant; None if there is none."""

    def find_idempotent(self, tenant: str, key: str) -> Task | None:
        """The tenant's task with this idempotency key, whatever its state; None if there is
        none (another tenant's task with the same key does not count). A key names one task
        for as long as the store keeps it."""

    def fingerprint(self, task_id: str) -> str | None:
        """The fingerprint the task was inserted with; None if it had none, or there is no
        such task."""

    def claim_key(self) -> bytes:
        """The board's secret that signs claims: 32 random bytes made the first time it is
        asked for, the same ever after — from any store on the board, after any reopening.

        It commits the key before returning it, so no claim is ever signed with a key that
        could be lost: call it with no batch open (the daemon does, at start-up), or the open
        batch commits with it. Two stores making it at once agree on one key.

        :raises StorageUnavailable: the key could not be made durable."""

    def list_tasks(self, query: TaskFilter) -> list[Task]:
        """The tasks that match every set field of ``query``, at most ``query.limit``, in id
        order (byte order; ids are UUIDv7, so that is first-in first-out), or the reverse with
        ``query.newest``. Paging with ``after`` (``before`` when newest) set to the last id of
        a page visits every match once."""

    def count_tasks(self, query: TaskFilter) -> int:
        """How many tasks match every set field of ``query`` (its ``limit`` and ``newest``
        are not used): what a page of ``list_tasks`` leaves to the next ones."""

    def children(self, task_id: str) -> list[Task]:
        """The tasks whose ``parent`` is ``task_id`` (direct children only, any state), in id
        order; empty for a task with none, or no such task."""

    def count_children(self, task_id: str) -> int:
        """``len(children(task_id))``, without reading the tasks."""

    def open_family(self, task_id: str) -> list[Task]:
        """The task and its descendants at any depth that are ``pending`` or ``running``: the
        root first (when it is open), then by depth, then by id. A member that ended does not
        stop the search: its own open descendants are included. Empty for no such task."""

    def open_tasks(self) -> list[Task]:
        """Every task, of every tenant, that is not ``closed`` (ended ones included), in id
        order: the daemon rebuilds its memory from these."""

    def count_by_state(self) -> dict[str, int]:
        """How many tasks of every tenant are in each state; states with none are absent."""

    def count_by_outcome(self) -> dict[str, int]:
        """How many tasks of every tenant ended with each outcome (``done``, ``failed``,
        ``cancelled``), closed or not; outcomes with none are absent."""

    def set_question(self, task_id: str, question: str | None) -> None:
        """Set (or, with None, clear) the task's pending ``question``, in the open batch.

        Not a transition: no ledger row, no compare-and-set, whatever the task's state. A task
        id that does not exist writes nothing and is no error.
        """

    def set_after(self, task_id: str, after: list[str]) -> None:
        """Rewrite a task's ``after`` in the open batch; not a transition, as ``set_question``."""

    # -- the ledger ------------------------------------------------------------------------------

    def append_ledger(self, entry: LedgerEntry) -> LedgerEntry:
        """Append a ledger row that changes no task (a schedule's missed, skipped or refused
        fire); ``entry`` gets its ``seq`` set in place and is returned."""

    def ledger(
        self, after: Mapping[str, int], limit: int, task: str | None = None,
        tenant: str | None = None,
    ) -> list[LedgerEntry]:  # fmt: skip
        """At most ``limit`` rows beyond the cursor ``after`` (``colibri.core.cursor``), each
        tenant's in ``seq`` order, merged by ``cursor.merged``; with ``task``, that task's only;
        with ``tenant``, that tenant's only, by an index (it costs its rows, not the board's)."""

    def ledger_heads(self) -> dict[str, int]:
        """Each tenant's highest ``seq`` (tenants with ledger rows only)."""

    def cost_totals(self, by: str, since: str, tenant: str | None = None) -> list[dict[str, Any]]:
        """What sessions cost, summed from the ledger rows that carry a ``cost`` and whose
        ``at`` is ``since`` or later (``""``: all of them) — of one ``tenant``'s rows only,
        when it is given.

        ``by`` is ``agent`` (the row's agent), ``tenant`` (the row's tenant), ``day`` (the UTC
        date of ``at``: ``2026-01-02``) or ``workspace`` (the task's workspace; for a task with
        none, the workspace of the agent that ran it as the agents table has it now). One dict
        per key, in key order with a None key first: ``key``, ``sessions`` (rows counted),
        ``usd`` (a float), ``tokens_in``, ``tokens_out`` (ints). The sums are taken as
        floats, so they never overflow whatever the costs stored; past 2**53 tokens they are
        approximate.

        :raises ValueError: ``by`` is none of the four.
        """

    # -- agents, tenants, skills -----------------------------------------------------------------

    def upsert_agent(self, agent: Agent, registered_at: str) -> None:
        """Store the agent under its name (unique across tenants), replacing every stored
        field of one already there: ``tenant``, ``capabilities``, ``slots``, ``ttl``,
        ``workspace``, ``last_seen``, and ``registered_at``. ``online`` and ``running`` are
        the daemon's memory, not stored.

        :raises StoreConflict: (PostgreSQL) the name is an agent's of a tenant the store does
            not name; nothing was written."""

    def agents(self) -> list[Agent]:
        """Every stored agent of every tenant, by name; ``online`` False, ``running`` empty."""

    def ensure_tenant(self, name: str, at: str) -> None:
        """Record a tenant, created ``at``, unless it is known; a known one keeps its first
        ``at``. No method reads it back."""

    def ensure_skills(self, names: list[str]) -> None:
        """Record each skill (a capability name) not yet known, with an empty description;
        known ones are left as they are. An empty list does nothing."""

    def describe_skill(self, name: str, description: str) -> None:
        """Set a skill's description, recording the skill if it is not known."""

    def skills(self) -> list[tuple[str, str, int]]:
        """``(name, description, agents)`` for every known skill, by name. ``agents`` counts
        the stored agents (any tenant, online or not) that have the skill among their
        capabilities; a capability never recorded as a skill is not listed."""

    # -- schedules -------------------------------------------------------------------------------

    def upsert_schedule(self, schedule: Schedule) -> None:
        """Store the whole schedule under its name, replacing one already there.

        :raises StoreConflict: (PostgreSQL) the name is a schedule's of a tenant the store does
            not name; nothing was written."""

    def get_schedule(self, name: str) -> Schedule | None:
        """The schedule with this name, equal to what was last stored; None if there is none."""

    def schedules(self) -> list[Schedule]:
        """Every stored schedule, by name."""

    def delete_schedule(self, name: str) -> bool:
        """Remove the schedule; True if there was one. Its fire records stay: a schedule
        added again under the name never fires a nominal time that was recorded before."""

    def record_fire(
        self,
        schedule: str,
        nominal: str,
        outcome: str,
        task: str | None,
        at: str,
        reason: str | None = None,
    ) -> bool:
        """Record what became of one nominal fire time of a schedule — once, ever.

        ``outcome`` is ``fired`` (with its ``task``), ``skipped``, ``missed`` or ``refused``
        (``reason`` says why intake refused it); ``at`` is when it was recorded. Returns True
        when it was written. If ``(schedule, nominal)`` was recorded before — committed, or
        earlier in this batch — it returns False and writes nothing, whatever the new
        outcome, and the batch is otherwise untouched. Written in the same batch as the fired
        task, this is what makes a double fire impossible rather than unlikely.
        """

    def fire_recorded(self, schedule: str, nominal: str) -> bool:
        """Whether ``record_fire`` recorded this nominal time of this schedule (a read)."""

    def fires(self, schedule: str, limit: int) -> list[dict[str, Any]]:
        """The schedule's latest ``limit`` fire records, the latest nominal time first, each a
        dict of exactly ``schedule``, ``nominal``, ``outcome``, ``task``, ``at`` and
        ``reason`` as recorded."""

    # -- tokens ----------------------------------------------------------------------------------

    def insert_token(self, token: Token, secret_hash: str) -> None:
        """Store a new token with the hash of its secret (never the secret).

        :raises StoreConflict: a token with this id exists; nothing was written."""

    def token(self, token_id: str) -> tuple[Token, str] | None:
        """The token with this id and its secret's hash, as stored (revoked ones too); None if
        there is none."""

    def tokens(self) -> list[Token]:
        """Every stored token, revoked and expired ones too, oldest first (by ``created_at``,
        then id)."""

    def revoke_token(self, token_id: str, at: str) -> bool:
        """Mark it revoked ``at``; False if unknown or revoked already (the first time stays)."""

    def touch_token(self, token_id: str, at: str) -> None:
        """Set the token's ``last_used_at``; an unknown id changes nothing."""
