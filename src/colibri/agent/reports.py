"""A harness's reports: cut to fit the daemon's request line, paused between tries, and the last
ones a stopping harness sends for its sessions. ``Harness._deliver`` is where they go out while
the harness runs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TypeVar

import msgspec

from colibri.agent.session import Report, Session
from colibri.client import AsyncClient, Remote
from colibri.core.agent_protocol import Fail, Out, Reclaimed
from colibri.core.backoff import Backoff
from colibri.core.errors import ColibriError, ConnectionClosed, DaemonNotRunning, Elsewhere
from colibri.core.protocol import wire_fields
from colibri.core.sizes import fit_report

#: A report refused by a transient answer (``ColibriError.transient``) is sent again after
#: this pause, doubled each time up to ``REPORT_LONGEST_PAUSE``, until the daemon takes it or
#: refuses it for good.
REPORT_FIRST_PAUSE = 0.1
REPORT_LONGEST_PAUSE = 5.0
#: How long a stopping harness tries to deliver its sessions' last reports (after the kills,
#: within the supervisor's 10 s before it SIGKILLs the harness).
REPORT_TIMEOUT = 4.0
#: How long a stopping harness waits for its stopped sessions' worktrees to be closed (what
#: they left committed, their changes measured) before it sends their last reports: with
#: KILL_GRACE before and REPORT_TIMEOUT after, within the supervisor's 10 s.
SETTLE_PATIENCE = 1.0
#: What a session whose end says nothing, and that has not reported by itself, fails with.
ENDED_WITHOUT_OUT = "session ended without out"

ReportT = TypeVar("ReportT", bound=Report)


def report_pauses() -> Backoff:
    """The pauses between the tries of one report."""
    return Backoff(REPORT_FIRST_PAUSE, REPORT_LONGEST_PAUSE)


def fitted(report: ReportT, max_line: int) -> ReportT:
    """``report`` with its long text (an out's output, a fail's error) cut to fit one request
    line of ``max_line`` bytes."""
    match report:
        case Out(output=text):
            field = "output"
        case Fail(error=text):
            field = "error"
        case _:
            return report
    if not text:
        return report
    cmd, fields = wire_fields(report)
    del fields[field]
    return msgspec.structs.replace(
        report, **{field: fit_report(text, max_line, cmd, fields, field)}
    )


async def send_last_reports(
    daemon: Path | Remote, sessions: list[Session], stopped: str, max_line: int
) -> None:
    """Send each stopped session's report (``last_report``: a fail saying ``stopped`` for one
    that had none ready) on a plain connection, as a session's own go: the daemon takes them
    for the agent holding the task, checking the epoch, and gives the agent no new work.
    Within ``REPORT_TIMEOUT``, and only while this daemon is there and serves the tenant."""
    client = AsyncClient(daemon)
    try:
        async with asyncio.timeout(REPORT_TIMEOUT):
            await client.connect()
            for session in sessions:
                pauses = report_pauses()
                report = last_report(session, stopped)
                last = fitted(
                    msgspec.structs.replace(report, from_session=True, claim=session.claim),
                    max_line,
                )
                while True:  # a transient refusal is waited out, within REPORT_TIMEOUT
                    try:
                        await client.request(last)
                    except ColibriError as exc:
                        if not exc.transient or isinstance(exc, (ConnectionClosed, Elsewhere)):
                            break
                        await asyncio.sleep(pauses.next())
                        continue
                    break
    except (DaemonNotRunning, OSError, TimeoutError):
        pass  # no daemon (or a frozen one): these fail as lost later, unless claimed
    finally:
        await client.close()


def last_report(session: Session, stopped: str) -> Out | Fail:
    """What a stopping harness reports for ``session``: its out or fail if it had one ready;
    else it failed (``reclaimed`` and ``requeue`` are for the agent's connection)."""
    report = session.report.request if session.report is not None else None
    match report:
        case Out() | Fail():
            return report
        case Reclaimed():
            error = ENDED_WITHOUT_OUT
        case _:
            error = stopped
    return Fail(task=session.task, epoch=session.epoch, error=error, change=session.change)
