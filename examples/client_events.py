"""Watch the board's events, typed, while a task goes from pending to done.

    python examples/client_events.py ~/fleet

Needs a daemon on that root and an agent with the capability ``python``.
"""

from __future__ import annotations

import sys

from colibri import Client, events, protocol


def main(root: str) -> None:
    # One connection listens, another acts: a subscribed connection receives events between
    # its replies, so it is best kept for listening.
    with Client.for_root(root) as watcher, Client.for_root(root) as board:
        watcher.request(protocol.Subscribe(name="example watcher"))
        task = board.submit("lint the repository", capabilities=["python"])
        for event in watcher.typed_events():
            if isinstance(event, events.TaskChanged) and event.task.id == task.id:
                print(f"{event.from_state or 'new'} -> {event.to_state}")
                if event.to_state in ("done", "failed", "cancelled"):
                    print(f"out: {(event.task.output or event.task.error or '').strip()}")
                    break
            elif isinstance(event, events.AgentChanged):
                print(f"agent {event.agent.name} is {'on' if event.agent.online else 'off'}line")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
