"""A session's report always reaches the daemon: long and escaped outputs fit the line, the
harness never holds all of a huge output, and a report the daemon refuses is never sent again
as it was."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from colibri.agent.harness import Harness
from colibri.agent.session import Pending, Session
from colibri.agent.spec import AgentSpec
from colibri.client import AsyncClient
from colibri.core import protocol as p
from tests.helpers import Daemon, harness_pid, online, wait_until
from tests.sessions.support import PY


def prints(size: int, byte: str) -> list[str]:
    """A session that writes ``size`` bytes of ``byte`` to stdout, then exits 0."""
    return [PY, "-c", f"import sys; sys.stdout.buffer.write({byte!r}.encode() * {size})"]


def peak_rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_an_output_of_control_bytes_past_the_line_limit_is_reported_cut(
    fleet: Callable[..., Daemon], root: Path
) -> None:
    """3 MiB of \\x01: kept to output_limit (head and tail), which JSON escaping makes six
    times longer than the line limit; the report is cut again to fit, and arrives at once —
    before, it was refused as line_too_long and sent again, forever, the task running."""
    daemon = fleet({"w": {"session": {"command": prints(3 << 20, "\x01")}}})
    wait_until(lambda: online(daemon, "w"))
    task = daemon.call("submit", text="print a lot", workspace="w")["task"]
    final = daemon.wait_closed(task["id"], timeout=20)
    assert final["outcome"] == "done", final
    output = final["output"]
    assert "characters cut here to fit one report" in output
    assert output.startswith("\x01" * 1000) and output.endswith("\x01" * 1000)
    assert len(json.dumps(output)) < 1 << 20
    log = (root / ".colibri" / "harness" / "w.log").read_text()
    assert log.count("event=registered") == 1, log  # no reconnect storm


def test_a_huge_output_is_capped_while_read(fleet: Callable[..., Daemon], root: Path) -> None:
    """300 MB of output: the harness keeps its first and last halves of output_limit as it
    reads, so its peak memory stays far below the output (before: all of it, and twice)."""
    daemon = fleet({"w": {"session": {"command": prints(300_000_000, "y"),
                                      "output_limit": 65536}}})  # fmt: skip
    wait_until(lambda: online(daemon, "w"))
    harness = harness_pid(root, "w")
    assert harness is not None
    task = daemon.call("submit", text="print a gigabyte's worth", workspace="w")["task"]
    final = daemon.wait_closed(task["id"], timeout=60)
    assert final["outcome"] == "done"
    assert "[output truncated: 300000000 bytes in all" in final["output"]
    assert final["output"].startswith("y" * 32768) and final["output"].endswith("y" * 32768)
    assert peak_rss_kib(harness) < 150 * 1024, peak_rss_kib(harness)


def test_a_small_line_limit_still_gets_every_report(
    fleet: Callable[..., Daemon], root: Path
) -> None:
    daemon = fleet({"w": {"session": {"command": prints(100_000, "z")}}})
    config = json.loads((root / "colibri.jsonc").read_text())
    config["server"] = {"max_line": 2048}
    (root / "colibri.jsonc").write_text(json.dumps(config))
    daemon.restart()
    wait_until(lambda: online(daemon, "w"), timeout=20)
    task = daemon.call("submit", text="more than a line", workspace="w")["task"]
    final = daemon.wait_closed(task["id"], timeout=20)
    assert final["outcome"] == "done" and "cut here to fit" in final["output"]
    assert len(final["output"]) < 2048


def test_a_refused_report_is_turned_into_a_failure_not_sent_again(daemon: Daemon) -> None:
    """A report the daemon refuses (here a cost it cannot take, as a harness of another
    version might send) is never sent again as it was: the task fails, saying why."""
    events: list[dict[str, Any]] = []

    async def scenario() -> None:
        harness = Harness(AgentSpec(name="a1", command=["true"]), daemon.socket, daemon.root)
        client = AsyncClient(daemon.socket, on_event=events.append)
        await client.connect()
        await client.call("register-agent", name="a1")
        harness.client = client
        submitter = await AsyncClient(daemon.socket).connect()
        task = (await submitter.call("submit", text="costly"))["task"]
        while not any(e["event"] == "assign" for e in events):
            await asyncio.sleep(0.01)
        assign = next(e for e in events if e["event"] == "assign")
        session = Session(task["id"], assign["epoch"], assign["claim"])
        harness.sessions[session.task] = session
        cost = p.ReportedCost(tokens_in=2**63)
        session.report = Pending(
            p.Out(task=session.task, epoch=session.epoch, output="done", cost=cost)
        )
        await harness._deliver(session)
        await client.close()
        await submitter.close()

    asyncio.run(scenario())
    final = daemon.call("get", task=next(e for e in events if e["event"] == "assign")["task"]["id"])
    task = final["task"]
    assert (task["state"], task["outcome"]) == ("closed", "failed"), task
    assert "report was refused" in task["error"] and "tokens_in" in task["error"]
    outs = [r for r in daemon.call("ledger", task=task["id"])["entries"] if r["to_state"] == "done"]
    assert outs == []


def test_a_claude_result_with_numbers_out_of_range_keeps_the_rest_of_its_cost() -> None:
    from colibri.agent.claude import claude_result

    output, cost = claude_result(
        json.dumps({"result": "ok", "total_cost_usd": 0.5,
                    "usage": {"input_tokens": 9223372036854775807, "output_tokens": 12}})
    )  # fmt: skip
    assert output == "ok"
    assert cost == {"usd": 0.5, "tokens_out": 12}
    _, cost = claude_result(json.dumps({"result": "x", "total_cost_usd": 1e308}))
    assert cost is None


def test_a_report_writes_a_sessions_nul_as_a_replacement_character() -> None:
    """The daemon refuses a NUL (no board stores one): a report carries U+FFFD in its place,
    whether it fits whole or is cut."""
    from colibri.core.sizes import fit_report

    for text in ("a\x00b", "\x00" * 10_000):
        fitted = fit_report(text, 4096, "out", {"task": "t1", "epoch": 1})
        assert "\x00" not in fitted and "\ufffd" in fitted


def test_fit_text_keeps_head_and_tail_within_the_budget() -> None:
    from colibri.core.protocol import encode
    from colibri.core.sizes import fit_text

    for text in ("a" * 10_000, "\x00" * 10_000, "é" * 10_000, "\U0001f600" * 5000, "\n" * 3):
        for budget in (200, 1000, 50_000):
            fitted = fit_text(text, budget)
            assert len(encode(fitted)) <= budget or fitted == text and len(encode(text)) <= budget
            if fitted != text:
                assert fitted.startswith(text[:10]) and fitted.endswith(text[-10:])


def test_a_failure_reported_after_a_restart_fits_a_small_line(
    fleet: Callable[..., Daemon], root: Path
) -> None:
    """A session fails with 3,000 bytes of stderr while the daemon is down, and the daemon
    takes lines of 2 KiB. The harness sends the failure when it registers again, cut to fit
    (not refused as too long, and sent again until its stack ran out, killing the harness
    and losing the task as 'registered again without it')."""
    go = root / "go"
    fails = [PY, "-c", "import os, sys, time; sys.stdin.read()\n"
             f"while not os.path.exists({str(go)!r}): time.sleep(0.05)\n"
             "sys.stderr.write('e' * 3000); sys.exit(3)"]  # fmt: skip
    daemon = fleet({"w": {"session": {"command": fails}}})
    config = json.loads((root / "colibri.jsonc").read_text())
    config["server"] = {"max_line": 2048}
    (root / "colibri.jsonc").write_text(json.dumps(config))
    daemon.restart()
    wait_until(lambda: online(daemon, "w"), timeout=20)
    task = daemon.call("submit", text="fails loudly while the daemon is away", workspace="w")
    task_id = task["task"]["id"]
    wait_until(lambda: daemon.call("get", task=task_id)["task"]["state"] == "running")
    harness = harness_pid(root, "w")  # the one running the session
    assert harness is not None
    daemon.kill()
    go.write_text("")
    time.sleep(1.0)  # the session fails while no daemon listens
    daemon.start()
    final = daemon.wait_closed(task_id, timeout=40)
    assert final["outcome"] == "failed" and final["error"].startswith("exit 3: eee"), final
    assert harness_pid(root, "w") == harness  # the same one: not killed by its own report
    assert "Traceback" not in (root / ".colibri" / "harness" / "w.log").read_text()
