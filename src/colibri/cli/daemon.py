"""Daemon commands: run, stop, demo, backup (``init`` is in cli/init.py; ``run --detach``'s
start in the background in cli/detach.py)."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path

import click

from colibri.cli.base import Context, cli, json_option, pass_ctx
from colibri.cli.detach import DETACH_PATIENCE, Started, option_again, start_detached
from colibri.cli.web import DEFAULT_LISTEN as DEMO_WEB


@cli.command()
@click.option(
    "--store",
    metavar="PATH|URL",
    help="Keep the board here instead of .colibri/colibri.sqlite: an SQLite file's path, or a "
    "postgresql:// URL (docs/HIVE.md).",
)
@click.option(
    "--durability",
    type=click.Choice(["full", "relaxed"]),
    help="full: fsync each commit (default); relaxed: survive a daemon crash, not power loss.",
)
@click.option("--force", is_flag=True, help="Run even inside another root (creates a nested root).")
@click.option(
    "--log-level",
    default="info",
    show_default=True,
    type=click.Choice(["debug", "info", "warning", "error"]),
    help="At info or debug, in the foreground with stdout a terminal and the text log, what "
    "the board does is shown too, a line per event as colibri attach prints it.",
)
@click.option(
    "--log-format", default="text", show_default=True, type=click.Choice(["text", "json"])
)
@click.option(
    "--loop",
    default="auto",
    show_default=True,
    type=click.Choice(["auto", "uvloop", "asyncio"]),
    help="Event loop: uvloop when it is installed (auto), or force one.",
)
@click.option(
    "--listen",
    multiple=True,
    metavar="tcp://HOST:PORT",
    help="Listen on TCP too, for agents and operators on other machines (repeatable; "
    "TLS: give --tls-cert and --tls-key).",
)
@click.option("--tls-cert", metavar="PEM", help="The TLS certificate (chain) to present.")
@click.option("--tls-key", metavar="PEM", help="The TLS certificate's private key.")
@click.option(
    "--lease-ttl",
    metavar="DURATION",
    help="On a PostgreSQL board: how long this daemon's lease lasts unrenewed (store.lease_ttl; "
    "10s by default); a standby takes over that long after a crash.",
)
@click.option(
    "--tenants",
    metavar="A,B",
    help="On a PostgreSQL board: serve only these tenants (store.tenants), each by a lease of "
    "its own, beside daemons serving others; the whole board by default.",
)
@click.option(
    "--share",
    is_flag=True,
    help="On a PostgreSQL board: share its tenants out with the other daemons started so "
    "(store.share), each serving its fair part, taken over and handed back as they come and go.",
)
@click.option(
    "--metrics",
    metavar="HOST:PORT",
    help="Serve Prometheus metrics over HTTP at http://HOST:PORT/metrics (server.metrics; "
    "docs/METRICS.md).",
)
@click.option(
    "--web",
    metavar="HOST:PORT",
    help="Serve the board in a browser too, as colibri web does (docs/WEB.md): on loopback it "
    "prints a one-time sign-in URL; with --tls-cert and --tls-key it serves HTTPS, and operator "
    "tokens sign in, checked on the first --listen (required off loopback).",
)
@click.option(
    "--insecure-loopback",
    is_flag=True,
    help="Allow plain TCP without TLS on loopback addresses (for tests on one machine).",
)
@click.option(
    "--detach",
    is_flag=True,
    help="Run in the background: return once the daemon serves, its log in "
    ".colibri/daemon.log (stop it with: colibri stop).",
)
@click.option(
    "--started-fd",
    type=click.IntRange(0),
    hidden=True,
    help="A pipe to say on, in one line, that the daemon serves or why it stopped as it "
    "started (run --detach gives its daemon one).",
)
@pass_ctx
def run(
    ctx: Context,
    store: str | None,
    durability: str | None,
    force: bool,
    log_level: str,
    log_format: str,
    loop: str,
    listen: tuple[str, ...],
    tls_cert: str | None,
    tls_key: str | None,
    lease_ttl: str | None,
    tenants: str | None,
    share: bool,
    metrics: str | None,
    web: str | None,
    insecure_loopback: bool,
    detach: bool,
    started_fd: int | None,
) -> None:
    """Run the daemon in the foreground (creating the root here if there is none).

    Stop it with Ctrl+C, SIGTERM or SIGHUP (or, with --detach, colibri stop): its harnesses
    stop with it. One daemon per root. On a terminal it shows, beside its log, a line per event
    of the board (each task submitted, started, done or failed), as colibri attach does;
    --log-level warning shows neither.
    """
    from colibri.config import init_root, load_config

    started = Started(started_fd)
    try:
        root = Path(ctx.root_option or os.getcwd()).expanduser().resolve()
        if init_root(root, force=force):
            click.echo(f"colibri: initialised a new root at {root}", err=True)
        if detach:
            params = click.get_current_context().params
            arguments = [arg for name, value in params.items() for arg in option_again(name, value)]
            start_detached(root, arguments)
            return

        from colibri.daemon.app import run_loop, serve
        from colibri.logs import setup

        config = load_config(
            root, store=store, durability=durability, listen=listen, tls_cert=tls_cert,
            tls_key=tls_key, insecure_loopback=insecure_loopback, lease_ttl=lease_ttl,
            metrics=metrics, tenants=tenants, share=share,
        )  # fmt: skip
        setup(log_level, log_format)
        shown = _Shown(root) if _shows_the_board(log_level, log_format) else None
        beside = None
        if web is not None:
            from colibri.cli.web import WebBeside

            beside = WebBeside(root, web, config, ctx.tls_ca)

        def said(state: str) -> None:
            started.say(state)
            if state == "serving" and shown is not None:
                shown.begin()
            if state == "serving" and beside is not None:
                beside.begin()

        try:
            code = run_loop(serve(config, said), loop)
        finally:
            if shown is not None:
                shown.end()
            if beside is not None:
                beside.end()
        raise SystemExit(code)
    except Exception as exc:
        from colibri.cli.failure import translated
        from colibri.core.errors import ColibriError

        started.failed(exc if isinstance(exc, ColibriError) else translated(exc))
        raise
    finally:
        started.close()  # stopped without a word (a signal, exit 0 while standing by)


def _shows_the_board(log_level: str, log_format: str) -> bool:
    """Whether ``run`` in the foreground shows what the board does beside its log: a person
    watches (stdout a terminal, the log as text) and asked for the info lines (the default;
    ``--log-level warning`` quiets both)."""
    import sys

    return sys.stdout.isatty() and log_format == "text" and log_level in ("debug", "info")


class _Shown:
    """The board's events on the terminal of a daemon run in the foreground, as a foreground
    worker of Celery or RQ shows each task it takes and ends: ``colibri attach``'s lines, from
    a connection of its own made once the daemon serves, read in a thread beside the loop.
    It subscribes to the events only: it is no listener of the bus that ``send`` would count,
    nor a link of its chains."""

    #: How long a stopped daemon waits for the last lines (its connections are closed by then,
    #: unless it stopped on a fatal error).
    ENDING = 2.0

    def __init__(self, root: Path) -> None:
        self.root = root
        self.thread: threading.Thread | None = None

    def begin(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._show, name="shown", daemon=True)
            self.thread.start()

    def _show(self) -> None:
        from colibri.cli.stream import Printer, follow
        from colibri.client import Client
        from colibri.core.errors import ColibriError

        with contextlib.suppress(ColibriError, OSError), Client.for_root(self.root) as client:
            follow(client, Printer(as_json=False), messages=False)

    def end(self) -> None:
        if self.thread is not None:
            self.thread.join(self.ENDING)


@cli.command()
@click.option(
    "--timeout", type=click.FloatRange(0.1, 3600), default=DETACH_PATIENCE, show_default=True,
    help="Seconds to wait for it to be gone.",
)  # fmt: skip
@pass_ctx
def stop(ctx: Context, timeout: float) -> None:
    """Stop this root's daemon (SIGTERM, as Ctrl+C) and wait until it is gone."""
    import signal
    import time

    from colibri import host
    from colibri.client import daemon_pid
    from colibri.config import host_mode
    from colibri.core.errors import DaemonNotRunning, LockHeld, RootError
    from colibri.layout import RootLayout

    host.select(host_mode(os.environ))
    root = ctx.root()
    pid = daemon_pid(root)
    if pid is None:
        raise DaemonNotRunning(str(root))
    # Where the system cannot say who holds the lock (daemon_pid), the daemon answering on the
    # socket must be that pid, where the system says the peer's.
    answering = _answering_pid(root)
    if answering is not None and answering != pid:
        layout = RootLayout(root)
        raise RootError(
            f"{layout.daemon_lock} names pid {pid}, but pid {answering} answers on "
            f"{layout.socket}: nothing was signalled"
        )
    os.kill(pid, signal.SIGTERM)
    give_up = time.monotonic() + timeout
    while host.alive(pid):
        if time.monotonic() > give_up:
            raise LockHeld(
                str(pid),
                f"the daemon (pid {pid}) is still stopping after {timeout:g}s (its harnesses "
                "stop their sessions first); colibri stop again waits on",
            )
        time.sleep(0.05)
    click.echo(f"stopped the daemon (pid {pid}) of {root}")


