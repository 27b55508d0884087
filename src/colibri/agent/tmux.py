"""The tmux session backend: interactive agents an operator can attach to.

Each task runs as a tmux session (named by the task id) on the workspace's own tmux server,
whose socket is ``.colibri/tmux/<agent>.sock``; ``colibri attach-session TASK`` (or plain
``tmux -S … attach -t TASK``) shows it live. The agent's command starts first; the task is typed
into it once it is ready — when the session runs ``colibri ready``, or when ``ready_pattern``
appears on its screen. The session reports with ``colibri out``; a session that ends without
out fails its task. One that is not ready within ``ready_timeout`` is killed and its task goes
back to pending.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from pathlib import Path

from colibri.host import alive

POLL = 0.1
#: tmux commands running now (their pids), and how many are being started: the harness's
#: reaper must never take them for a session's leftovers, nor reap them (asyncio does).
CLIENTS: set[int] = set()
SPAWNING = 0


def socket_for(root: Path, agent: str) -> Path:
    from colibri.layout import STATE_DIR

    return root / STATE_DIR / "tmux" / f"{agent}.sock"


async def tmux(socket: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Run one tmux command against the workspace's server (with ``env`` added to the
    client's environment); raise RuntimeError on failure."""
    global SPAWNING
    SPAWNING += 1
    try:
        process = await asyncio.create_subprocess_exec(
            "tmux", "-S", str(socket), *args,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            stdin=asyncio.subprocess.DEVNULL, env={**os.environ, **env} if env else None,
        )  # fmt: skip
    finally:
        SPAWNING -= 1
    CLIENTS.add(process.pid)
    try:
        out, err = await process.communicate()
    finally:
        CLIENTS.discard(process.pid)
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


async def kill(socket: Path, name: str, pid: int) -> None:
    """Stop the session's whole process group, then its tmux session."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
    for _ in range(50):
        if not alive(pid):
            break
        await asyncio.sleep(POLL)
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(RuntimeError):
        await tmux(socket, "kill-session", "-t", name)
