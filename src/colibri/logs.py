"""Structured log lines to stderr: ``text`` for people, ``json`` for collectors.

Every record carries a stable ``event`` key (pass ``extra={"event": ...}``); other extras are
printed beside it.
"""

from __future__ import annotations

import logging
import sys
import time

import msgspec

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


def setup(level: str, fmt: str) -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger("colibri")
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    root.propagate = False
