"""colibri.jsonc as text: read bounded in size and depth (every syntax error one line with its
line number and what was expected), and edited in place with its comments and layout kept."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path
from typing import TYPE_CHECKING, Any

from colibri.core.errors import ConfigError
from colibri.privatefiles import what

if TYPE_CHECKING:
    import pyjson5

#: colibri.jsonc is written by people, and 1 MiB holds thousands of workspaces: a bigger file is
#: a mistake (a log or a dump saved under this name). Refusing it before reading it keeps
#: ``colibri run`` answering within a second, whatever the file holds.
MAX_CONFIG_BYTES = 1 << 20
#: Deepest nesting of objects and arrays read. The deepest real setting is five levels down
#: (workspaces.NAME.session.env.KEY); a file far deeper is a mistake or an attack, and the
#: parser stops at this depth instead of recursing into it.
MAX_CONFIG_DEPTH = 64


def key_offset(text: str, key: str, start: int) -> int:
    """Where ``key:`` (quoted or not) first is in ``text`` from ``start``, or -1.

    Found as the literal key first, then checked around it: a pattern that starts with an
    optional quote makes the regular expression engine try every offset, seconds on 1 MiB.
    """
    for match in re.finditer(rf"""{re.escape(key)}["']?\s*:""", text[start:]):
        before = start + match.start() - 1
        if before >= 0 and text[before] in "\"'":
            before -= 1
        if before < 0 or not (text[before].isalnum() or text[before] in "_$-"):
            return start + match.start()
    return -1


def read_config_text(path: Path) -> str | None:
    """The text of colibri.jsonc, or None if there is none; a ConfigError for a file that is
    too big, not UTF-8, not a regular file or unreadable, each in one line."""
    try:
        # O_NONBLOCK: a named pipe of this name must not hang the open; it is refused below.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        if os.path.islink(path):
            raise ConfigError(
                f"{path}:1: a symbolic link to {os.readlink(path)}, which does not exist"
            ) from None
        return None
    except OSError as exc:
        raise ConfigError(f"{path}:1: cannot read it: {exc.strerror}") from None
    info = os.fstat(fd)
    if not stat.S_ISREG(info.st_mode):
        os.close(fd)
        raise ConfigError(f"{path}:1: {what(info)}, not a file of settings")
    with os.fdopen(fd, "rb") as file:
        try:
            # One byte past the cap tells a file that is too big, however it grows meanwhile.
            data = file.read(MAX_CONFIG_BYTES + 1)
        except OSError as exc:
            raise ConfigError(f"{path}:1: cannot read it: {exc.strerror}") from None
    if len(data) > MAX_CONFIG_BYTES:
        raise ConfigError(
            f"{path}:1: the file has {max(info.st_size, len(data)):,} bytes; colibri.jsonc may "
            f"have at most {MAX_CONFIG_BYTES:,} (1 MiB)"
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data.count(b"\n", 0, exc.start) + 1
        column = exc.start - (data.rfind(b"\n", 0, exc.start) + 1) + 1
        raise ConfigError(
            f"{path}:{line}: byte 0x{data[exc.start]:02x} at column {column} is not UTF-8; "
            "colibri.jsonc must be UTF-8 text"
        ) from None


def parse_jsonc(path: Path, text: str) -> Any:
    """``text`` parsed as JSONC (JSON5: comments, trailing commas, unquoted keys …), at most
    MAX_CONFIG_DEPTH deep; a syntax error is a ConfigError ``file:line: what is wrong``.

    pyjson5 parses in C: a 1 MiB file takes milliseconds, where the pure-Python json5 took
    seconds, and it stops at the depth cap instead of recursing into the file.
    """
    import pyjson5

    try:
        parsed = pyjson5.decode(text, maxdepth=MAX_CONFIG_DEPTH)
    except pyjson5.Json5DecoderException as exc:
        offset, message = _syntax_error(exc, text)
        line = text.count("\n", 0, offset) + 1
        column = offset - text.rfind("\n", 0, offset)
        raise ConfigError(f"{path}:{line}: {message} (column {column})") from None
    # A schedule's tasks are written to the board at each fire: one holding a NUL, stored on
    # PostgreSQL, lost the batch of each of its fires. Refused as a request holding one is.
    # (What never reaches the board — a session's command and environment — says why
    # otherwise: no process can be given one.)
    schedules = parsed.get("schedules") if isinstance(parsed, dict) else None
    below = _nul_in(schedules)
    found = None if below is None else ["schedules", *below]
    if found is not None:
        offset = 0
        for key in found:
            at = key_offset(text, key, offset) if isinstance(key, str) else -1
            offset = at if at >= 0 else offset
        shown = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in found).lstrip(".")
        raise ConfigError(
            f"{path}:{text.count(chr(10), 0, offset) + 1}: {shown or 'a value'} holds a NUL "
            "character (\\u0000, \\0), which the board does not store: remove it"
        )
    return parsed


def _nul_in(value: Any) -> list[str | int] | None:
    """Where in ``value`` a string (or a key) holds a NUL, as the keys and indexes down to it
    (``["schedules", "nightly", "task", "text"]``), if one does."""
    if isinstance(value, str):
        return [] if "\x00" in value else None
    items: Any = ()
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    for key, item in items:
        if isinstance(key, str) and "\x00" in key:
            return [key]
        below = _nul_in(item)
        if below is not None:
            return [key, *below]
    return None


#: What pyjson5 calls the things it expected, as our messages say them.
_NAMES = {
    "comma": "','",
    "colon": "':'",
    "JSON5Value": "a value",
    "IdentifierStart": "a key",
    "IdentifierName": "key",
    "UnicodeEscapeSequence": "a \\u escape",
    "hexadecimal character": "a hexadecimal digit",
}


