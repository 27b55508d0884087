"""Roots: a directory holding ``colibri.jsonc`` and the ``.colibri/`` state folder, found like
``.git`` — ``--root``/``COLIBRI_ROOT`` (resolved by the CLI), else the nearest ancestor of the
working directory that has ``.colibri/``."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from colibri.config.template import TEMPLATE
from colibri.core.errors import RootError
from colibri.layout import CONFIG_NAME, STATE_DIR
from colibri.privatefiles import what
from colibri.trust import check_root


def find_root(start: Path) -> Path | None:
    """The nearest directory at or above ``start`` that has a ``.colibri/`` folder.

    A ``.colibri`` that is a symlink counts too, so that ``resolve_root`` refuses it rather than
    passing on to a root further up; a plain file of that name is someone else's, not a root.
    """
    start = start.resolve()
    for candidate in (start, *start.parents):
        try:
            mode = os.lstat(candidate / STATE_DIR).st_mode
        except OSError:
            continue
        if stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
            return candidate
    return None


def check_state_entry(root: Path) -> bool:
    """Whether ``root/.colibri`` exists; a RootError if it is anything but a real directory.

    The daemon refuses such a state folder too (daemon.process.check_state_dir); saying so here
    stops ``init``, ``run`` and every other command with what is there and what to do.
    """
    path = root / STATE_DIR
    try:
        info = os.lstat(path)
    except (FileNotFoundError, NotADirectoryError):  # NotADirectory: ``root`` is a file
        return False
    except OSError as exc:
        raise RootError(f"cannot look at {path}: {exc.strerror}") from None
    if stat.S_ISDIR(info.st_mode):
        return True
    if stat.S_ISLNK(info.st_mode):
        raise RootError(
            f"{path} is a symlink (to {os.readlink(path)}); a root's state folder must be a "
            "real directory: remove the link (or put the folder itself there) and try again"
        )
    raise RootError(
        f"{path} is {what(info)}, where a Colibri root keeps its state folder: move it away "
        "(or remove it) and try again"
    )


def not_a_root(root: Path | str) -> RootError:
    """What is said of a folder named as a root that is none: by ``--root`` and
    ``COLIBRI_ROOT``, and by ``Client.for_root``."""
    return RootError(f"{root} is not a Colibri root (create one with: colibri init {root})")


def resolve_root(explicit: str | None, cwd: Path) -> Path:
    """The root a command acts on: ``explicit`` (``--root``, ``COLIBRI_ROOT``), else the
    nearest at or above ``cwd``; refused if it is not one, or not ours (``trust.check_root``)."""
    if explicit:
        root = Path(explicit).expanduser().resolve()
        if not check_state_entry(root):
            raise not_a_root(root)
        check_root(root)
        return root
    found = find_root(cwd)
    if found is None:
        raise RootError(
            f"no Colibri root at or above {cwd} (create one with: colibri init, or pass --root)"
        )
    check_state_entry(found)
    check_root(found)
    return found


def init_root(target: Path, *, force: bool = False, config: str = TEMPLATE) -> bool:
    """Create a root at ``target``, writing ``config`` as its colibri.jsonc unless one is there;
    False if it already was a root (then nothing is written). Refuse inside another root."""
    target = target.expanduser().resolve()
    # Before anything is made or read: a folder, colibri.jsonc or .colibri another user owns
    # would have us run what they wrote.
    check_root(target)
    if check_state_entry(target):
        return False
    enclosing = find_root(target.parent) if target.parent != target else None
    if enclosing is not None and not force:
        raise RootError(
            f"{target} is inside the Colibri root {enclosing}; use that root, "
            "or pass --force to create a nested one"
        )
    if os.path.lexists(target) and not target.is_dir():
        raise RootError(f"{target} is {what(os.stat(target))}, not a directory")
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise RootError(f"cannot create a Colibri root at {target}: {exc.strerror}") from None
    # The file first, whole, then the state folder that makes the folder a root: a command
    # started at the same moment (two ``run --detach`` on a fresh root) never finds a root
    # whose colibri.jsonc is missing or half written.
    _write_new(target / CONFIG_NAME, config)
    try:
        (target / STATE_DIR).mkdir(mode=0o700)
    except FileExistsError:
        check_state_entry(target)  # made just now by another command, or refused
        return False
    except OSError as exc:
        raise RootError(f"cannot create a Colibri root at {target}: {exc.strerror}") from None
    return True


def _write_new(file: Path, text: str) -> None:
    """Write ``file`` whole, unless something of that name is there (a colibri.jsonc, or a
    symlink even leading nowhere, which is never followed): written aside, then linked in."""
    import tempfile

    try:
        fd, aside = tempfile.mkstemp(dir=file.parent, prefix=f".{file.name}.")
    except OSError as exc:
        raise RootError(f"cannot create {file}: {exc.strerror}") from None
    try:
        umask = os.umask(0)
        os.umask(umask)
        # Never writable by others, whatever the umask: it says what sessions run as us.
        os.fchmod(fd, 0o644 & ~umask)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(text)
        os.link(aside, file)
    except FileExistsError:
        pass
    except OSError as exc:
        raise RootError(f"cannot create {file}: {exc.strerror}") from None
    finally:
        os.unlink(aside)
