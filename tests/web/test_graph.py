"""A task's page shows its dependencies as a graph, at the HTTP level: what it waits for,
transitively and nested (to the depth shown), and what waits for it, each with its state;
escaped; a tenant's token sees none of another tenant's tasks in it."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from tests.helpers import Daemon
from tests.remote.conftest import TlsDaemon
from tests.web.conftest import WebServer
from tests.web.test_tenants import board, pki, sign_in, tls_web  # noqa: F401  (fixtures)


def tree(body: str, list_id: str) -> ET.Element:
    """The list ``list_id`` of a task page (its ``<dd>``), as elements."""
    match = re.search(rf'<ul class="after" id="{list_id}">.*?</dd>', body, re.S)
    assert match, f"no {list_id} on the page"
    listed = ET.fromstring("<dd>" + match.group(0)).find("ul")
    assert listed is not None
    return listed


def entries(element: ET.Element) -> list[tuple[str, str, list[Any]]]:
    """Each task of a list: its id, state and what is nested under it (the same, again)."""
    shown: list[tuple[str, str, list[Any]]] = []
    for li in element.findall("li"):
        state = li.find("span").text or ""  # type: ignore[union-attr]
        nested = li.find("ul")
        shown.append((li.get("data-dep") or li.get("data-dependent") or "", state,
                       entries(nested) if nested is not None else []))  # fmt: skip
    return shown


def page(web: WebServer, cookie: str, task_id: str) -> str:
    status, _, body = web.request("GET", f"/tasks/{task_id}", cookie=cookie)
    assert status == 200, body
    return body


def test_a_tasks_page_shows_what_it_waits_for_nested_and_what_waits_for_it(
    daemon: Daemon, web: WebServer
) -> None:
    a = daemon.submit("first <b>step</b>")["id"]
    b = daemon.submit("second", after=[a])["id"]
    d = daemon.submit("beside")["id"]
    c = daemon.submit("third", after=[b, d])["id"]  # a fan-in: c waits for two
    x = daemon.submit("also after the first", after=[a])["id"]
    daemon.call("cancel", task=d)  # c is cancelled with it (if_dependency_fails: cancel)
    cookie, _ = web.sign_in()

    body = page(web, cookie, c)
    assert entries(tree(body, "task-after")) == [
        (b, "blocked", [(a, "pending", [])]),
        (d, "cancelled", []),
    ]
    assert "first &lt;b&gt;step&lt;/b&gt;" in body and "<b>step" not in body
    assert 'id="task-waiting"' not in body  # nothing waits for c

    body = page(web, cookie, a)
    assert 'id="task-after"' not in body  # a waits for nothing
    assert entries(tree(body, "task-waiting")) == [(b, "blocked", []), (x, "blocked", [])]
    body = page(web, cookie, b)
    assert entries(tree(body, "task-after")) == [(a, "pending", [])]
    assert entries(tree(body, "task-waiting")) == [(c, "cancelled", [])]


def test_the_tree_stops_at_its_depth_and_says_what_is_left_out(
    daemon: Daemon, web: WebServer
) -> None:
    chain = [daemon.submit("link 0")["id"]]
    for n in range(1, 5):
        chain.append(daemon.submit(f"link {n}", after=[chain[-1]])["id"])
    cookie, _ = web.sign_in()
    body = page(web, cookie, chain[4])
    assert entries(tree(body, "task-after")) == [
        (chain[3], "blocked", [(chain[2], "blocked", [(chain[1], "blocked", [])])])
    ]
    assert chain[0] not in body and "waits for 1 more, not shown" in body


def test_a_tenants_token_sees_none_of_another_tenants_tasks_in_the_graph(
    board: TlsDaemon,  # noqa: F811
    tls_web: WebServer,  # noqa: F811
) -> None:
    acme_a = board.submit("acme's secret plans", tenant="acme")["id"]
    beta_a = board.submit("beta's first", tenant="beta")["id"]
    acme_b = board.submit("acme's next", tenant="acme", after=[acme_a])["id"]
    beta_b = board.submit("beta's next", tenant="beta", after=[beta_a])["id"]
    beta = sign_in(tls_web, board.token("operator", "beta"))
    for task_id in (beta_a, beta_b):
        body = page(tls_web, beta, task_id)
        assert acme_a not in body and acme_b not in body and "acme" not in body
    assert entries(tree(page(tls_web, beta, beta_a), "task-waiting")) == [
        (beta_b, "blocked", [])
    ]
    acme = sign_in(tls_web, board.token("operator", "acme"))
    body = page(tls_web, acme, acme_a)
    assert entries(tree(body, "task-waiting")) == [(acme_b, "blocked", [])]
    assert beta_a not in body and beta_b not in body


def test_an_open_task_page_is_drawn_again_when_a_task_comes_to_wait_for_it(
    daemon: Daemon, web: WebServer
) -> None:
    a = daemon.submit("first")["id"]
    cookie, _ = web.sign_in()
    page(web, cookie, a)  # (the feed loaded)
    later: dict[str, str] = {}

    def drawn(updates: list[dict[str, Any]]) -> bool:
        if not later:  # (first asked once the stream is open)
            later.update(daemon.submit("waits for the first", after=[a]))
        return any("task-detail" in u.get("replace", {}) for u in updates)

    updates = web.events(cookie, f"view=task&task={a}", drawn)
    html = next(
        u["replace"]["task-detail"] for u in updates if "task-detail" in u.get("replace", {})
    )
    assert f'data-dependent="{later["id"]}"' in html
