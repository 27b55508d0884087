"""Plans: tasks submitted together that wait for each other by name (``plan_order``), and a
schedule's pipeline, the steps a fire submits after the schedule's own task.

A schedule's ``then`` lists steps, each a task's fields and an optional ``name``. A step runs
after the step before it (the first after the schedule's task, named ``task``) unless it names
what it waits for in ``after``: ``task`` or earlier steps — so a pipeline never waits in a
circle. Each fire submits the task and its steps together (``submit-all``, one transaction).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Annotated

import msgspec

from colibri.core.errors import BadRequest
from colibri.core.model import ShortStr, TaskSpec, check_name, normalize_names

#: The name the schedule's own task goes by in its steps' ``after``.
FIRST = "task"
#: Most steps after a schedule's task.
MAX_STEPS = 100


class Step(TaskSpec, kw_only=True, forbid_unknown_fields=True, omit_defaults=True):
    """One step of a schedule's pipeline: a task's fields, and the name others wait for it by."""

    name: ShortStr | None = None


Steps = Annotated[list[Step], msgspec.Meta(max_length=MAX_STEPS)]


def step_name(index: int, step: Step) -> str:
    """A step's own name, or ``step-N`` (from 1) when it has none."""
    return step.name if step.name is not None else f"step-{index + 1}"


def checked_steps(schedule: str, task: TaskSpec, steps: list[Step]) -> list[Step]:
    """A schedule's steps as intake will read them, names normalised, or why not.

    :raises BadRequest: a step with no text, a parent, a name taken, or an ``after`` that names
        no earlier step; the schedule's task waiting for a task (each fire's is new).
    """
    if task.after:
        raise BadRequest(
            f"schedule {schedule!r}: its task waits for nothing (each fire makes it anew); put "
            "what follows it in then"
        )
    seen = {FIRST}
    made: list[Step] = []
    previous = FIRST
    for index, step in enumerate(steps):
        where = f"schedule {schedule!r}: then[{index}]"
        if not step.text.strip():
            raise BadRequest(f"{where}: text is empty")
        if step.parent is not None:
            raise BadRequest(f"{where}: a step has no parent (it is a task of the fire's own)")
        if step.tenant is not None and step.tenant != task.tenant:
            raise BadRequest(f"{where}: a step is of its schedule's tenant; leave tenant out")
        name = step_name(index, step)
        check_name(name, f"{where}: name")
        if name in seen:
            raise BadRequest(f"{where}: the name {name!r} is taken; give each step its own")
        after = step.after or [previous]
        for wanted in after:
            if wanted not in seen:
                raise BadRequest(
                    f"{where}: after names {wanted!r}, which is not {FIRST!r} nor an earlier "
                    "step; a step waits only for what comes before it"
                )
        made.append(
            msgspec.structs.replace(
                step,
                name=name,
                after=list(dict.fromkeys(after)),
                capabilities=normalize_names(step.capabilities, "capability"),
                labels=normalize_names(step.labels, "label"),
                workspace=check_name(step.workspace, "workspace") if step.workspace else None,
                agent=check_name(step.agent, "agent name") if step.agent else None,
                tenant=check_name(step.tenant, "tenant") if step.tenant else None,
            )
        )
        seen.add(name)
        previous = name
    return made


def fire_of(task: TaskSpec, steps: list[Step]) -> tuple[list[TaskSpec], list[str | None]]:
    """The submissions of one fire — the task, then its steps — and their local names (the
    steps' ``after`` name them). Steps are those ``checked_steps`` returned."""
    specs: list[TaskSpec] = [task]
    names: list[str | None] = [FIRST]
    for index, step in enumerate(steps):
        fields = {f: getattr(step, f) for f in TaskSpec.__struct_fields__}
        specs.append(TaskSpec(**{**fields, "tenant": task.tenant}))
        names.append(step_name(index, step))
    return specs, names


def plan_order(afters: Sequence[Sequence[str]], names: Sequence[str | None]) -> list[int]:
    """The order to admit a plan's submissions in: each after the ones it names in its
    ``after`` (by their local ``names``), otherwise as given.

    :raises BadRequest: a name given twice, or a cycle (its ``index``: a submission in it).
    """
    index_of: dict[str, int] = {}
    for index, name in enumerate(names):
        if name is None:
            continue
        if name in index_of:
            refused = BadRequest(
                f"the name {name!r} is given to submissions {index_of[name]} and {index}: "
                "each needs its own"
            )
            refused.index = index
            raise refused
        index_of[name] = index
    if not index_of:
        return list(range(len(names)))
    blockers = [{index_of[a] for a in after if a in index_of} for after in afters]
    waiting_on: dict[int, list[int]] = defaultdict(list)
    for index, deps in enumerate(blockers):
        for dep in deps:
            waiting_on[dep].append(index)
    ready = [i for i, deps in enumerate(blockers) if not deps]
    ready.reverse()
    order: list[int] = []
    while ready:
        index = ready.pop()
        order.append(index)
        for later in reversed(waiting_on.get(index, [])):
            blockers[later].discard(index)
            if not blockers[later]:
                ready.append(later)
    if len(order) < len(names):
        # Each submission left waits for one left: following them from the first comes round.
        path: list[int] = []
        node = min(set(range(len(names))) - set(order))
        while node not in path:
            path.append(node)
            node = min(blockers[node])
        cycle = [*path[path.index(node) :], node]
        shown = " → ".join(str(names[i]) for i in cycle)
        refused = BadRequest(
            f"the plan waits in a circle: {shown}; a task cannot wait, even through others, "
            "for itself"
        )
        refused.index = cycle[0]
        raise refused
    return order
