"""Whose roots and daemons a command trusts, as git's ``safe.directory``: its own user's and
root's, and those of the roots its user names in ``COLIBRI_TRUSTED_ROOTS``.

A root found by walking up from the working directory may be one another user planted in a
folder anyone can write (``/tmp/x/.colibri``, above ``/tmp/x/work``). Whoever owns it decides
what its ``colibri.jsonc`` makes sessions run, which pid its ``daemon.lock`` names for ``colibri
stop`` to signal, and who answers on its socket — and so reads every request sent there. So
before any of it is used, the root's folder, ``colibri.jsonc``, ``.colibri``, ``daemon.lock``
and ``colibri.sock`` must belong to the user running the command or to root (``check_root``),
and the process answering on the socket must run as one of them (``check_daemon``: the
kernel's word, ``host.peer_credentials``, before a byte is sent).

``COLIBRI_TRUSTED_ROOTS`` (folders separated by ``:``, or ``*`` for every root) allows the
roots of users one trusts: a member of a daemon's ``server.socket_group`` names the daemon's
root so, and then the daemon may run as the owner of its ``.colibri``. It is read from the
environment only: a setting in ``colibri.jsonc`` would be the untrusted root's own word.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path

from colibri.core.errors import RootError
from colibri.layout import RootLayout

TRUSTED_ROOTS_ENV = "COLIBRI_TRUSTED_ROOTS"


def allowed(root: Path) -> bool:
    """Whether the user named ``root`` (resolved) in ``COLIBRI_TRUSTED_ROOTS``."""
    for entry in os.environ.get(TRUSTED_ROOTS_ENV, "").split(os.pathsep):
        entry = entry.strip()
        if entry == "*" or (entry and Path(entry).expanduser().resolve() == root.resolve()):
            return True
    return False


def _ours(uid: int) -> bool:
    return uid in (os.getuid(), 0)


def who(uid: int) -> str:
    """A user as a person says it: ``name (uid N)``, or ``uid N`` if it has no name."""
    import pwd

    try:
        return f"{pwd.getpwuid(uid).pw_name} (uid {uid})"
    except KeyError:
        return f"uid {uid}"


def _not_yours() -> str:
    return "you or root" if os.getuid() != 0 else "you"


def _allow_it(uid: int, root: Path) -> str:
    name = who(uid).split(" (")[0]
    return f"if you trust {name}, allow it with {TRUSTED_ROOTS_ENV}={root}"


def check_root(root: Path) -> None:
    """Refuse ``root`` (RootError, one line) if its folder, ``colibri.jsonc``, ``.colibri``,
    ``daemon.lock`` or ``colibri.sock`` belongs to someone other than the user running us or
    root, unless ``COLIBRI_TRUSTED_ROOTS`` allows it. What is not there is not asked about."""
    layout = RootLayout(root)
    for path in (root, layout.config, layout.state, layout.daemon_lock, layout.socket):
        try:
            owner = os.lstat(path).st_uid
        except OSError:
            continue  # not there (or not ours to look at: the daemon's socket says who it is)
        if _ours(owner):
            continue
        if allowed(root):
            return
        raise RootError(
            f"{path} belongs to {who(owner)}, not to {_not_yours()}: another user's root is not "
            f"used (its owner decides what runs here and reads what is sent); "
            f"{_allow_it(owner, root)}"
        )


def check_daemon(sock: socket.socket, path: str) -> None:
    """Refuse (RootError, one line) a daemon answering on the Unix socket ``path`` (``sock``,
    connected, nothing sent yet) that runs as another user than ours or root — or, where its
    root is allowed (``COLIBRI_TRUSTED_ROOTS``), than the owner of the socket's folder."""
    from colibri import host

    root = Path(path).parent.parent
    try:
        uid = host.peer_credentials(sock)[0]
    except OSError as exc:
        raise RootError(
            f"cannot tell who answers on {path} ({exc.strerror or exc}); nothing was sent to it"
        ) from None
    if _ours(uid):
        return
    try:
        owner = os.lstat(Path(path).parent).st_uid
    except OSError:
        owner = None
    if uid == owner and allowed(root):
        return
    raise RootError(
        f"the daemon at {path} runs as {who(uid)}, not as {_not_yours()}: nothing was sent "
        f"to it; {_allow_it(uid, root)}"
    )
