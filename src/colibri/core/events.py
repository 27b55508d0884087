"""Events the daemon pushes: to the agent that holds a task, and to subscribers.

Every pushed object has ``event`` (its name, in the past tense where it reports a fact) and a
``seq`` that increases by one per event for the life of the daemon. Durable history, with a
``seq`` that survives restarts, is the ledger (``ledger`` command).
"""

from __future__ import annotations

from typing import Any

from colibri.core.model import Agent, Task

#: To an agent: run this task under this claim.
ASSIGN = "assign"
#: To an agent: stop the session of this task (it was cancelled or reclaimed).
CANCEL = "cancel"
#: To subscribers: a task changed state.
TASK_CHANGED = "task"
#: To subscribers: an agent came online or went offline.
AGENT_CHANGED = "agent"
#: To subscribers: dispatch was paused or resumed.
SWARM_TOGGLED = "swarm"
#: To a subscriber that fell too far behind, just before it is dropped.
DROPPED = "dropped"


def assign(task: Task, claim: str) -> dict[str, Any]:
    """``claim``: the secret of this claim, which the session's own reports must carry."""
    return {"event": ASSIGN, "epoch": task.epoch, "claim": claim, "task": task}


def cancel(task: Task, reason: str) -> dict[str, Any]:
    return {"event": CANCEL, "task": task.id, "epoch": task.epoch, "reason": reason}


def task_changed(task: Task, from_state: str | None, reason: str | None) -> dict[str, Any]:
    return {
        "event": TASK_CHANGED,
        "from": from_state,
        "to": task.state,
        "reason": reason,
        "task": task,
    }


def agent_changed(agent: Agent) -> dict[str, Any]:
    return {"event": AGENT_CHANGED, "agent": agent}


def swarm_toggled(paused: bool) -> dict[str, Any]:
    return {"event": SWARM_TOGGLED, "paused": paused}


def dropped(reason: str) -> dict[str, Any]:
    return {"event": DROPPED, "reason": reason}
