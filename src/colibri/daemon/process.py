"""The process's chores: its locks, its state folder and socket file, its event loop, and
calls that must not hold the loop up (``off_loop``)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import stat
import threading
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

from colibri.config import Config
from colibri.core.errors import LockHeld, RootError
from colibri.locks import hold_lock, store_lock

T = TypeVar("T")


def acquire_lock(path: Path) -> int:
    """Hold ``daemon.lock`` for the life of the process; the kernel drops it if we die."""
    try:
        return hold_lock(path)
    except LockHeld as held:
        raise LockHeld(
            held.holder,
            f"another daemon (pid {held.holder}) is already running for {path.parent.parent}",
        ) from None


def acquire_store_lock(store: str) -> int:
    """Hold ``<store>.lock`` too: another root's daemon may have been pointed at this board."""
    try:
        return hold_lock(store_lock(store), own_folder=False)
    except LockHeld as held:
        raise LockHeld(
            held.holder,
            f"another daemon (pid {held.holder}) already has the board {store} open; one daemon "
            "per board: stop it, or give this root a board of its own (--store, store.path)",
        ) from None


def check_state_dir(path: Path, group: int | None = None) -> None:
    """Refuse a state folder someone else could tamper with; tighten our own to 0700.

    With a socket group the folder also gets that group now, and its traverse bit only once the
    socket is in place (``open_to_group``), so nobody reaches a half-made socket."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode) or not stat.S_ISDIR(info.st_mode):
        raise RootError(f"{path} must be a real directory, not a symlink or a file")
    if info.st_uid != os.getuid():
        raise RootError(f"{path} belongs to uid {info.st_uid}, not to us (uid {os.getuid()})")
    if stat.S_IMODE(info.st_mode) != 0o700:
        os.chmod(path, 0o700)
    if group is not None and info.st_gid != group:
        try:
            os.chown(path, -1, group)
        except PermissionError:
            raise RootError(
                f"cannot give {path} to group {group} (server.socket_group): the user running "
                "the daemon must be a member of that group"
            ) from None


def open_to_group(config: Config) -> None:
    """Let ``server.socket_group`` in: the socket 0660 in a folder its members may traverse
    (0710: they reach the socket by name, list nothing, and every file in it is 0600)."""
    group = config.server.socket_group
    if group is None:
        return
    os.chown(config.layout.socket, -1, group)
    os.chmod(config.layout.socket, 0o660)
    os.chmod(config.layout.state, 0o710)


def clear_stale_socket(path: Path) -> None:
    """We hold the lock, so a socket left at ``path`` is from a dead daemon: remove it."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(info.st_mode):
        raise RootError(f"{path} exists and is not a socket; refusing to remove it")
    os.unlink(path)


def run_loop(main: Coroutine[Any, Any, int], loop: str = "auto") -> int:
    """Run the daemon's loop: uvloop when it is installed (faster sockets), else asyncio's."""
    try:
        if loop == "asyncio":
            raise ImportError
        import uvloop
    except ImportError:
        if loop == "uvloop":
            main.close()
            raise  # the CLI says what to install (colibri.extras)
        return asyncio.run(main)
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(main)


async def off_loop(call: Callable[[], T]) -> T:
    """``call``'s result, run on a daemon thread of its own. Not ``asyncio.to_thread``: the
    executor's threads are joined when the loop ends, and a lease call hung on a server gone
    silent would keep a daemon that stopped by its deadline from exiting."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[T] = loop.create_future()

    def settle(outcome: Callable[[], None]) -> None:
        if not future.done():
            outcome()

    def run() -> None:
        try:
            result = call()
        except BaseException as exc:
            error = exc
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                loop.call_soon_threadsafe(settle, lambda: future.set_exception(error))
        else:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(settle, lambda: future.set_result(result))

    threading.Thread(target=run, name="colibri-off-loop", daemon=True).start()
    return await future
