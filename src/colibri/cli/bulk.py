"""Work in bulk: many tasks submitted from a JSON lines file, the ledger exported whole.

While they run, both show how far they are on stderr when it is a terminal, on a line erased
before their one summary; piped, they stay quiet and machine-readable.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import click
import msgspec

from colibri.cli.base import Context, json_option, pass_ctx
from colibri.cli.ledger import LEDGER_PAGE, ledger, ledger_rows, parse_since
from colibri.cli.output import counted, print_json_line, print_line, printable
from colibri.core.errors import BadRequest, ColibriError, ConnectionClosed
from colibri.core.text import json_safe

if TYPE_CHECKING:
    from colibri.core.model import LedgerEntry
    from colibri.core.replies import Submitted

#: Progress is redrawn at most this often (rows or tasks), on a terminal only.
PROGRESS_EVERY = 500
#: The terminal's control sequence that erases from the cursor to the end of the line.
ERASE_LINE = "\x1b[K"
#: The ledger's columns in a CSV export; a row's cost is spread over the last four.
CSV_COLUMNS = [
    "seq", "at", "task", "schedule", "tenant", "from_state", "to_state", "agent", "epoch",
    "reason", "uid", "pid", "cost_usd", "tokens_in", "tokens_out", "model",
]  # fmt: skip


def bulk_task_type() -> type[Any]:
    """One line of ``submit --from``: a submission's fields; ``agent`` pins it (as
    ``create-task``). Imported when first asked for: the wire's structs are not loaded for
    ``colibri --help``."""
    from colibri.core.protocol import SubmitItem

    return SubmitItem


class Progress:
    """How far a long command has got, on one line of stderr that each step redraws and
    ``clear`` erases, so that what stays on the terminal is the command's own summary. Shown
    only while stderr is a terminal (and ``shown`` is not False: the caller's output going to
    that same terminal would be written over); nothing at all otherwise."""

    def __init__(self, template: str = "", *, shown: bool = True) -> None:
        self.template = template
        self.shown = shown and sys.stderr.isatty()
        self.drawn = False
        self.count = 0

    def say(self, text: str) -> None:
        """Show ``text`` in place of what the line showed."""
        if self.shown:
            sys.stderr.write(f"\r{ERASE_LINE}{printable(text)}")
            sys.stderr.flush()
            self.drawn = True

    def step(self, n: int = 1) -> None:
        before, self.count = self.count, self.count + n
        if before // PROGRESS_EVERY != self.count // PROGRESS_EVERY:
            self.say(self.template.format(count=self.count))

    def clear(self) -> None:
        """Erase the line, leaving the cursor where it began: called before anything else is
        written, a summary or an error."""
        if self.drawn:
            sys.stderr.write(f"\r{ERASE_LINE}")
            sys.stderr.flush()
            self.drawn = False


def read_tasks(source: IO[str], name: str) -> list[tuple[int, Any]]:
    """Every task of a JSON lines file, with its line number, checked before any is sent: a
    bad line stops the whole submission with ``FILE:LINE: what is wrong``, and nothing is
    submitted. Blank lines and lines starting with ``#`` are skipped. (What only the board can
    tell — a parent, a quota, a budget — the daemon checks, refusing the file whole.)"""
    from colibri.core.model import checked_names

    decoder = msgspec.json.Decoder(bulk_task_type())
    tasks: list[tuple[int, Any]] = []
    for number, line in enumerate(source, 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        try:
            task = decoder.decode(line)
        except msgspec.DecodeError as exc:
            raise BadRequest(f"{name}:{number}: {_plain(exc)}; nothing was submitted") from None
        if task.claim is not None:
            raise BadRequest(f"{name}:{number}: claim is for sessions; nothing was submitted")
        try:
            checked_names(task.spec())  # what the daemon would refuse, refused before any is sent
        except BadRequest as exc:
            raise BadRequest(f"{name}:{number}: {exc.message}; nothing was submitted") from None
        tasks.append((number, task))
    return tasks


def _plain(exc: msgspec.DecodeError) -> str:
    """msgspec's message in our words: the field as ``priority``, not ``$.priority``."""
    text = str(exc)
    if " - at `$." in text:
        message, where = text.rsplit(" - at `$.", 1)
        return f"{where.rstrip('`')}: {message}"
    return text


