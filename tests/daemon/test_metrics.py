"""Prometheus metrics (``colibri run --metrics``): a real daemon, scraped over real HTTP."""

from __future__ import annotations

import json
import re
import socket
import subprocess
from pathlib import Path

import pytest

from tests.helpers import (
    PYTHON,
    Daemon,
    FakeAgent,
    metrics_url,
    one_line,
    run_refused,
    sample,
    scrape,
    set_next_fire,
    sqlite_only,
    wait_until,
)

CONTRIB = Path(__file__).resolve().parents[2] / "contrib"


def serving(root: Path) -> Daemon:
    daemon = Daemon(root, "--metrics", "127.0.0.1:0")
    daemon.start()
    return daemon


def test_a_scrape_follows_the_work(root: Path) -> None:
    daemon = serving(root)
    try:
        url = metrics_url(daemon)
        before = scrape(url)
        assert sample(before, "colibri_tasks_submitted_total") == 0
        for outcome in ("done", "failed", "cancelled"):
            assert sample(before, "colibri_tasks_finished_total", outcome=outcome) == 0
        assert sample(before, "colibri_submit_to_assign_seconds_count") == 0
        assert sample(before, "colibri_tasks", state="pending") == 0

        ids = [daemon.submit(f"job {n}", capabilities=["m"])["id"] for n in range(3)]
        queued = scrape(url)
        assert sample(queued, "colibri_tasks_submitted_total") == 3
        assert sample(queued, "colibri_tasks", state="pending") == 3
        assert sample(queued, "colibri_tasks", state="running") == 0
        assert (sample(queued, "colibri_store_commit_seconds_count") or 0) >= 1

        agent = FakeAgent(daemon, "m-1", ["m"], workspace="ws")
        first = agent.next_assign()
        assert first["task"]["id"] == ids[0]
        daemon.call("cancel", task=ids[2])
        busy = scrape(url)
        assert sample(busy, "colibri_tasks_assigned_total") == 1
        assert sample(busy, "colibri_submit_to_assign_seconds_count") == 1
        assert sample(busy, "colibri_submit_to_assign_seconds_bucket", le="+Inf") == 1
        assert sample(busy, "colibri_tasks", state="running") == 1
        assert sample(busy, "colibri_tasks", state="pending") == 1
        assert sample(busy, "colibri_sessions_running", workspace="ws") == 1
        assert sample(busy, "colibri_agents_online", workspace="ws") == 1
        assert sample(busy, "colibri_tasks_finished_total", outcome="cancelled") == 1

        agent.out(first, cost={"usd": 0.25, "tokens_in": 100, "tokens_out": 20})
        second = agent.next_assign()
        assert second["task"]["id"] == ids[1]
        agent.fail(second, "it broke")
        daemon.wait_closed(ids[1])
        after = scrape(url)
        assert sample(after, "colibri_tasks_submitted_total") == 3
        assert sample(after, "colibri_tasks_finished_total", outcome="done") == 1
        assert sample(after, "colibri_tasks_finished_total", outcome="failed") == 1
        assert sample(after, "colibri_tasks_finished_total", outcome="cancelled") == 1
        assert sample(after, "colibri_tasks_assigned_total") == 2
        assert sample(after, "colibri_submit_to_assign_seconds_count") == 2
        assert sample(after, "colibri_spend_usd_total", workspace="ws") == pytest.approx(0.25)
        assert sample(after, "colibri_spend_tokens_total", workspace="ws", direction="in") == 100
        assert sample(after, "colibri_spend_tokens_total", workspace="ws", direction="out") == 20
        assert all(sample(after, "colibri_tasks", state=s) == 0 for s in ("pending", "running"))
        assert sample(after, "colibri_sessions_running", workspace="ws") == 0
        commits = sample(after, "colibri_store_commit_seconds_count")
        commits_before = sample(queued, "colibri_store_commit_seconds_count")
        assert commits is not None and commits_before is not None and commits > commits_before

        # The ready pool is what the agent's heartbeat last said.
        assert sample(after, "colibri_ready_sessions", workspace="ws") == 0
        agent.client.call("heartbeat", ready=3)
        assert sample(scrape(url), "colibri_ready_sessions", workspace="ws") == 3
        agent.client.call("heartbeat")  # a heartbeat without the field leaves it as it was
        assert sample(scrape(url), "colibri_ready_sessions", workspace="ws") == 3
        agent.close()
        assert sample(scrape(url), "colibri_tasks_submitted_total") == 3  # scraping changes nothing
    finally:
        daemon.stop()


