"""How the CLI fails, in one place (``Group.invoke``): a ``ColibriError`` from anywhere — the
daemon's reply, the config, the root — and the foreign exceptions that reach this far,
translated first (a lost connection is ``closed``, another ``OSError`` is ``os_error``, a bug
is ``internal`` after its traceback), end the command with exit 1: one line on stderr, or with
``--json`` the document ``{"ok": false, "error": {"code": …, "message": …}}`` on stdout.
Usage errors (click's: a bad option, options that do not go together) exit 2 with click's
message on stderr, with or without ``--json``.
"""

from __future__ import annotations

import sys
from typing import Any, NoReturn

import click

from colibri.core.errors import Busy, ColibriError, Internal

#: Set in ``click.Context.meta`` (shared by a command's context and its parents') once
#: ``--json`` is seen, so that an error is printed as JSON too.
JSON_META = "colibri.json"


class Group(click.Group):
    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except ColibriError as exc:
            fail(exc, ctx)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise  # usage errors (exit 2), --help, and click's own ends
        except KeyboardInterrupt:
            sys.exit(130)
        except BrokenPipeError:
            if _stdout_closed():
                raise  # `colibri ledger | head`: click ends quietly, exit 1
            fail(translated(BrokenPipeError("it closed the connection")), ctx)
        except Exception as exc:
            error = translated(exc)
            if isinstance(error, Internal):
                import traceback

                traceback.print_exc()  # a bug: its traceback, then the one error like any other
            fail(error, ctx)


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


def fail(error: ColibriError, ctx: click.Context) -> NoReturn:
    """End a failed command, exit 1: with ``--json``, the error document on stdout; else one
    line on stderr."""
    message = error.message
    if isinstance(error, Busy):
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
