"""Fixtures of the daemon tests: agents that close themselves, daemons with given settings."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.helpers import Daemon, FakeAgent, write_config

Spawn = Callable[..., FakeAgent]


@pytest.fixture
def spawn() -> Iterator[Spawn]:
    """Make FakeAgents that are closed when the test ends."""
    made: list[FakeAgent] = []

    def make(
        daemon: Daemon, name: str, capabilities: list[str] | None = None, **extra: Any
    ) -> FakeAgent:
        agent = FakeAgent(daemon, name, capabilities, **extra)
        made.append(agent)
        return agent

    yield make
    for agent in made:
        agent.close()


@pytest.fixture
def start_daemon(root: Path) -> Iterator[Callable[..., Daemon]]:
    """Start a daemon on ``root`` with the given scheduler settings; stopped (exit 0) after."""
    started: list[Daemon] = []

    def start(**scheduler: Any) -> Daemon:
        write_config(root, **scheduler)
        daemon = Daemon(root)
        daemon.start()
        started.append(daemon)
        return daemon

    yield start
    for daemon in started:
        daemon.stop()
