"""``colibri schedule``: cron, interval and once schedules that submit tasks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import click
import msgspec

from colibri.cli.base import Context, cli, json_option, pass_ctx
from colibri.cli.completion import agent_names, schedule_names, workspace_names
from colibri.cli.output import print_json, print_line, print_table

if TYPE_CHECKING:
    from colibri.core.schedules import Schedule


@cli.group()
def schedule() -> None:
    """Recurring and one-off work: cron, interval and once schedules.

    \b
    colibri schedule add nightly "nightly build" --cron "0 0 * * *" \\
        --tz Europe/Ljubljana --cap freebsd
    colibri schedule add sweep "clean caches" --every 15m
    colibri schedule add release "tag 2.0" --at "2026-12-24T18:00:00+01:00"
    colibri schedule show nightly --next 10
    """


def _when(s: Schedule) -> str:
    if s.kind == "cron":
        return f"cron {s.cron}"
    if s.kind == "interval":
        from colibri.core.durations import format_duration

        return f"every {format_duration(s.every or 0.0)}"
    return f"once at {s.at}"


@schedule.command("add")
@click.argument("name")
@click.argument("text")
@click.option("--cron", help="A five-field cron expression or a macro such as @daily.")
@click.option("--tz", help="IANA time zone of the cron expression (default: this machine's).")
@click.option("--every", help="Interval: a duration such as 90s, 15m, 1h30m, 1d.")
@click.option(
    "--at", "at_", metavar="TIME", help="Once: ISO 8601, with an offset or local to --tz."
)
@click.option(
    "--cap", "caps", multiple=True, metavar="CAP", help="A required capability (repeatable)."
)
@click.option("--agent", shell_complete=agent_names, help="Pin the fired tasks to this agent.")
@click.option(
    "--workspace",
    shell_complete=workspace_names,
    help="Only agents of this workspace may take the tasks.",
)
@click.option("--priority", type=int, default=0, show_default=True)
@click.option("--label", "labels", multiple=True, help="A label for the fired tasks (repeatable).")
@click.option("--max-attempts", type=click.IntRange(1, 100), default=1, show_default=True)
@click.option(
    "--catch-up",
    type=click.Choice(["one", "all", "none"]),
    default="one",
    show_default=True,
    help="After downtime: fire once for all missed times, each of them, or none.",
)
@click.option(
    "--catch-up-max",
    type=click.IntRange(1, 10_000),
    default=100,
    show_default=True,
    help="With --catch-up all: fire at most this many missed times.",
)
@click.option("--grace", help="Skip (and record) missed times older than this duration.")
@click.option(
    "--overlap",
    type=click.Choice(["skip", "allow", "replace"]),
    default="skip",
    show_default=True,
    help="If the previous fire's task is still open: skip, run both, or cancel it.",
)
@click.option("--jitter", help="Delay each fire by up to this duration (spreads load).")
@click.option("--paused", is_flag=True, help="Add it paused.")
@click.option("--replace", is_flag=True, help="Overwrite a schedule of the same name.")
@click.option(
    "--then",
    "then",
    multiple=True,
    metavar="TEXT",
    help="A step each fire submits after the task, run once the one before it is done "
    "(repeatable: a pipeline; same capabilities, workspace and agent as the task).",
)
@json_option
@pass_ctx
def add(
    ctx: Context,
    name: str,
    text: str,
    cron: str | None,
    tz: str | None,
    every: str | None,
    at_: str | None,
    caps: tuple[str, ...],
    agent: str | None,
    workspace: str | None,
    priority: int,
    labels: tuple[str, ...],
    max_attempts: int,
    catch_up: str,
    catch_up_max: int,
    grace: str | None,
    overlap: str,
    jitter: str | None,
    paused: bool,
    replace: bool,
    then: tuple[str, ...],
    as_json: bool,
) -> None:
    """Add schedule NAME that submits a task saying TEXT each time it fires (and, with --then,
    the steps after it)."""
    if sum(x is not None for x in (cron, every, at_)) != 1:
        raise click.UsageError("give exactly one of --cron, --every or --at")
    task: dict[str, Any] = {
        "text": text,
        "capabilities": list(caps),
        "priority": priority,
        "labels": list(labels),
        "max_attempts": max_attempts,
    }
    if agent:
        task["agent"] = agent
    if workspace:
        task["workspace"] = workspace
    spec: dict[str, Any] = {
        k: v
        for k, v in {
            "cron": cron,
            "tz": tz,
            "every": every,
            "at": at_,
            "catch_up": catch_up,
            "catch_up_max": catch_up_max,
            "grace": grace,
            "overlap": overlap,
            "jitter": jitter,
            "paused": paused,
            "task": task,
        }.items()
        if v is not None
    }
    from colibri.core import protocol as p
    from colibri.core.model import TaskSpec
    from colibri.core.plans import Step
    from colibri.core.schedules import ScheduleSpec

    # Not validated here: the daemon checks the values, and says what is wrong, in one place.
    steps = [Step(**{**task, "text": step}) for step in then]
    schedule = ScheduleSpec(**{**spec, "task": TaskSpec(**task), "then": steps})
    reply = ctx.request(p.ScheduleAdd(name=name, schedule=schedule, replace=replace))
    if as_json:
        print_json({**msgspec.to_builtins(reply.schedule), "next": reply.next})
        return
    nxt = _local(reply.next[0], reply.schedule.tz) if reply.next else "never"
    print_line(f"added {name}: {_when(reply.schedule)}; next fire {nxt}")


@schedule.command("list")
@json_option
@pass_ctx
def list_schedules(ctx: Context, as_json: bool) -> None:
    """List schedules with their next fire time."""
    from colibri.core import protocol as p

    rows = ctx.request(p.ScheduleList()).schedules
    if as_json:
        print_json(rows)
        return
    print_table(
        ["NAME", "WHEN", "TZ", "NEXT", "STATE", "FIRES", "SKIPPED", "MISSED", "REFUSED", "TASK"],
        [
            [
                s.name,
                _when(s),
                s.tz or "-",
                _local(s.next_fire_at, s.tz) if s.next_fire_at else "-",
                "finished" if s.finished else "paused" if s.paused else "active",
                s.fires,
                s.skipped,
                s.missed,
                s.refused,
                s.task.text[:40],
            ]
            for s in rows
        ],
        empty="no schedules (add one with: colibri schedule add NAME TEXT --cron EXPR)",
    )


@schedule.command("show")
@click.argument("name", shell_complete=schedule_names)
@click.option(
    "--next",
    "count",
    type=click.IntRange(0, 1000),
    default=10,
    show_default=True,
    help="How many upcoming fire times to list.",
)
@click.option(
    "--fires",
    type=click.IntRange(0, 1000),
    default=0,
    show_default=True,
    help="How many recent fires (fired, skipped, missed, refused) to list.",
)
@json_option
@pass_ctx
def show(ctx: Context, name: str, count: int, fires: int, as_json: bool) -> None:
    """Show one schedule and its next fire times."""
    from colibri.core import protocol as p

    reply = ctx.request(p.ScheduleGet(name=name, next=count, fires=fires))
    s = reply.schedule
    if as_json:
        doc = {**msgspec.to_builtins(s), "next": reply.next}
        if reply.fires is not msgspec.UNSET:
            doc["fires_recent"] = reply.fires
        print_json(doc)
        return
    state = "finished" if s.finished else "paused" if s.paused else "active"
    print_line(f"{s.name}: {_when(s)} ({s.tz or 'UTC'}), {state}")
    caps = s.task.capabilities
    print_line(f"task: {s.task.text}" + (f"  [caps {', '.join(caps)}]" if caps else ""))
    for step in s.then:
        print_line(f"then {step.name} (after {', '.join(step.after)}): {step.text}")
    print_line(
        f"catch_up {s.catch_up}, overlap {s.overlap}, "
        f"fired {s.fires}, skipped {s.skipped}, missed {s.missed}, "
        f"refused {s.refused}"
    )
    tz = s.tz
    if s.last_task:
        print_line(f"last fire {_local(s.last_fire_at or '', tz)} → task {s.last_task}")
    if reply.next:
        print("next:")
        for when in reply.next:
            print_line(f"  {_local(when, tz)}")
    for fire in reply.fires or []:
        why = f"  ({fire['reason']})" if fire.get("reason") else ""
        print_line(
            f"  {_local(fire['nominal'], tz)} {fire['outcome']} {fire.get('task') or ''}{why}"
        )


def _local(instant: str, tz: str | None) -> str:
    """An RFC 3339 UTC instant as a person reads it: in the schedule's own time zone, with its
    abbreviation and the UTC instant beside it (``2026-12-02 09:00:00 JST (00:00:00Z)``); as
    it is for a schedule kept in UTC, or a text that is not an instant."""
    if not tz:
        return instant
    from datetime import datetime
    from zoneinfo import ZoneInfo

    try:
        when = datetime.fromisoformat(instant.replace("Z", "+00:00"))
        there = when.astimezone(ZoneInfo(tz))
    except (ValueError, KeyError):
        return instant
    return f"{there:%Y-%m-%d %H:%M:%S} {there.tzname()} ({instant})"


_SIMPLE = {
    "run": (
        "fired",
        "Fire schedule NAME now, once (prints the task id); its timetable is unchanged.",
    ),
    "rm": ("removed", "Remove schedule NAME."),
    "pause": ("paused", "Pause schedule NAME: it does not fire until resumed."),
    "resume": ("resumed", "Resume NAME from now on (times passed while paused are not fired)."),
}


def _simple(command: str) -> None:
    verb, text = _SIMPLE[command]

    @schedule.command(command, help=text)
    @click.argument("name", shell_complete=schedule_names)
    @json_option
    @pass_ctx
    def run(ctx: Context, name: str, as_json: bool) -> None:
        from colibri.core import protocol as p

        if command == "run":
            task = ctx.request(p.ScheduleRun(name=name)).task
            print_json(task) if as_json else print_line(task.id)
            return
        kind = {"rm": p.ScheduleRemove, "pause": p.SchedulePause, "resume": p.ScheduleResume}
        schedule = ctx.request(kind[command](name=name)).schedule
        print_json(schedule) if as_json else print_line(f"{verb} {name}")


for _command in _SIMPLE:
    _simple(_command)
