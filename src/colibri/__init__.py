"""Colibri: a task board and scheduler for fleets of agents.

The way in for programs (docs/CLIENT.md)::

    from colibri import Client
    with Client.for_root("/srv/build") as board:
        task = board.submit("upgrade zfs", capabilities=["freebsd", "zfs"])
        print(board.wait(task.id).output)

Every name of ``__all__`` is loaded on first use (a module ``__getattr__``), so that
``import colibri`` — and with it every ``colibri`` command, ``--help`` included — stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

#: The public names, each with the module it lives in (one that is itself a module: ``errors``,
#: every error class with its code; ``events``, every pushed event as its class; ``protocol``,
#: every request as its class; ``replies``, the reply each request names).
_PUBLIC = {
    "AsyncClient": "colibri.client",
    "Client": "colibri.client",
    "ColibriError": "colibri.core.errors",
    "Remote": "colibri.client",
    "Task": "colibri.core.model",
    "errors": "colibri.core.errors",
    "events": "colibri.core.events",
    "protocol": "colibri.core.protocol",
    "replies": "colibri.core.replies",
}
_MODULES = {"errors", "events", "protocol", "replies"}

__all__ = [
    "AsyncClient",
    "Client",
    "ColibriError",
    "Remote",
    "Task",
    "__version__",
    "errors",
    "events",
    "protocol",
    "replies",
]

if TYPE_CHECKING:  # what type checkers and editors see; at run time, ``__getattr__`` below
    from colibri.client import AsyncClient as AsyncClient
    from colibri.client import Client as Client
    from colibri.client import Remote as Remote
    from colibri.core import errors as errors
    from colibri.core import events as events
    from colibri.core import protocol as protocol
    from colibri.core import replies as replies
    from colibri.core.errors import ColibriError as ColibriError
    from colibri.core.model import Task as Task


def __getattr__(name: str) -> Any:
    module = _PUBLIC.get(name)
    if module is None:
        raise AttributeError(f"module 'colibri' has no attribute {name!r}")
    loaded = importlib.import_module(module)
    value = loaded if name in _MODULES else getattr(loaded, name)
    globals()[name] = value  # found directly from now on
    return value


def __dir__() -> list[str]:
    return sorted({*__all__, *(name for name in globals() if name.startswith("__"))})