def test_sessions_never_ready_count_and_trip_the_breaker(root: Path) -> None:
    from colibri.daemon.board import BREAKER_AFTER

    daemon = serving(root)
    try:
        url = metrics_url(daemon)
        agent = FakeAgent(daemon, "flaky", ["f"], workspace="ws")
        task = daemon.submit("never ready", capabilities=["f"])
        for _ in range(BREAKER_AFTER):
            assign = agent.next_assign()
            agent.client.call(
                "requeue", task=task["id"], epoch=assign["epoch"], reason="not ready in time"
            )
        samples = scrape(url)
        assert sample(samples, "colibri_ready_timeouts_total", workspace="ws") == BREAKER_AFTER
        assert sample(samples, "colibri_breaker_trips_total", workspace="ws") == 1
        assert sample(samples, "colibri_tasks_assigned_total") == BREAKER_AFTER
        # the wait from submission to the first assignment, once, not per requeue
        assert sample(samples, "colibri_submit_to_assign_seconds_count") == 1
        assert sample(samples, "colibri_tasks", state="pending") == 1
        # agents says so too (the TUI shows it): the breaker of flaky is open, not another's.
        other = FakeAgent(daemon, "steady", ["g"])
        shown = {a["name"]: a for a in daemon.call("agents")["agents"]}
        assert shown["flaky"]["breaker_open"] is True
        assert shown["steady"]["breaker_open"] is False and shown["steady"]["ready"] == 0
        other.close()
        agent.close()
    finally:
        daemon.stop()


def test_heartbeats_refuse_an_impossible_ready_pool(root: Path) -> None:
    from colibri.core.errors import BadRequest

    daemon = serving(root)
    try:
        agent = FakeAgent(daemon, "a-1", workspace="ws")
        for bad in (-1, 10_001, 1.5, "3", True):
            with pytest.raises(BadRequest):
                agent.client.call("heartbeat", ready=bad)
        agent.client.call("heartbeat", ready=10_000)
        samples = scrape(metrics_url(daemon))
        assert sample(samples, "colibri_ready_sessions", workspace="ws") == 10_000
        agent.close()
    finally:
        daemon.stop()


def test_schedule_fires_and_skips_are_counted(root: Path) -> None:
    daemon = serving(root)
    try:
        url = metrics_url(daemon)
        daemon.call(
            "schedule-add",
            name="often",
            schedule={"every": "1s", "overlap": "skip", "task": {"text": "tick"}},
        )
        # no agent: the first fire's task stays pending, and the next fires are skipped
        samples = wait_until(
            lambda: (
                (s := scrape(url))
                and (sample(s, "colibri_schedule_skipped_total", schedule="often") or 0) >= 1
                and s
            ),
            timeout=15,
        )
        assert sample(samples, "colibri_schedule_fires_total", schedule="often") == 1
        assert sample(samples, "colibri_schedule_missed_total", schedule="often") == 0
        assert sample(samples, "colibri_schedule_refused_total", schedule="often") == 0
        assert sample(samples, "colibri_tasks_submitted_total") == 1
    finally:
        daemon.stop()


@sqlite_only
def test_fires_missed_while_the_daemon_was_down_are_counted(root: Path) -> None:
    daemon = serving(root)
    daemon.call("schedule-add", name="minutely", schedule={"cron": "* * * * *",
                "task": {"text": "every minute"}})  # fmt: skip
    daemon.stop()
    set_next_fire(root, 3600)
    daemon.start()
    try:
        url = metrics_url(daemon)
        samples = wait_until(
            lambda: (
                (s := scrape(url))
                and sample(s, "colibri_schedule_fires_total", schedule="minutely")
                and s
            )
        )
        assert sample(samples, "colibri_schedule_fires_total", schedule="minutely") == 1
        missed = sample(samples, "colibri_schedule_missed_total", schedule="minutely")
        assert missed is not None and 58 <= missed <= 62, missed
    finally:
        daemon.stop()


