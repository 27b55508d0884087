"""Text from sessions and other users, made safe to show on a terminal.

Task texts, outputs, errors, questions and names come from anyone who may submit. Whatever is
shown to people (the CLI's tables and lines, the TUI, ``colibri attach``, the descriptions a
shell shows beside its completions) goes through ``printable`` first, so what a task says can
never drive the operator's terminal (set its title, clear it, recolour it) or reorder and hide
what follows on screen. ``--json`` goes through ``json_safe``: the exact text, with the same
characters written as ``\\u`` escapes. This module is the one place that says which characters
those are (``UNSAFE``), and of the one character no board stores: a NUL (``holds_nul``).
"""

from __future__ import annotations

import re

#: The characters never written raw for people:
#: - the C0 controls, DEL and the C1 controls (U+009B is a one-character CSI for some terminals);
#: - every format character (Unicode's Cf): the bidi marks U+200E, U+200F, U+061C, the
#:   embeddings and overrides U+202A-U+202E and isolates U+2066-U+2069, which reorder what
#:   follows on screen; the invisible ones (U+200B, U+2060-U+2064, U+FEFF, U+00AD); the tag
#:   characters U+E0000-U+E007F, which spell text no terminal shows; and the rest of Cf, but
#:   U+200C and U+200D (the joiners, which Persian and Indic text and emoji sequences need);
#: - the line and paragraph separators U+2028, U+2029 (a new line to some programs);
#: - lone surrogates, which no terminal can be sent as UTF-8.
#: ``tests/cli/test_terminal_output.py`` checks the list against ``unicodedata``.
_C0 = "\x00-\x1f"
_BEYOND_C0 = (
    "\x7f-\x9f\xad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e"
    "\u200b\u200e\u200f\u2028-\u202e\u2060-\u2064\u2066-\u206f\ud800-\udfff\ufeff"
    "\ufff9-\ufffb\U000110bd\U000110cd\U00013430-\U0001343f\U0001bca0-\U0001bca3"
    "\U0001d173-\U0001d17a\U000e0001\U000e0020-\U000e007f"
)
UNSAFE = _C0 + _BEYOND_C0
_LINE_UNSAFE = re.compile(f"[{UNSAFE}]")
# The same, less newline and tab: a block of several lines keeps its layout.
_BLOCK_UNSAFE = re.compile(f"[\\x00-\\x08\\x0b-\\x1f{_BEYOND_C0}]")
# In JSON the C0 controls are escaped by the encoder already (and a formatted document's own
# newlines must stay): the rest.
_JSON_UNSAFE = re.compile(f"[{_BEYOND_C0}]")
_NAMED = {"\t": " ", "\n": "\\n", "\r": "\\r"}


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def printable(text: str, *, newlines: bool = False) -> str:
    """``text`` made safe for a terminal: each character of ``UNSAFE`` is written as a visible
    escape (ESC as ``\\x1b``, BEL as ``\\x07``, U+202E as ``\\u202e``, a newline as ``\\n``),
    and a tab becomes a space, so the result is one line. With ``newlines``, newlines and tabs
    are kept, for text laid out over several lines (a task's text or output). Backslashes are
    left as they are."""
    unsafe = _BLOCK_UNSAFE if newlines else _LINE_UNSAFE
    if unsafe.search(text) is None:
        return text
    return unsafe.sub(_visible, text)


def one_line(text: str, width: int | None = None) -> str:
    """``text`` as one short printable line: its whitespace runs made single spaces, cut to
    ``width`` characters with an ellipsis, then ``printable`` (after the cut, so that no
    escape is cut in half) — a table cell, a line of ``attach``, a description beside a
    completion."""
    line = " ".join(text.split())
    if width is not None and len(line) > width:
        line = line[: width - 1] + "…"
    return printable(line)


def _json_escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    if code < 0x10000:
        return f"\\u{code:04x}"
    code -= 0x10000  # JSON writes an astral character as its UTF-16 surrogate pair
    return f"\\u{0xD800 + (code >> 10):04x}\\u{0xDC00 + (code & 0x3FF):04x}"


def json_safe(data: bytes) -> bytes:
    """A JSON document (UTF-8, its C0 controls escaped, as any encoder writes them) with every
    other character of ``UNSAFE`` written as a ``\\u`` escape: it decodes to the same value,
    and a terminal that shows it is sent none of them raw."""
    if data.isascii() and b"\x7f" not in data:
        return data
    text = data.decode()
    if _JSON_UNSAFE.search(text) is None:
        return data
    return _JSON_UNSAFE.sub(_json_escape, text).encode()


def short_id(task_id: str) -> str:
    """A task id shortened for a screen, the one short form every display shows: its last 8
    characters. (A UUIDv7 begins with its creation time, the same for the tasks of one minute;
    it ends with random bits.) Every command that takes an id takes it back: the daemon reads
    an id's end as it reads its start (``Guards.resolve``)."""
    return task_id[-8:]


# -- what the board stores ----------------------------------------------------------------

#: A NUL written in a JSON string (``\\u0000``), not a backslash written before ``u0000``.
_ESCAPED_NUL = re.compile(rb"(?<!\\)(?:\\\\)*\\u0000")
#: No board stores a NUL (PostgreSQL's text cannot): a request holding one is refused so,
#: on every store alike, before it is handled (on PostgreSQL it lost the batch it went in).
NUL_REFUSED = (
    "a text of this request holds a NUL character (\\u0000), which the board does not store "
    "(PostgreSQL's text cannot): remove it, or write it another way"
)


def holds_nul(line: bytes) -> bool:
    """Whether a JSON line writes a NUL in one of its strings."""
    return b"\\u0000" in line and _ESCAPED_NUL.search(line) is not None


def storable(text: str) -> str:
    """A session's text as the board can store it: each NUL (which a session may print, and
    which the daemon refuses, ``NUL_REFUSED``) written as U+FFFD."""
    return text.replace("\x00", "\ufffd")