def submit_file(ctx: Context, path: str, as_json: bool) -> None:
    """``colibri submit --from PATH``: the whole file as one ``submit-all``, which the daemon
    takes in one transaction or refuses whole, naming the first line it refused."""
    from colibri.core.protocol import MAX_SUBMIT_ALL

    name = "stdin" if path == "-" else path
    try:
        if path == "-":
            tasks = read_tasks(sys.stdin, name)
        else:
            with Path(path).open(encoding="utf-8-sig") as source:  # a BOM is not JSON
                tasks = read_tasks(source, name)
    except UnicodeDecodeError:
        raise BadRequest(f"{name} is not UTF-8 text; nothing was submitted") from None
    if len(tasks) > MAX_SUBMIT_ALL:
        raise BadRequest(
            f"{name} holds {len(tasks)} tasks, more than the {MAX_SUBMIT_ALL} one submission "
            "takes at once; split it (each part is taken whole or not at all); nothing was "
            "submitted"
        )
    from colibri.core.protocol import Ping, SubmitAll, wire_fields

    made: list[Submitted] = []
    if tasks:
        request = SubmitAll(tasks=[task for _, task in tasks])
        with ctx.client() as client:
            cmd, fields = wire_fields(request)
            size = len(msgspec.json.encode({"cmd": cmd, "id": 1, **fields})) + 1
            max_line = client.request(Ping()).max_line
            if size > max_line:
                raise BadRequest(
                    f"{name} makes a submission of {size} bytes, more than the daemon's "
                    f"server.max_line of {max_line}; split the file (each part is taken whole "
                    "or not at all), or raise server.max_line; nothing was submitted"
                )
            # One request, taken whole: nothing to count while it runs, so a terminal is told
            # what is under way until the answer comes; then only the summary stays.
            progress = Progress()
            progress.say(f"submitting {counted(len(tasks), 'task')} from {name}")
            try:
                made = client.request(request).tasks
            except ColibriError as exc:
                if isinstance(exc, ConnectionClosed):
                    exc.message += (
                        f"; the daemon took all of {name} or none of it: see colibri list"
                    )
                elif exc.index is not None and 0 <= exc.index < len(tasks):
                    number = tasks[exc.index][0]
                    exc.message = f"{name}:{number}: {exc.message}; nothing was submitted"
                else:
                    exc.message = f"{name}: {exc.message}; nothing was submitted"
                raise
            finally:
                progress.clear()
    waiting: dict[str, list[str]] = {}
    again = 0
    for reply in made:
        if reply.waits:
            # (Each task's own dependencies: one line for all that wait for others.)
            why = "for other tasks to end" if reply.waits.startswith("waits for") else reply.waits
            waiting.setdefault(why, []).append(reply.task.id)
        again += not reply.created
        if as_json:
            print_json_line({**msgspec.to_builtins(reply.task), "created": reply.created})
        else:
            print_line(reply.task.id)
    if not as_json:
        kept = ""
        if again:
            keys = "its idempotency key" if again == 1 else "their idempotency keys"
            kept = f", {again} already there ({keys})"
        click.echo(
            printable(f"colibri: submitted {counted(len(made) - again, 'task')} from {name}{kept}"),
            err=True,
        )
    for why, ids in waiting.items():  # one line per reason, not one per task
        n = len(ids)
        click.echo(
            printable(f"colibri: {n} task{'s' if n != 1 else ''} wait{'' if n != 1 else 's'}: "
                      f"{why} (see: colibri why {ids[0]})"),
            err=True,
        )  # fmt: skip


#: What makes a spreadsheet read a cell as a formula (or a DDE command) when it starts with it:
#: OWASP's list (CSV injection), a tab and a carriage return included.
FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")


def spreadsheet_cell(value: Any) -> Any:
    """``value`` as a CSV cell no spreadsheet runs: a text that starts with one of
    ``FORMULA_LEADS`` gets a ``'`` before it, which the spreadsheet shows as text. Numbers stay
    numbers (a negative one is a number, not a formula); only text is ever changed."""
    if isinstance(value, str) and value.startswith(FORMULA_LEADS):
        return "'" + value
    return value


