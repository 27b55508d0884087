"""A harness's reports: cut to fit the daemon's request line, paused between tries, and the last
ones a stopping harness sends for its sessions. ``Harness._deliver`` is where they go out while
the harness runs."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from colibri.agent.backends.base import Report
from colibri.agent.session import Session
from colibri.client import AsyncClient, Remote
from colibri.core.backoff import Backoff
from colibri.core.errors import ColibriError, ConnectionClosed, DaemonNotRunning, Elsewhere
from colibri.core.sizes import fit_report

#: A report refused by a transient answer (``ColibriError.transient``) is sent again after
#: this pause, doubled each time up to ``REPORT_LONGEST_PAUSE``, until the daemon takes it or
#: refuses it for good.
REPORT_FIRST_PAUSE = 0.1
REPORT_LONGEST_PAUSE = 5.0
#: How long a stopping harness tries to deliver its sessions' last reports (after the kills,
#: within the supervisor's 10 s before it SIGKILLs the harness).
REPORT_TIMEOUT = 4.0
#: What a session whose end says nothing, and that has not reported by itself, fails with.
ENDED_WITHOUT_OUT: Report = ("fail", {"error": "session ended without out"})


def report_pauses() -> Backoff:
    """The pauses between the tries of one report."""
    return Backoff(REPORT_FIRST_PAUSE, REPORT_LONGEST_PAUSE)


def fitted(session: Session, cmd: str, fields: dict[str, Any], max_line: int) -> dict[str, Any]:
    """A report's fields, its long text (an out's output, a fail's error) cut to fit one
    request line of ``max_line`` bytes."""
    fields = {k: v for k, v in fields.items() if k != "refused"}  # ours, not the wire's
    field = {"out": "output", "fail": "error"}.get(cmd)
    if field is None or not fields.get(field):
        return fields
    rest = {k: v for k, v in fields.items() if k != field}
    where = {"task": session.task, "epoch": session.epoch, "claim": session.claim}
    text = fit_report(fields[field], max_line, cmd, {**where, **rest}, field)
    return {**rest, field: text}


async def send_last_reports(
    daemon: Path | Remote, sessions: list[Session], stopped: Report, max_line: int
) -> None:
    """Send each stopped session's report (``stopped`` for one that had none ready) on a plain
    connection, as a session's own go: the daemon takes them for the agent holding the task,
    checking the epoch, and gives the agent no new work. Within ``REPORT_TIMEOUT``, and only
    while this daemon is there and serves the tenant."""
    client = AsyncClient(daemon)
    try:
        async with asyncio.timeout(REPORT_TIMEOUT):
            await client.connect()
            for session in sessions:
                report = session.report
                if report is not None and report[0] == "reclaimed":
                    report = ENDED_WITHOUT_OUT  # ``reclaimed`` is for the agent's connection
                cmd, fields = report if report and report[0] in ("out", "fail") else stopped
                pauses = report_pauses()
                while True:  # a transient refusal is waited out, within REPORT_TIMEOUT
                    try:
                        await client.call(
                            cmd, task=session.task, epoch=session.epoch, from_session=True,
                            claim=session.claim, **fitted(session, cmd, fields, max_line),
                        )  # fmt: skip
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
