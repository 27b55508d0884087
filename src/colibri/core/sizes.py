"""Sizes on the wire: replies that fit memory and reports that fit a line.

A reply is built whole in memory, so lists of tasks or ledger rows stop at a byte budget and
say where to go on. A session's report must fit the daemon's line limit after JSON escaping
(where a control byte takes six): its long text is cut to its head and tail, with a line
saying how much was cut, rather than refused.
"""

from __future__ import annotations

from colibri.core.model import LedgerEntry, Task
from colibri.core.protocol import ERROR_MAX, OUTPUT_MAX, encode
from colibri.core.text import storable

#: Replies that list tasks or ledger rows stop before about this many bytes (and say where
#: to go on): a reply is built whole in memory, so its size, not only its count, is bounded.
REPLY_BUDGET = 8 * 1024 * 1024


def task_size(task: Task) -> int:
    """How many bytes a task takes in a reply, encoded (a control byte takes six)."""
    return len(encode(task))


def ledger_size(entry: LedgerEntry) -> int:
    return len(encode(entry))


#: Room kept on a report's line for what the client adds to it (``id``) and its newline.
LINE_SLACK = 256


def fit_report(
    text: str, max_line: int, cmd: str, fields: dict[str, object], field: str = "output"
) -> str:
    """``text`` as it fits, as ``field``, one ``cmd`` request line of at most ``max_line``
    bytes with the other ``fields``, after JSON escaping (a control byte takes six): whole, or
    cut, and ``storable``. (An ``out``'s output is at most OUTPUT_MAX; a ``fail``'s error,
    ERROR_MAX.)"""
    overhead = len(encode({"cmd": cmd, **fields, field: ""})) + LINE_SLACK
    most = ERROR_MAX if field == "error" else OUTPUT_MAX
    return fit_text(storable(text), min(max_line - overhead, most))


def fit_text(text: str, budget: int) -> str:
    """``text`` whole if its JSON string takes at most ``budget`` bytes; else its head and
    tail, with a line between them saying how much was cut."""
    size = len(encode(text))
    total = keep = len(text)
    candidate = text
    while size > budget and keep > 0:
        keep = int(keep * budget / size * 0.95)
        head, tail = text[: keep - keep // 2], text[total - keep // 2 :]
        cut = total - len(head) - len(tail)
        candidate = f"{head}\n[{cut} of {total} characters cut here to fit one report]\n{tail}"
        size = len(encode(candidate))
    return candidate
