"""The ``colibri`` a session runs: the very Colibri of its harness, first on its PATH.

A session reports with ``colibri out``, hands work on with ``colibri submit --to``: whatever
``colibri`` its PATH finds. A daemon started by absolute path (``.venv/bin/colibri run``, a
service) has no ``colibri`` on its PATH, or another version's. So the harness writes a small
script named ``colibri`` into a folder of its own under ``.colibri/bin/`` and puts that folder
first on each session's PATH (before the workspace's own ``session.env`` PATH, if it sets one).

The script runs this Python with this copy of the package, not the console script beside
the interpreter: that may be missing (the harness run by ``python -m colibri`` from a source
tree, or by an interpreter whose scripts went to another folder) or be another program of that
name, and putting the interpreter's own folder on PATH would put its ``python`` and ``pip``
before the session's. The folder holds that one file; it is named by the script's digest, so
harnesses of different installs on one root never overwrite each other's.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shlex
import sys
from pathlib import Path

import colibri
from colibri.core.errors import RootError
from colibri.layout import RootLayout
from colibri.privatefiles import private_dir, write_private

log = logging.getLogger(__name__)

NAME = "colibri"


def script() -> str:
    """The ``colibri`` of this harness's sessions, as a POSIX ``sh`` script."""
    # The folder that holds the package: put on the path if this Python would not find it
    # there by itself (a source tree run with PYTHONPATH, which a session may set otherwise).
    home = os.path.dirname(os.path.dirname(os.path.abspath(colibri.__file__)))
    code = (  # (a JSON string is a Python one, and reads well in single quotes)
        f"import sys\nhome = {json.dumps(home)}\n"
        "if home not in sys.path: sys.path.insert(0, home)\n"
        "from colibri.cli.main import main\nmain()"
    )
    # -P: no folder of the session's (its working directory) before the package's.
    run = [os.path.abspath(sys.executable), "-P", "-c", code]
    return (
        "#!/bin/sh\n"
        "# The Colibri whose harness runs this root's sessions, first on their PATH (written\n"
        "# by the harness: its Python, and its copy of the package).\n"
        f'exec {" ".join(shlex.quote(part) for part in run)} "$@"\n'
    )


def write_shim(root: Path) -> Path | None:
    """The folder holding this harness's ``colibri`` (written if it is not there yet), or
    None if it cannot be written (said in the log): the sessions then find ``colibri`` on
    their PATH as it is."""
    text = script()
    folder = RootLayout(root).shim(hashlib.sha256(text.encode()).hexdigest()[:16])
    path = folder / NAME
    try:
        if path.read_text(encoding="utf-8") == text:
            return folder
    except (OSError, UnicodeDecodeError):
        pass
    try:
        private_dir(folder.parent)
        private_dir(folder)
        write_private(path, text.encode(), mode=0o700)
    except (OSError, RootError) as exc:
        log.warning(
            "cannot write the colibri of the sessions; they run the colibri on their PATH",
            extra={"event": "shim_failed", "path": str(path), "error": str(exc)},
        )
        return None
    return folder


def first_on_path(folder: Path, path: str | None) -> str:
    """``path`` (a PATH's value; None: unset, the system's default) with ``folder`` first."""
    rest = os.defpath if path is None else path
    return os.pathsep.join([str(folder), rest]) if rest else str(folder)
