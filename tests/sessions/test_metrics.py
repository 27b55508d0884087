"""Metrics of a real fleet: a workspace's harness, its ready pool, its restarts."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

from tests.helpers import Daemon, metrics_url, sample, scrape, wait_until
from tests.sessions.support import ECHO, sweep


def test_a_workspace_s_agent_ready_pool_and_harness_restarts_are_scraped(root: Path) -> None:
    (root / "colibri.jsonc").write_text(json.dumps({
        "scheduler": {"agent_ttl": "3s"},
        "workspaces": {"hot": {"warm": 2, "session": {"command": ECHO, "idle": "60s"}}},
    }))  # fmt: skip
    daemon = Daemon(root, "--metrics", "127.0.0.1:0")
    daemon.start()
    try:
        url = metrics_url(daemon)
        first = scrape(url)
        assert sample(first, "colibri_harness_restarts_total", workspace="hot") == 0
        assert sample(first, "colibri_harness_degraded", workspace="hot") == 0
        # the harness registers, fills its pool, and says so in its heartbeats (every second)
        wait_until(
            lambda: sample(scrape(url), "colibri_ready_sessions", workspace="hot") == 2, timeout=30
        )
        assert sample(scrape(url), "colibri_agents_online", workspace="hot") == 1
        task = daemon.submit("hello", workspace="hot")
        assert daemon.wait_closed(task["id"], timeout=30)["outcome"] == "done"
        done = scrape(url)
        assert sample(done, "colibri_tasks_finished_total", outcome="done") == 1
        assert sample(done, "colibri_submit_to_assign_seconds_count") == 1

        (harness,) = daemon.call("status")["harnesses"]
        os.killpg(harness["pid"], signal.SIGKILL)  # a crash: the supervisor starts it again
        wait_until(
            lambda: sample(scrape(url), "colibri_harness_restarts_total", workspace="hot") == 1,
            timeout=30,
        )
    finally:
        sweep(root, daemon)
        sweep(root)
