"""The /bakeoff page in a real browser: headless Debian Chromium driven by Selenium.

Fills the form with the issue's request, submits, and checks the shown result (the stored result page's
report, rendered on the server by `zsnli.compare.render`) against the JSON API. Skipped (with the reason) only when chromium / chromedriver or selenium are absent; .ci/run
installs them. Set ZSNLI_BAKEOFF_SCREENSHOT=PATH to keep a screenshot of the rendered result.
"""

from __future__ import annotations

import os
import shutil

import httpx
import pytest

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")
pytestmark = pytest.mark.skipif(not (CHROMIUM and DRIVER),
                                reason="needs Debian's chromium and chromium-driver (apt-get install -y chromium "
                                       "chromium-driver; .ci/run does)")

EXAMPLES = "Cannot sign in\taccess\nRefund my invoice\tbilling\nLogin still fails\taccess\n"


@pytest.fixture
def server(bert_dir, bakeoff_server):
    return bakeoff_server(bert_dir, embedding_dir=str(bert_dir))


@pytest.fixture
def browser():
    webdriver = pytest.importorskip("selenium.webdriver")
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
                "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage", "--window-size=1100,1700"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=DRIVER), options=options)
    yield driver
    driver.quit()


def test_form_submit_renders_winner_and_receipt(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import Select, WebDriverWait

    browser.get(server + "/bakeoff")
    browser.find_element(By.ID, "task").send_keys("Classify support requests as access or billing")
    examples = browser.find_element(By.ID, "examples")
    examples.click()
    for line in EXAMPLES.splitlines():  # a Tab key would move the focus: paste-like input of the tab character
        browser.execute_script("arguments[0].setRangeText(arguments[1], arguments[0].value.length, "
                               "arguments[0].value.length, 'end')", examples, line + "\n")
    assert examples.get_attribute("value") == EXAMPLES
    Select(browser.find_element(By.ID, "challenger")).select_by_value("tfidf_logreg")
    browser.find_element(By.ID, "submit").click()
    WebDriverWait(browser, 120).until(ec.presence_of_element_located((By.ID, "winner")))
    progress = browser.execute_script("return document.getElementById('progress-text').textContent")
    from zsnli.compare.service.arms_adapter import INCUMBENTS

    assert progress.startswith(f"running {len(INCUMBENTS)} arms on 3 examples")  # the indicator shown while it ran
    assert not browser.find_element(By.ID, "progress").is_displayed()
    bakeoff_id = browser.find_element(By.ID, "permalink").get_attribute("href").rsplit("/", 1)[1]
    answer = httpx.get(f"{server}/v1/bakeoffs/{bakeoff_id}").json()
    assert answer["task_description"] == "Classify support requests as access or billing"
    assert answer["n"] == 3 and answer["labels"] == {"access": "access", "billing": "billing"}
    winner_text = browser.find_element(By.ID, "winner").text
    assert winner_text.startswith(f"Winner: {answer['winner']} ")
    assert browser.find_element(By.ID, "receipt-sha256").text == answer["receipt"]["sha256"]
    rows = browser.find_elements(By.CSS_SELECTOR, "#scorecard tbody tr")
    assert [r.get_attribute("data-arm") for r in rows] == [e["arm"] for e in answer["scorecard"]]
    diagrams = browser.find_elements(By.CSS_SELECTOR, ".diagram svg")
    assert len(diagrams) == sum(e["status"] == "scored" for e in answer["scorecard"])
    # no ZSNLI_PUBLIC_URL: root-relative links, never the host the request named
    assert browser.find_element(By.ID, "badge-markdown").text == \
        f"[![bake-off](/bakeoffs/{bakeoff_id}/badge.svg)](/bakeoffs/{bakeoff_id})"
    shot = os.environ.get("ZSNLI_BAKEOFF_SCREENSHOT")
    if shot:
        browser.save_screenshot(shot)
    # the stored page renders the same answer
    browser.get(f"{server}/bakeoffs/{bakeoff_id}")
    WebDriverWait(browser, 30).until(ec.presence_of_element_located((By.ID, "winner")))
    assert browser.find_element(By.ID, "winner").text == winner_text
    assert browser.find_element(By.ID, "receipt-sha256").text == answer["receipt"]["sha256"]


def test_422_is_shown_with_its_field(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    browser.get(server + "/bakeoff")
    browser.find_element(By.ID, "task").send_keys("Support")
    browser.execute_script("document.getElementById('examples').value = arguments[0]", "Cannot sign in\taccess\n")
    browser.find_element(By.ID, "submit").click()
    WebDriverWait(browser, 30).until(ec.visibility_of_element_located((By.ID, "error")))
    assert "422" in browser.find_element(By.ID, "error").text and "examples" in browser.find_element(By.ID, "error").text


def test_upload_of_a_jsonl_file_in_the_projects_examples_format(server, browser, tmp_path):
    import json

    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    labels = ["access", "billing"]
    rows = [("Cannot sign in", 0), ("Refund my invoice", 1), ("Login still fails", 0), ("Charged twice", 1)]
    upload = tmp_path / "examples.jsonl"
    upload.write_text("".join(json.dumps({"id": i, "dataset": "support", "text": t, "labels": labels, "label": g}) + "\n"
                              for i, (t, g) in enumerate(rows)))
    browser.get(server + "/bakeoff")
    browser.find_element(By.ID, "task").send_keys("Support requests")
    for box in browser.find_elements(By.CSS_SELECTOR, "input[name=arm]"):
        if box.get_attribute("value") not in ("majority", "tfidf_logreg"):
            box.click()  # only the two cheap arms
    browser.find_element(By.ID, "upload").send_keys(str(upload))
    browser.find_element(By.ID, "submit").click()
    WebDriverWait(browser, 60).until(ec.presence_of_element_located((By.ID, "winner")))
    bakeoff_id = browser.find_element(By.ID, "permalink").get_attribute("href").rsplit("/", 1)[1]
    answer = httpx.get(f"{server}/v1/bakeoffs/{bakeoff_id}").json()
    assert answer["n"] == 4 and list(answer["labels"]) == labels
    assert sorted(e["arm"] for e in answer["scorecard"]) == ["majority", "tfidf_logreg"]


# Fragments that break a page which embeds user text carelessly: a comment opener before a script tag
# (the HTML parser's script-data-double-escaped state), a closing script tag, an event handler, entities,
# and the two JavaScript line terminators.
HOSTILE = ("<!--<script>", "</script><script>window.__pwned = 1</script>", "<img src=x onerror='window.__pwned=1'>",
           "&amp; &lt;b&gt;", "\u2028\u2029", "]]> --> `${1}`")


def hostile_request() -> dict:
    task = "Route tickets " + " ".join(HOSTILE)
    labels = {f"access {HOSTILE[0]}": f"sign in {HOSTILE[1]}", f"billing {HOSTILE[2]}": f"money {HOSTILE[3]}"}
    names = list(labels)
    texts = [f"Cannot sign in {HOSTILE[0]}", f"Refund my invoice {HOSTILE[1]}", f"Login fails {HOSTILE[4]}",
             f"Charged twice {HOSTILE[5]}"]
    return {"task_description": task, "labels": labels, "retain": True,
            "candidates": ["majority", "tfidf_logreg", "served"],
            "examples": [{"input": t, "expected": names[i % 2]} for i, t in enumerate(texts)]}


def _check_rendered(browser, answer: dict) -> None:
    from selenium.webdriver.common.by import By

    assert browser.execute_script("return window.__pwned") is None  # no injected script or handler ran
    winner = browser.find_element(By.ID, "winner").text  # "(by a tie-break)" when the winner tied on macro-F1
    assert winner.startswith((f"Winner: {answer['winner']} ", f"Winner (by a tie-break): {answer['winner']} "))
    rows = browser.find_elements(By.CSS_SELECTOR, "#scorecard tbody tr")
    assert [r.get_attribute("data-arm") for r in rows] == [e["arm"] for e in answer["scorecard"]]
    assert browser.find_element(By.ID, "receipt-sha256").text == answer["receipt"]["sha256"]
    text = browser.execute_script("return document.getElementById('result').textContent")
    for name, description in answer["labels"].items():  # label names and descriptions shown as text
        assert name in text and description in text


def test_stored_page_shows_hostile_text_as_text(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    request = hostile_request()
    r = httpx.post(server + "/v1/bakeoff", json=request, timeout=120)
    assert r.status_code == 200, r.text
    answer = r.json()
    assert answer["task_description"] == request["task_description"]
    assert [p["expected"] for p in answer["scorecard"][0]["predictions"]] == [e["expected"] for e in request["examples"]]
    browser.get(f"{server}/bakeoffs/{answer['id']}")
    WebDriverWait(browser, 30).until(ec.presence_of_element_located((By.ID, "winner")))
    _check_rendered(browser, answer)
    task = browser.execute_script("return document.querySelector('p.task').textContent")
    assert task == request["task_description"]
    # the latest list shows the task as text too
    browser.get(f"{server}/bakeoffs")
    assert request["task_description"] in browser.execute_script("return document.querySelector('tbody').textContent")
    assert browser.execute_script("return window.__pwned") is None


def test_form_renders_hostile_text_as_text(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    request = hostile_request()
    browser.get(server + "/bakeoff")
    browser.execute_script("document.getElementById('task').value = arguments[0]", request["task_description"])
    lines = "".join(f"{e['input']}\t{e['expected']}\n" for e in request["examples"])
    browser.execute_script("document.getElementById('examples').value = arguments[0]", lines)
    for box in browser.find_elements(By.CSS_SELECTOR, "input[name=arm]"):
        if box.get_attribute("value") not in ("majority", "tfidf_logreg"):
            box.click()
    browser.find_element(By.ID, "submit").click()
    WebDriverWait(browser, 60).until(ec.presence_of_element_located((By.ID, "winner")))
    bakeoff_id = browser.find_element(By.ID, "permalink").get_attribute("href").rsplit("/", 1)[1]
    answer = httpx.get(f"{server}/v1/bakeoffs/{bakeoff_id}").json()
    assert answer["task_description"] == request["task_description"]
    _check_rendered(browser, answer)
    browser.get(f"{server}/bakeoffs/{bakeoff_id}")
    WebDriverWait(browser, 30).until(ec.presence_of_element_located((By.ID, "winner")))
    _check_rendered(browser, answer)


def test_tab_types_a_tab_in_the_examples_box_and_esc_tab_leaves(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    browser.get(server + "/bakeoff")
    box = browser.find_element(By.ID, "examples")
    box.click()
    box.send_keys("Cannot sign in", Keys.TAB, "access", Keys.ENTER, "Refund my invoice", Keys.TAB, "billing")
    assert box.get_attribute("value") == "Cannot sign in\taccess\nRefund my invoice\tbilling"
    assert browser.switch_to.active_element == box  # Tab typed, the focus stayed
    box.send_keys(Keys.ESCAPE, Keys.TAB)
    assert browser.switch_to.active_element != box  # Esc, Tab: the focus moved on, nothing typed
    assert box.get_attribute("value") == "Cannot sign in\taccess\nRefund my invoice\tbilling"
    assert "Esc, then Tab" in browser.find_element(By.ID, "examples-hint").text


def test_the_results_are_explained(server, browser):
    from selenium.webdriver.common.by import By

    from zsnli.compare.service.arms_adapter import INCUMBENTS
    from zsnli.compare.service.page import ARM_NOTES

    assert set(INCUMBENTS) <= set(ARM_NOTES)  # every arm a bake-off runs is explained
    browser.get(server + "/bakeoff")
    box = browser.find_element(By.ID, "glossary")
    browser.execute_script("arguments[0].scrollIntoView()", box)
    shot = os.environ.get("ZSNLI_BAKEOFF_SCREENSHOT")
    if shot:
        browser.save_screenshot(shot.replace(".png", "-glossary.png"))
    glossary = box.text
    for term in ("ECE", "macro-F1", "p50 ms", "majority", "embedding_knn", "Reliability diagrams"):
        assert term in glossary


VIEW_ARMS = ("served", "majority", "keyword_rules", "tfidf_linearsvc", "tfidf_linearsvc_raw", "char_nb")
SUPPORT = [("Cannot sign in", "access"), ("Refund my invoice", "billing"), ("Login still fails", "access"),
           ("Charged twice this month", "billing"), ("Password reset link broken", "access"),
           ("Invoice shows the wrong amount", "billing"), ("Locked out of my account", "access"),
           ("Cancel my subscription refund", "billing")]


def _permalink_id(browser) -> str:
    from selenium.webdriver.common.by import By

    return browser.find_element(By.ID, "permalink").get_attribute("href").rsplit("/", 1)[1]


def test_an_arm_opens_its_view_ceilings_pick_an_arm_and_a_rerun_takes_the_ticked_arms(server, browser):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    from zsnli.compare.engine import best_within
    from zsnli.compare.render import board

    browser.get(server + "/bakeoff")
    browser.find_element(By.ID, "task").send_keys("Support requests: access or billing")
    browser.execute_script("document.getElementById('examples').value = arguments[0]",
                           "".join(f"{t}\t{y}\n" for t, y in SUPPORT))
    for box in browser.find_elements(By.CSS_SELECTOR, "input[name=arm]"):
        if (box.get_attribute("value") in VIEW_ARMS) != box.is_selected():
            box.click()
    browser.find_element(By.ID, "submit").click()
    WebDriverWait(browser, 120).until(ec.presence_of_element_located((By.ID, "winner")))
    first = _permalink_id(browser)
    answer = httpx.get(f"{server}/v1/bakeoffs/{first}").json()
    assert sorted(e["arm"] for e in answer["scorecard"]) == sorted(VIEW_ARMS)

    # clicking an arm in the ranking opens its view: reliability, coverage, per-class F1, confusions, slices
    second = answer["scorecard"][1]
    view = browser.find_element(By.ID, "arm-view-2")
    assert view.get_attribute("open") is None
    browser.find_element(By.CSS_SELECTOR, "#scorecard a[href='#arm-view-2']").click()
    assert view.get_attribute("open") == "true"
    assert view.find_element(By.CSS_SELECTOR, "svg[aria-label^='reliability diagram of']").is_displayed()
    assert view.find_element(By.CSS_SELECTOR, "svg.coverage").is_displayed()
    matrix = view.find_elements(By.CSS_SELECTOR, "table.confusion tr")
    cells = [[int(td.text) for td in tr.find_elements(By.TAG_NAME, "td")[1:]] for tr in matrix[1:]]
    assert cells == second["confusion"]["counts"]
    assert "Per-class F1" in view.text and "Worst slices" in view.text
    shot = os.environ.get("ZSNLI_BAKEOFF_SCREENSHOT")
    if shot:
        browser.save_screenshot(shot.replace(".png", "-arm-view.png"))

    # the ceilings name the best-ranked arm inside them, by the one rule (zsnli.compare.engine.best_within)
    rows = board(answer)
    assert browser.find_element(By.ID, "ceiling-best").text == best_within(rows) == answer["winner"]
    assert not browser.find_element(By.ID, "max-rss").is_enabled()  # the service measures no arm's memory
    p95s = sorted(r["p95_ms"] for r in rows)
    for max_p95, max_fit in ((p95s[2], None), (None, 0.0), (p95s[0] / 2, None), (p95s[-1], 1e-9)):
        for box_id, value in (("max-p95", max_p95), ("max-fit", max_fit)):
            box = browser.find_element(By.ID, box_id)
            box.clear()
            if value is not None:
                box.send_keys(repr(value))
        expected = best_within(rows, max_p95_ms=max_p95, max_fit_s=max_fit)
        assert browser.find_element(By.ID, "ceiling-best").text == (expected or "no arm fits"), (max_p95, max_fit)
    browser.find_element(By.ID, "max-p95").clear()
    browser.find_element(By.ID, "max-fit").clear()
    browser.find_element(By.ID, "max-fit").send_keys("0")
    assert browser.find_element(By.ID, "ceiling-best").text == "served"  # nothing fitted: only the zero-shot arm
    # an arm ticked off leaves the ranking and the ceilings' pick
    browser.find_element(By.CSS_SELECTOR, "#arm-toggles input[value='served']").click()
    assert not browser.find_element(By.CSS_SELECTOR, "#scorecard tr[data-arm='served']").is_displayed()
    assert browser.find_element(By.ID, "ceiling-best").text == "no arm fits"
    browser.find_element(By.CSS_SELECTOR, "#arm-toggles input[value='served']").click()
    assert browser.find_element(By.ID, "ceiling-best").text == "served"
    if shot:
        browser.execute_script("document.getElementById('ceilings').scrollIntoView()")
        browser.save_screenshot(shot.replace(".png", "-ceilings.png"))

    # untick two arms in the result's arm toggles and run again on the same examples
    for name in ("served", "char_nb"):
        browser.find_element(By.CSS_SELECTOR, f"#arm-toggles input[value='{name}']").click()
    browser.find_element(By.ID, "rerun-button").click()
    WebDriverWait(browser, 120).until(lambda b: b.find_elements(By.ID, "permalink") and _permalink_id(b) != first)
    again = httpx.get(f"{server}/v1/bakeoffs/{_permalink_id(browser)}").json()
    assert sorted(e["arm"] for e in again["scorecard"]) == sorted(set(VIEW_ARMS) - {"served", "char_nb"})
    assert again["n"] == len(SUPPORT)


def test_the_command_lines_html_file_has_the_pages_toggles_and_ceilings(browser, tmp_path):
    """Issue 57 (9): ``validate.py bakeoff --html`` had neither the arm toggles nor the page's ceilings. The file
    is the one renderer's (render_html, report.js inlined): open it from disk, tick an arm off, type ceilings."""
    from selenium.webdriver.common.by import By

    from zsnli.compare.engine import best_within
    from zsnli.compare.render import board, render_html

    def row(arm, kind, f1, p95, fit, rss, note=""):
        return {"arm": arm, "kind": kind, "type": arm, "macro_f1": f1, "accuracy": f1, "ece": 0.1, "p50_ms": p95 / 2,
                "p95_ms": p95, "fit_s": fit, "fit_note": note, "peak_rss_mb": rss, "cost": "free (local)",
                "error": None, "failed": 0}

    report = {"examples": {"source": "x.jsonl", "sha256": "e" * 64, "n": 40, "datasets": ["a", "b"]},
              "suite": {"name": "ci", "description": "d"}, "options": {"timing": "one per call"}, "arms": [],
              "leaderboard": [row("zsnli", "zero-shot", 0.9, 120.0, 3600.0, 900.0, "trained offline (manifest)"),
                              row("embedding+logreg", "few-shot", 0.8, 30.0, 2.5, 700.0),
                              row("tfidf", "few-shot", 0.6, 2.0, 0.3, 150.0)],
              "constraints": {"max_p95_ms": 50.0, "max_fit_s": None, "max_rss_mb": None, "best": "embedding+logreg"},
              "receipt": {"sha256": "s" * 64, "signature": None, "key_id": None, "examples_sha256": "e" * 64}}
    path = tmp_path / "report.html"
    path.write_text(render_html(report), encoding="utf-8")
    browser.get(path.as_uri())
    rows = board(report)
    assert browser.find_element(By.ID, "max-p95").get_attribute("value") == "50.0"  # --max-p95-ms fills the box
    assert browser.find_element(By.ID, "ceiling-best").text == "embedding+logreg"
    for p95, fit, rss in ((None, 0.0, None), (None, 1.0, 800.0), (None, None, 100.0), (200.0, 1.0, None)):
        for box_id, value in (("max-p95", p95), ("max-fit", fit), ("max-rss", rss)):
            box = browser.find_element(By.ID, box_id)
            box.clear()
            if value is not None:
                box.send_keys(repr(value))
        expected = best_within(rows, max_p95_ms=p95, max_fit_s=fit, max_rss_mb=rss)
        assert browser.find_element(By.ID, "ceiling-best").text == (expected or "no arm fits"), (p95, fit, rss)
    assert browser.find_element(By.ID, "ceiling-best").text == "zsnli"  # trained offline: no fit cost here
    browser.find_element(By.CSS_SELECTOR, "#arm-toggles input[value='zsnli']").click()
    assert not browser.find_element(By.CSS_SELECTOR, "#scorecard tr[data-arm='zsnli']").is_displayed()
    assert browser.find_element(By.ID, "ceiling-best").text == "tfidf"  # embedding+logreg fitted 2.5 s > 1
