"""D5: cancelling the root of 5,461 tasks while 8 clients keep adding children to the tree.

The family is depth 6 with fan-out 4 (1 + 4 + … + 4⁶ = 5,461 tasks), some of its leaves already
done or failed. The cascade is one transaction, and a cancelled family takes no new children
anywhere below it: at quiescence no descendant of the root is open, every child submitted
concurrently was either created before the cancel (and cancelled with the family) or refused
``parent_cancelled``, and what had ended stays as it ended.
"""

from __future__ import annotations

import random
import threading
from pathlib import Path
from typing import Any

from colibri.client import Client
from tests.helpers import Daemon, FakeAgent, wait_until
from tests.reliability import history

DEPTH, FANOUT = 6, 4
CLIENTS = 8


def submit_level(daemon: Daemon, parents: list[str], fields: dict[str, Any]) -> list[str]:
    """FANOUT children under each parent, pipelined on one connection (a thread writes while
    this one reads the replies, so neither side's buffer fills up); their ids, in order."""
    wanted = [parent for parent in parents for _ in range(FANOUT)]
    with daemon.client(timeout=60) as client:
        sender = threading.Thread(
            target=lambda: [
                client.send("submit", text=f"child of {p}", parent=p, **fields) for p in wanted
            ]
        )
        sender.start()
        ids = []
        for request_id in range(1, len(wanted) + 1):
            reply = client.read()
            assert reply["ok"] is True and reply["id"] == request_id, reply
            ids.append(reply["task"]["id"])
        sender.join(timeout=60)
    return ids


def test_cancel_root_of_5461_while_8_clients_add_children(daemon: Daemon, root: Path) -> None:
    tree = [[daemon.call("submit", text="root", capabilities=["nobody"])["task"]["id"]]]
    for depth in range(1, DEPTH + 1):
        last = depth == DEPTH
        # Leaves can be worked on, so some of them end before the cancel.
        fields = {"capabilities": ["leaf"] if last else ["nobody"]}
        tree.append(submit_level(daemon, tree[-1], fields))
    members = [task for level in tree for task in level]
    assert len(members) == 5_461

    ended: dict[str, str] = {}
    worker = FakeAgent(daemon, "leafworker", ["leaf"], slots=1)
    try:
        for n in range(30):
            assign = worker.next_assign()
            if n % 3:
                worker.out(assign, "done early")
                ended[assign["task"]["id"]] = "done"
            else:
                worker.fail(assign, "failed early")
                ended[assign["task"]["id"]] = "failed"
    finally:
        worker.close()

    # (parent, "ok" | error code, whether it was sent after the cancel was answered)
    outcomes: list[tuple[str, str, bool]] = []
    lock = threading.Lock()
    stop = threading.Event()
    cancel_answered = threading.Event()
    tried_after: dict[int, threading.Event] = {seed: threading.Event() for seed in range(CLIENTS)}

    def add_children(seed: int) -> None:
        rng = random.Random(seed)
        with Client(daemon.socket, timeout=30) as client:
            while not stop.is_set():
                parent = rng.choice(members)
                # Read before sending: a request sent once the cancel was answered reaches the
                # daemon after the cancel's commit, however the threads are scheduled.
                sent_after = cancel_answered.is_set()
                request = client.send("submit", text="late child", parent=parent,
                                      capabilities=["nobody"])  # fmt: skip
                reply = client.read()
                assert reply["id"] == request
                code = "ok" if reply["ok"] else reply["error"]["code"]
                with lock:
                    outcomes.append((parent, code, sent_after))
                if sent_after:
                    tried_after[seed].set()

    def submitted() -> int:
        with lock:
            return len(outcomes)

    adders = [threading.Thread(target=add_children, args=(seed,)) for seed in range(CLIENTS)]
    for adder in adders:
        adder.start()
    wait_until(lambda: submitted() >= 10 * CLIENTS, timeout=60)  # the adders are busy
    cancelled = daemon.call("cancel", task=tree[0][0], reason="abandon the release")["cancelled"]
    cancel_answered.set()
    # Every adder keeps trying against the cancelled family.
    for seed in range(CLIENTS):
        assert tried_after[seed].wait(timeout=60), f"adder {seed} sent nothing after the cancel"
    stop.set()
    for adder in adders:
        adder.join(timeout=60)
    assert not any(adder.is_alive() for adder in adders)

    codes = {code for _, code, _ in outcomes}
    assert codes <= {"ok", "parent_cancelled"}, codes
    assert "parent_cancelled" in codes and "ok" in codes
    # Nothing sent once the cancel was answered is accepted.
    late = [code for _, code, sent_after in outcomes if sent_after]
    assert len(late) >= CLIENTS and set(late) == {"parent_cancelled"}, late

    store = history.read_store(root / ".colibri" / "colibri.sqlite")
    report = history.check(store)
    assert report.open_descendants_of_cancelled == []
    assert report.problems() == {}, report.problems()
    family = set(store.tasks) - {tree[0][0]}  # everything here was put under the root
    created_late = len(store.tasks) - len(members)
    assert created_late == sum(1 for _, code, _ in outcomes if code == "ok")
    open_ones = [t for t in family if store.tasks[t]["state"] in ("pending", "running")]
    assert open_ones == []
    # The leaves that had ended keep their outcome; everything else open was cancelled.
    assert {t: store.tasks[t]["outcome"] for t in ended} == ended
    assert len(cancelled) == len(family) + 1 - len(ended)  # + the root
