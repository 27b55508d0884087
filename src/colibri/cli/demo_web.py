"""``colibri demo --web``: the demo's daemon serves the board in a browser too (``run --web``).

Its web server says each one-time sign-in URL on the daemon's stderr, a fresh one after each
use. The demo reads the daemon's output through a pipe — passing every line on to the demo's
log, where the latest URL can always be found — and shows the first URL before its TUI or its
lines start.
"""

from __future__ import annotations

import importlib.util
import queue
import threading
from pathlib import Path
from typing import IO, Any

#: What ``colibri web`` needs, by the names they are imported as (python-multipart: the forms).
WEB_MODULES = {"starlette": "starlette", "uvicorn": "uvicorn", "jinja2": "jinja2",
               "python-multipart": "python_multipart"}  # fmt: skip
URL_SAID = "colibri web: "


def missing_web_extra() -> list[str]:
    """The packages of the web extra that cannot be imported (found, not imported: importing
    Starlette and uvicorn is for the daemon)."""
    missing = []
    for package, module in WEB_MODULES.items():
        try:
            found = importlib.util.find_spec(module) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            missing.append(package)
    return missing


def check_address(web: str) -> None:
    """``--web``'s value, a HOST:PORT, or a one-line error (a folder given after a bare
    ``--web`` is taken for its value: said so)."""
    import click

    from colibri.core.errors import ConfigError
    from colibri.endpoints import WEB_PORT, parse_host_port

    try:
        parse_host_port(web, "web", WEB_PORT)
    except ConfigError as exc:
        hint = "" if ":" in web else f" (a folder? it goes first: colibri demo {web} --web)"
        raise click.BadParameter(exc.message + hint, param_hint="--web") from None


def refuse_without_web_extra() -> None:
    missing = missing_web_extra()
    if missing:
        raise SystemExit(
            f"colibri: demo --web needs the web extra ({', '.join(missing)} missing): "
            "pip install 'colibri-board[web]' (from a checkout: pip install -e '.[web]')"
        )


class DaemonOutput(threading.Thread):
    """The daemon's stdout and stderr, line by line into the demo's log; each sign-in URL its
    web server says is put in ``urls`` too ("" once the daemon's output has ended)."""

    def __init__(self, stream: IO[bytes], log: IO[bytes]) -> None:
        super().__init__(name="demo-daemon-output", daemon=True)
        self.stream = stream
        self.log = log
        self.urls: queue.Queue[str] = queue.Queue()
        self.last = ""

    def run(self) -> None:
        try:
            for line in self.stream:
                self.log.write(line)
                self.log.flush()
                text = line.decode(errors="replace").strip()
                self.last = text or self.last
                if text.startswith(URL_SAID) and "secret=" in text:
                    self.urls.put(text[len(URL_SAID) :])
        except (OSError, ValueError):
            pass  # the log closed under us: the demo is ending
        finally:
            self.urls.put("")

    def first_url(self, timeout: float = 30.0) -> str:
        try:
            url = self.urls.get(timeout=timeout)
        except queue.Empty:
            url = ""
        if not url:
            raise SystemExit(
                f"colibri: the demo daemon said no sign-in URL for its web server: {self.last}"
            )
        return url


def say_url(url: str, log_path: Path) -> str:
    """What the demo says of the board in a browser (also its TUI's notice)."""
    return (
        f"the board in a browser: {url}\n"
        f"  it signs in once; each use puts a fresh one in the demo's log: "
        f"grep '{URL_SAID}' {log_path} | tail -1"
    )


def tui_with_notice(target: Any, root: Path, notice: str) -> Any:
    """The demo's TUI, showing ``notice`` (where the board is in a browser) as it starts, for
    as long as it runs: the URL printed before it is hidden while the TUI has the screen."""
    from colibri.tui.app import ColibriApp

    class DemoApp(ColibriApp):
        def on_mount(self) -> None:  # (as well as the board's own: Textual calls both)
            self.notify(notice, title="colibri demo --web", timeout=24 * 3600)

    return DemoApp(target, root=root)
