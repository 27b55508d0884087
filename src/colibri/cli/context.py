"""What a command talks to (``Context``: this root's daemon on its socket, or one over TCP
with ``--connect``), and how it rides out a daemon away for a moment: a session's own command
waits out a busy or restarting daemon (``wait_out_busy``); a command that follows the board
follows it through a takeover or a restart (``through_takeovers``). Both pause as
``core.backoff`` says."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from colibri.core.backoff import Backoff
from colibri.core.errors import Busy, ColibriError, DaemonNotRunning, NotOwner, Standby, Unreached

if TYPE_CHECKING:  # the client's modules load when a command connects, not at start
    from colibri.client import Client
    from colibri.core.request_fields import R, Request

T = TypeVar("T")

#: How a session's own command waits out a daemon that refuses it as ``busy``: the first pause,
#: the longest pause (each one doubles), and the time after which it gives up.
BUSY_FIRST_PAUSE = 0.05
BUSY_LONGEST_PAUSE = 2.0
BUSY_PATIENCE = 60.0

#: How long a command that follows the board (``wait``, ``submit --wait``, ``attach``,
#: ``ledger --follow``) looks for a daemon again after losing its own, before it gives up
#: (``--follow-for``): a takeover takes the lease's ttl and a few seconds (10–14 s with the
#: default 10 s ttl).
FOLLOW_PATIENCE = 60.0


class Context:
    def __init__(
        self,
        root: str | None = None,
        connect: str | None = None,
        token: str | None = None,
        tls_ca: str | None = None,
        insecure_loopback: bool = False,
        follow_for: str | None = None,
    ) -> None:
        self.root_option = root
        self.connect = connect
        self.token = token
        self.tls_ca = tls_ca
        self.insecure_loopback = insecure_loopback
        self.follow_for = follow_for

    def patience(self) -> float:
        """How long a command that follows the board looks for a daemon again after losing
        its own (``--follow-for``)."""
        if self.follow_for is None:
            return FOLLOW_PATIENCE
        from colibri.core.durations import DAY, parse_duration

        try:
            return parse_duration(self.follow_for, high=DAY)
        except ColibriError as exc:
            exc.message = f"--follow-for (COLIBRI_FOLLOW_FOR): {exc.message}"
            raise

    def root(self) -> Path:
        from colibri.config import resolve_root

        return resolve_root(self.root_option, Path.cwd())

    def remote(self) -> Any:
        """The daemon over TCP that ``--connect`` names, or None: this root's, on its socket."""
        if not self.connect:
            return None
        from colibri.client import Remote

        if not self.token:
            raise click.UsageError(
                "--connect needs a token: give --token, or set COLIBRI_TOKEN "
                "(create one on the daemon's host with: colibri token create)"
            )
        return Remote.parse(
            self.connect, token=self.token, ca=self.tls_ca,
            insecure_loopback=self.insecure_loopback,
        )  # fmt: skip

    def client(self, timeout: float | None = None) -> Client:
        """A connection to the daemon; ``timeout``: seconds each socket operation may take.
        Over TCP a takeover is waited out, said once on stderr, and a request lost to one is
        sent again where that is safe (``Client.remote``)."""
        from colibri.client import Client

        remote = self.remote()
        if remote is not None:
            return Client.remote(remote, timeout=timeout, on_wait=say_waiting)
        return Client.for_root(self.root(), timeout=timeout)

    def request(self, req: Request[R], *, patient: bool = False) -> R:
        """One request on a connection of its own, its reply typed (``Client.request``);
        ``patient``: see ``wait_out_busy``."""

        def once() -> R:
            with self.client() as client:
                return client.request(req)

        return wait_out_busy(once) if patient else once()


def say_waiting(what: str) -> None:
    """One line on stderr: what the client waits for (a daemon to take over)."""
    from colibri.cli.output import printable

    click.echo(printable(f"colibri: {what}"), err=True)


