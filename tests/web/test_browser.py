"""The board in a real browser (headless Chromium driven by Selenium) against a real daemon
and a real ``colibri web``: it follows the board without a reload, its actions act, and
hostile text stays text. One browser, daemon and web server for the module."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest

from colibri.config import init_root
from tests.helpers import Daemon, FakeAgent, write_config
from tests.web.conftest import WebServer

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="chromium and chromedriver are not installed (apt-get install chromium chromium-driver)",
)

WAIT = 10.0


@pytest.fixture(scope="module")
def stack() -> Iterator[tuple[Daemon, WebServer, Any]]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    root = Path(tempfile.mkdtemp(prefix="cbw", dir="/tmp"))
    init_root(root)
    write_config(root)
    daemon = Daemon(root)
    daemon.start()
    web = WebServer(root)
    browser = None
    try:
        web.start()
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1400,1000", "--disable-extensions"):  # fmt: skip
            options.add_argument(flag)
        browser = webdriver.Chrome(options=options, service=Service(str(DRIVER)))
        signed_in(browser, web)
        yield daemon, web, browser
    finally:
        if browser is not None:
            browser.quit()
        web.stop()
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)


def signed_in(browser: Any, web: WebServer) -> None:
    """The browser signed in to ``web`` by a sign-in URL of its own (cookies go by host, not
    port: a browser signed in to another server on loopback is signed out of this one)."""
    browser.get(web.sign_in_url())
    assert urlsplit(browser.current_url).path == "/", browser.current_url


def until(browser: Any, predicate: Any) -> Any:
    from selenium.common.exceptions import NoSuchElementException, StaleElementReferenceException
    from selenium.webdriver.support.ui import WebDriverWait

    # (an element read while the stream replaces it is stale: read again)
    ignored = (NoSuchElementException, StaleElementReferenceException)
    waiting = WebDriverWait(browser, WAIT, poll_frequency=0.05, ignored_exceptions=ignored)
    return waiting.until(lambda _: predicate())


def card(browser: Any, task_id: str) -> Any:
    from selenium.webdriver.common.by import By

    found = browser.find_elements(By.CSS_SELECTOR, f'[data-task="{task_id}"]')
    return found[0] if found else None


def column_of(browser: Any, task_id: str) -> str | None:
    element = card(browser, task_id)
    if element is None:
        return None
    return str(element.find_element("xpath", "..").get_attribute("id"))


def result(browser: Any, form: str) -> str:
    return str(browser.find_element("css selector", f"#{form} output.result").text)


def test_the_board_follows_tasks_as_they_move_without_a_reload(
    stack: tuple[Daemon, WebServer, Any],
) -> None:
    daemon, web, browser = stack
    browser.get(web.base + "/")
    until(browser, lambda: browser.execute_script("return document.body.dataset.live") == "yes")
    browser.execute_script("window.notReloaded = true")
    task = daemon.submit("build the kernel", capabilities=["bsd"])
    until(browser, lambda: column_of(browser, task["id"]) == "col-pending")
    agent = FakeAgent(daemon, "bsd-1", ["bsd"])
    try:
        assign = agent.next_assign()
        until(browser, lambda: column_of(browser, task["id"]) == "col-running")
        # (other tests of this module may leave tasks running on the same board)
        running = str(daemon.call("status")["tasks"]["running"])
        until(browser, lambda: browser.find_element("id", "n-running").text == running)
        agent.out(assign, "built")
        until(browser, lambda: column_of(browser, task["id"]) == "col-done")
        done = str(sum(t["outcome"] == "done" for t in daemon.call("list")["tasks"]))
        until(browser, lambda: browser.find_element("id", "count-done").text == done)
    finally:
        agent.close()
    assert browser.execute_script("return window.notReloaded") is True
    until(browser, lambda: "build the kernel" in card(browser, task["id"]).text)


def test_submit_cancel_retry_and_answer_from_the_pages(
    stack: tuple[Daemon, WebServer, Any],
) -> None:
    daemon, web, browser = stack
    browser.get(web.base + "/tasks")
    browser.find_element("css selector", "details.submit summary").click()
    browser.find_element("id", "submit-text").send_keys("written in the browser")
    browser.find_element("id", "submit-caps").send_keys("linux, zfs")
    browser.find_element("id", "submit-priority").send_keys("3")
    browser.find_element("id", "submit").click()
    until(browser, lambda: result(browser, "submit-form").startswith("submitted"))
    (task,) = [t for t in daemon.call("list")["tasks"] if t["text"] == "written in the browser"]
    assert (task["capabilities"], task["priority"]) == (["linux", "zfs"], 3)
    until(browser, lambda: card(browser, task["id"]) is not None)  # in the list, live
    # An error of the daemon is shown in place, in one line.
    browser.find_element("id", "submit-text").send_keys("waits")
    browser.find_element("id", "submit-after").send_keys("0123-not-a-task")
    browser.find_element("id", "submit").click()
    until(browser, lambda: "error" in browser.find_element(
        "css selector", "#submit-form output.result").get_attribute("class"))  # fmt: skip
    assert "\n" not in result(browser, "submit-form") and ":" in result(browser, "submit-form")

    browser.get(f"{web.base}/tasks/{task['id']}")
    browser.find_element("id", "cancel").click()
    until(browser, lambda: result(browser, "cancel-form") == "cancelled 1 task(s)")
    until(browser, lambda: browser.find_element("id", "task-state").text.startswith("cancelled"))
    assert daemon.task(task["id"])["outcome"] == "cancelled"
    browser.find_element("id", "retry").click()
    until(browser, lambda: result(browser, "retry-form").startswith("retried as"))
    browser.find_element("css selector", "#retry-form a.submitted").click()  # the new task
    until(browser, lambda: browser.find_element("id", "task-state").text.startswith("pending"))
    again = browser.find_element("css selector", "#task-detail h1 .id").text
    assert again != task["id"] and daemon.task(again)["text"] == "written in the browser"

    agent = FakeAgent(daemon, "asker-1", ["interactive"])
    asker = daemon.client()
    try:
        asking = daemon.submit("migrate the schema", capabilities=["interactive"])
        assign = agent.next_assign()
        browser.get(f"{web.base}/tasks/{asking['id']}")
        asker.send("ask", task=asking["id"], epoch=assign["epoch"], claim=assign["claim"],
                   question="drop the legacy table too?")  # fmt: skip
        until(browser, lambda: browser.find_elements("id", "answer-text"))  # came live
        # (The region may be drawn again meanwhile: looked for afresh until it says so.)
        until(browser, lambda: "drop the legacy table too?"
              in browser.find_element("id", "task-question").text)  # fmt: skip
        browser.find_element("id", "answer-text").send_keys("yes, drop it")  # (a kept form)
        browser.find_element("id", "answer").click()
        assert asker.read()["answer"] == "yes, drop it"
    finally:
        asker.close()
        agent.close()


def test_pause_and_resume_show_the_banner(stack: tuple[Daemon, WebServer, Any]) -> None:
    daemon, web, browser = stack
    browser.get(web.base + "/")
    browser.find_element("id", "pause").click()
    until(browser, lambda: "PAUSED" in browser.find_element("id", "header").text)
    assert daemon.call("status")["paused"] is True
    browser.find_element("id", "resume").click()
    until(browser, lambda: "PAUSED" not in browser.find_element("id", "header").text)
    assert daemon.call("status")["paused"] is False


def test_hostile_text_is_shown_as_text(stack: tuple[Daemon, WebServer, Any]) -> None:
    from selenium.common.exceptions import NoAlertPresentException

    daemon, web, browser = stack
    hostile = ("<script>alert('x')</script><img src=x onerror=alert(1)> "
               "javascript:alert(2) \u202egnp.exe")  # fmt: skip
    browser.get(web.base + "/")
    until(browser, lambda: browser.execute_script("return document.body.dataset.live") == "yes")
    task = daemon.submit(hostile, capabilities=["nobody-has-it"])  # (taken by no agent)
    shown = hostile.replace("\u202e", "\\u202e")
    # Drawn by the page's script from the stream, then by the server in a page drawn afresh.
    until(browser, lambda: card(browser, task["id"]) is not None)
    assert card(browser, task["id"]).find_element("css selector", ".text").text == shown
    browser.get(web.base + "/")
    assert card(browser, task["id"]).find_element("css selector", ".text").text == shown
    browser.get(f"{web.base}/tasks/{task['id']}")
    assert browser.find_element("id", "task-text").text == shown
    assert browser.find_elements("css selector", "#task-detail img, #task-detail script") == []
    with pytest.raises(NoAlertPresentException):
        browser.switch_to.alert.text  # noqa: B018


def test_a_blocked_card_moves_when_its_dependency_closes(
    stack: tuple[Daemon, WebServer, Any],
) -> None:
    """Released (``pending → pending``) to pending, then taken; cancelled by the cascade when
    its dependency fails; one that waits for a retry of it stays blocked (a reload too) until
    the retry is done: all without a reload."""
    daemon, web, browser = stack
    browser.get(web.base + "/")
    until(browser, lambda: browser.execute_script("return document.body.dataset.live") == "yes")
    first = daemon.submit("fetch the sources", capabilities=["dep"])
    second = daemon.submit("fetch the patches", capabilities=["dep"])
    released = daemon.submit("apply the sources", capabilities=["later"], after=[first["id"]])
    cascaded = daemon.submit("apply the patches", capabilities=["later"], after=[second["id"]])
    waits = daemon.submit("test the patches", capabilities=["later"], after=[second["id"]],
                          if_dependency_fails="wait")  # fmt: skip
    for blocked in (released, cascaded, waits):
        until(browser, lambda b=blocked: column_of(browser, b["id"]) == "col-blocked")
    agent = FakeAgent(daemon, "dep-1", ["dep"], slots=2)
    try:
        assigns = {a["task"]["id"]: a for a in (agent.next_assign(), agent.next_assign())}
        agent.out(assigns[first["id"]], "fetched")
        until(browser, lambda: column_of(browser, released["id"]) == "col-pending")
        agent.fail(assigns[second["id"]], "no network")
        until(browser, lambda: column_of(browser, cascaded["id"]) == "col-cancelled")
        browser.get(web.base + "/")
        assert column_of(browser, waits["id"]) == "col-blocked"  # for a retry of its dependency
        until(browser, lambda: browser.execute_script("return document.body.dataset.live") == "yes")
        browser.execute_script("window.notReloaded = true")
        retry = daemon.call("retry", task=second["id"])["task"]
        agent.out(agent.next_assign(), "fetched at last")
        daemon.wait_closed(retry["id"])
        until(browser, lambda: column_of(browser, waits["id"]) == "col-pending")
    finally:
        agent.close()
    later = FakeAgent(daemon, "later-1", ["later"], slots=2)
    try:
        taken = [later.next_assign(), later.next_assign()]
        until(browser, lambda: column_of(browser, released["id"]) == "col-running")
        until(browser, lambda: column_of(browser, waits["id"]) == "col-running")
        for assign in taken:  # (nothing left running for the module's other tests)
            later.out(assign, "applied")
    finally:
        later.close()
    assert browser.execute_script("return window.notReloaded") is True
    assert daemon.task(cascaded["id"])["outcome"] == "cancelled"


def test_a_half_typed_answer_survives_the_task_page_drawn_again(
    stack: tuple[Daemon, WebServer, Any],
) -> None:
    daemon, web, browser = stack
    # (A capability of its own: no task another test left on the board is assigned instead.)
    agent = FakeAgent(daemon, "asker-2", ["renames"])
    asker = daemon.client()
    try:
        asking = daemon.submit("rename the column", capabilities=["renames"])
        assign = agent.next_assign()
        assert assign["task"]["id"] == asking["id"]
        asker.send("ask", task=asking["id"], epoch=assign["epoch"], claim=assign["claim"],
                   question="to what?")  # fmt: skip
        browser.get(f"{web.base}/tasks/{asking['id']}")
        until(browser, lambda: browser.execute_script("return document.body.dataset.live") == "yes")
        # (The question may reach the page after it was drawn: by its stream, then.)
        until(browser, lambda: browser.find_elements("id", "answer-text"))
        box = browser.find_element("id", "answer-text")
        box.send_keys("created_")
        # A child: its family is drawn again on this page.
        child = daemon.submit("rename its index too", parent=asking["id"],
                              capabilities=["nobody-has-it"])  # fmt: skip
        until(browser, lambda: browser.find_elements("id", "task-family"))
        assert browser.find_element("id", "answer-text").get_attribute("value") == "created_"
        assert browser.execute_script("return document.activeElement.id") == "answer-text"
        browser.switch_to.active_element.send_keys("on")  # typing goes on where it was
        browser.find_element("id", "answer").click()
        assert asker.read()["answer"] == "created_on"
        daemon.call("cancel", task=child["id"])
        agent.out(assign, "renamed")
    finally:
        asker.close()
        agent.close()


@pytest.fixture
def own_daemon() -> Iterator[tuple[Daemon, WebServer]]:
    """A daemon and web server of a test's own (one it stops and starts again)."""
    root = Path(tempfile.mkdtemp(prefix="cbr", dir="/tmp"))
    init_root(root)
    write_config(root)
    daemon = Daemon(root)
    web = WebServer(root)
    try:
        daemon.start()
        web.start()
        yield daemon, web
    finally:
        web.stop()
        daemon.stop_with()
        shutil.rmtree(root, ignore_errors=True)


