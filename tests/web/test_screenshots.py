"""The main pages (board, list, a task, agents) in headless Chromium at a fixed size, compared
with the images kept in docs/ (the README shows docs/web.png, the board). The board is the same
each run: fixed texts, agents and costs; what differs from run to run — the ids, the instants,
the ages — is written over in the page by this test before the picture is taken (the server
draws them as it always does).

``COLIBRI_UPDATE_SCREENSHOTS=1`` writes the images again instead of comparing.
"""

from __future__ import annotations

import io
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from colibri.config import init_root
from tests.helpers import Daemon, FakeAgent, write_config
from tests.web.conftest import WebServer
from tests.web.test_browser import CHROMIUM, DRIVER, until

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or DRIVER is None,
    reason="chromium and chromedriver are not installed (apt-get install chromium chromium-driver)",
)

DOCS = Path(__file__).resolve().parents[2] / "docs"
UPDATE = os.environ.get("COLIBRI_UPDATE_SCREENSHOTS") == "1"
WIDTH, HEIGHT = 1400, 900
#: A pixel differs when a channel differs by more than this (antialiasing stays under it) ...
PIXEL = 48
#: ... and a page differs when more than this fraction of its pixels do.
TOLERANCE = 0.005
INSTANT = "2025-06-02T09:41:07.120Z"

#: The tasks, in the order they are submitted (ids sort as they were made: newest first).
SCENE = [
    ("upgrade", "upgrade the kernel on build hosts", ["linux"]),
    ("scrub", "scrub pool tank", ["zfs"]),
    ("bench", "benchmark the old parser", ["linux"]),
    ("refactor", "refactor the login form", ["linux"]),
    ("snapshot", "snapshot and send tank/home", ["zfs"]),
    ("release", "choose the name of release 2.4", ["interactive"]),
    ("notes", "write release notes for 2.4", ["docs"]),
    ("certs", "rotate TLS certificates", ["ops"]),
]


class Scene:
    def __init__(self, daemon: Daemon) -> None:
        self.daemon = daemon
        self.ids: dict[str, str] = {}
        self.agents: list[FakeAgent] = []
        self.asker = daemon.client()

    def build(self) -> None:
        daemon = self.daemon
        for name, text, caps in SCENE:
            self.ids[name] = daemon.submit(text, capabilities=caps)["id"]
        self.ids["deploy"] = daemon.submit(
            "deploy 2.4 to staging", capabilities=["docs"], after=[self.ids["release"]]
        )["id"]
        build = self.agent("build-1", ["linux"], 3)
        zfs = self.agent("zfs-1", ["zfs"], 2)
        desk = self.agent("desk-1", ["interactive"], 1)
        held = {a["task"]["id"]: a for a in (build.next_assign() for _ in range(3))}
        held |= {a["task"]["id"]: a for a in (zfs.next_assign() for _ in range(2))}
        cost = {"usd": 0.42, "tokens_in": 18_000, "tokens_out": 2_400}
        build.out(held[self.ids["upgrade"]], "6 hosts on 6.8.12", cost=cost)
        zfs.fail(held[self.ids["scrub"]], "pool tank: 2 checksum errors")
        daemon.call("cancel", task=self.ids["bench"])  # its session never says it is gone
        asking = desk.next_assign()
        self.asker.send("ask", task=asking["task"]["id"], epoch=asking["epoch"],
                        claim=asking["claim"], question="'Kestrel' or 'Merlin'?")  # fmt: skip
        daemon.wait_closed(self.ids["upgrade"])
        daemon.wait_closed(self.ids["scrub"])

    def agent(self, name: str, caps: list[str], slots: int) -> FakeAgent:
        agent = FakeAgent(self.daemon, name, caps, slots=slots)
        self.agents.append(agent)
        return agent

    def close(self) -> None:
        self.asker.close()
        for agent in self.agents:
            agent.close()

    def fakes(self) -> dict[str, str]:
        """Each id as the pictures show it: the same every run."""
        return {real: f"0197a3c4-5d6e-7f80-9{i:03d}-4b2e{i:02d}9c{i:02d}f0"
                for i, real in enumerate(self.ids.values())}  # fmt: skip