def wait_out_busy(attempt: Callable[[], T]) -> T:
    """Run ``attempt`` (which opens its own connection) again while the daemon's answer is
    transient (``ColibriError.transient``): ``busy``, not there for a moment (restarting: no
    socket, the connection closed under the request, or a daemon standing by until its
    predecessor's lease lapses), its store unavailable, a batch rolled back — with growing
    pauses, for up to ``BUSY_PATIENCE`` seconds. For what a session reports from inside
    itself: a report must not be lost because the daemon was full or restarting. A transient
    refusal changes nothing; a request cut off by a restart either committed or did not, and
    sent again it is answered as taken (the same report), refused (the task has moved on) or
    taken, never done twice.
    """
    import time

    give_up = time.monotonic() + BUSY_PATIENCE
    pauses = Backoff(BUSY_FIRST_PAUSE, BUSY_LONGEST_PAUSE)
    while True:
        try:
            return attempt()
        except ColibriError as exc:
            if not exc.transient:
                raise
            if time.monotonic() + pauses.peek() > give_up:
                exc.message += f" (still so after {BUSY_PATIENCE:.0f}s of retries)"
                raise
        time.sleep(pauses.next())


#: What such a command follows through: its daemon gone (killed, stopped, restarting), or
#: one that does not serve the board or the tenant now (it stands by, or another took it), or
#: one too busy to take the connection. Not ``lease_lost``, the rest of ``Elsewhere``: a batch
#: refused as its daemon's lease passed on ends the command, as it always has.
LOST = (Unreached, Standby, NotOwner, Busy)


def through_takeovers(
    ctx: Context,
    run: Callable[[Client], T],
    *,
    patient: bool = False,
    connected: Client | None = None,
) -> T:
    """``run(client)`` on a connection to the daemon, for a command that follows the board.
    When the connection is lost (``LOST``) it connects again — over TCP trying the addresses
    after the lost one first, where a standby that took over serves — says so in one line on
    stderr, and calls ``run`` again, which goes on from where it was. It gives up, ``no_daemon``,
    once no daemon has answered for ``ctx.patience()`` seconds (0: the loss is raised as it
    is). On this root's socket, a daemon gone for good (no process holds the root any more)
    ends it at once with the error that lost it, unless ``patient`` (a session's own command,
    which waits out a restart for ``BUSY_PATIENCE`` as ``wait_out_busy`` does, its first
    connection too). ``connected``: a connection already open, for the first try."""
    import time

    from colibri.client import Client, socket_path

    patience = BUSY_PATIENCE if patient else ctx.patience()
    remote = ctx.remote()
    lost: ColibriError | None = None
    lost_at = 0.0
    where = ""  # the daemon that was lost ("": none yet, a session waiting for its first)
    pauses = Backoff(BUSY_FIRST_PAUSE, BUSY_LONGEST_PAUSE)
    while True:
        try:
            if connected is not None:
                client, connected = connected, None
            elif remote is None:
                client = ctx.client()
            else:
                # This loop follows the board once it is lost (nothing is sent twice by the
                # client): only a first try waits out a takeover under way, and says so.
                first = lost is None
                client = Client.remote(remote, patience=None if first else 0,
                                       on_wait=say_waiting if first else None,
                                       resend=False)  # fmt: skip
        except ColibriError as exc:
            if not isinstance(exc, LOST) or (lost is None and not patient):
                raise
            if lost is None:
                lost, lost_at = exc, time.monotonic()
            if remote is None and isinstance(exc, DaemonNotRunning) and not patient:
                raise lost from None  # the root's daemon stopped: nothing to follow
            if time.monotonic() - lost_at + pauses.peek() > patience:
                after = f"losing the daemon at {where}" if where else "the first try"
                raise DaemonNotRunning.at(
                    str(remote) if remote is not None else str(socket_path(ctx.root())),
                    f"none answered within {patience:g}s after {after} "
                    f"({lost.message}); last: {exc.message}",
                ) from None
            time.sleep(pauses.next())
            continue
        with client:
            if lost is not None and where:
                from colibri.cli.output import printable

                click.echo(
                    printable(f"colibri: lost the daemon at {where} ({lost.message}); "
                              f"following the board at {client.path}"),
                    err=True,
                )  # fmt: skip
            lost = None
            pauses.reset()
            try:
                return run(client)
            except ColibriError as exc:
                if not isinstance(exc, LOST) or not patience:
                    raise
                lost, lost_at, where = exc, time.monotonic(), client.path
                if remote is not None:
                    remote = remote.past(client.path)


def in_session() -> bool:
    """Whether this command runs inside a session (its harness set these)."""
    import os

    return bool(os.environ.get("COLIBRI_TASK_ID") or os.environ.get("COLIBRI_TASK_FILE"))
