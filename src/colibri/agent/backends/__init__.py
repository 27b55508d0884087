"""Session backends: ``subprocess`` (one-shot commands) and ``tmux`` (interactive agents)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from colibri.agent.backends.base import SessionBackend
    from colibri.agent.reaping import Reaper
    from colibri.agent.spec import AgentSpec


def backend_for(spec: AgentSpec, root: Path, reaper: Reaper) -> SessionBackend:
    """The backend that ``spec.backend`` names (the config allows only these two)."""
    if spec.backend == "tmux":
        from colibri.agent.backends.tmux import TmuxBackend

        return TmuxBackend(spec, root, reaper)
    from colibri.agent.backends.subprocess import SubprocessBackend

    return SubprocessBackend(spec, reaper)
