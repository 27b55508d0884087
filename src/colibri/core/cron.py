"""Cron expressions as a schedule takes them: five fields or a macro (``@daily`` …), checked
by cronsim, and what is wrong with one that is not said field by field."""

from __future__ import annotations

from datetime import UTC, datetime

from colibri.core.errors import BadRequest, shown

#: The macros a cron expression may be, each with the five fields it stands for.
MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}


def normalize_cron(expr: str) -> str:
    """Expand a macro and check the expression; raise BadRequest saying what is wrong."""
    from cronsim import CronSim, CronSimError

    text = " ".join(expr.split())
    text = MACROS.get(text.lower(), text)
    if len(text.split(" ")) != 5:
        raise BadRequest(
            f"cron expression {shown(expr)} must have five fields (minute hour day-of-month month "
            f"day-of-week) or be one of {', '.join(MACROS)}"
        )
    try:
        CronSim(text, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise BadRequest(_cron_error(expr, text, str(exc))) from None
    return text


#: Each cron field's name, range and an example, in the order of the expression.
_CRON_FIELDS = (
    ("minute", "0-59", "*/15 * * * *"),
    ("hour", "0-23", "0 9 * * *"),
    ("day-of-month", "1-31", "0 0 1,15 * *"),
    ("month", "1-12 or jan-dec", "0 0 1 */3 *"),
    ("day-of-week", "0-7 or sun-sat (0 and 7 are Sunday)", "0 9 * * mon-fri"),
)


def _cron_error(expr: str, text: str, why: str) -> str:
    """Say which field of a cron expression is wrong, its range and an example (cronsim says
    only "Bad minute")."""
    for index, (name, values, example) in enumerate(_CRON_FIELDS):
        if why == f"Bad {name}":
            field = text.split(" ")[index]
            never = " or never comes in the months given" if name == "day-of-month" else ""
            return (
                f"invalid cron expression {shown(expr)}: its {name} field {shown(field)} is not "
                f"valid{never}: {name} takes {values}, as one value, a list (1,2), a range "
                f"(1-5) or a step (*/5); e.g. {example!r}"
            )
    return f"invalid cron expression {shown(expr)}: {why}"