def _csv_row(entry: LedgerEntry) -> list[Any]:
    # As the cost is sent: a figure left at its default is not there (an empty cell).
    cost = msgspec.to_builtins(entry.cost) if entry.cost else {}
    return [
        spreadsheet_cell(value)
        for value in (
            *(getattr(entry, column) for column in CSV_COLUMNS[:12]),
            cost.get("usd"), cost.get("tokens_in"), cost.get("tokens_out"), cost.get("model"),
        )
    ]  # fmt: skip


@ledger.command("export")
@click.option(
    "--format", "fmt", type=click.Choice(["jsonl", "csv"]), default="jsonl", show_default=True
)
@click.option(
    "--since", metavar="POSITION|TIME",
    help="Only rows after this ledger position (acme:5,default:120, or a seq of the default "
    "tenant), or at or after this date or instant (2026-11-30).",
)  # fmt: skip
@click.option(
    "--out", type=click.Path(dir_okay=False, path_type=Path),
    help="Write here (refused if it exists) instead of stdout.",
)  # fmt: skip
@json_option
@pass_ctx
def ledger_export(
    ctx: Context, fmt: str, since: str | None, out: Path | None, as_json: bool
) -> None:
    """Export the ledger, oldest row first, as JSON lines or CSV (a header row first).

    In CSV, every text cell is quoted, and one that starts with = + - @, a tab or a carriage
    return is written after a ' so that no spreadsheet takes it for a formula; numbers stay
    numbers. JSON lines are the exact text (control, bidi and other format characters as \\u
    escapes, as in --json); onto a terminal, CSV shows them as escapes, as every table does."""
    import csv

    after, at_least = parse_since(since)
    if out is not None:
        import os

        from colibri.core.errors import FileExists
        from colibri.privatefiles import open_private

        try:
            # 0600 whatever the umask, as the ledger it copies: task texts, errors, who did what.
            fd = open_private(out, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except FileExistsError:
            raise FileExists(f"{out} exists; give another --out, or remove it") from None
        sink: IO[str] = open(fd, "w", encoding="utf-8", newline="")
    else:
        sink = sys.stdout
    # Every text cell quoted, numbers bare: a spreadsheet set to split on ";" (as many locales
    # are) keeps a reason with a ";" in it whole, rather than starting a cell after it.
    writer = csv.writer(sink, quoting=csv.QUOTE_NONNUMERIC) if fmt == "csv" else None
    encode = msgspec.json.Encoder().encode
    # Onto a terminal, what sessions wrote is shown as people are shown it (JSON lines keep
    # the exact text either way: json_safe only escapes).
    terminal = out is None and sys.stdout.isatty()
    # Rows written onto the terminal are their own progress (and a count would be drawn over
    # them).
    progress = Progress("exporting the ledger: {count} rows", shown=not terminal)
    try:
        if writer is not None:
            writer.writerow(CSV_COLUMNS)
        from colibri.core.protocol import Ledger

        with ctx.client() as client:
            rows = ledger_rows(
                lambda after: client.request(Ledger(after=after, limit=LEDGER_PAGE)), after
            )
            for entry in rows:
                if at_least and entry.at < at_least:
                    continue
                if writer is not None:
                    row = _csv_row(entry)
                    if terminal:
                        row = [
                            printable(c, newlines=True) if isinstance(c, str) else c for c in row
                        ]
                    writer.writerow(row)
                else:
                    sink.write(json_safe(encode(entry)).decode() + "\n")
                progress.step()
    except BaseException:
        if out is not None:  # a part of the ledger would pass for all of it: not left behind
            sink.close()
            out.unlink(missing_ok=True)
        raise
    finally:
        progress.clear()
        if out is not None:
            sink.close()
        else:
            sink.flush()
    if out is not None:
        summary = {"rows": progress.count, "format": fmt, "out": str(out)}
        if as_json:
            print_json_line(summary)
        else:
            exported = counted(progress.count, "ledger row")
            click.echo(printable(f"exported {exported} to {out} ({fmt})"))
