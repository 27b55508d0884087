"""An open page's stream, at the HTTP level: what changed between a page's drawing and its
stream's opening comes first on the stream, so a page never misses a task that moved in
between (a browser opens the stream only once it has the page)."""

from __future__ import annotations

import html
import re

from tests.helpers import Daemon, wait_until
from tests.web.conftest import WebServer


def stream_of(body: str) -> str:
    found = re.search(r'data-stream="/events\?([^"]*)"', body)
    assert found is not None, body[:500]
    return html.unescape(found.group(1))


def test_a_task_that_moved_before_the_stream_opened_comes_first_on_it(
    daemon: Daemon, web: WebServer
) -> None:
    cookie, _ = web.sign_in()
    status, _, first = web.request("GET", "/", cookie=cookie)
    assert status == 200
    query = stream_of(first)
    assert "since=" in query and "loads=" in query
    task = daemon.submit("moved while the page was on its way", capabilities=["nobody-has-it"])
    # Passed on by the web server: a page drawn now shows it; the first page did not.
    wait_until(lambda: task["id"] in web.request("GET", "/", cookie=cookie)[2])
    assert task["id"] not in first
    updates = web.events(
        cookie, query, lambda seen: any(u.get("upsert") for u in seen), timeout=10
    )
    upserts = [u for update in updates for u in update.get("upsert", [])]
    assert [u["id"] for u in upserts] == [task["id"]]
    assert upserts[0]["into"] == "col-pending"
    # A stream opened at the page's own version sends nothing of it again.
    _, _, again = web.request("GET", "/", cookie=cookie)
    later = web.events(cookie, stream_of(again), lambda seen: True, timeout=5)
    assert later == []


def test_a_tasks_page_shows_the_branch_and_the_change_its_session_left(
    daemon: Daemon, web: WebServer
) -> None:
    """A session that ran in a worktree reports its change with its out: the task's page says
    the branch, where it ended and how much changed, escaped as every text is."""
    from tests.helpers import FakeAgent

    cookie, _ = web.sign_in()
    agent = FakeAgent(daemon, "coder-1", ["code"])
    try:
        task = daemon.submit("fix the login form", capabilities=["code"])
        assign = agent.next_assign()
        change = {"branch": "colibri/0f3a-fix-login", "base": "1" * 40,
                  "head": "9c1e2f4" + "0" * 33, "files": 3, "insertions": 40,
                  "deletions": 2}  # fmt: skip
        agent.out(assign, "fixed", change=change)
        daemon.wait_closed(task["id"])
    finally:
        agent.close()

    def page() -> str | None:
        body = web.request("GET", f"/tasks/{task['id']}", cookie=cookie)[2]
        return body if "colibri/0f3a-fix-login" in body else None

    shown = wait_until(page)
    assert "branch colibri/0f3a-fix-login at 9c1e2f400: 3 files, +40 -2" in html.unescape(shown)