@pytest.fixture(scope="module")
def shot() -> Iterator[tuple[Any, WebServer, Scene]]:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    root = Path(tempfile.mkdtemp(prefix="cbs", dir="/tmp"))
    init_root(root)
    write_config(root)
    daemon = Daemon(root)
    daemon.start()
    web = WebServer(root)
    scene = Scene(daemon)
    browser = None
    try:
        scene.build()
        web.start()
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for flag in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     f"--window-size={WIDTH},{HEIGHT}", "--disable-extensions",
                     "--force-device-scale-factor=1", "--hide-scrollbars",
                     "--font-render-hinting=none"):  # fmt: skip
            options.add_argument(flag)
        browser = webdriver.Chrome(options=options, service=Service(str(DRIVER)))
        browser.get(web.sign_in_url())
        yield browser, web, scene
    finally:
        if browser is not None:
            browser.quit()
        scene.close()
        web.stop()
        daemon.stop()
        shutil.rmtree(root, ignore_errors=True)


#: Writes the ids, instants and ages over with the scene's fixed ones (text nodes only).
MASK = """
const [fakes, instant] = arguments;
const pairs = [];
for (const [real, fake] of Object.entries(fakes)) {
  pairs.push([real, fake], [real.slice(-8), fake.slice(-8)]);
}
const when = /\\d{4}-\\d\\d-\\d\\dT\\d\\d:\\d\\d:\\d\\d(\\.\\d+)?Z/g;
const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
for (let node = walker.nextNode(); node; node = walker.nextNode()) {
  let text = node.nodeValue;
  for (const [real, fake] of pairs) text = text.split(real).join(fake);
  node.nodeValue = text.replace(when, instant);
}
for (const age of document.querySelectorAll(".age")) age.textContent = "4m";
for (const row of document.querySelectorAll("table.tasks tbody tr")) {
  row.cells[2].textContent = "4m";
}
"""


def picture(browser: Any, scene: Scene, name: str) -> str | None:
    """The page pictured, and how it differs from the kept image (None: it does not)."""
    from PIL import Image, ImageChops

    browser.execute_script(MASK, scene.fakes(), INSTANT)
    height = min(HEIGHT, int(browser.execute_script(
        "return document.documentElement.scrollHeight")))  # fmt: skip
    taken = Image.open(io.BytesIO(browser.get_screenshot_as_png())).convert("RGB")
    taken = taken.crop((0, 0, taken.width, height))
    kept_at = DOCS / name
    if UPDATE:
        taken.save(kept_at, optimize=True)
        return None
    if not kept_at.exists():
        return f"{name} is missing"
    kept = Image.open(kept_at).convert("RGB")
    if kept.size != taken.size:
        taken.save(kept_at.with_suffix(".new.png"))
        return f"{name}: {taken.size} now, {kept.size} kept"
    differing = ImageChops.difference(kept, taken).convert("L").point(lambda v: v > PIXEL and 255)
    share = differing.histogram()[255] / (kept.width * kept.height)
    if share <= TOLERANCE:
        return None
    taken.save(kept_at.with_suffix(".new.png"))
    return f"{name}: {share:.2%} of its pixels differ (at most {TOLERANCE:.2%})"


def live(browser: Any) -> None:
    until(browser, lambda: browser.execute_script("return document.body.dataset.live") == "yes")


def test_the_main_pages_look_as_the_images_kept_in_docs(
    shot: tuple[Any, WebServer, Scene],
) -> None:
    """One test for the four pages (one daemon, web server and browser): every page that
    differs is named, with its new picture left beside the kept one."""
    browser, web, scene = shot
    differ: list[str | None] = []

    browser.get(web.base + "/")
    live(browser)
    counts = {"pending": "2", "blocked": "1", "running": "2", "asking": "1", "done": "1",
              "failed": "1", "cancelled": "1"}  # fmt: skip
    for column, count in counts.items():
        until(browser, lambda c=column, n=count: browser.find_element("id", f"count-{c}").text == n)
    differ.append(picture(browser, scene, "web.png"))

    browser.get(web.base + "/tasks")
    live(browser)
    until(browser, lambda: browser.find_element("id", "listed").text == "9 tasks")
    differ.append(picture(browser, scene, "web-list.png"))

    browser.get(f"{web.base}/tasks/{scene.ids['release']}")
    live(browser)
    until(browser, lambda: browser.find_elements("id", "answer-text"))
    differ.append(picture(browser, scene, "web-task.png"))

    browser.get(web.base + "/agents")
    live(browser)
    until(browser, lambda: len(browser.find_elements("css selector", "tr.a-online")) == 3)
    differ.append(picture(browser, scene, "web-agents.png"))

    found = [d for d in differ if d is not None]
    assert not found, (
        "; ".join(found) + ". What each looks like now is beside it in docs/ (*.new.png); if "
        "the pages changed on purpose, run again with COLIBRI_UPDATE_SCREENSHOTS=1"
    )
