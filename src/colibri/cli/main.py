"""The ``colibri`` command: every command module registered on the ``cli`` group of
``cli/base.py``, and the options that reach a daemon over TCP given to every client command.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import click

from colibri.cli.base import Context, cli, complete_paths

__all__ = ["cli", "main"]


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
                         shell_complete=complete_paths("file")),
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
        ledger,
        schedules,
        session,
        store,
        submit,
        supervise,
        tasks,
        tls,
        tokens,
        watch,
        web,
        workspaces,
    )

    _take_remote_options(cli)
    cli(prog_name="colibri")