# -- refusals --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "value",
    ["nonsense", "127.0.0.1", "127.0.0.1:", "127.0.0.1:65536", "127.0.0.1:-1", ":9464",
     "tcp://127.0.0.1:9464", "http://127.0.0.1:9464", "[::1]", "[::1:9464", "::1:9464",
     "127.0.0.1:٣", "a b:9464", ""],
)  # fmt: skip
def test_a_bad_metrics_address_is_refused_in_one_line(root: Path, value: str) -> None:
    result = run_refused(root, "--metrics", value)
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert line.startswith("colibri: ") and "--metrics" in line and "HOST:PORT" in line, line
    assert "Traceback" not in result.stderr
    assert not (root / ".colibri" / "colibri.sock").exists()


def test_a_bad_metrics_setting_names_its_line(root: Path) -> None:
    for value, words in ((9464, "must be an address like"), ('"nope"', "is not an address"),
                         ("[]", "must be an address like")):  # fmt: skip
        (root / "colibri.jsonc").write_text(
            f'{{\n  "server": {{\n    "metrics": {value}\n  }}\n}}\n'
        )
        line = one_line(run_refused(root).stderr)
        assert "colibri.jsonc:3: server.metrics" in line and words in line, line


def test_the_setting_serves_and_the_option_overrides_it(root: Path) -> None:
    (root / "colibri.jsonc").write_text(json.dumps({"server": {"metrics": "127.0.0.1:0"}}))
    daemon = Daemon(root)
    daemon.start()
    try:
        assert sample(scrape(metrics_url(daemon)), "colibri_tasks_submitted_total") == 0
    finally:
        daemon.stop()
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        (root / "colibri.jsonc").write_text(
            json.dumps({"server": {"metrics": f"127.0.0.1:{port}"}})
        )
        daemon = serving(root)  # --metrics 127.0.0.1:0 wins over the taken port of the file
        try:
            assert not metrics_url(daemon).endswith(f":{port}/metrics")
        finally:
            daemon.stop()


