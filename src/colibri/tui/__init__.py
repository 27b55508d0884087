"""``colibri tui``: the swarm, live, in the terminal (Textual).

It meets the daemon on its socket like any client: one load (``list``, ``status``, ``agents``,
``schedule-list``), then the events of a ``subscribe``; it never reads the store. This package
imports ``colibri.client`` and ``colibri.core`` only (tests/test_layers.py holds it to that),
and Textual is imported only by ``colibri tui`` and the demo, never by the rest of the CLI.
"""
