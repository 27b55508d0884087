"""``colibri web`` as a real process against a real daemon, and a small HTTP client for the
checks that need no browser (who may see what, what is refused)."""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import queue
import re
import signal
import ssl
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import pytest

from tests.helpers import PYTHON, Daemon


class WebServer:
    """``python -m colibri web`` on a root: its base URL, and each sign-in URL it prints."""

    def __init__(self, root: Path, *args: str, env: dict[str, str] | None = None) -> None:
        self.root = root
        self.args = list(args)
        self.env = env or {}
        self.process: subprocess.Popen[str] | None = None
        self.lines: queue.Queue[str] = queue.Queue()
        self.said: list[str] = []
        self.base = ""
        self.ca: str | None = None
        self._used: set[str] = set()

    def start(self) -> WebServer:
        command = [PYTHON, "-m", "colibri", "--root", str(self.root), "web",
                   "--listen", "127.0.0.1:0", *self.args]  # fmt: skip
        self.process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
            stdin=subprocess.DEVNULL, start_new_session=True, env={**os.environ, **self.env},
        )  # fmt: skip
        threading.Thread(target=self._read, daemon=True).start()
        first = self.next_line()
        self.base = re.match(r"colibri web: (https?://[^/ ]+)", first).group(1)  # type: ignore[union-attr]
        return self

    def _read(self) -> None:
        assert self.process is not None and self.process.stderr is not None
        for line in self.process.stderr:
            self.lines.put(line.rstrip("\n"))
        self.lines.put("")

    def next_line(self, timeout: float = 15.0) -> str:
        line = self.lines.get(timeout=timeout)
        if not line:
            raise AssertionError(f"colibri web ended: {self.said}")
        self.said.append(line)
        return line

    def sign_in_url(self) -> str:
        """A sign-in URL not handed out before: the newest printed, or the next one (each is
        good once, and the server prints a new one after each use). It is the caller's to use:
        one handed out twice would be refused the second time, leaving that browser signed
        in to whichever server it was signed in to before."""
        while True:
            with contextlib.suppress(queue.Empty):
                while True:  # (lines printed meanwhile: the newest URL is the good one)
                    line = self.lines.get_nowait()
                    if not line:
                        raise AssertionError(f"colibri web ended: {self.said}")
                    self.said.append(line)
            urls = [u for u in self.said if "secret=" in u]
            if urls and urls[-1] not in self._used:
                self._used.add(urls[-1])
                return urls[-1].split("colibri web: ", 1)[1]
            self.next_line()

    def stop(self) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=10)
        if self.process.stderr is not None:
            self.process.stderr.close()

    # -- HTTP ------------------------------------------------------------------------------

    def request(
        self, method: str, path: str, *, cookie: str | None = None,
        form: dict[str, str] | None = None, headers: dict[str, str] | None = None,
    ) -> tuple[int, dict[str, str], str]:  # fmt: skip
        parts = urlsplit(self.base)
        if parts.scheme == "https":
            context = ssl.create_default_context(cafile=self.ca)
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                parts.hostname or "", parts.port, context=context, timeout=10
            )
        else:
            conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=10)
        sent = dict(headers or {})
        if cookie:
            sent["Cookie"] = f"colibri_session={cookie}"
        body = None
        if form is not None:
            body = urlencode(form)
            sent.setdefault("Content-Type", "application/x-www-form-urlencoded")
            sent.setdefault("Origin", self.base)
        try:
            conn.request(method, path, body=body, headers=sent)
            response = conn.getresponse()
            return response.status, {k.lower(): v for k, v in response.getheaders()}, \
                response.read().decode()  # fmt: skip
        finally:
            conn.close()

    def sign_in(self, url: str | None = None) -> tuple[str, str]:
        """Signed in by the one-time URL: the session cookie and the CSRF token."""
        url = url or self.sign_in_url()
        status, headers, _ = self.request("GET", url[len(self.base):])
        assert status == 303, (status, headers)
        cookie = cookie_of(headers)
        return cookie, self.csrf(cookie)

    def csrf(self, cookie: str) -> str:
        status, _, body = self.request("GET", "/agents", cookie=cookie)
        assert status == 200, body
        return re.search(r'<meta name="csrf" content="([^"]+)">', body).group(1)  # type: ignore[union-attr]

    def events(self, cookie: str, query: str, until: Any, timeout: float = 10.0) -> list[Any]:
        """The updates of a stream, read until ``until(updates)`` says enough."""
        parts = urlsplit(self.base)
        if parts.scheme == "https":
            context = ssl.create_default_context(cafile=self.ca)
            conn: http.client.HTTPConnection = http.client.HTTPSConnection(
                parts.hostname or "", parts.port, context=context, timeout=timeout
            )
        else:
            conn = http.client.HTTPConnection(parts.hostname or "", parts.port, timeout=timeout)
        updates: list[Any] = []
        try:
            conn.request("GET", f"/events?{query}", headers={"Cookie": f"colibri_session={cookie}"})
            response = conn.getresponse()
            assert response.status == 200
            deadline = time.monotonic() + timeout
            while not until(updates):
                assert time.monotonic() < deadline, f"not seen within {timeout}s: {updates}"
                line = response.readline().decode()
                if line.startswith("data: "):
                    updates.append(json.loads(line[6:]))
            return updates
        finally:
            conn.close()


def cookie_of(headers: dict[str, str]) -> str:
    match = re.search(r"colibri_session=([^;]*)", headers.get("set-cookie", ""))
    assert match and match.group(1), headers
    return match.group(1)


@pytest.fixture
def web(daemon: Daemon) -> Iterator[WebServer]:
    server = WebServer(daemon.root).start()
    try:
        yield server
    finally:
        server.stop()