def _syntax_error(exc: pyjson5.Json5DecoderException, text: str) -> tuple[int, str]:
    """Where in ``text`` pyjson5's error is, and what it says, in one line.

    pyjson5 says ``Expected b'comma' or U+007d near 12, found U+0022``; its offset is just past
    the character it stopped at (for extra data, just past the value before them).
    """
    import pyjson5

    said = str(exc.args[0]) if exc.args else type(exc).__name__
    near = re.search(r" (?:starting )?near (\d+)", said)
    position = int(near[1]) if near else 0
    offset = max(position - 1, 0)
    if isinstance(exc, pyjson5.Json5NestingTooDeep):
        return offset, f"nested deeper than {MAX_CONFIG_DEPTH} levels of objects and arrays"
    if isinstance(exc, pyjson5.Json5ExtraData):
        offset = _next_content(text, position)
        return offset, f"{_char(text[offset])} after the end of the settings' object"
    if said.startswith("No JSON data"):
        return offset, "no settings: the file must hold one object { … }"
    if "NumericLiteral" in said:
        return offset, "a number that cannot be read (malformed, or too large)"
    unclosed = re.match(r"Unclosed b'([^']*)'", said)
    if unclosed:
        return offset, f"the {_NAMES.get(unclosed[1], unclosed[1])} that starts here is not closed"
    said = said.replace(near[0], "") if near else said
    said = re.sub(r"b'([^']*)'", lambda m: _NAMES.get(m[1], m[1]), said)
    said = re.sub(r"U\+([0-9a-fA-F]{4,6})", lambda m: _char(chr(int(m[1], 16))), said)
    said = " ".join(said.split())
    return offset, said[:1].lower() + said[1:]


def _char(c: str) -> str:
    return repr(c) if c.isprintable() and not c.isspace() else f"U+{ord(c):04X}"


def _next_content(text: str, i: int) -> int:
    """The offset of the first character at or after ``i`` that is not blank or a comment."""
    n = len(text)
    while i < n:
        if text[i].isspace():
            i += 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
        else:
            return i
    return max(n - 1, 0)


# -- editing the text, comments and layout kept (colibri workspace add) --------------------


def _scan(text: str) -> list[tuple[int, str]]:
    """Structural characters of JSONC text with their offsets, skipping strings and comments."""
    out: list[tuple[int, str]] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c in "\"'":
            i += 1
            while i < n and text[i] != c:
                i += 2 if text[i] == "\\" else 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = n if end < 0 else end + 2
            continue
        elif c in "{}[]:,":
            out.append((i, c))
        i += 1
    return out


def _last_content(text: str, limit: int) -> int:
    """Offset just past the last character before ``limit`` that is not blank or comment."""
    last, i = 0, 0
    while i < limit:
        c = text[i]
        if c in "\"'":
            j = i + 1
            while j < limit and text[j] != c:
                j += 2 if text[j] == "\\" else 1
            i = j + 1
            last = min(i, limit)
            continue
        if text.startswith("//", i):
            end = text.find("\n", i)
            i = limit if end < 0 else end
            continue
        if text.startswith("/*", i):
            end = text.find("*/", i + 2)
            i = limit if end < 0 else end + 2
            continue
        if not c.isspace():
            last = i + 1
        i += 1
    return last


def _append_member(text: str, close: int, member: str, indent: str) -> str:
    """Insert ``member`` as the last member of the object whose ``}`` is at ``close``."""
    end = _last_content(text, close)
    needs_comma = text[end - 1] not in "{," if end else False
    head = text[:end] + ("," if needs_comma else "") + text[end:close].rstrip()
    return f"{head}\n{indent}{member},\n{indent[:-2]}{text[close:]}"


def insert_workspace(text: str, name: str, entry: dict[str, Any]) -> str:
    """colibri.jsonc text with workspace ``name`` added, every comment and layout kept."""
    return insert_member(text, "workspaces", name, entry)


def insert_member(text: str, section: str, name: str, entry: dict[str, Any]) -> str:
    """colibri.jsonc text with ``name: entry`` added to the top-level object ``section``
    (``workspaces``, ``templates`` …), every comment and layout kept.

    The entry goes at the end of that object, which is created at the end of the top-level
    object if there is none. The caller checks the result by loading it.
    """
    import msgspec  # (lazily: the CLI starts without it)

    body = msgspec.json.encode(entry).decode()
    marks = _scan(text)
    depth = 0
    top_close = None
    section_open = None
    for k, (pos, c) in enumerate(marks):
        if c in "{[":
            depth += 1
            if c == "{" and depth == 2 and k >= 1 and marks[k - 1][1] == ":":
                key_end = marks[k - 1][0]
                start = max((p for p, ch in marks[: k - 1] if ch in "{,"), default=0)
                key = re.search(r"[\"']?([A-Za-z_$][\w$-]*)[\"']?\s*$", text[start + 1 : key_end])
                if key is not None and key.group(1) == section:
                    section_open = pos
        elif c in "}]":
            if depth == 2 and section_open is not None and c == "}":
                return _append_member(text, pos, f"{json_key(name)}: {body}", "    ")
            if depth == 1 and c == "}":
                top_close = pos
            depth -= 1
    if top_close is None:
        return f"{{\n  {json_key(section)}: {{\n    {json_key(name)}: {body},\n  }},\n}}\n"
    member = f"{json_key(section)}: {{\n    {json_key(name)}: {body},\n  }}"
    return _append_member(text, top_close, member, "  ")


def json_key(name: str) -> str:
    import msgspec

    return msgspec.json.encode(name).decode()