def test_the_page_says_the_daemon_went_away_and_comes_back_live_by_itself(
    stack: tuple[Daemon, WebServer, Any], own_daemon: tuple[Daemon, WebServer]
) -> None:
    """The daemon stopped under an open board: the banner says so and the board stays as it
    was; the daemon started again on the same root: the page loads it afresh by itself and
    follows it live again."""
    browser = stack[2]
    daemon, web = own_daemon
    signed_in(browser, web)
    try:
        _comes_back(browser, daemon, web)
    finally:
        # Cookies go by host, not port: this server's session replaced the module server's,
        # which the module's other tests (run after this one on this worker) need again.
        signed_in(browser, stack[1])


def _comes_back(browser: Any, daemon: Daemon, web: WebServer) -> None:
    before = daemon.submit("submitted before the restart")
    browser.get(web.base + "/")
    until(browser, lambda: browser.execute_script("return document.body.dataset.live") == "yes")
    until(browser, lambda: column_of(browser, before["id"]) == "col-pending")
    browser.execute_script("window.notReloaded = true")
    daemon.stop()
    until(browser, lambda: "The daemon went away" in browser.find_element("id", "banner").text)
    assert column_of(browser, before["id"]) == "col-pending"  # the board as it was
    assert browser.execute_script("return window.notReloaded") is True
    daemon.start()
    # Back: the page is made again from the fresh load (no banner), then follows the events.
    until(browser, lambda: browser.execute_script("return window.notReloaded") is None)
    until(browser, lambda: not browser.find_elements("id", "banner"))
    until(browser, lambda: browser.execute_script("return document.body.dataset.live") == "yes")
    browser.execute_script("window.notReloaded = true")
    after = daemon.submit("submitted after the restart")
    until(browser, lambda: column_of(browser, after["id"]) == "col-pending")
    assert browser.execute_script("return window.notReloaded") is True
    assert column_of(browser, before["id"]) == "col-pending"
