"""Bidirectional controls in stored text are shown, and user text is isolated (issue 31 item 7): a label whose bytes
are ``acc`` U+202E ``sse`` displays as ``acc<U+202E>sse``, never as "access", on every page that shows it (the report
renderer, the service's result and list pages, the form, the badge, ``GET /``), and in real Chromium. The JSON
answer keeps the text as sent."""

from __future__ import annotations

import os

import httpx
import pytest

from zsnli.serving.text import BIDI_CONTROLS, html_text, show_bidi

RLO = "\u202e"
TRICK = f"acc{RLO}sse"  # displays as "access" when the override acts
ALL_CONTROLS = "".join(sorted(BIDI_CONTROLS))


def test_show_bidi_names_every_control_and_keeps_other_text():
    assert show_bidi(TRICK) == "acc<U+202E>sse"
    shown = show_bidi(f"a{ALL_CONTROLS}b")
    assert not set(shown) & BIDI_CONTROLS and shown.count("<U+") == len(BIDI_CONTROLS)
    assert "<U+061C>" in shown and "<U+2066>" in shown and "<U+200F>" in shown
    assert show_bidi("שלום, world \u00e9") == "שלום, world \u00e9"  # right-to-left letters are text, not controls
    assert html_text(f"<b>{RLO}") == "<bdi>&lt;b&gt;&lt;U+202E&gt;</bdi>"


def _answer(label: str, arm: str = "majority") -> dict:
    from test_render import service_answer

    answer = service_answer({arm: (0.5, 0.1, 1.0), "served": (0.4, 0.2, 2.0)}, 4, task=f"route {RLO}tickets")
    answer["labels"] = {label: f"the {label} class", "billing": "billing"}
    return answer


def test_the_report_renderer_shows_and_isolates_user_text():
    from zsnli.compare.render import render_html, report_html

    arm = f"served{RLO}x"
    for page in (report_html(_answer(TRICK, arm)), render_html(_answer(TRICK, arm))):
        assert not set(page) & BIDI_CONTROLS, "a raw bidi control reached the page"
        assert "<bdi>acc&lt;U+202E&gt;sse</bdi>" in page  # the label, shown and isolated
        assert "<bdi>route &lt;U+202E&gt;tickets</bdi>" in page  # the task
        assert "<bdi>served&lt;U+202E&gt;x</bdi>" in page  # the arm in the ranking and its diagram


def test_the_cli_reports_dataset_and_class_names_are_shown():
    from zsnli.compare.render_arms import confusions_html as _confusions, per_class_html as _per_class

    arm = {"per_class": {f"news{RLO}": [{"label": TRICK, "support": 3, "precision": 0.5, "recall": 0.5, "f1": 0.5}]},
           "confusions": [{"dataset": f"news{RLO}", "gold": TRICK, "predicted": "billing", "count": 1,
                           "share_of_gold": 0.3}]}
    for html in (_per_class(arm), _confusions(arm)):
        assert not set(html) & BIDI_CONTROLS and "<bdi>acc&lt;U+202E&gt;sse</bdi>" in html
        assert "<bdi>news&lt;U+202E&gt;</bdi>" in html


def test_service_pages_badge_and_index_show_the_controls():
    from zsnli.compare.service.badge import badge_svg
    from zsnli.compare.service.page import list_page, result_page
    from zsnli.serving.app import index_page

    answer = _answer(TRICK)
    pages = [result_page(answer, None),
             list_page([{"id": answer["id"], "created_at": "t", "task_description": f"x{RLO}y", "n": 4,
                         "winner": f"w{RLO}"}]),
             badge_svg("bake-off", f"{TRICK} F1 0.50"),
             index_page({"version": "1", "status": "ok", "model": f"model{RLO}", "routes": []})]
    for page in pages:
        assert not set(page) & BIDI_CONTROLS, page[:200]
        assert "&lt;U+202E&gt;" in page
    assert "<bdi>x&lt;U+202E&gt;y</bdi>" in pages[1] and "<bdi>model&lt;U+202E&gt;</bdi>" in pages[3]


def test_the_stored_answer_keeps_the_text_as_sent(bert_dir, tmp_path, monkeypatch):
    import asyncio

    from bakeoff_support import make_bakeoff_app
    from conftest import running_app

    monkeypatch.setenv("ZSNLI_BAKEOFF_DB", str(tmp_path / "b.sqlite3"))
    monkeypatch.setenv("ZSNLI_RECEIPT_KEY", str(tmp_path / "key.pem"))

    async def run():
        async with running_app(make_bakeoff_app(bert_dir)) as client:
            r = await client.post("/v1/bakeoff", json=_request())
            assert r.status_code == 200, r.text
            page = await client.get(f"/bakeoffs/{r.json()['id']}")
            return r.json(), page.text

    answer, page = asyncio.run(run())
    assert TRICK in answer["labels"]  # the JSON as sent
    assert not set(page) & BIDI_CONTROLS and "acc&lt;U+202E&gt;sse" in page


def _request() -> dict:
    return {"task_description": f"support {RLO}requests", "candidates": ["majority", "tfidf_logreg"],
            "examples": [{"input": "Cannot sign in", "expected": TRICK}, {"input": "Refund my invoice", "expected": "billing"},
                         {"input": "Login fails", "expected": TRICK}, {"input": "Charge twice", "expected": "billing"}]}


# --------------------------------------------------------------------------- in Chromium

def test_chromium_shows_the_control_not_access(bert_dir, bakeoff_server):
    """The stored result page in headless Chromium: the label reads ``acc<U+202E>sse`` and nothing on the page
    reads "access" reversed into place. ZSNLI_BIDI_SCREENSHOT=PATH keeps a screenshot."""
    from test_bakeoff_browser import CHROMIUM, DRIVER

    if not (CHROMIUM and DRIVER):
        pytest.skip("needs Debian's chromium and chromium-driver (apt-get install -y chromium chromium-driver)")
    webdriver = pytest.importorskip("selenium.webdriver")

    base = bakeoff_server(bert_dir)
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1000,900"):
        options.add_argument(arg)
    driver = None
    try:
        answer = httpx.post(base + "/v1/bakeoff", json=_request(), timeout=120).json()
        driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=DRIVER), options=options)
        driver.get(f"{base}/bakeoffs/{answer['id']}")
        text = driver.execute_script("return document.body.innerText")
        assert "acc<U+202E>sse" in text and "support <U+202E>requests" in text
        assert not set(text) & BIDI_CONTROLS and "access" not in text
        isolated = driver.execute_script(
            "return [...document.querySelectorAll('bdi')].map(b => b.textContent).filter(t => t.includes('U+202E'))")
        assert "acc<U+202E>sse" in isolated
        shot = os.environ.get("ZSNLI_BIDI_SCREENSHOT")
        if shot:
            driver.execute_script("document.querySelector('p.task').scrollIntoView()")
            driver.save_screenshot(shot)
    finally:
        if driver is not None:
            driver.quit()
