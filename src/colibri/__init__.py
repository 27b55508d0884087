"""Colibri: a task board and scheduler for fleets of agents."""

from __future__ import annotations

__version__ = "0.1.0"

__all__ = ["__version__"]
