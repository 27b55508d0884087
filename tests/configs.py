"""colibri.jsonc in tests: write it, load it, and find the line an error must name."""

from __future__ import annotations

from pathlib import Path

import pytest

from colibri.config import Config, load_config
from colibri.core.errors import ConfigError
from colibri.layout import CONFIG_NAME


def loaded(root: Path, text: str) -> Config:
    (root / CONFIG_NAME).write_text(text)
    return load_config(root)


def refused(root: Path, text: str) -> str:
    """The ConfigError message for ``text`` as colibri.jsonc (always one line)."""
    (root / CONFIG_NAME).write_text(text)
    with pytest.raises(ConfigError) as caught:
        load_config(root)
    message = caught.value.message
    assert "\n" not in message, message
    return message


def line_of(text: str, needle: str) -> int:
    """1-based number of the first line of ``text`` holding ``needle``."""
    for number, line in enumerate(text.splitlines(), 1):
        if needle in line:
            return number
    raise AssertionError(f"{needle!r} is not in the text")


def at(root: Path, text: str, needle: str) -> str:
    """The ``file:line:`` prefix an error about the line holding ``needle`` starts with."""
    return f"{root / CONFIG_NAME}:{line_of(text, needle)}:"
