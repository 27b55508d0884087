"""The task body a session receives: a small header, a blank line, then the text.

    colibri-task: 01a22b47-7755-7e84-b77c-7ea09550014b
    epoch: 1
    claim: 4f0c2e8a9b1d7c3e5a6f8b0d2c4e6a8b
    parent: 01a22b47-7c41-7a3d-a025-2b8c5dd64a2a
    from: api
    workspace: web
    after: 01a22b47-7a11-7c3e-9d2a-5b1c3e8f0a6d done colibri/3e8f0a6d-draft-the-release-notes

    write the release notes for 2.0

``epoch`` numbers the claim and ``claim`` is its secret (a session's own reports carry both).
``parent`` and ``from`` (the workspace
that handed the task on) are ``-`` for a task with no parent. Each ``after`` line names a task
this one waited for, what it came to, and the branch its session left (``-``: none); a task
that waited for none has no such line. The body is written to the file
named by ``COLIBRI_TASK_FILE``; stdin carries the text alone, so a one-shot command such as
``claude -p`` reads exactly the task. Built and parsed here, and only here.
"""

from __future__ import annotations

from dataclasses import dataclass

from colibri.core.errors import BadTaskBody, shown

MAGIC = "colibri-task"
FIELDS = ("epoch", "claim", "parent", "from", "workspace")


@dataclass(frozen=True, slots=True)
class Body:
    task: str
    text: str
    parent: str | None = None
    sender: str | None = None
    workspace: str | None = None
    epoch: int | None = None
    claim: str | None = None
    #: ``ID OUTCOME BRANCH`` of each task it waited for, in its ``after`` order.
    after: tuple[str, ...] = ()


def build_body(body: Body) -> str:
    def value(v: str | None) -> str:
        return v if v else "-"

    return (
        f"{MAGIC}: {body.task}\n"
        f"epoch: {body.epoch if body.epoch is not None else '-'}\n"
        f"claim: {value(body.claim)}\n"
        f"parent: {value(body.parent)}\n"
        f"from: {value(body.sender)}\n"
        f"workspace: {value(body.workspace)}\n"
        + "".join(f"after: {line}\n" for line in body.after)
        + f"\n{body.text}"
    )


def parse_body(data: str) -> Body:
    """The inverse of ``build_body``; raise BadTaskBody for text that is not a task body."""
    head, sep, text = data.partition("\n\n")
    if not sep:
        raise BadTaskBody("not a task body: no blank line after the header")
    values: dict[str, str] = {}
    after: list[str] = []
    for line in head.split("\n"):
        key, colon, value = line.partition(": ")
        if not colon:
            raise BadTaskBody(f"not a task body: header line {shown(line)} has no ': '")
        if key == "after":
            after.append(value)
        else:
            values[key] = value
    if MAGIC not in values:
        raise BadTaskBody(f"not a task body: the first header is not {MAGIC}")

    def opt(key: str) -> str | None:
        v = values.get(key, "-")
        return None if v == "-" else v

    epoch = opt("epoch")
    return Body(
        task=values[MAGIC],
        text=text,
        parent=opt("parent"),
        sender=opt("from"),
        workspace=opt("workspace"),
        epoch=int(epoch) if epoch is not None and epoch.isdigit() else None,
        claim=opt("claim"),
        after=tuple(after),
    )
