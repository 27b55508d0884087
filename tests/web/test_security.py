"""Who may see the board in a browser on loopback, at the HTTP level (no browser needed):
nobody unsigned, the one-time URL good once, no POST from another site or without the
session's CSRF token, no other Host, and the headers that keep a page's text inert."""

from __future__ import annotations

import re
from pathlib import Path

from tests.helpers import Daemon, sqlite_only, wait_until
from tests.web.conftest import WebServer, cookie_of

HOSTILE = ("<script>alert('x')</script> <img src=x onerror=alert(1)> "
           "javascript:alert(2) \u202egnp.exe")  # fmt: skip


def test_nothing_is_shown_or_done_without_a_signed_in_session(
    daemon: Daemon, web: WebServer
) -> None:
    task = daemon.submit("the secret plan")
    for path in ("/", "/tasks", f"/tasks/{task['id']}", "/agents", "/schedules"):
        status, headers, body = web.request("GET", path)
        assert (status, headers["location"]) == (303, "/login"), path
        assert "secret plan" not in body
    status, _, body = web.request("GET", "/events?view=board")
    assert status == 401 and "secret plan" not in body
    for path in ("/submit", f"/tasks/{task['id']}/cancel", "/pause"):
        status, _, _ = web.request("POST", path, form={"text": "sneaked in", "csrf": "x"})
        assert status == 401, path
    # A cookie the server never gave is no session either.
    status, _, _ = web.request("GET", "/", cookie="forged")
    assert status == 303
    assert daemon.task(task["id"])["state"] == "pending"
    assert [t["text"] for t in daemon.call("list")["tasks"]] == ["the secret plan"]
    assert daemon.call("status")["paused"] is False


def test_the_sign_in_url_works_once_and_a_new_one_is_printed(
    daemon: Daemon, web: WebServer
) -> None:
    url = web.sign_in_url()
    cookie, _ = web.sign_in(url)
    status, headers, _ = web.request("GET", url[len(web.base):])
    assert status == 403 and "set-cookie" not in headers
    status, _, body = web.request("GET", "/login?secret=guessed")
    assert status == 403 and "used already" in body
    # The next URL printed signs in a second browser; both sessions work.
    other, _ = web.sign_in()
    assert other != cookie
    for session in (cookie, other):
        assert web.request("GET", "/", cookie=session)[0] == 200


def test_the_session_cookie_and_the_security_headers(daemon: Daemon, web: WebServer) -> None:
    status, headers, _ = web.request("GET", web.sign_in_url()[len(web.base):])
    assert status == 303 and headers["location"] == "/"
    cookie = headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=Strict" in cookie and "Max-Age=43200" in cookie
    assert "Secure" not in cookie  # plain HTTP on loopback: a Secure cookie would never return
    status, headers, body = web.request("GET", "/", cookie=cookie_of(headers))
    assert status == 200
    csp = headers["content-security-policy"]
    assert "script-src 'self'" in csp and "unsafe-inline" not in csp
    assert "frame-ancestors 'none'" in csp
    assert headers["x-content-type-options"] == "nosniff"
    assert "<script>" not in body and "<script src=\"/static/web.js\" defer></script>" in body


def test_a_request_naming_another_host_is_refused(web: WebServer) -> None:
    port = web.base.rsplit(":", 1)[1]
    status, _, _ = web.request("GET", "/login", headers={"Host": f"attacker.example:{port}"})
    assert status == 421
    assert web.request("GET", "/login", headers={"Host": f"localhost:{port}"})[0] == 200


def test_a_post_from_another_origin_or_without_the_csrf_token_is_refused(
    daemon: Daemon, web: WebServer
) -> None:
    task = daemon.submit("keep me")
    cookie, csrf = web.sign_in()
    cancel = f"/tasks/{task['id']}/cancel"
    status, _, body = web.request("POST", cancel, cookie=cookie, form={"csrf": csrf},
                                  headers={"Origin": "http://attacker.example"})  # fmt: skip
    assert status == 403 and "another site" in body
    status, _, _ = web.request("POST", cancel, cookie=cookie, form={"csrf": csrf},
                               headers={"Origin": "null"})  # fmt: skip
    assert status == 403
    status, _, body = web.request("POST", cancel, cookie=cookie, form={"csrf": "stale"})
    assert status == 403 and "CSRF" in body
    status, _, body = web.request("POST", "/pause", cookie=cookie, form={"paused": "1"})
    assert status == 403
    assert daemon.task(task["id"])["state"] == "pending"
    assert daemon.call("status")["paused"] is False
    # The same request from our own page goes through.
    status, _, body = web.request("POST", cancel, cookie=cookie, form={"csrf": csrf},
                                  headers={"X-Requested-With": "colibri"})  # fmt: skip
    assert (status, body) == (200, '{"message":"cancelled 1 task(s)"}')
    assert daemon.task(task["id"])["outcome"] == "cancelled"


def test_an_action_the_daemon_refuses_says_why_in_one_line(daemon: Daemon, web: WebServer) -> None:
    cookie, csrf = web.sign_in()
    ajax = {"X-Requested-With": "colibri"}
    status, _, body = web.request("POST", "/tasks/0000/retry", cookie=cookie,
                                  form={"csrf": csrf}, headers=ajax)  # fmt: skip
    assert status == 400 and body.startswith('{"error":"') and "\\n" not in body
    status, _, body = web.request("POST", "/submit", cookie=cookie, headers=ajax,
                                  form={"csrf": csrf, "text": "x", "priority": "high"})  # fmt: skip
    assert status == 400 and "priority must be a whole number, not 'high'" in body


@sqlite_only
def test_on_an_sqlite_board_there_is_no_hive_page(web: WebServer) -> None:
    cookie, _ = web.sign_in()
    status, _, body = web.request("GET", "/", cookie=cookie)
    assert status == 200 and 'href="/hive"' not in body and 'href="/agents"' in body
    status, _, body = web.request("GET", "/hive", cookie=cookie)
    assert status == 404 and "no_hive: this daemon&#39;s board is SQLite" in body


def test_hostile_text_is_escaped_and_bidi_controls_made_visible(
    daemon: Daemon, web: WebServer
) -> None:
    task = daemon.submit(HOSTILE)
    cookie, _ = web.sign_in()
    for path in ("/", "/tasks", f"/tasks/{task['id']}"):
        status, _, body = web.request("GET", path, cookie=cookie)
        assert status == 200
        assert "<script>alert" not in body and "<img" not in body and "\u202e" not in body
        assert "&lt;script&gt;alert(&#39;x&#39;)&lt;/script&gt;" in body
        assert "\\u202egnp.exe" in body
        assert 'href="javascript' not in body


def test_run_web_serves_the_board_beside_its_daemon(root: Path) -> None:
    daemon = Daemon(root, "--web", "127.0.0.1:0")
    daemon.start()
    try:
        said = r"colibri web: (http://[^/\s]+)(/login\?secret=\S+)"
        found = wait_until(lambda: re.search(said, daemon.log()))
        task = daemon.submit("seen beside the daemon")
        web = WebServer(root)
        web.base = found.group(1)
        status, headers, _ = web.request("GET", "/")
        assert status == 303
        cookie, _ = web.sign_in(found.group(1) + found.group(2))
        body = wait_until(lambda: (page := web.request("GET", "/tasks", cookie=cookie)[2])
                          and task["id"] in page and page)  # fmt: skip
        assert "seen beside the daemon" in body
    finally:
        daemon.stop()
