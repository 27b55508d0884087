"""``colibri run --web``: the web server is a thread of the daemon's process, and stopping the
daemon (a SIGTERM, ``colibri stop``) is not held up by pages still open: their streams are
ended by the server, not cut when its graceful shutdown's time runs out."""

from __future__ import annotations

import http.client
import re
import signal
from pathlib import Path

import pytest

from tests.helpers import Daemon, colibri, wait_until
from tests.web.conftest import WebServer

TIMED_OUT = "timeout graceful shutdown exceeded"


@pytest.mark.parametrize("how", ["sigterm", "colibri stop"])
def test_stopping_the_daemon_ends_the_open_pages_streams(root: Path, how: str) -> None:
    daemon = Daemon(root, "--web", "127.0.0.1:0")
    daemon.start()
    streams: list[http.client.HTTPConnection] = []
    try:
        said = r"colibri web: (http://([^/\s:]+):(\d+))(/login\?secret=\S+)"
        found = wait_until(lambda: re.search(said, daemon.log()))
        web = WebServer(root)
        web.base = found.group(1)
        cookie, _ = web.sign_in(found.group(1) + found.group(4))
        responses = []
        for _ in range(2):  # two open pages
            conn = http.client.HTTPConnection(found.group(2), int(found.group(3)), timeout=10)
            streams.append(conn)
            conn.request("GET", "/events?view=board",
                         headers={"Cookie": f"colibri_session={cookie}"})  # fmt: skip
            response = conn.getresponse()
            assert response.readline() == b"retry: 1000\n"  # the stream is open
            responses.append(response)
        process = daemon.process
        assert process is not None
        if how == "sigterm":
            process.send_signal(signal.SIGTERM)
        else:
            assert colibri(root, "stop").returncode == 0
        for response in responses:
            # Ended whole by the server (a stream cut short would raise IncompleteRead).
            response.read()
        assert process.wait(timeout=15) == 0
        assert TIMED_OUT not in daemon.log() and "Traceback" not in daemon.log(), daemon.log()
    finally:
        for conn in streams:
            conn.close()
        daemon.stop()
