"""/docs, /redoc and the server's other pages in a real browser, offline (issue 11, part 3).

Headless Chromium from the system packages (Debian ``chromium`` and
``chromium-driver``, which .ci/run installs) driven by Selenium. The browser's
only route off the machine is a dead proxy (loopback is not proxied), so a
page that still needed a CDN would stay blank. Each page must also be clean
(`_page_faults`): no request it even attempted off the machine (one its
Content-Security-Policy blocked counts too), no console error (a 404, a
blocked load, an exception), and the icon the browser asks for answers 200.
The server is ``server.py`` serving the tiny BERT fixture on 127.0.0.1.

Set ``ZSNLI_SCREENSHOT_DIR`` to keep the screenshots.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")

pytestmark = pytest.mark.skipif(
    CHROMIUM is None or CHROMEDRIVER is None,
    reason="needs Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver)",
)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server_url(bert_dir, tmp_path_factory):
    """``python server.py`` on the tiny BERT fixture, on a free loopback port; SIGTERM at the end."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("ZSNLI_")}
    env.update(ZSNLI_MODEL_DIR=str(bert_dir), HOST="127.0.0.1", PORT=str(port), ZSNLI_LOG_LEVEL="warning",
               ZSNLI_RUNS_DIR=str(tmp_path_factory.mktemp("runs")),  # the bake-off's store: not in the checkout
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.Popen([sys.executable, str(ROOT / "server.py")], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
        while True:
            assert proc.poll() is None, proc.stdout.read().decode(errors="replace")[-2000:]
            try:
                with urllib.request.urlopen(url + "/health", timeout=2) as resp:
                    if resp.status == 200:
                        break
            except OSError:
                pass
            assert time.monotonic() < deadline, "server not healthy within 120 s"
            time.sleep(0.2)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="module")
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1280,1700", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync",
                # offline: everything but loopback (bypassed implicitly) goes to a port nothing listens on
                "--proxy-server=http://127.0.0.1:9"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"performance": "ALL", "browser": "ALL"})  # network, console
    driver = webdriver.Chrome(service=Service(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


def _icon_status(driver) -> tuple[str, int | str]:
    """The icon the page shows (its ``<link rel=icon>``, else the origin's ``/favicon.ico``) and its HTTP status.

    Fetched by the page itself, so a missing icon is a 404 here and a console error, whether or not the
    browser had asked for it yet (it does so after the load event, and remembers a failure per origin)."""
    return tuple(driver.execute_async_script("""
        const done = arguments[arguments.length - 1];
        const link = document.querySelector("link[rel~='icon']");
        const url = link ? link.href : new URL("/favicon.ico", location.href).href;
        fetch(url).then(r => done([url, r.status]), e => done([url, String(e)]));"""))


def _page_faults(driver, base: str) -> list[str]:
    """What the pages under ``base`` did wrong since the last call: each console error (level SEVERE: a failed
    or CSP-blocked load, an uncaught exception) and each request they attempted off the machine, from the
    DevTools network events, blocked ones included. The browser's own background traffic (no document
    under ``base``) is not a page's."""
    faults = [f"console: {e['message']}" for e in driver.get_log("browser") if e["level"] == "SEVERE"]
    for entry in driver.get_log("performance"):
        message = json.loads(entry["message"])["message"]
        params = message.get("params", {})
        if message.get("method") == "Network.requestWillBeSent":
            url, doc = params["request"]["url"], params.get("documentURL", "")
            if doc.startswith(base + "/") and not url.startswith((base + "/", "data:", "blob:")):
                faults.append(f"off-machine request: {url}")
    return faults


def _assert_clean(driver, base: str) -> None:
    """The page's icon answers 200 from ``base``; then no `_page_faults`."""
    url, status = _icon_status(driver)
    assert url.startswith(base + "/") and status == 200, f"the page's icon {url} answered {status}"
    assert _page_faults(driver, base) == []


def _screenshot(driver, name: str, tmp_path: Path) -> Path:
    path = tmp_path / name
    driver.save_screenshot(str(path))
    keep = os.environ.get("ZSNLI_SCREENSHOT_DIR")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(path, Path(keep) / name)
    return path


def test_swagger_ui_renders_classify_and_try_it_out_returns_200(browser, server_url, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    wait = WebDriverWait(browser, 60)
    browser.get(server_url + "/docs")
    path = wait.until(ec.visibility_of_element_located(
        (By.CSS_SELECTOR, '.opblock-post .opblock-summary-path[data-path="/classify"]')))
    block = path.find_element(By.XPATH, "./ancestor::div[contains(@class, 'opblock-post')][1]")
    block.find_element(By.CSS_SELECTOR, ".opblock-summary").click()
    wait.until(lambda _: block.find_element(By.CSS_SELECTOR, ".try-out__btn")).click()
    body = wait.until(lambda _: block.find_element(By.CSS_SELECTOR, "textarea.body-param__text"))
    request = json.loads(body.get_attribute("value"))  # the documented example, sent as it is
    assert request["text"] and (request.get("candidate_labels") or request.get("labels"))
    block.find_element(By.CSS_SELECTOR, "button.execute").click()
    status = wait.until(ec.visibility_of_element_located(
        (By.CSS_SELECTOR, ".live-responses-table .response .response-col_status")))
    answer = block.find_element(By.CSS_SELECTOR, ".live-responses-table .response-col_description pre")
    browser.execute_script("arguments[0].scrollIntoView({block: 'center'})", status)
    shot = _screenshot(browser, "swagger-try-it-out.png", tmp_path)
    assert status.text.strip() == "200", f"Try it out answered {status.text!r}: {answer.text[:300]} ({shot})"
    probabilities = json.loads(answer.text)["probabilities"]
    labels = request.get("candidate_labels") or request.get("labels")
    assert len(probabilities) == len(labels)
    _assert_clean(browser, server_url)


def test_redoc_renders_classify(browser, server_url, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server_url + "/redoc")
    WebDriverWait(browser, 60).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, ".api-content") and "/classify" in d.page_source)
    heading = browser.find_element(By.CSS_SELECTOR, ".api-content h1")
    _screenshot(browser, "redoc.png", tmp_path)
    assert heading.text.startswith("zsnli")
    _assert_clean(browser, server_url)
    assert browser.find_element(By.CSS_SELECTOR, "a[href='https://redocly.com/redoc/'] img").get_attribute(
        "src").startswith("data:")  # the footer's logo: inline, never cdn.redoc.ly


@pytest.mark.parametrize("page", ["/", "/bakeoff", "/bakeoffs"])
def test_other_pages_are_clean_offline(browser, server_url, page):
    """The index and the bake-off's pages: no console error (GET / had a 404 for /favicon.ico), nothing
    off the machine."""
    browser.get(server_url + page)
    assert browser.execute_script("return document.contentType") == "text/html"
    _assert_clean(browser, server_url)
