"""Submit a task and wait for its out; submit a family and follow it; catch an error by class.

    python examples/client_submit_wait.py ~/fleet

Needs a daemon on that root (``colibri run``) and an agent with the capability ``python``
(``colibri agent --name py-1 --cap python -- examples/run-task.sh``).
"""

from __future__ import annotations

import sys

from colibri import Client, errors


def main(root: str) -> None:
    with Client.for_root(root) as board:
        task = board.submit("run the test suite", capabilities=["python"])
        print(f"submitted {task.id}: {task.state}")
        done = board.wait(task.id)  # blocks until the task has ended
        print(f"{done.outcome}: {(done.output or done.error or '').strip()}")

        # A family: children name their parent; cancelling the parent would cancel them all.
        release = board.submit("release 2.0", capabilities=["python"])
        for part in ("write the notes", "tag the commit"):
            board.submit(part, capabilities=["python"], parent=release.id)
        for member in board.family(release.id):  # the top ancestor first, then its children
            ended = board.wait(member.id)
            print(f"{'  ' if member.parent else ''}{ended.text}: {ended.outcome}")

        # Every error is a class of colibri.errors, with the daemon's stable code.
        try:
            board.get("no-such-task")
        except errors.UnknownTask as exc:
            print(f"{exc.code}: {exc.message}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else ".")
