"""The modules Colibri imports only where a feature needs them, and what installs each.

The PostgreSQL store, ``colibri mcp`` and ``colibri web`` need an extra of their own (``pip
install 'colibri-board[postgresql]'``, ``'colibri-board[mcp]'``, ``'colibri-board[web]'``: the
distribution is ``colibri-board``);
uvloop, Textual, prometheus-client and cryptography are dependencies, but loaded only by what
uses them, so a trimmed or broken installation lacks one only when that feature runs. Either
way the command ends in one line naming what is missing and how to install it (``missing``,
called where the CLI translates the exceptions that reach it), never as a bug.
"""

from __future__ import annotations

from dataclasses import dataclass

from colibri.core.errors import ConfigError


@dataclass(frozen=True, slots=True)
class Extra:
    needed_by: str
    what: str
    install: str


_POSTGRESQL = Extra("the PostgreSQL store", "psycopg", "pip install 'colibri-board[postgresql]'")
_MCP = Extra("colibri mcp", "the MCP SDK", "pip install 'colibri-board[mcp]'")
_WEB = Extra("colibri web", "Starlette, uvicorn and Jinja2", "pip install 'colibri-board[web]'")

#: Each lazily imported module, by its top-level name, and what needs it.
OPTIONAL = {
    "psycopg": _POSTGRESQL,
    "psycopg_binary": _POSTGRESQL,
    "mcp": _MCP,
    "mcp_types": _MCP,
    "pydantic": _MCP,
    "starlette": _WEB,
    "uvicorn": _WEB,
    "jinja2": _WEB,
    "multipart": _WEB,
    "python_multipart": _WEB,
    "uvloop": Extra("--loop uvloop", "uvloop", "pip install uvloop"),
    "textual": Extra(
        "colibri tui and the demo",
        "Textual",
        "pip install 'textual>=0.80' (or colibri-board again)",
    ),
    "prometheus_client": Extra(
        "--metrics",
        "prometheus-client",
        "pip install 'prometheus-client>=0.20' (or colibri-board again)",
    ),  # fmt: skip
    "cryptography": Extra(
        "colibri tls init",
        "cryptography",
        "pip install 'cryptography>=42' (or colibri-board again)",
    ),
}


def missing(exc: ImportError) -> ConfigError | None:
    """The one-line error for an optional module that could not be imported (``exc``), or
    None if ``exc`` is about any other module."""
    name = (exc.name or "").split(".")[0]
    extra = OPTIONAL.get(name)
    if extra is None:
        return None
    if isinstance(exc, ModuleNotFoundError):
        return ConfigError(
            f"{extra.needed_by} needs {extra.what}, which is not installed: {extra.install}"
        )
    # Installed, but not as colibri needs it (too old, half removed): what it said, and the fix.
    return ConfigError(
        f"{extra.needed_by} needs {extra.what}, which cannot be loaded ({exc}): {extra.install}"
    )
