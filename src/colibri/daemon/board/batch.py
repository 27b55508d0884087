"""The batch in progress: what the board's changes must let out once the store commits them.

The server handles many requests between two commits (group commit). Whoever changes the board
records the change's effects here — ledger rows for the mirror, messages for connections,
``wait`` replies it answered — and nothing leaves before the commit. After a commit the server
takes them all; after a failed one they are dropped and the answered waits are put back.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from colibri.core.events import Event
from colibri.core.model import LedgerEntry
from colibri.core.replies import ErrorReply, Reply

#: What the daemon sends: an event, or a reply (``ok``, or a refusal).
Message = Event | Reply | ErrorReply


class Peer(Protocol):
    """A connection the board can address messages to (the server's connection object)."""

    #: The agent registered on this connection, if any.
    agent_name: str | None
    #: Set once the connection is going away: nothing more is sent to it.
    closing: bool

    def send(self, message: Message) -> None: ...


@dataclass
class Effects:
    """A batch's effects, taken as it commits (``Batch.take``): its ledger rows and messages,
    let out once it is committed; its answered waits and claims, given back if it is not."""

    ledger_rows: list[LedgerEntry]
    outbox: list[tuple[Peer, Message]]
    answered: list[tuple[str, Peer, Any]]
    placed: list[tuple[str, int, Peer]]


class Batch:
    def __init__(self) -> None:
        #: (uid, pid) of the peer whose request is being handled; None for the daemon's own
        #: work (sweeps, schedule fires). Every ledger row written meanwhile names them.
        self.actor: tuple[int, int] | None = None
        self.ledger_rows: list[LedgerEntry] = []
        self.outbox: list[tuple[Peer, Message]] = []
        #: ``wait`` requests answered in this batch: (task id, peer, request id).
        self.answered: list[tuple[str, Peer, Any]] = []
        #: Claims made in this batch, whose ``assign`` is in the outbox: (task id, epoch,
        #: the agent's connection).
        self.placed: list[tuple[str, int, Peer]] = []
        #: Claims of batches that did not commit as far as the daemon could tell; after the
        #: board is rebuilt, those the store has after all (a commit whose answer was lost)
        #: are told to their agents (``Board.rebuild``).
        self.unconfirmed: list[tuple[str, int, Peer]] = []
        #: Whether a dispatch pass should run before the commit.
        self.dispatch_wanted = False
        #: Called when a new deadline may be earlier than the sweep's next wake.
        self.wake_sweep: Callable[[], None] = lambda: None

    @property
    def uid(self) -> int | None:
        return None if self.actor is None else self.actor[0]

    @property
    def pid(self) -> int | None:
        return None if self.actor is None else self.actor[1]

    def emit(self, peer: Peer, message: Message) -> None:
        self.outbox.append((peer, message))

    def take(self) -> Effects:
        """As the batch commits: hand over what it lets out once committed; start a new one."""
        taken = Effects(self.ledger_rows, self.outbox, self.answered, self.placed)
        self.ledger_rows, self.outbox, self.answered, self.placed = [], [], [], []
        return taken

    def give_back(self, taken: Effects) -> None:
        """A batch taken for its commit did not commit, and neither will this one, written
        after it: its answered waits and its claims are this one's to drop (``drop``)."""
        self.answered[:0] = taken.answered
        self.placed[:0] = taken.placed

    def drop(self) -> list[tuple[str, Peer, Any]]:
        """After a rollback: nothing of it happened. Return the waits it had answered."""
        answered = self.answered
        self.unconfirmed.extend(self.placed)
        self.ledger_rows, self.outbox, self.answered, self.placed = [], [], [], []
        return answered
