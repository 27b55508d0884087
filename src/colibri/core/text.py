"""Text from sessions and other users, made safe to show on a terminal.

Task texts, outputs, errors and names come from anyone who may submit. Whatever is shown to
people (the CLI's tables, the TUI, ``colibri attach``) goes through ``printable`` first, so
what a task says can never drive the operator's terminal (set its title, clear it, recolour or
reorder what follows).
"""

from __future__ import annotations

import re

# C0 controls, DEL, C1 controls (U+009B is a one-character CSI for some terminals), and the
# bidi embeddings, overrides and isolates, which reorder the text that follows them on screen.
_LINE_UNSAFE = re.compile(r"[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
# The same, less newline and tab: a block of several lines keeps its layout.
_BLOCK_UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\t": " ", "\n": "\\n", "\r": "\\r"}


def _visible(match: re.Match[str]) -> str:
    char = match.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, *, newlines: bool = False) -> str:
    """``text`` made safe for a terminal: each control character is written as a visible
    escape (ESC as ``\\x1b``, BEL as ``\\x07``, U+202E as ``\\u202e``, a newline as ``\\n``),
    and a tab becomes a space, so the result is one line. With ``newlines``, newlines and tabs
    are kept, for text laid out over several lines (a task's text or output). Backslashes are
    left as they are."""
    unsafe = _BLOCK_UNSAFE if newlines else _LINE_UNSAFE
    if unsafe.search(text) is None:
        return text
    return unsafe.sub(_visible, text)


def short_id(task_id: str) -> str:
    """A task id shortened for a screen: its last 8 characters. (A UUIDv7 begins with its
    creation time, the same for the tasks of one burst; it ends with random bits.)"""
    return task_id[-8:]