def test_a_port_in_use_stops_the_daemon_in_one_line(root: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_refused(root, "--metrics", f"127.0.0.1:{port}")
    assert result.returncode == 1
    line = one_line(result.stderr)
    assert line == (
        f"colibri: cannot serve metrics on 127.0.0.1:{port}: Address already in use; pick "
        "another address or port (--metrics, server.metrics)"
    )
    assert not (root / ".colibri" / "colibri.sock").exists()
    daemon = serving(root)  # nothing was left held: the next daemon starts
    daemon.stop()
    # an address of no interface here (TEST-NET-1)
    line = one_line(run_refused(root, "--metrics", "192.0.2.1:9464").stderr)
    assert "cannot serve metrics on 192.0.2.1:9464: Cannot assign requested address" in line


def test_without_metrics_nothing_serves_and_the_library_is_not_loaded(daemon: Daemon) -> None:
    assert daemon.call("status")["daemon"]["metrics"] is None
    check = ("import sys, colibri.cli.main, colibri.cli.daemon, colibri.daemon.app; "
             "assert 'prometheus_client' not in sys.modules, 'loaded'")  # fmt: skip
    subprocess.run([PYTHON, "-c", check], check=True, timeout=60)


# -- HTTP ------------------------------------------------------------------------------------


def http(url: str, request: bytes) -> bytes:
    host, port = re.match(r"http://(.+):(\d+)/", url).groups()  # type: ignore[union-attr]
    with socket.create_connection((host, int(port)), timeout=10) as conn:
        conn.sendall(request)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    return data


def test_the_endpoint_answers_only_what_it_serves(root: Path) -> None:
    daemon = serving(root)
    try:
        url = metrics_url(daemon)
        port = int(url.rsplit(":", 1)[1].split("/")[0])
        from colibri.daemon.metrics import MAX_CLIENTS

        # Peers that say nothing — as many as the endpoint takes at once, and more — hold up
        # neither a scrape (the one silent longest makes room for it) nor the daemon.
        silent = [socket.create_connection(("127.0.0.1", port)) for _ in range(MAX_CLIENTS + 4)]
        try:
            for _ in range(3):
                assert sample(scrape(url), "colibri_tasks_submitted_total") == 0
            daemon.submit("still served")
        finally:
            for conn in silent:
                conn.close()
        get = http(url, b"GET /metrics?x=1 HTTP/1.1\r\nHost: x\r\n\r\n")
        assert get.startswith(b"HTTP/1.1 200 ") and b"colibri_tasks_submitted_total 1.0" in get
        head = http(url, b"HEAD /metrics HTTP/1.1\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 200 ") and head.endswith(b"\r\n\r\n")
        assert http(url, b"GET /other HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 404 ")
        post = http(url, b"POST /metrics HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
        assert post.startswith(b"HTTP/1.1 405 ") and b"Allow: GET, HEAD" in post
        assert http(url, b"hello\r\n\r\n").startswith(b"HTTP/1.1 400 ")
        assert http(url, b"GET / HTTP/1.0\n\n").startswith(b"HTTP/1.1 200 ")
        assert http(url, b"GET /" + b"x" * 10_000 + b" HTTP/1.1\r\n\r\n") == b""  # too long
        assert http(url, b"GET /metrics HTTP/1.1\r\n" + b"X: y\r\n" * 200 + b"\r\n").startswith(
            b"HTTP/1.1 400 "
        )
        assert sample(scrape(url), "colibri_tasks_submitted_total") == 1
    finally:
        daemon.stop()


# -- what contrib/ builds on -----------------------------------------------------------------


def exposed(url: str) -> tuple[set[str], set[str]]:
    """The families a scrape holds (counters without ``_total``), and every series name it can
    hold: those of the families' samples, and each family's own names with their suffixes (a
    labelled counter that has counted nothing yet has no sample)."""
    import urllib.request

    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    families, names = set(), set()
    suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_sum", "_count"]}
    for family in text_string_to_metric_families(text):
        families.add(family.name)
        names |= {s.name for s in family.samples}
        names |= {family.name + suffix for suffix in suffixes.get(family.type, [""])}
    return families, names


def test_the_alert_rules_the_dashboard_and_the_docs_name_the_metrics_that_exist(
    root: Path,
) -> None:
    import yaml

    (group,) = yaml.safe_load((CONTRIB / "prometheus" / "alerts.yml").read_text())["groups"]
    rules = group["rules"]
    assert all({"alert", "expr", "labels", "annotations"} <= set(rule) for rule in rules)
    alerts = " ".join(rule["expr"] for rule in rules)
    dashboard = json.loads((CONTRIB / "grafana" / "colibri.json").read_text())
    exprs: list[str] = []

    def walk(node: object) -> None:
        if isinstance(node, dict):
            exprs.extend(
                v for k, v in node.items() if k in ("expr", "query") and isinstance(v, str)
            )
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(dashboard)
    used_by_alerts = set(re.findall(r"\bcolibri_[a-z0-9_]+", alerts))
    used_by_dashboard = set(re.findall(r"\bcolibri_[a-z0-9_]+", " ".join(exprs)))
    # the alerts the docs promise: tasks failing, agents gone, schedules missed
    assert {"colibri_tasks_finished_total", "colibri_agents_online",
            "colibri_schedule_missed_total"} <= used_by_alerts  # fmt: skip
    assert len(used_by_dashboard) >= 15, used_by_dashboard
    daemon = serving(root)
    try:
        families, names = exposed(metrics_url(daemon))
    finally:
        daemon.stop()
    assert used_by_alerts - names == set()
    assert used_by_dashboard - names == set()
    # docs/METRICS.md's table: every family the daemon serves, and nothing else
    table = (CONTRIB.parent / "docs" / "METRICS.md").read_text()
    documented = set(re.findall(r"^\| `(colibri_[a-z0-9_]+)` \|", table, re.M))
    assert {name.removesuffix("_total") for name in documented} == families
    assert documented <= names | families
