"""Load the named SQL blocks of ``sql/<dialect>.sql``."""

from __future__ import annotations

import re
from importlib.resources import files

_BLOCK = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def load(dialect: str) -> dict[str, str]:
    text = files("colibri.store").joinpath(f"sql/{dialect}.sql").read_text("utf-8")
    parts = _BLOCK.split(text)
    return {name: body.strip() for name, body in zip(parts[1::2], parts[2::2], strict=True)}
