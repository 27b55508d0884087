"""The tmux commands of the tmux session backend (``backends/tmux.py``).

Every session of an agent is a tmux session on that agent's own tmux server, whose socket is
``.colibri/tmux/<agent>.sock`` (``socket_for``, also what ``colibri attach-session`` uses).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from pathlib import Path

from colibri.agent.reaping import spawn
from colibri.host import alive

POLL = 0.1


def socket_for(root: Path, agent: str) -> Path:
    from colibri.layout import RootLayout

    return RootLayout(root).tmux_socket(agent)


async def tmux(socket: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Run one tmux command against the workspace's server (with ``env`` added to the
    client's environment); raise RuntimeError on failure. The client is the harness's
    own (``spawn``): the reaper never takes it for a session's leftovers."""
    process = await spawn(
        "tmux", "-S", str(socket), *args,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        stdin=asyncio.subprocess.DEVNULL, env={**os.environ, **env} if env else None,
    )  # fmt: skip
    out, err = await process.communicate()
    if process.returncode != 0:
        raise RuntimeError(f"tmux {args[0]}: {err.decode(errors='replace').strip()}")
    return out.decode(errors="replace")


async def start(
    socket: Path,
    name: str,
    command: list[str],
    env: dict[str, str],
    cwd: Path | None,
    names: list[str],
) -> int:
    """Start ``command`` as tmux session ``name`` with ``env``; return the pid of its pane (a
    group leader). ``names``: every variable any session may be given (those not in ``env``
    are removed from this session's environment).

    The values never go on a command line, which every user of the machine may read in
    /proc: the server copies them from the client's own environment, as its
    ``update-environment`` option tells it to. ``COLIBRI_SESSION`` alone (an id, no secret)
    is given with ``-e``: the client keeps the harness's own, so a tmux server this call
    starts carries the harness's id, never a session's, and outlives every session."""
    from colibri.privatefiles import private_dir

    private_dir(socket.parent)
    values = dict(env)
    sid = values.pop("COLIBRI_SESSION", None)
    flags = [f"-eCOLIBRI_SESSION={sid}"] if sid is not None else []
    listed = " ".join(sorted(n for n in names if n != "COLIBRI_SESSION"))
    where = ["-c", str(cwd)] if cwd is not None else []
    out = await tmux(
        socket, "set-option", "-g", "update-environment", listed, ";",
        "new-session", "-d", "-s", name, "-x", "200", "-y", "50", *where, *flags,
        "-P", "-F", "#{pane_pid}", *command, env=values,
    )  # fmt: skip
    return int(out.strip().splitlines()[-1])


async def screen(socket: Path, name: str) -> str:
    return await tmux(socket, "capture-pane", "-p", "-t", name)


async def type_text(socket: Path, name: str, text: str) -> None:
    """Type the task into the session literally (never through a shell), then Enter."""
    await tmux(socket, "send-keys", "-t", name, "-l", text)
    await tmux(socket, "send-keys", "-t", name, "Enter")


async def wait_ready(
    socket: Path, name: str, pid: int, ready: asyncio.Event, pattern: str | None
) -> bool:
    """Until ready (``colibri ready``, or ``pattern`` on the screen); False if it ended first."""
    compiled = re.compile(pattern) if pattern else None
    while not ready.is_set():
        if not alive(pid):
            return False
        if compiled is not None:
            with contextlib.suppress(RuntimeError):
                if compiled.search(await screen(socket, name)):
                    return True
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(POLL):
                await ready.wait()
    return True


async def wait_exit(pid: int) -> None:
    while alive(pid):
        await asyncio.sleep(POLL)


async def kill(socket: Path, name: str, pid: int, grace: float) -> None:
    """Stop the session's whole process group (SIGKILL after ``grace``), then its tmux
    session."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM if grace > 0 else signal.SIGKILL)
    for _ in range(round(grace / POLL)):
        if not alive(pid):
            break
        await asyncio.sleep(POLL)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(RuntimeError):
        await tmux(socket, "kill-session", "-t", name)
