"""Shell completion: ``colibri completions bash|zsh|fish`` prints the script a shell loads, and
the completers here offer the values only the board knows — task ids, agent, workspace and
schedule names — by asking the daemon (click's ``shell_complete=``; the shell runs
``colibri`` with ``_COLIBRI_COMPLETE`` set at every Tab).

What a completion offers is written by the shell straight to the terminal: each description
(a task's text, the question its session asks…) is one ``printable`` line (``one_line``), as
everything else printed for people, and a value that is not printable is not offered.

A completion runs at every Tab, so it never gets in the way: the daemon gets
``COMPLETION_TIMEOUT`` seconds a request, and anything that goes wrong — no root, no daemon, a
refusal, a colibri.jsonc that does not load — completes nothing, silently.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import click

from colibri.cli.base import Context, cli
from colibri.core.text import one_line, printable

if TYPE_CHECKING:
    from click.shell_completion import CompletionItem

    from colibri.core.protocol import Request
    from colibri.core.request_fields import R

#: Seconds the daemon has to accept and to answer each request of one completion.
COMPLETION_TIMEOUT = 1.0
#: At most this many task ids are offered at once (type more of the id to narrow them).
MAX_TASKS = 200
#: How much of a task's text (or another description) a shell that shows them gets.
HELP_WIDTH = 60

SHELLS = ("bash", "zsh", "fish")
Completer = Callable[[click.Context, click.Parameter, str], list[Any]]


@cli.command()
@click.argument("shell", type=click.Choice(SHELLS))
def completions(shell: str) -> None:
    """Print the completion script for SHELL (bash, zsh or fish).

    \b
    bash:  eval "$(colibri completions bash)"     in ~/.bashrc
    zsh:   eval "$(colibri completions zsh)"      in ~/.zshrc, after compinit
    fish:  colibri completions fish > ~/.config/fish/completions/colibri.fish

    Task ids, agent, workspace and schedule names are completed from the running daemon
    (the one --root, COLIBRI_ROOT or --connect names).
    """
    from click.shell_completion import get_completion_class

    completion = get_completion_class(shell)
    assert completion is not None  # SHELLS are click's own
    click.echo(completion(cli, {}, "colibri", "_COLIBRI_COMPLETE").source())


def _context(ctx: click.Context) -> Context:
    """Where the command line being completed points: ``--root``, ``--connect`` … as given
    before the command (or in their variables), overridden by those given after its name."""
    params = ctx.find_root().params
    where = Context(
        params.get("root"),
        params.get("connect"),
        params.get("token"),
        params.get("tls_ca"),
        bool(params.get("insecure_loopback")),
    )
    after = ctx.find_object(Context)  # made by the options given after the command's name
    if after is not None:
        for name in ("connect", "token", "tls_ca", "insecure_loopback"):
            if getattr(after, name):
                setattr(where, name, getattr(after, name))
    return where


def _ask(ctx: click.Context, *requests: Request[R]) -> list[R]:
    """The daemon's replies to ``requests``, on one connection: those it answered ``ok`` (a
    refused request is left out), none if the connection fails."""
    from colibri.core.errors import (
        Busy,
        ColibriError,
        ConnectionClosed,
        Forbidden,
        Throttled,
        Unauthorized,
    )

    replies = []
    try:
        with _context(ctx).client(timeout=COMPLETION_TIMEOUT) as client:
            for req in requests:
                try:
                    replies.append(client.request(req))
                except ColibriError as exc:
                    if isinstance(
                        exc, (ConnectionClosed, Busy, Forbidden, Unauthorized, Throttled)
                    ):
                        raise  # about the connection, not the request: ask no more
    except Exception:  # no root, no daemon, a refusal, a timeout: nothing (more) to offer
        pass
    return replies


def _items(pairs: Iterable[tuple[str, str]], incomplete: str) -> list[CompletionItem]:
    """The values that start with ``incomplete``, sorted, each once, with its description."""
    from click.shell_completion import CompletionItem

    seen: dict[str, str] = {}
    for value, help_text in pairs:
        # A value that is not printable as it is could not be typed either: not offered.
        if value.startswith(incomplete) and value not in seen and printable(value) == value:
            seen[value] = help_text
    return [CompletionItem(v, help=one_line(h, HELP_WIDTH)) for v, h in sorted(seen.items())]


def _quiet(complete: Completer) -> Completer:
    """``complete``, offering nothing rather than a traceback if a reply is not as expected (a
    daemon of another version): what the shell prints at a Tab is the completions only."""

    @functools.wraps(complete)
    def quiet(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        try:
            return complete(ctx, param, incomplete)
        except Exception:
            return []

    return quiet


def task_ids(*states: str, asking: bool = False) -> Completer:
    """A completer of task ids (of ``states`` only, if given; ``asking``: only the tasks whose
    session waits on a question). Ids sort as they are listed, so the ones that start with what
    was typed are the first after it: one page finds them however large the board is."""

    @_quiet
    def complete(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
        from colibri.core import protocol as p
        from colibri.core.replies import TaskPage

        requests: list[Request[Any]] = [
            p.ListTasks(after=incomplete or None, limit=MAX_TASKS, state=state)
            for state in states or (None,)
        ]
        if incomplete:  # ``after`` leaves out the id itself, if all of it was typed
            requests.append(p.Get(task=incomplete))
        replies = _ask(ctx, *requests)
        tasks = [
            t
            for reply in replies
            for t in (reply.tasks if isinstance(reply, TaskPage) else [reply.task])
        ]
        tasks = [t for t in tasks if (not states or t.state in states)]
        if asking:
            tasks = [t for t in tasks if t.question]
        found = [(t.id, f"{t.state}: {t.question or t.text}") for t in tasks]
        return _items(found, incomplete)[:MAX_TASKS]

    return complete


@_quiet
def agent_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """The agents the daemon knows."""
    from colibri.core import protocol as p

    agents = [a for reply in _ask(ctx, p.Agents()) for a in reply.agents]
    return _items(
        (
            (a.name, f"{'online' if a.online else 'offline'}: "
                     f"{','.join(a.capabilities) or 'no capabilities'}")
            for a in agents
        ),
        incomplete,
    )  # fmt: skip


@_quiet
def workspace_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """The workspaces of this root's colibri.jsonc, and those the daemon's agents serve (all a
    daemon reached with --connect can tell)."""
    found: list[tuple[str, str]] = []
    where = _context(ctx)
    if not where.connect:
        try:
            from colibri.config import load_config

            workspaces = load_config(where.root()).workspaces
        except Exception:  # no root, or a colibri.jsonc that does not load: the daemon's only
            workspaces = {}
        found += [(w.name, ",".join(w.capabilities) or "workspace") for w in workspaces.values()]
    from colibri.core import protocol as p

    agents = [a for reply in _ask(ctx, p.Agents()) for a in reply.agents]
    found += [(a.workspace, f"served by {a.name}") for a in agents if a.workspace]
    return _items(found, incomplete)


@_quiet
def schedule_names(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """The schedules on the board."""
    from colibri.core import protocol as p

    schedules = [s for reply in _ask(ctx, p.ScheduleList()) for s in reply.schedules]
    return _items(((s.name, s.task.text) for s in schedules), incomplete)


@_quiet
def token_ids(ctx: click.Context, param: click.Parameter, incomplete: str) -> list[Any]:
    """The tokens not revoked yet (only the root's owner may list them)."""
    from colibri.core import protocol as p

    tokens = [t for reply in _ask(ctx, p.TokenList()) for t in reply.tokens]
    return _items(
        (
            (t.id, f"{t.role} of {t.tenant}" + (f", agent {t.agent}" if t.agent else ""))
            for t in tokens
            if not t.revoked_at
        ),
        incomplete,
    )
