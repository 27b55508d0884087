"""D4: a Hypothesis state machine over the Board with a real SQLite store on a temporary file.

A real daemon is too slow for thousands of sequences, so the machine drives the daemon's own
``Board`` in process, as ``Server.flush`` does: each rule is one batch, followed by a commit; the
board's events go to peer objects that play the agents (they keep what they were assigned and
answer from it). Time is a clock object the test advances. ``restart`` commits, closes the store,
reopens the file and builds a new Board from it, as a daemon restart does; the agents then
register again with the sessions they still hold.

After every step: the store's ledger, replayed against ``core.states``, contains only legal
edges and reproduces every task's stored state; terminal states are absorbing (only
done/failed/cancelled → closed); memory agrees with the store; no task is held twice.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, event, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, initialize, invariant, rule

from colibri.config import SchedulerSettings
from colibri.core.access import OWNER
from colibri.core.errors import ColibriError, StaleClaim
from colibri.core.model import MAX_TOKENS, MAX_USD, Cost, TaskSpec
from colibri.core.protocol import Held, RegisterAgent
from colibri.core.states import ENDED, State
from colibri.daemon.board import Board, LiveAgent
from colibri.store import Store, open_store
from tests.inprocess import ManualClock, Peer, plain
from tests.properties import examples
from tests.reliability import history

AGENTS = ("a0", "a1", "a2")
#: Supervised workspaces' agents (slots 1 and 2) share a host-wide cap of MAX_SESSIONS.
SUPERVISED = ("a0", "a1")
MAX_SESSIONS = 2
#: Agents may register again under another tenant; work must only ever go to its own tenant's.
TENANTS = ("default", "team-b")
TTL = 5.0
#: A RAM-backed folder when there is one: the store is real SQLite, its fsyncs are cheap.
SCRATCH = "/dev/shm" if os.path.isdir("/dev/shm") else None


class AgentModel:
    """What one agent believes: the sessions it runs, the ones it was told to stop."""

    def __init__(self, name: str, slots: int) -> None:
        self.name = name
        self.slots = slots
        self.tenant = "default"
        self.peer: Peer | None = None
        self.sessions: dict[str, int] = {}  # task id → epoch
        self.stopping: dict[str, int] = {}
        self.claims: dict[str, str] = {}  # task id → the secret its assign carried

    def hear(self, message: dict[str, Any]) -> None:
        kind = message.get("event")
        if kind == "assign":
            task_id = message["task"].id
            assert task_id not in self.sessions, f"{task_id} assigned twice to {self.name}"
            tenant = message["task"].tenant
            assert tenant == self.tenant, (
                f"{task_id} of {tenant} sent to {self.name} of {self.tenant}"
            )
            self.sessions[task_id] = message["epoch"]
            self.claims[task_id] = message["claim"]
        elif kind == "cancel":
            if self.sessions.get(message["task"]) == message["epoch"]:
                self.stopping[message["task"]] = self.sessions.pop(message["task"])
        elif kind == "expired":
            self.peer = None


class BoardMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.dir = Path(tempfile.mkdtemp(prefix="cbsm", dir=SCRATCH))
        self.path = str(self.dir / "board.sqlite")
        self.clock = ManualClock()
        self.settings = SchedulerSettings(
            agent_ttl=TTL, retry_backoff=1.0, tick=30.0, max_sessions=MAX_SESSIONS
        )
        self.store: Store = open_store(self.path, durability="relaxed")
        self.board = self.new_board()
        self.board.rebuild()
        self.agents = {name: AgentModel(name, slots=1 + n % 2) for n, name in enumerate(AGENTS)}
        self.ids: list[str] = []
        #: The last state seen in the store for each task (for absorbing states).
        self.seen: dict[str, tuple[str, str | None]] = {}
        self.flush()

    def new_board(self) -> Board:
        """A board as the daemon builds it: a0 and a1 are supervised workspaces, together
        held to MAX_SESSIONS sessions whatever their slots; a2 is an agent started by hand."""
        board = Board(self.store, self.settings, self.clock, send_to={n: [] for n in SUPERVISED})
        board.rebuild()
        return board

    def teardown(self) -> None:
        self.store.close()
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- the batch boundary, as Server.flush ---------------------------------------------------

    def flush(self) -> None:
        if self.board.dispatch_wanted and not self.board.paused:
            self.board.dispatch()  # event-driven dispatch, in the same batch
        self.store.commit()
        outbox = self.board.take_effects().outbox
        for peer, message in outbox:
            if isinstance(peer, Peer):
                peer.send(message)
                agent = self.agents.get(peer.name)
                if agent is not None and agent.peer is peer:
                    agent.hear(plain(message))

    def attempt(self, action: Any) -> Any:
        """One request: a ColibriError is a refusal (the batch still commits, as the server's)."""
        try:
            return action()
        except ColibriError:
            return None
        finally:
            self.flush()

    def live(self, agent: AgentModel) -> LiveAgent | None:
        if agent.peer is None:
            return None
        live = self.board.agents.get(agent.name)
        if live is None or live.peer is not agent.peer or not live.online:
            return None
        return live

    # -- rules ---------------------------------------------------------------------------------

    @initialize(work=st.integers(0, 4))
    def start(self, work: int) -> None:
        """Two agents connect; some work is waiting already."""
        for name in AGENTS[:2]:
            self.register(name, with_sessions=False)
        if work:
            self.submit(count=work, parent=None, max_attempts=1 + work % 2)

    @rule(
        count=st.integers(1, 3),
        parent=st.one_of(st.none(), st.integers(0, 100)),
        max_attempts=st.sampled_from([1, 1, 2]),
        tenant=st.sampled_from(TENANTS),
    )
    def submit(
        self, count: int, parent: int | None, max_attempts: int, tenant: str = "default"
    ) -> None:
        """``count`` submissions in one batch, maybe children of an earlier task."""
        parent_id = self.ids[parent % len(self.ids)] if parent is not None and self.ids else None
        for _ in range(count):
            fields = TaskSpec(
                text=f"task {len(self.ids)}",
                parent=parent_id,
                max_attempts=max_attempts,
                tenant=tenant,
            )
            # Ids given in order (the daemon's are time-ordered UUIDs): replays stay the same.
            task_id = f"task-{len(self.ids):04d}"
            try:
                self.board.submit(fields, task_id=task_id)
            except ColibriError:
                continue
            self.ids.append(task_id)
        self.flush()

    @rule(
        name=st.sampled_from(AGENTS),
        with_sessions=st.booleans(),
        tenant=st.sampled_from(TENANTS),
        same_connection=st.booleans(),
    )
    def register(
        self,
        name: str,
        with_sessions: bool,
        tenant: str | None = None,
        same_connection: bool = False,
    ) -> None:
        """Connect (or reconnect) an agent, or register again on the connection it has; it
        reports the sessions it still runs, or not."""
        agent = self.agents[name]
        again = same_connection and agent.peer is not None
        if agent.peer is not None and not again:
            self.board.disconnect(agent.peer)
        if not with_sessions:
            agent.sessions.clear()
            agent.stopping.clear()
        peer = agent.peer if again and agent.peer is not None else Peer(name)
        agent.peer = peer
        running = [
            Held(task=t, epoch=e, claim=agent.claims[t])
            for t, e in {**agent.sessions, **agent.stopping}.items()
        ]
        tenant = agent.tenant if tenant is None else tenant
        request = RegisterAgent(
            name=name, slots=agent.slots, ttl=TTL, running=running, tenant=tenant
        )
        try:
            _live, adopted, rejected = self.board.register(request, peer)
        except ColibriError:
            if not again:
                agent.peer = None
            self.flush()
            return
        agent.tenant = tenant
        # The reply comes before any event of the batch: drop what was rejected first.
        for held in rejected:
            agent.sessions.pop(held.task, None)
            agent.stopping.pop(held.task, None)
        if adopted:
            event("register: sessions adopted")
        self.flush()

    @rule()
    def claim(self) -> None:
        self.attempt(self.board.dispatch)

    def _report(self, pick: int, how: str, cost: Cost | None = None) -> None:
        """A connected agent reports on one of its sessions (or one it was told to stop)."""
        held = [
            (agent, task_id)
            for agent in self.agents.values()
            if self.live(agent) is not None
            for task_id in sorted(agent.stopping if how == "reclaimed" else agent.sessions)
        ]
        if not held:
            return
        agent, task_id = held[pick % len(held)]
        live = self.live(agent)
        assert live is not None
        epoch = (agent.stopping if how == "reclaimed" else agent.sessions).pop(task_id)
        if how == "out":
            done = self.attempt(lambda: self.board.out(live, task_id, epoch, "ok", cost))
        elif how == "fail":
            done = self.attempt(lambda: self.board.fail(live, task_id, epoch, "boom"))
        else:
            done = self.attempt(lambda: self.board.reclaimed(live, task_id, epoch))
        event(f"{how} {'accepted' if done is not None else 'refused'}")

    @rule(pick=st.integers(0, 10), at_bounds=st.booleans())
    def out(self, pick: int, at_bounds: bool) -> None:
        """An out, maybe with the largest cost a session may report (sums must not overflow)."""
        biggest = Cost(tokens_in=MAX_TOKENS, tokens_out=MAX_TOKENS, usd=MAX_USD)
        self._report(pick, "out", biggest if at_bounds else None)

    @rule(pick=st.integers(0, 10))
    def fail(self, pick: int) -> None:
        self._report(pick, "fail")

    @rule(pick=st.integers(0, 10))
    def reclaimed(self, pick: int) -> None:
        self._report(pick, "reclaimed")

    @rule(name=st.sampled_from(AGENTS), pick=st.integers(0, 100))
    def stale_report(self, name: str, pick: int) -> None:
        """A report under an older claim of a task that was claimed again is refused."""
        live = self.live(self.agents[name])
        claimed_again = [t for t in self.board.tasks.values() if t.epoch > 1]
        if live is None or not claimed_again:
            return
        task = claimed_again[pick % len(claimed_again)]
        before = sum(self.store.ledger_heads().values())
        event("stale report")
        with pytest.raises(StaleClaim):
            self.board.out(live, task.id, task.epoch - 1, "late", None)
        self.flush()
        assert sum(self.store.ledger_heads().values()) == before

    @rule(name=st.sampled_from(AGENTS), pick=st.integers(0, 100), forged=st.sampled_from(
        [None, "", "0" * 32, "not a claim at all"]
    ))  # fmt: skip
    def session_that_lies(self, name: str, pick: int, forged: str | None) -> None:
        """A report sent as if from inside a session, for some running task, with its epoch
        but not its claim's secret (another session's, or none): refused, nothing written."""
        running = sorted(t.id for t in self.board.tasks.values() if t.state == State.RUNNING)
        if not running:
            return
        task = self.board.tasks[running[pick % len(running)]]
        before = sum(self.store.ledger_heads().values())
        peer = Peer(f"liar-{name}")
        with pytest.raises(ColibriError) as caught:
            live = self.board.reporter(
                peer, OWNER, "out", task.id, task.epoch, from_session=True, claim=forged
            )
            self.board.out(live, task.id, task.epoch, "forged", None, False)
        assert caught.value.code in ("bad_claim", "illegal_transition"), caught.value
        event(f"forged report: {caught.value.code}")
        self.flush()
        assert sum(self.store.ledger_heads().values()) == before
        assert self.board.tasks[task.id].state == State.RUNNING

    @rule(name=st.sampled_from(AGENTS), pick=st.integers(0, 100))
    def register_with_a_forged_session(self, name: str, pick: int) -> None:
        """An agent registers claiming a running task of its own name without its secret:
        nothing is adopted from it (the task is lost with the agent's old connection, as any
        session it did not show)."""
        agent = self.agents[name]
        mine = sorted(t.id for t in self.board.tasks.values()
                      if t.state == State.RUNNING and t.agent == name)  # fmt: skip
        if not mine:
            return
        target = self.board.tasks[mine[pick % len(mine)]]
        if agent.peer is not None:
            self.board.disconnect(agent.peer)
        agent.sessions.clear()
        agent.stopping.clear()
        agent.peer = Peer(name)
        forged = Held(task=target.id, epoch=target.epoch, claim="f" * 32)
        request = RegisterAgent(name=name, slots=agent.slots, ttl=TTL, running=[forged],
                                tenant=agent.tenant)  # fmt: skip
        try:
            _live, adopted, rejected = self.board.register(request, agent.peer)
        except ColibriError:
            agent.peer = None
            self.flush()
            return
        assert adopted == [] and [h.task for h in rejected] == [target.id]
        self.flush()

    @rule(pick=st.integers(0, 100))
    def cancel(self, pick: int) -> None:
        if not self.ids:
            return
        task_id = self.ids[pick % len(self.ids)]
        self.attempt(lambda: self.board.cancel(task_id, "test"))

    @rule(name=st.sampled_from(AGENTS))
    def disconnect(self, name: str) -> None:
        """The connection drops; the agent's sessions go on (it may register again)."""
        agent = self.agents[name]
        if agent.peer is not None:
            self.board.disconnect(agent.peer)
            agent.peer = None
            self.flush()

    @rule(talking=st.sampled_from([None, *AGENTS]), come_back=st.booleans())
    def agent_expiry(self, talking: str | None, come_back: bool) -> None:
        """Time passes beyond the TTL; agents that stayed silent expire, their sessions lost;
        maybe they register again at once, as the harness does when told ``expired``."""
        self.clock.advance(TTL + 0.5)
        live = self.live(self.agents[talking]) if talking else None
        if live is not None:
            self.board.heartbeat(live)
        self.attempt(self.board.sweep)
        if come_back:
            self.reconnect_all()

    def reconnect_all(self) -> None:
        for name, agent in self.agents.items():
            if agent.peer is None and (name != AGENTS[-1] or agent.sessions or agent.stopping):
                self.register(name, with_sessions=True)

    @rule(seconds=st.floats(0.1, 3.0))
    def time_passes(self, seconds: float) -> None:
        self.clock.advance(seconds)
        self.attempt(self.board.sweep)

    @rule(come_back=st.booleans())
    def restart(self, come_back: bool) -> None:
        """The daemon stops and starts: a new Board from the reopened store; nobody connected.
        Maybe the agents reconnect at once with the sessions they kept running."""
        self.store.commit()
        self.store.close()
        self.store = open_store(self.path, durability="relaxed")
        self.board = self.new_board()
        for agent in self.agents.values():
            agent.peer = None
        self.flush()
        if come_back:
            self.reconnect_all()

    # -- invariants ----------------------------------------------------------------------------

    @invariant()
    def board_is_consistent(self) -> None:
        snapshot = history.read_store(Path(self.path), integrity_check=False)
        self.ledger_replays_to_the_store(snapshot)
        self.memory_agrees_with_the_store(snapshot)

    def ledger_replays_to_the_store(self, snapshot: history.StoreSnapshot) -> None:
        report = history.check(snapshot, check_stuck=False)
        assert not report.problems(), report.problems()
        for task_id, task in snapshot.tasks.items():
            # Several transitions may happen in one step (the ledger replay checks each edge);
            # across steps an ended task may only close, and its outcome never changes.
            previous = self.seen.get(task_id)
            now = (task["state"], task["outcome"])
            if previous is not None and previous[0] in ENDED:
                assert now[0] in (previous[0], State.CLOSED), (task_id, previous, now)
                assert now[1] == previous[1], (task_id, previous, now)
            if now[0] == State.CLOSED:
                assert now[1] in ("done", "failed", "cancelled"), task
            self.seen[task_id] = now

    @invariant()
    def capacity_matches_the_sessions(self) -> None:
        """Every path that ends a session frees its slot exactly once: the free slots each
        index offers are what the agent's held sessions leave, under the host-wide cap."""
        board = self.board
        supervised = [board.agents[n] for n in SUPERVISED if n in board.agents]
        assert sum(len(a.holding) for a in supervised) <= MAX_SESSIONS
        held_text: dict[str, int] = {}
        for task in board.tasks.values():
            held_text[task.tenant] = held_text.get(task.tenant, 0) + len(task.text.encode())
        assert {t: n for t, n in board.transitions.open_text.items() if n} == held_text
        running = {t.id for t in board.tasks.values() if t.state == State.RUNNING}
        for live in board.agents.values():
            assert live.holding <= set(board.tasks), (live.name, live.holding)
            for task_id in live.holding & running:
                assert board.tasks[task_id].agent == live.name
            index = board.capacity.indexes.get(live.tenant)
            if index is not None and live.name in index:
                assert index.free(live.name) == board.capacity.free(live), (
                    f"{live.name} offers {index.free(live.name)} free slots in the index; its "
                    f"sessions leave {board.capacity.free(live)}"
                )

    @invariant()
    def cost_sums_stay_finite(self) -> None:
        for by in ("agent", "workspace", "tenant", "day"):
            for row in self.store.cost_totals(by, ""):
                assert math.isfinite(row["usd"]) and row["tokens_in"] >= 0, row

    def memory_agrees_with_the_store(self, snapshot: history.StoreSnapshot) -> None:
        open_ids = {t for t, row in snapshot.tasks.items() if row["state"] != State.CLOSED}
        assert set(self.board.tasks) == open_ids
        for task_id, task in self.board.tasks.items():
            row = snapshot.tasks[task_id]
            assert (task.state, task.epoch, task.attempts) == (
                row["state"],
                row["epoch"],
                row["attempts"],
            )
        # ``status`` counts from memory, kept by each change: the store's counts, always.
        status = self.board.status()
        assert {k: v for k, v in status["tasks"].items() if v} == self.store.count_by_state()
        assert {k: v for k, v in status["outcomes"].items() if v} == self.store.count_by_outcome()
        holders: dict[str, str] = {}
        for live in self.board.agents.values():
            assert len(live.holding) <= live.slots
            for task_id in live.holding:
                assert task_id not in holders, f"{task_id} held by {holders[task_id]} and more"
                holders[task_id] = live.name
                assert self.board.tasks[task_id].agent == live.name


BoardMachine.TestCase.settings = settings(
    max_examples=examples(200),
    stateful_step_count=30,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)
TestBoardStateMachine = pytest.mark.properties(BoardMachine.TestCase)
