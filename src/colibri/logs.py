"""Structured log lines to stderr: ``text`` for people, ``json`` for collectors.

Every record carries a stable ``event`` key (pass ``extra={"event": ...}``); other extras are
printed beside it.
"""

from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

import msgspec

from colibri.core.errors import RootError
from colibri.privatefiles import open_private

_STANDARD = set(logging.LogRecord("", 0, "", 0, "", None, None).__dict__) | {"message", "asctime"}


def _extras(record: logging.LogRecord) -> dict[str, object]:
    return {k: v for k, v in record.__dict__.items() if k not in _STANDARD}


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc: dict[str, object] = {
            "ts": round(record.created, 3),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_extras(record),
        }
        if record.exc_info:
            doc["traceback"] = self.formatException(record.exc_info)
        return msgspec.json.encode(doc, enc_hook=str).decode()


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%H:%M:%S", time.localtime(record.created))
        extras = " ".join(f"{k}={v}" for k, v in _extras(record).items())
        line = f"{stamp} {record.levelname.lower():7} {record.getMessage()}" + (
            f"  {extras}" if extras else ""
        )
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class RotatingOutput(logging.StreamHandler):  # type: ignore[type-arg]
    """Records to stderr, which is the file ``path`` (a harness's log, opened by the daemon
    that started it). Past ``limit`` bytes the file becomes ``path.1`` (the older one
    replaced) and a new ``path`` takes over stdout and stderr, so whatever the process writes
    after — records and tracebacks alike — goes to the new file. Only renames: no line is cut
    or lost, and a reader of the old file sees it whole."""

    def __init__(self, path: Path, limit: int) -> None:
        super().__init__(sys.stderr)
        self.path = path
        self.limit = limit

    def emit(self, record: logging.LogRecord) -> None:
        super().emit(record)
        try:
            if os.fstat(2).st_size >= self.limit:
                self._rotate()
        except (OSError, RootError):
            pass  # a log that cannot be rotated is written on; the next record tries again

    def _rotate(self) -> None:
        writing = os.fstat(2)
        named = os.lstat(self.path)
        if (named.st_dev, named.st_ino) != (writing.st_dev, writing.st_ino):
            return  # stderr is not the file of that name (any more): not ours to rename
        os.replace(self.path, self.path.with_name(f"{self.path.name}.1"))
        fd = open_private(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT)
        sys.stdout.flush()
        self.flush()
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)


def setup(level: str, fmt: str, rotate: tuple[Path, int] | None = None) -> None:
    """Log records of ``level`` and above to stderr, as ``fmt`` (text or json); with
    ``rotate`` (a path and a size), stderr is that file and is rotated (``RotatingOutput``)."""
    handler = logging.StreamHandler(sys.stderr) if rotate is None else RotatingOutput(*rotate)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger("colibri")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
