"""Fixtures of the workspace tests: a daemon started on a configured root, and a clean sweep."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Daemon
from tests.sessions.support import sweep, write_workspaces


@pytest.fixture
def fleet(root: Path) -> Iterator[Callable[..., Daemon]]:
    """``fleet(workspaces, **settings)`` writes colibri.jsonc and starts the daemon (which starts
    a harness per workspace). Afterwards every process naming the root is gone."""
    started: list[Daemon] = []

    def start(workspaces: dict[str, Any], **settings: Any) -> Daemon:
        write_workspaces(root, workspaces, **settings)
        daemon = Daemon(root)
        started.append(daemon)
        daemon.start()
        return daemon

    yield start
    for daemon in started:
        sweep(root, daemon)
    sweep(root)
