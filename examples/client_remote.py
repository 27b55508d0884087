"""Reach a daemon on another machine over TLS, with a token, and submit a task there.

    COLIBRI_CONNECT=tcp://board.example:7433 COLIBRI_TOKEN=… COLIBRI_TLS_CA=ca.pem \
        python examples/client_remote.py

The same variables as the ``colibri`` command's. Make the token on the daemon's host with
``colibri token create --role operator``; ``COLIBRI_TLS_CA`` is the CA that signed the daemon's
certificate (leave it out when a public CA did).
"""

from __future__ import annotations

import os

from colibri import Client, ColibriError, Remote


def main() -> None:
    remote = Remote.parse(
        os.environ["COLIBRI_CONNECT"],
        token=os.environ["COLIBRI_TOKEN"],
        ca=os.environ.get("COLIBRI_TLS_CA"),
    )
    try:
        with Client.remote(remote) as board:
            task = board.submit("collect the build logs", capabilities=["python"])
            print(f"{board.wait(task.id).outcome} on {remote}")
    except ColibriError as exc:  # unauthorized, tls_failed, no_daemon …: one line, its code
        raise SystemExit(f"{exc.code}: {exc.message}") from None


if __name__ == "__main__":
    main()
