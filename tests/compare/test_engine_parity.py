"""One comparison engine: the CLI and the service agree (winner, figures, one receipt format, one HTML renderer),
and the service's served arm answers what /classify answers.

Both run on one real server (tiny BERT, `ThreadServer`): ``validate.py bakeoff`` reaches its served arm over
HTTP (``/classify``), ``POST /v1/bakeoff`` runs the same arms in-process.
"""

from __future__ import annotations

import json

import httpx
import pytest
from bakeoff_support import make_bakeoff_app
from conftest import make_settings
from http_support import ThreadServer

ARMS = ["served", "tfidf_logreg", "majority", "embedding_similarity"]


def _examples(n: int) -> list[dict]:
    texts = {"access": ["Cannot sign in", "The login page rejects my password", "Locked out of my account"],
             "billing": ["Refund my invoice", "I was charged twice", "The card payment failed"]}
    labels = ["access" if i % 2 else "billing" for i in range(n)]
    return [{"input": f"{texts[label][i % 3]} (case {i})", "expected": label} for i, label in enumerate(labels)]


@pytest.fixture
def server(bert_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("ZSNLI_BAKEOFF_DB", str(tmp_path / "bakeoffs.sqlite3"))
    monkeypatch.setenv("ZSNLI_RECEIPT_KEY", str(tmp_path / "receipt.pem"))
    overrides = {"embedding_dir": str(bert_dir), "max_text_chars": 24}  # /classify cuts texts to 24 characters
    with ThreadServer(make_bakeoff_app(bert_dir, **overrides), make_settings(bert_dir, **overrides)) as srv:
        yield f"http://127.0.0.1:{srv.port}"


@pytest.mark.timeout(300)
def test_cli_and_service_name_the_same_winner_with_the_same_figures(server, bert_dir, tmp_path):
    from rich.console import Console

    from zsnli.compare.bakeoff_cli import bakeoff_main

    examples = _examples(40)  # 20 per label: stratified 5-fold for the few-shot arms on both sides
    answer = httpx.post(server + "/v1/bakeoff", json={"task_description": "support", "examples": examples,
                                                        "candidates": ARMS}, timeout=240).json()
    rows = [{"id": i, "dataset": "support", "text": e["input"], "labels": ["billing", "access"],
             "label": ["billing", "access"].index(e["expected"])} for i, e in enumerate(examples)]
    assert answer["labels"] == {"billing": "billing", "access": "access"}  # first-appearance order, as the file
    (tmp_path / "examples.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "suite.toml").write_text(
        '[protocol]\nmin_class_for_split = 1000\nloo_max_n = 30\n\n'  # the service's rule: no split, LOO up to 30
        f'[[arms]]\nname = "served"\ntype = "served"\nurl = "{server}"\n\n'
        '[[arms]]\nname = "tfidf_logreg"\ntype = "tfidf_logreg"\n\n[[arms]]\nname = "majority"\ntype = "majority"\n\n'
        f'[[arms]]\nname = "embedding_similarity"\ntype = "embedding_similarity"\nmodel_dir = "{bert_dir}"\n')
    code = bakeoff_main(["--suite", str(tmp_path / "suite.toml"), "--examples", str(tmp_path / "examples.jsonl"),
                         "--in-process", "--report", str(tmp_path / "r.json")], Console(file=open("/dev/null", "w")))
    # the CLI signs with ZSNLI_RECEIPT_KEY (set by the fixture for the server): the service's key
    assert code == 0
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["protocol"]["per_dataset"]["support"]["method"] == "kfold"
    cli = {r["arm"]: r for r in report["leaderboard"]}
    service = {e["arm"]: e for e in answer["scorecard"]}
    assert all(e["status"] == "scored" for e in service.values()), answer["scorecard"]
    for arm in ARMS:
        for key in ("macro_f1", "accuracy", "ece"):
            assert round(cli[arm][key], 4) == service[arm][key], (arm, key, cli[arm][key], service[arm][key])
    # the rankings agree up to the latency tie-break (timed over HTTP on one side, in-process on the other)
    ranked = sorted(ARMS, key=lambda a: (-service[a]["macro_f1"], service[a]["ece"]))
    assert answer["winner"] == report["leaderboard"][0]["arm"] == ranked[0]
    assert [r["arm"] for r in report["leaderboard"]][:2] == [e["arm"] for e in answer["scorecard"]][:2]
    _one_receipt_format(server, answer, report)
    _one_renderer(server, answer, report, (tmp_path / "r.html").read_text())


def _one_receipt_format(server: str, answer: dict, report: dict) -> None:
    """Both receipts: same keys and version, signed by ZSNLI_RECEIPT_KEY (the CLI reads it too), accepted by the
    one `verify`, refused once a figure is changed."""
    import copy

    from zsnli.compare.receipts import verify

    pem = httpx.get(server + "/v1/receipts/public-key").text.encode()
    assert set(answer["receipt"]) == set(report["receipt"]) and answer["receipt"]["version"] == report["receipt"]["version"]
    assert answer["receipt"]["key_id"] == report["receipt"]["key_id"] is not None
    assert verify(answer, pem) == [] and verify(report, pem) == []
    assert answer["receipt"]["arms"]["served"]["model_sha256"] == report["receipt"]["arms"]["served"]["model_sha256"]
    for sealed, entry in ((answer, ("scorecard", 0)), (report, ("leaderboard", 0))):
        forged = copy.deepcopy(sealed)
        forged[entry[0]][entry[1]]["macro_f1"] = -1.0  # no real figure: a change whatever the arm scored
        assert any("signature does not match" in p for p in verify(forged, pem))


def _one_renderer(server: str, answer: dict, report: dict, cli_html: str) -> None:
    """The CLI's HTML file and the service's report route are `render_html` of their reports; the ranking tables
    hold the same arms, in the same order, with the same accuracy cells."""
    from test_render import ranking

    from zsnli.compare.render import render_html

    service_html = httpx.get(f"{server}/bakeoffs/{answer['id']}/report.html").text
    assert cli_html == render_html(report) and service_html == render_html(answer)
    cli_rows, service_rows = ranking(cli_html), ranking(service_html)
    assert list(cli_rows)[:2] == list(service_rows)[:2] and set(cli_rows) == set(service_rows) == set(ARMS)
    for arm in ARMS:
        assert cli_rows[arm]["accuracy"] == service_rows[arm]["accuracy"], arm


@pytest.mark.timeout(300)
def test_the_served_arm_answers_what_classify_answers(server):
    examples = _examples(8)
    examples[0]["input"] = "Refund my invoice " + "and tell me why " * 20  # past max_text_chars: /classify cuts it
    labels = {"billing": "a question about money", "access": "signing in"}
    body = {"task_description": "support", "examples": examples, "labels": labels,
            "candidates": ["served", "served_about"], "retain": True}
    answer = httpx.post(server + "/v1/bakeoff", json=body, timeout=240).json()
    for entry in answer["scorecard"]:
        template = {"served": None, "served_about": "This text is about {}."}[entry["arm"]]
        for example, predicted in zip(examples, entry["predictions"]):
            request = {"text": example["input"], "labels": list(labels.values())}
            if template:
                request["hypothesis_template"] = template
            r = httpx.post(server + "/classify", json=request, timeout=60)
            assert r.status_code == 200, r.text
            want = [round(p, 4) for p in r.json()["probabilities"]]
            assert predicted["probabilities"] == pytest.approx(want, abs=1.01e-4), (entry["arm"], example)
