"""What every request of the wire protocol is made of: the ``Request`` base (its ``cmd`` tag
and ``id``), and the bounded field types requests share."""

from __future__ import annotations

from typing import Annotated, Generic, TypeVar

import msgspec

from colibri.core import cursor
from colibri.core.model import MAX_EPOCH, MAX_TOKENS, MAX_USD, Cost

#: Every integer that enters here has an upper bound that SQLite's 64-bit integers, sums over
#: many rows, JSON and time arithmetic downstream can hold; every float is bounded too.
SqlInt = Annotated[int, msgspec.Meta(ge=0, le=2**63 - 1)]
#: The ledger position past every row there is: following from it, only new rows come.
LEDGER_END = cursor.END
#: A ledger position (``colibri.core.cursor``), or the number an older client sends for one:
#: taken, to be refused in words (``cursor.OLD_FORM``) rather than as a type error.
LedgerAfter = str | SqlInt
#: Echoed as it came; a string id is bounded by the line limit alone.
RequestId = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)] | str | None
Epoch = Annotated[int, msgspec.Meta(ge=0, le=MAX_EPOCH)]
#: The longest output an ``out`` carries, and error a ``fail`` does, whatever
#: ``server.max_line`` allows.
OUTPUT_MAX = 16 * 1024 * 1024
ERROR_MAX = 64 * 1024
#: The per-claim secret a session proves its report with (``COLIBRI_CLAIM``).
Claim = Annotated[str, msgspec.Meta(max_length=128)]


class ReportedCost(Cost, forbid_unknown_fields=True, omit_defaults=True):
    """A cost as a session reports it: each number bounded, so that no sum, budget or
    comparison downstream can overflow (SQLite's integers) or become infinite (JSON null)."""

    tokens_in: Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS)] = 0
    tokens_out: Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKENS)] = 0
    usd: Annotated[float, msgspec.Meta(ge=0.0, le=MAX_USD)] = 0.0
    model: Annotated[str, msgspec.Meta(max_length=200)] | None = None


#: The reply a request is answered with (``core/replies.py``): ``Request[R]``.
R = TypeVar("R")


class Request(
    msgspec.Struct,
    Generic[R],
    tag_field="cmd",
    forbid_unknown_fields=True,
    kw_only=True,
    omit_defaults=True,
):
    """A request of the wire protocol, answered with an ``R`` (``Client.request`` returns it).
    Encoded without the fields left at their defaults: the daemon applies the same ones."""

    id: RequestId = None