def _answering_pid(root: Path) -> int | None:
    """The pid of the daemon answering on ``root``'s socket (checked as any client checks
    it), or None: none answers, or the system does not say a peer's pid."""
    import socket

    from colibri import host
    from colibri.client import socket_path
    from colibri.trust import check_daemon

    path = str(socket_path(root))
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(5)
        try:
            sock.connect(path)
        except OSError:
            return None  # starting (no socket yet), or gone meanwhile
        check_daemon(sock, path)
        pid = host.peer_credentials(sock)[2]
    return pid if pid > 0 else None


@cli.command()
@click.argument(
    "directory",
    required=False,
    default="colibri-demo",
    type=click.Path(file_okay=False, path_type=Path),
)
@click.option(
    "--exit-when-done",
    is_flag=True,
    help="Submit one round of work, follow it until every task has ended, then stop.",
)
@click.option(
    "--web",
    is_flag=False,
    flag_value=DEMO_WEB,
    default=None,
    metavar="[HOST:PORT]",
    help=f"Serve the board in a browser too (default {DEMO_WEB}; port 0: any free one), and "
    "print its one-time sign-in URL. Needs the web extra: pip install 'colibri-board[web]'.",
)
def demo(directory: Path, exit_when_done: bool, web: str | None) -> None:
    """A living demo swarm in DIRECTORY: a daemon, three agents, two workspaces, and tasks
    arriving until you quit (in the TUI on a terminal, else as lines). Quitting stops them.

    With --web, the board in a browser too: open the URL it prints (DIRECTORY goes before
    --web: colibri demo DIRECTORY --web)."""
    from colibri.cli.demo import run_demo

    if web is not None:
        from colibri.cli.demo_web import check_address

        check_address(web)
    raise SystemExit(run_demo(directory.resolve(), exit_when_done=exit_when_done, web=web))


