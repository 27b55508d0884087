"""The ``colibri`` command. Commands are thin: parse, call the client, print.

Heavy modules (the daemon, rich, the store) are imported inside the commands that need them,
so ``colibri --help`` and the quick commands start fast.

Errors are handled here, once (``Group.invoke``): a ``ColibriError`` from anywhere — the
daemon's reply, the config, the root — and the foreign exceptions that reach this far,
translated first (a lost connection is ``closed``, another ``OSError`` is ``os_error``, a bug
is ``internal`` after its traceback), end the command with exit 1: one line on stderr, or with
``--json`` the document ``{"ok": false, "error": {"code": …, "message": …}}`` on stdout.
Usage errors (click's: a bad option, options that do not go together) exit 2 with click's
message on stderr, with or without ``--json``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn, TypeVar

import click

from colibri import __version__
from colibri.core.errors import ColibriError

T = TypeVar("T")

#: How long a command that follows the board (``wait``, ``submit --wait``, ``attach``,
#: ``ledger --follow``) looks for a daemon again after losing its own, before it gives up
#: (``--follow-for``): a takeover takes the lease's ttl and a few seconds (10–14 s with the
#: default 10 s ttl).
FOLLOW_PATIENCE = 60.0
#: How a session's own command waits out a daemon that refuses it as ``busy``: the first pause,
#: the longest pause (each one doubles), and the time after which it gives up.
BUSY_FIRST_PAUSE = 0.05
BUSY_LONGEST_PAUSE = 2.0
BUSY_PATIENCE = 60.0


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

    def client(self, timeout: float | None = None) -> Any:
        """A connection to the daemon; ``timeout``: seconds each socket operation may take.
        Over TCP a takeover is waited out, said once on stderr, and a request lost to one is
        sent again where that is safe (``Client.remote``)."""
        from colibri.client import Client

        remote = self.remote()
        if remote is not None:
            return Client.remote(remote, timeout=timeout, on_wait=say_waiting)
        return Client.for_root(self.root(), timeout=timeout)

    def call(self, cmd: str, *, patient: bool = False, **fields: Any) -> dict[str, Any]:
        """One request on a connection of its own; ``patient``: see ``wait_out_busy``."""

        def once() -> dict[str, Any]:
            with self.client() as client:
                return client.call(cmd, **fields)  # type: ignore[no-any-return]

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
    pause = BUSY_FIRST_PAUSE
    while True:
        try:
            return attempt()
        except ColibriError as exc:
            if not exc.transient:
                raise
            if time.monotonic() + pause > give_up:
                exc.message += f" (still so after {BUSY_PATIENCE:.0f}s of retries)"
                raise
        time.sleep(pause)
        pause = min(pause * 2, BUSY_LONGEST_PAUSE)


#: What such a command follows through: its daemon gone (killed, stopped, restarting), or
#: one that does not serve the board or the tenant now (it stands by, or another took it).
LOST = frozenset({"closed", "no_daemon", "standby", "not_owner", "busy"})


def through_takeovers(ctx: Context, run: Callable[[Any], T], *, patient: bool = False) -> T:
    """``run(client)`` on a connection to the daemon, for a command that follows the board.
    When the connection is lost (``LOST``) it connects again — over TCP trying the addresses
    after the lost one first, where a standby that took over serves — says so in one line on
    stderr, and calls ``run`` again, which goes on from where it was. It gives up, ``no_daemon``,
    once no daemon has answered for ``ctx.patience()`` seconds (0: the loss is raised as it
    is). On this root's socket, a daemon gone for good (no process holds the root any more)
    ends it at once with the error that lost it, unless ``patient`` (a session's own command,
    which waits out a restart for ``BUSY_PATIENCE`` as ``wait_out_busy`` does, its first
    connection too)."""
    import time

    from colibri.client import Client, socket_path
    from colibri.core.errors import DaemonNotRunning

    patience = BUSY_PATIENCE if patient else ctx.patience()
    remote = ctx.remote()
    lost: ColibriError | None = None
    lost_at = 0.0
    where = ""  # the daemon that was lost ("": none yet, a session waiting for its first)
    pause = BUSY_FIRST_PAUSE
    while True:
        try:
            if remote is None:
                client = ctx.client()
            else:
                # This loop follows the board once it is lost (nothing is sent twice by the
                # client): only a first try waits out a takeover under way, and says so.
                first = lost is None
                client = Client.remote(remote, patience=None if first else 0,
                                       on_wait=say_waiting if first else None,
                                       resend=False)  # fmt: skip
        except ColibriError as exc:
            if exc.code not in LOST or (lost is None and not patient):
                raise
            if lost is None:
                lost, lost_at = exc, time.monotonic()
            if remote is None and exc.code == "no_daemon" and not patient:
                raise lost from None  # the root's daemon stopped: nothing to follow
            if time.monotonic() - lost_at + pause > patience:
                after = f"losing the daemon at {where}" if where else "the first try"
                raise DaemonNotRunning.at(
                    str(remote) if remote is not None else str(socket_path(ctx.root())),
                    f"none answered within {patience:g}s after {after} "
                    f"({lost.message}); last: {exc.message}",
                ) from None
            time.sleep(pause)
            pause = min(pause * 2, BUSY_LONGEST_PAUSE)
            continue
        with client:
            if lost is not None and where:
                from colibri.cli.output import printable

                click.echo(
                    printable(f"colibri: lost the daemon at {where} ({lost.message}); "
                              f"following the board at {client.path}"),
                    err=True,
                )  # fmt: skip
            lost, pause = None, BUSY_FIRST_PAUSE
            try:
                return run(client)
            except ColibriError as exc:
                if exc.code not in LOST or not patience:
                    raise
                lost, lost_at, where = exc, time.monotonic(), client.path
                if remote is not None:
                    remote = remote.past(client.path)


def in_session() -> bool:
    """Whether this command runs inside a session (its harness set these)."""
    import os

    return bool(os.environ.get("COLIBRI_TASK_ID") or os.environ.get("COLIBRI_TASK_FILE"))


pass_ctx = click.make_pass_decorator(Context)

#: Set in ``click.Context.meta`` (shared by a command's context and its parents') once
#: ``--json`` is seen, so that an error is printed as JSON too.
JSON_META = "colibri.json"


def _note_json(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        ctx.meta[JSON_META] = True
    return value


json_option = click.option(
    "--json",
    "as_json",
    is_flag=True,
    callback=_note_json,
    help='Print JSON instead of a table; an error as {"ok": false, "error": {"code", "message"}}.',
)


class Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ColibriError as exc:
            _fail(exc, ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise  # usage errors (exit 2), --help, and click's own ends
        except KeyboardInterrupt:
            sys.exit(130)
        except BrokenPipeError:
            if _stdout_closed():
                raise  # `colibri ledger | head`: click ends quietly, exit 1
            _fail(translated(BrokenPipeError("it closed the connection")), ctx)
        except Exception as exc:
            error = translated(exc)
            if error.code == "internal":
                import traceback

                traceback.print_exc()  # a bug: its traceback, then the one error like any other
            _fail(error, ctx)


def translated(exc: Exception) -> ColibriError:
    """A foreign exception that reached the CLI, as the error of the tree that says it."""
    from colibri.core import errors

    if isinstance(exc, (ConnectionError, TimeoutError)):
        why = exc.strerror or str(exc) or type(exc).__name__
        return errors.ConnectionClosed(f"lost the connection to the daemon ({why})")
    if isinstance(exc, OSError):
        where = f": {exc.filename}" if exc.filename else ""
        return errors.OsFailure(f"{exc.strerror or exc}{where}")
    if isinstance(exc, UnicodeError):
        return errors.BadRequest(f"the input is not UTF-8 text ({exc})")
    if isinstance(exc, ImportError):
        from colibri.extras import missing

        if (error := missing(exc)) is not None:
            return error
    return errors.Internal(
        f"a bug in colibri: {type(exc).__name__}: {exc} (the traceback is above)"
    )


def _fail(error: ColibriError, ctx: click.Context) -> NoReturn:
    """End a failed command, exit 1: with ``--json``, the error document on stdout; else one
    line on stderr."""
    message = error.message
    if error.code == "busy":
        # The daemon's busy message ("too many connections; try again later") does not say
        # who is busy.
        message = f"the daemon is busy: {message}"
    if ctx.meta.get(JSON_META):
        from colibri.cli.output import print_json_line

        print_json_line({"ok": False, "error": {"code": error.code, "message": message}})
    else:
        from colibri.cli.output import printable

        click.echo(f"colibri: {printable(message)}", err=True)
    sys.exit(1)


def _stdout_closed() -> bool:
    """Whether stdout is a pipe that nobody reads any more."""
    import select

    try:
        poller = select.poll()
        poller.register(sys.stdout.fileno(), 0)  # POLLERR is always reported
        return any(events & select.POLLERR for _, events in poller.poll(0))
    except (OSError, ValueError):
        return False


def _paths(kind: str) -> Callable[[click.Context, click.Parameter, str], list[Any]]:
    """Completes a file (``kind`` "file") or a directory ("dir") name: the shell does it."""

    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        return [CompletionItem(incomplete, type=kind)]

    return complete


@click.group(
    cls=Group, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100}
)
@click.option(
    "--root",
    envvar="COLIBRI_ROOT",
    metavar="DIR",
    shell_complete=_paths("dir"),
    help="The Colibri root to use. Default: the nearest directory at or above the working "
    "directory that has .colibri/ [env: COLIBRI_ROOT]",
)
@click.option(
    "--connect",
    envvar="COLIBRI_CONNECT",
    metavar="tcp://HOST:PORT[,…]",
    help="Reach a daemon on another machine over TLS instead of this root's socket; several "
    "addresses are tried in turn [env: COLIBRI_CONNECT]",
)
@click.option(
    "--token",
    envvar="COLIBRI_TOKEN",
    metavar="TOKEN",
    help="The token to act with over --connect [env: COLIBRI_TOKEN; safer than the option, "
    "which other users can see in ps]",
)
@click.option(
    "--tls-ca",
    envvar="COLIBRI_TLS_CA",
    metavar="PEM",
    shell_complete=_paths("file"),
    help="The CA that signed the daemon's certificate (default: the system's) "
    "[env: COLIBRI_TLS_CA]",
)
@click.option(
    "--insecure-loopback",
    is_flag=True,
    envvar="COLIBRI_INSECURE_LOOPBACK",
    help="Plain TCP without TLS, to a loopback daemon run with --insecure-loopback (tests).",
)
@click.option(
    "--follow-for",
    envvar="COLIBRI_FOLLOW_FOR",
    metavar="DURATION",
    help="How long wait, submit --wait, attach and ledger --follow look for a daemon again "
    "after losing theirs (a takeover, a restart), before they give up; 0: not at all "
    f"[default: {FOLLOW_PATIENCE:.0f}s; env: COLIBRI_FOLLOW_FOR]",
)
@click.version_option(__version__, prog_name="colibri")
@click.pass_context
def cli(
    ctx: click.Context,
    root: str | None,
    connect: str | None,
    token: str | None,
    tls_ca: str | None,
    insecure_loopback: bool,
    follow_for: str | None,
) -> None:
    """Colibri: a task board and scheduler for fleets of agents.

    \b
    Start:   colibri init && colibri run
    Try:     colibri init --starter try && cd try && colibri run
    Agents:  colibri agent --name build-1 --cap python -- ./run-task.sh
    Work:    colibri submit "upgrade zfs" --cap freebsd --cap zfs --wait
    Watch:   colibri tui, colibri attach, colibri list, colibri ledger --follow
    """
    from click.core import ParameterSource

    if (
        ctx.get_parameter_source("root") == ParameterSource.COMMANDLINE
        and ctx.get_parameter_source("connect") == ParameterSource.ENVIRONMENT
    ):
        connect = None  # what the command line names wins over the environment
    ctx.obj = Context(root, connect, token, tls_ca, insecure_loopback, follow_for)


#: Commands that never reach a daemon over TCP: they act on this host's root.
LOCAL_ONLY = frozenset({"init", "run", "demo", "tls", "hive", "store", "completions", "backup"})


def _remote_option(name: str) -> Callable[[click.Context, click.Parameter, Any], None]:
    def keep(ctx: click.Context, param: click.Parameter, value: Any) -> None:
        if value:  # given after the command: it wins over the one before it and the variable
            setattr(ctx.ensure_object(Context), name, value)

    return keep


def _take_remote_options(group: click.Group) -> None:
    """Let every client command take ``--connect``, ``--token``, ``--tls-ca`` and
    ``--insecure-loopback`` after its name too (``colibri agent --connect …``), as well as
    before it."""
    for name, command in group.commands.items():
        if name in LOCAL_ONLY:
            continue
        if isinstance(command, click.Group):
            _take_remote_options(command)
            if not command.invoke_without_command:
                continue  # a group that is a command itself (``ledger``) takes them too
        command.params += [
            click.Option(["--connect"], metavar="tcp://HOST:PORT[,…]", expose_value=False,
                         callback=_remote_option("connect"), help="As colibri --connect."),
            click.Option(["--token"], metavar="TOKEN", expose_value=False,
                         callback=_remote_option("token"), help="As colibri --token."),
            click.Option(["--tls-ca"], metavar="PEM", expose_value=False,
                         callback=_remote_option("tls_ca"), help="As colibri --tls-ca.",
                         shell_complete=_paths("file")),
            click.Option(["--insecure-loopback"], is_flag=True, expose_value=False,
                         callback=_remote_option("insecure_loopback"),
                         help="As colibri --insecure-loopback."),
        ]  # fmt: skip


def main() -> None:
    from colibri.cli import (  # noqa: F401
        agents,
        bulk,
        completion,
        daemon,
        hive,
        init,
        schedules,
        session,
        store,
        supervise,
        tasks,
        tls,
        tokens,
        watch,
        workspaces,
    )

    _take_remote_options(cli)
    cli(prog_name="colibri")
