"""Messages to a workspace's subscribers: broadcast, or down a priority chain.

``send`` delivers a message to the subscribers of a workspace (those that subscribed with that
``workspace``, and those with none). A message that carries a task header (a task body, see
``colibri.core.lineage``) goes down the *chain*: to the subscriber with the highest ``priority``
first; if it answers ``consumed`` the chain stops there, otherwise — it answers not consumed, or
says nothing within ``CHAIN_WAIT`` — the next one gets it. Any other message is broadcast to all
of them at once. A slow or gone subscriber costs the chain at most ``CHAIN_WAIT`` and never
blocks the daemon: nothing here waits, timers move the chain on.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from colibri.core.errors import BadRequest, BadTaskBody
from colibri.core.events import MessageSent
from colibri.core.lineage import parse_body
from colibri.core.replies import Delivered

if TYPE_CHECKING:
    from colibri.daemon.board import Audience, Subscription
    from colibri.daemon.connection import Connection

#: How long a subscriber in the chain has to answer before the next one gets the message.
CHAIN_WAIT = 2.0


@dataclass(eq=False)
class Chain:
    id: int
    message: MessageSent
    waiting: list[Subscription]
    sender: Connection
    request_id: Any
    delivered: list[str] = field(default_factory=list)
    current: Subscription | None = None
    timer: asyncio.TimerHandle | None = None


def carries_header(text: str) -> bool:
    try:
        parse_body(text)
    except BadTaskBody:
        return False
    return True


class Bus:
    """Subscribers are the board's (``Audience``): one registry for events and messages."""

    def __init__(
        self, audience: Audience, loop: asyncio.AbstractEventLoop, flush: Callable[[], None]
    ) -> None:
        self.audience = audience
        self.loop = loop
        #: Asks the server to write out what was queued (a chain moves on between requests).
        self.flush = flush
        self.chains: dict[int, Chain] = {}
        self._ids = itertools.count(1)

    def owes(self, conn: Connection) -> bool:
        """Whether ``conn`` sent a chained message whose reply is still to come."""
        return any(chain.sender is conn for chain in self.chains.values())

    def forget(self, conn: Connection) -> None:
        """``conn`` is gone: the chains it was waiting in move on without it."""
        for chain in list(self.chains.values()):
            chain.waiting = [s for s in chain.waiting if s.peer is not conn]
            if chain.current is not None and chain.current.peer is conn:
                self._advance(chain)

    def send(self, conn: Connection, request_id: Any, to: str, text: str) -> Delivered | None:
        targets = [
            s for s in self.audience.subscriptions if s.messages and s.workspace in (None, to)
        ]
        message_id = next(self._ids)
        chained = carries_header(text)
        message = MessageSent(message=message_id, to=to, text=text, chained=chained)
        if not chained:
            for target in targets:
                target.peer.send(message)
            return Delivered(
                message=message_id, delivered=[t.name for t in targets], consumed_by=None
            )
        chain = Chain(message_id, message, targets, conn, request_id)
        self.chains[message_id] = chain
        self._advance(chain)
        return None  # the reply comes when the chain ends

    def consumed(self, conn: Connection, message_id: int, consumed: bool) -> None:
        chain = self.chains.get(message_id)
        if chain is None or chain.current is None or chain.current.peer is not conn:
            raise BadRequest(f"message {message_id} is not waiting for this subscriber's answer")
        if chain.timer is not None:
            chain.timer.cancel()
        if consumed:
            self._finish(chain, chain.current.name)
        else:
            self._advance(chain)

    def _advance(self, chain: Chain) -> None:
        if chain.timer is not None:
            chain.timer.cancel()
            chain.timer = None
        while chain.waiting:
            target = chain.waiting.pop(0)
            if target.peer.closing:
                continue
            chain.current = target
            chain.delivered.append(target.name)
            target.peer.send(chain.message)
            chain.timer = self.loop.call_later(CHAIN_WAIT, self._advance, chain)
            self.flush()
            return
        self._finish(chain, None)

    def _finish(self, chain: Chain, consumed_by: str | None) -> None:
        self.chains.pop(chain.id, None)
        chain.current = None
        if chain.timer is not None:
            chain.timer.cancel()
        chain.sender.queue(
            Delivered(
                id=chain.request_id, message=chain.id, delivered=chain.delivered,
                consumed_by=consumed_by,
            )
        )  # fmt: skip
        self.flush()
