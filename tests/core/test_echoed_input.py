"""Input a person or a peer gave, quoted back in an error, is quoted clipped (``shown``): a 10 KB
tenant name given to ``--tenants`` came back whole, on one line of 10 KB. Each case hands a
check 10 KB where a name, a time zone, an expression or a time goes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from colibri.core import errors
from colibri.core.access import Principal
from colibri.core.errors import ColibriError
from colibri.core.lineage import parse_body
from colibri.core.model import TaskSpec, check_name
from colibri.core.schedules import ScheduleSpec, build, normalize_cron, zone

LONG = "x" * 10_000
TASK = TaskSpec(text="t")
AGENT = Principal(kind="agent", tenant="acme", agent="far", workspace="api")

CASES: dict[str, Callable[[], object]] = {
    "a name": lambda: check_name(LONG, "tenant"),
    "a time zone": lambda: zone(LONG),
    "a cron expression": lambda: normalize_cron(LONG),
    "a cron expression of five fields": lambda: normalize_cron(f"{LONG} * * * *"),
    "a time": lambda: build("s", ScheduleSpec(at=LONG, task=TASK), now=0.0, default_tz="UTC"),
    "a jitter": lambda: build(
        "s", ScheduleSpec(every="1m", jitter=LONG, task=TASK), now=0.0, default_tz="UTC"
    ),
    "a task body's header": lambda: parse_body(LONG + "\n\ntext"),
    "a token's other tenant": lambda: AGENT.tenant_for(LONG),
    "a token's other workspace": lambda: AGENT.check_registration("far", [], LONG),
    "a token's other agent": lambda: AGENT.check_registration(LONG, [], "api"),
    "an unknown schedule": lambda: _raise(errors.UnknownSchedule(LONG)),
    "a schedule that exists": lambda: _raise(errors.ScheduleExists(LONG)),
    "an idempotency key": lambda: _raise(errors.IdempotencyConflict(LONG, "t1")),
    "an unknown workspace": lambda: _raise(errors.UnknownWorkspace(LONG, ["api"])),
    # Checked before anything connects: no server is asked.
    "hive move --to": lambda: _hive("hand_over", "postgresql://u@127.0.0.1:1/db", "acme", LONG),
    "hive grant's role": lambda: _hive("grant_role", "postgresql://u@127.0.0.1:1/db", LONG),
}


def _hive(name: str, *args: str) -> object:
    from colibri.store import postgres

    return getattr(postgres, name)(*args)


def _raise(error: ColibriError) -> None:
    raise error


@pytest.mark.parametrize("case", CASES)
def test_long_input_is_quoted_clipped_in_the_error(case: str) -> None:
    with pytest.raises(ColibriError) as caught:
        CASES[case]()
    message = caught.value.message
    assert "xxxxx…" in message and len(message) < 400, message[:500]


def test_run_with_a_10_kb_tenant_says_so_in_one_short_line(tmp_path: object) -> None:
    from click.testing import CliRunner

    from colibri.cli import daemon  # noqa: F401 (registers ``run``, as ``main`` does)
    from colibri.cli.main import cli

    args = ["--root", str(tmp_path), "run", "--store", "postgresql://u@127.0.0.1:1/db",
            "--tenants", f"acme,{LONG}"]  # fmt: skip
    result = CliRunner().invoke(cli, args)
    assert result.exit_code == 1, result.output
    refusal = result.output.splitlines()[-1]  # after "initialised a new root at …"
    assert len(result.output) < 500, result.output[:500]
    assert refusal.startswith("colibri: --tenants: invalid tenant 'xxx") and "…" in refusal
