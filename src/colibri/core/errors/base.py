"""The root of the error tree, the groups callers catch, and how a message quotes a value.
The tree itself is drawn in ``colibri.core.errors``."""

from __future__ import annotations


class ColibriError(Exception):
    """The root of the tree. Raise one of its subclasses, each of which has its own ``code``;
    ``error`` is the code of none of them."""

    code = "error"
    #: For a request of several items (``submit-all``): the one (from 0) the error is about.
    index: int | None = None
    #: Whether the request may be taken if sent again later, unchanged (the docstring above).
    transient = False
    #: A class callers catch, never raised: it has no code of its own (the docstring above).
    group = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def to_wire(self) -> dict[str, str | int | float]:
        wire: dict[str, str | int | float] = {"code": self.code, "message": self.message}
        if self.index is not None:
            wire["index"] = self.index
        return wire


class NotFound(ColibriError, LookupError):
    """(group) Nothing goes by the name the request gave: a task, schedule, parent, token or
    workspace. Also a ``LookupError``, as a missing key is."""

    group = True


class Unavailable(ColibriError):
    """(group) The request was not taken now, and nothing was done: the daemon is full or
    throttles the address, its store cannot commit, another daemon serves it, or no daemon
    heard it. The same request may be taken later (``transient``)."""

    group = True
    transient = True


class Elsewhere(Unavailable):
    """(group) Another daemon serves what was asked, now or once it takes over: a standby's
    refusal, a tenant another daemon holds, a write fenced off by a lease that passed on."""

    group = True


class Unreached(Unavailable):
    """(group) No daemon heard the request (none answers at the address), or the connection
    was cut off under it: whether it was taken, only asking again tells."""

    group = True


def shown(value: object, width: int = 60) -> str:
    """``value`` as a message quotes it: its repr, so never more than one line, and clipped."""
    text = repr(value)
    return text if len(text) <= width else text[: width - 1] + "…"