@cli.command()
@click.argument("path", type=click.Path(path_type=str))
@click.option(
    "--store",
    metavar="PATH",
    help="The SQLite board to copy (default: this root's, from colibri.jsonc).",
)
@click.option("--force", is_flag=True, help="Replace PATH if it exists.")
@json_option
@pass_ctx
def backup(ctx: Context, path: str, store: str | None, force: bool, as_json: bool) -> None:
    """Copy the board to PATH (a file, or a folder to put a dated copy in): one consistent
    snapshot, taken while the daemon runs or not. Restore: docs/OPERATIONS.md."""
    from colibri.core.errors import RootError
    from colibri.core.leases import is_postgres
    from colibri.store.backup import backup_board

    root: Path | None
    if store is None:
        from colibri.config import load_config

        root = ctx.root()
        store = load_config(root).store
    else:
        if not is_postgres(store):
            store = os.path.abspath(os.path.expanduser(store))
        try:
            root = ctx.root()
        except RootError:
            root = None  # a board named by --store, outside any root of ours
    keep_out, held = _daemons_files(root, store)
    copy = backup_board(store, path, force=force, keep_out=keep_out, held=held)
    if as_json:
        from colibri.cli.output import print_json

        print_json(copy.to_dict())
        return
    from colibri.cli.output import printable

    print(
        printable(
            f"backed up {copy.board} to {copy.path}: {copy.tasks} tasks, {copy.ledger_rows} "
            f"ledger rows (at {copy.ledger_at or 'its start'}), {copy.bytes / 2**20:.1f} MiB"
        )
    )


def _daemons_files(root: Path | None, store: str) -> tuple[list[Path], set[tuple[int, int]]]:
    """What a backup may not overwrite: the root's state folder, and the files that the
    root's daemon and the one holding the board's lock have open (where the system says)."""
    from colibri import host
    from colibri.client import daemon_pid
    from colibri.layout import RootLayout
    from colibri.locks import store_lock

    pids = set()
    if root is not None and (pid := daemon_pid(root)) is not None:
        pids.add(pid)
    try:
        lock = os.stat(store_lock(store))
    except OSError:
        pass  # no lock: no daemon has had the board open (or a PostgreSQL board)
    else:
        pids |= host.flock_holders(lock.st_dev, lock.st_ino) or set()
    held: set[tuple[int, int]] = set()
    for pid in pids:
        held |= host.open_files(pid) or set()
    return ([RootLayout(root).state] if root is not None else []), held
