"""POST /v1/bakeoff and its pages on the tiny BERT model: contract, 422s, privacy, 404s, time budget, statelessness."""

from __future__ import annotations

import re
import sqlite3
import time

import pytest
from bakeoff_support import make_bakeoff_app
from conftest import cached_loader, running_app

from zsnli.compare.service.arms_adapter import INCUMBENTS
from zsnli.compare.receipts import verify

pytestmark = pytest.mark.anyio

# The issue's request; challenger_model names a real arm ("NAME" there is a placeholder: a 422, tested below).
ISSUE_REQUEST = {"task_description": "Classify support requests as access or billing",
                 "examples": [{"input": "Cannot sign in", "expected": "access"},
                              {"input": "Refund my invoice", "expected": "billing"},
                              {"input": "Login still fails", "expected": "access"}],
                 "challenger_model": "tfidf_logreg"}

ANSWER_KEYS = {"id", "created_at", "task_description", "labels", "n", "scorecard", "winner", "arms_run", "verdict",
               "receipt"}
ENTRY_KEYS = {"rank", "arm", "role", "kind", "accuracy", "macro_f1", "ece", "n", "latency_ms_p50", "latency_ms_p95",
              "fit_s", "status", "reliability", "coverage", "per_class", "confusion", "slices"}


@pytest.fixture
def bakeoff_env(tmp_path, monkeypatch):
    monkeypatch.setenv("ZSNLI_BAKEOFF_DB", str(tmp_path / "store" / "bakeoffs.sqlite3"))
    monkeypatch.setenv("ZSNLI_RECEIPT_KEY", str(tmp_path / "keys" / "receipt.pem"))
    return tmp_path


@pytest.fixture
def app(bert_dir, bakeoff_env):
    return make_bakeoff_app(bert_dir, loader=cached_loader, embedding_dir=str(bert_dir))


async def test_contract_of_the_issue_request(app, bakeoff_env):
    async with running_app(app) as client:
        r = await client.post("/v1/bakeoff", json=ISSUE_REQUEST)
        assert r.status_code == 200, r.text
        a = r.json()
        assert set(a) == ANSWER_KEYS
        assert re.fullmatch(r"bo_[0-9a-f]{32}", a["id"])
        assert a["n"] == 3 and a["labels"] == {"access": "access", "billing": "billing"}
        assert a["task_description"] == ISSUE_REQUEST["task_description"]
        arms = [e["arm"] for e in a["scorecard"]]
        assert sorted(arms) == sorted(INCUMBENTS)  # default: all incumbents, challenger among them once
        assert [e["rank"] for e in a["scorecard"]] == list(range(1, len(arms) + 1))
        for e in a["scorecard"]:
            assert set(e) == ENTRY_KEYS, e
            assert e["status"] == "scored" and e["n"] == 3
            assert e["role"] == ("challenger" if e["arm"] == "tfidf_logreg" else "incumbent")
            assert 0 <= e["accuracy"] <= 1 and 0 <= e["macro_f1"] <= 1 and 0 <= e["ece"] <= 1
            assert 0 < e["latency_ms_p50"] <= e["latency_ms_p95"]
            assert sum(b["count"] for b in e["reliability"]) == 3
            # the arm view: fit cost, coverage curve, per-class F1, confusion matrix (gold rows), worst slices
            assert (e["fit_s"] is None) == (e["arm"] in ("served", "served_about", "embedding_similarity"))
            assert e["kind"] == ("zero-shot" if e["fit_s"] is None else "few-shot")
            assert e["fit_s"] is None or e["fit_s"] > 0
            assert e["coverage"]["coverage"][-1] == 1.0 and e["coverage"]["accuracy"][-1] == e["accuracy"]
            assert [c["label"] for c in e["per_class"]] == e["confusion"]["labels"] == ["access", "billing"]
            counts = e["confusion"]["counts"]
            assert [sum(row) for row in counts] == [2, 1]  # two access examples, one billing
            assert sum(counts[i][i] for i in range(2)) / 3 == pytest.approx(e["accuracy"], abs=1e-4)
            assert isinstance(e["slices"], list)
        keys = [(-e["macro_f1"], e["ece"], e["latency_ms_p50"]) for e in a["scorecard"]]
        assert keys == sorted(keys)
        assert a["winner"] == a["scorecard"][0]["arm"] and a["verdict"].startswith(f"Winner: {a['winner']} (")
        assert a["arms_run"] == {"requested": len(INCUMBENTS), "finished": len(INCUMBENTS), "not_finished": {}}
        assert a["receipt"]["not_run"] == {}
        assert {"sha256", "signature", "key_id"} <= set(a["receipt"])
        pem = (await client.get("/v1/receipts/public-key")).text.encode()
        assert verify(a, pem) == []
        stored = await client.get(f"/v1/bakeoffs/{a['id']}")
        assert stored.status_code == 200 and stored.json() == a
        latest = (await client.get("/v1/bakeoffs")).json()["bakeoffs"]
        assert latest[0]["id"] == a["id"] and latest[0]["winner"] == a["winner"]
        html = await client.get(f"/bakeoffs/{a['id']}")
        assert html.status_code == 200 and html.headers["content-type"].startswith("text/html")
        assert a["id"] in html.text and "bakeoff.js" in html.text
        badge = await client.get(f"/bakeoffs/{a['id']}/badge.svg")
        assert badge.headers["content-type"] == "image/svg+xml" and a["winner"] in badge.text
        listing = await client.get("/bakeoffs")
        assert a["id"] in listing.text
        for asset in ("bakeoff.js", "bakeoff.css"):
            assert (await client.get(f"/bakeoff/static/{asset}")).status_code == 200
        form = (await client.get("/bakeoff")).text
        assert "<form" in form and "http" not in form.replace("http-equiv", "")  # no external resources


async def test_candidates_subset_and_labels_as_hypotheses(app):
    async with running_app(app) as client:
        body = {**ISSUE_REQUEST, "candidates": ["majority", "served_about"], "challenger_model": None,
                "labels": {"access": "The customer cannot get into the account.", "billing": "A question about money."}}
        a = (await client.post("/v1/bakeoff", json=body)).json()
        assert sorted(e["arm"] for e in a["scorecard"]) == ["majority", "served_about"]
        assert a["labels"]["billing"] == "A question about money."
        assert all(e["role"] == "incumbent" for e in a["scorecard"])


@pytest.mark.parametrize("change, field", [
    ({"examples": ISSUE_REQUEST["examples"] + [{"input": "Where is my invoice", "expected": ""}]},
     "examples[3].expected"),
    ({"examples": ISSUE_REQUEST["examples"] + [{"input": "x", "expected": 3}]}, "examples[3].expected"),
    ({"examples": ISSUE_REQUEST["examples"] + [{"input": "   ", "expected": "access"}]}, "examples[3].input"),
    ({"examples": [{"input": "a", "expected": "access"}, {"input": "b", "expected": "access"}]}, "examples"),
    ({"labels": {"access": "Access.", "billing": "Billing.", "legal": "Legal."}}, "labels.legal"),
    ({"labels": {"access": "Access."}}, "examples[1].expected"),
    ({"candidates": ["majority", "gpt-9"]}, "candidates[1]"),
    ({"challenger_model": "NAME"}, "challenger_model"),
    ({"task_description": " "}, "task_description"),
    ({"task_description": None}, "task_description"),
    ({"examples": [{"input": f"text {i}", "expected": "ab"[i % 2]} for i in range(201)]}, "examples"),
    ({"examples": [{"input": "x" * 2001, "expected": "a"}, {"input": "y", "expected": "b"}]}, "examples[0].input"),
    ({"examples": [{"input": f"t{i}", "expected": f"label{i}"} for i in range(21)]}, "examples"),
    ({"retain": "yes"}, "retain"),
])
async def test_422_names_the_field(app, change, field):
    async with running_app(app) as client:
        r = await client.post("/v1/bakeoff", json={**ISSUE_REQUEST, **change})
        assert r.status_code == 422, r.text
        body = r.json()
        assert body["field"] == field and body["error_type"] == "validation", body
        assert field in body["error"] and body["errors"][0]["field"] == field


async def test_unknown_ids_are_404_json_everywhere(app):
    async with running_app(app) as client:
        for path in ("/v1/bakeoffs/bo_" + "0" * 32, "/bakeoffs/bo_" + "0" * 32, "/bakeoffs/bo_" + "0" * 32 + "/badge.svg",
                     "/v1/bakeoffs/nonsense", "/bakeoffs/../etc"):
            r = await client.get(path)
            assert r.status_code == 404, path
            assert r.json()["error_type"] == "not_found"


async def test_texts_stored_only_when_retained(app, bakeoff_env):
    async with running_app(app) as client:
        plain = (await client.post("/v1/bakeoff", json=ISSUE_REQUEST)).json()
        kept = (await client.post("/v1/bakeoff", json={**ISSUE_REQUEST, "retain": True})).json()
        pem = (await client.get("/v1/receipts/public-key")).text.encode()
    assert verify(kept, pem) == [] and verify(plain, pem) == []  # the predictions are signed with the rest
    assert all("predictions" not in e for e in plain["scorecard"])
    preds = kept["scorecard"][0]["predictions"]
    assert [p["expected"] for p in preds] == ["access", "billing", "access"]
    assert all(len(p["probabilities"]) == 2 for p in preds)
    with sqlite3.connect(bakeoff_env / "store" / "bakeoffs.sqlite3") as conn:
        def rows(bid):
            return conn.execute("SELECT idx, sha256, input, expected FROM bakeoff_examples WHERE bakeoff_id = ? "
                                "ORDER BY idx", (bid,)).fetchall()

        plain_answer = conn.execute("SELECT answer FROM bakeoffs WHERE id = ?", (plain["id"],)).fetchone()[0]
        plain_rows, kept_rows = rows(plain["id"]), rows(kept["id"])
    assert [r[2:] for r in plain_rows] == [(None, None)] * 3
    assert [r[2:] for r in kept_rows] == [(e["input"], e["expected"]) for e in ISSUE_REQUEST["examples"]]
    assert [r[1] for r in plain_rows] == [r[1] for r in kept_rows]  # the same sha256 either way
    assert all(re.fullmatch(r"[0-9a-f]{64}", r[1]) for r in plain_rows)
    for example in ISSUE_REQUEST["examples"]:
        assert example["input"] not in plain_answer


async def test_classify_never_touches_the_store(bert_dir, bakeoff_env, monkeypatch):
    from zsnli.compare.service import store as store_mod

    def refuse(*_a, **_k):
        raise AssertionError("/classify touched the bake-off store")

    monkeypatch.setattr(store_mod.Store, "_connect", refuse)
    app = make_bakeoff_app(bert_dir, loader=cached_loader)
    async with running_app(app) as client:
        for _ in range(3):
            r = await client.post("/classify", json={"text": "Cannot sign in", "labels": ["access", "billing"]})
            assert r.status_code == 200
    assert not (bakeoff_env / "store").exists() and not (bakeoff_env / "keys").exists()


async def test_embedding_arms_share_one_sentence_encoder(app, monkeypatch):
    """The three embedding arms (and the bake-offs after the first) load no encoder of their own."""
    from zsnli.runtime import embedding

    loads = []
    real_init = embedding.SentenceEncoder.__init__

    def counting_init(self, *args, **kwargs):
        loads.append(args)
        real_init(self, *args, **kwargs)

    monkeypatch.setattr(embedding.SentenceEncoder, "__init__", counting_init)
    body = {**ISSUE_REQUEST, "candidates": ["embedding_similarity", "embedding_logreg", "embedding_knn"]}
    async with running_app(app) as client:
        for _ in range(2):
            a = (await client.post("/v1/bakeoff", json=body)).json()
            assert {e["status"] for e in a["scorecard"]} == {"scored"}, a["scorecard"]
    assert len(loads) == 1  # the routes' one (the uncalibrated test server has no encoder of its own)
    digests = {a["receipt"]["arms"][name]["model_sha256"] for name in body["candidates"]}
    assert len(digests) == 1 and None not in digests


class _SlowLoader:
    """The tiny model with a forward that sleeps: the served-model arms cannot finish in a short budget."""

    def __call__(self, settings):
        model = cached_loader(settings)

        class Slow:
            def __getattr__(self, name):
                return getattr(model, name)

            def logits(self, encoded):
                time.sleep(0.4)
                return model.logits(encoded)

        return Slow()


def _estimate_nothing(monkeypatch):
    """The plan's estimate as 0 s (every arm's coefficients 0): these tests are about the run-time budget."""
    from zsnli.compare import budget

    monkeypatch.setattr(budget, "COSTS", {kind: budget.Cost() for kind in budget.COSTS})


async def test_time_budget_fails_unfinished_arms_only(bert_dir, bakeoff_env, monkeypatch):
    _estimate_nothing(monkeypatch)
    app = make_bakeoff_app(bert_dir, loader=_SlowLoader(), embedding_dir=str(bert_dir))
    # a 1 s budget for the routes' settings (ZSNLI_BAKEOFF_TIME_BUDGET_S starts at 5 s; the logic is the same)
    object.__setattr__(app.state.bakeoff["settings"], "time_budget_s", 1.0)
    async with running_app(app) as client:
        await client.get("/bakeoff")  # the first page or bake-off imports the bake-off's heavy half
        body = {**ISSUE_REQUEST, "candidates": ["majority", "tfidf_logreg", "served_about", "served"]}
        t0 = time.monotonic()
        a = (await client.post("/v1/bakeoff", json=body)).json()
        took = time.monotonic() - t0
    status = {e["arm"]: e for e in a["scorecard"]}
    assert status["majority"]["status"] == status["tfidf_logreg"]["status"] == "scored"
    for arm in ("served_about", "served"):
        assert status[arm]["status"] == "failed" and "time budget of 1 s" in status[arm]["error"]
        assert status[arm]["macro_f1"] is None
    assert [e["status"] for e in a["scorecard"]][-2:] == ["failed", "failed"]
    from zsnli.compare.service.runner import GRACE_S

    assert took < 1.0 + GRACE_S
    # issue 57: no winner among the arms that finished without saying so, in the answer, its receipt and pages
    assert a["arms_run"]["requested"] == 4 and a["arms_run"]["finished"] == 2
    assert a["arms_run"]["not_finished"] == {arm: status[arm]["error"] for arm in ("served_about", "served")}
    assert a["receipt"]["not_run"] == a["arms_run"]["not_finished"]
    assert a["verdict"].startswith("Winner among 2 of 4 arms") and f": {a['winner']} (macro-F1 " in a["verdict"]
    assert a["verdict"].endswith("; 2 did not finish: served_about, served") or \
        a["verdict"].endswith("; 2 did not finish: served, served_about")
    assert all(status[arm]["kind"] == "zero-shot" for arm in ("served_about", "served"))
    async with running_app(app) as client:
        page = (await client.get(f"/bakeoffs/{a['id']}")).text
        pem = (await client.get("/v1/receipts/public-key")).text.encode()
        badge = (await client.get(f"/bakeoffs/{a['id']}/badge.svg")).text
        listing = (await client.get("/bakeoffs")).text
        latest = (await client.get("/v1/bakeoffs")).json()["bakeoffs"][0]
    assert verify(a, pem) == []
    assert "class='winner partial'" in page and "Winner among 2 of 4 arms" in page and "id='not-finished'" in page
    assert "2 of 4 arms" in badge and "2 of 4 arms" in listing and latest["arms_run"] == "2 of 4 arms"


async def test_registered_local_model_as_challenger(bert_dir, deberta_dir, bakeoff_env, monkeypatch):
    monkeypatch.setenv("ZSNLI_BAKEOFF_MODELS", f"tiny-deberta={deberta_dir}")
    app = make_bakeoff_app(bert_dir, loader=cached_loader, embedding_dir=str(bert_dir))
    async with running_app(app) as client:
        body = {**ISSUE_REQUEST, "candidates": ["majority"], "challenger_model": "tiny-deberta"}
        a = (await client.post("/v1/bakeoff", json=body)).json()
        form = (await client.get("/bakeoff")).text
    entry = next(e for e in a["scorecard"] if e["arm"] == "tiny-deberta")
    assert entry["role"] == "challenger" and entry["status"] == "scored"
    ident = a["receipt"]["arms"]["tiny-deberta"]
    assert ident["type"] == "pipeline" and re.fullmatch(r"[0-9a-f]{64}", ident["model_sha256"])
    assert "tiny-deberta" in form


@pytest.mark.parametrize("var, value, says", [
    ("ZSNLI_BAKEOFF_TIME_BUDGET_S", "2", "[5, 600]"), ("ZSNLI_BAKEOFF_TIME_BUDGET_S", "soon", "a number"),
    ("ZSNLI_BAKEOFF_MAX_EXAMPLES", "1", "[2, 500]"), ("ZSNLI_BAKEOFF_MODELS", "nodir", "name=DIR"),
])
def test_bad_settings_refuse_with_one_line(var, value, says, bert_dir, monkeypatch, capsys):
    from zsnli.serve import main
    from zsnli.compare.service.settings import BakeoffSettings
    from zsnli.config import SettingsError

    with pytest.raises(SettingsError, match=re.escape(var)) as err:
        BakeoffSettings.from_env({var: value})
    assert says in str(err.value) and "\n" not in str(err.value)
    monkeypatch.setenv("ZSNLI_MODEL_DIR", str(bert_dir))
    monkeypatch.setenv(var, value)
    assert main() == 3
    assert var in capsys.readouterr().err


async def test_lone_surrogates_in_every_field_are_cleaned_before_any_work(app):
    """The /classify rule (U+FFFD) for the task, label names and descriptions, inputs and expected values."""
    raw = ('{"task_description": "Support \\ud800 requests", "retain": true, '
           '"candidates": ["majority", "served"], "challenger_model": "tfidf_logreg", '
           '"labels": {"access\\udc00": "sign in \\ud83d", "billing": "money \\udfff"}, '
           '"examples": [{"input": "Cannot \\ud800 sign in", "expected": "access\\udc00"}, '
           '{"input": "Refund \\ud83d\\ude00", "expected": "billing"}, '
           '{"input": "Login \\udbff fails", "expected": "access\\udc00"}]}')
    async with running_app(app) as client:
        r = await client.post("/v1/bakeoff", content=raw.encode(), headers={"content-type": "application/json"})
        assert r.status_code == 200, r.text
        a = r.json()
        assert a["task_description"] == "Support \ufffd requests"
        assert a["labels"] == {"access\ufffd": "sign in \ufffd", "billing": "money \ufffd"}
        assert {e["status"] for e in a["scorecard"]} == {"scored"}, a["scorecard"]
        assert [p["expected"] for p in a["scorecard"][0]["predictions"]] == ["access\ufffd", "billing", "access\ufffd"]
        stored = await client.get(f"/v1/bakeoffs/{a['id']}")
        assert stored.json() == a
        pem = (await client.get("/v1/receipts/public-key")).text.encode()
    assert verify(a, pem) == []


async def test_expected_labels_differing_in_case_space_or_invisible_characters_are_one_label(app):
    examples = [{"input": "Cannot sign in", "expected": "access"}, {"input": "Refund my invoice", "expected": "billing"},
                {"input": "Charged twice", "expected": "billing "}, {"input": "Invoice wrong", "expected": "Billing"},
                {"input": "Card declined", "expected": "bill\u200bing"}, {"input": "Login fails", "expected": " ACCESS\t"}]
    body = {"task_description": "support", "examples": examples, "candidates": ["majority", "served"], "retain": True}
    async with running_app(app) as client:
        r = await client.post("/v1/bakeoff", json=body)
    assert r.status_code == 200, r.text
    a = r.json()
    assert a["labels"] == {"access": "access", "billing": "billing"} and a["n"] == 6
    preds = next(e for e in a["scorecard"] if e["arm"] == "majority")["predictions"]
    assert [p["expected"] for p in preds] == ["access", "billing", "billing", "billing", "billing", "access"]


@pytest.mark.parametrize("change, field, error_type", [
    ({"examples": ISSUE_REQUEST["examples"] + [{"input": "x", "expected": "\u200b\u200b"}]}, "examples[3].expected",
     "validation"),
    ({"labels": {"access": "Access.", "billing": "Billing.", "Billing ": "Money."}}, "labels.Billing", "validation"),
    ({"labels": {"access": "Access.", "billing": "\u200b\u2060"}}, "labels.billing", "validation"),
    ({"labels": {"access": "Access.", "billing": "money " * 300}}, "labels.billing", "label_too_long"),
    ({"labels": {"access": "Access.", "billing": "money " * 80}}, "labels.billing", "label_too_long"),  # tokens
    ({"examples": [{"input": "a", "expected": "access"}, {"input": "b", "expected": "word " * 300}]},
     "examples[1].expected", "label_too_long"),
])
async def test_label_checks_are_classifys(app, change, field, error_type):
    """Blank, invisible-only, duplicate-after-normalisation and over-long labels: 422 naming the field, never an arm
    failure; the description checks are /classify's own (the same 422 kind for the same label)."""
    async with running_app(app) as client:
        r = await client.post("/v1/bakeoff", json={**ISSUE_REQUEST, **change})
        assert r.status_code == 422, r.text
        body = r.json()
        assert (body["field"], body["error_type"]) == (field, error_type), body
        assert body["errors"][0]["field"] == field and "Truncation" not in body["error"]
        if field != "labels.Billing" and "examples" not in change:
            label = change["labels"]["billing"]
            c = await client.post("/classify", json={"text": "x", "labels": ["Access.", label]})
            assert c.status_code == 422 and c.json()["error_type"] == error_type
            assert c.json()["field"] == "labels[1]"


def _slow_tfidf(monkeypatch, seconds: float = 0.3) -> list[float]:
    """tfidf_logreg with a slow predict (``seconds`` per document); returns the list of call times."""
    from zsnli.compare.arms import ARMS

    calls: list[float] = []
    cls = ARMS["tfidf_logreg"]
    real = cls.predict_proba

    def slow(self, texts, labels):
        calls.append(time.monotonic())
        time.sleep(seconds)
        return real(self, texts, labels)

    monkeypatch.setattr(cls, "predict_proba", slow)
    return calls


TWELVE = {"task_description": "support", "examples": [
    {"input": f"{'Cannot sign in' if i % 2 else 'Refund my invoice'} {i}", "expected": "ab"[i % 2]} for i in range(12)]}


async def test_budget_bounds_the_answer_and_stops_thread_work(bert_dir, bakeoff_env, monkeypatch):
    """Two bake-offs whose arms need ~4 s each, budget 1 s: both answer within budget + grace, stored, and the
    timed-out arm's thread stops at its next step (it used to run on and hold the store write behind it)."""
    import asyncio

    from zsnli.compare.service.runner import GRACE_S

    calls = _slow_tfidf(monkeypatch)
    _estimate_nothing(monkeypatch)
    app = make_bakeoff_app(bert_dir, loader=_SlowLoader(), embedding_dir=str(bert_dir))
    object.__setattr__(app.state.bakeoff["settings"], "time_budget_s", 1.0)
    body = {**TWELVE, "candidates": ["majority", "tfidf_logreg", "served"]}
    async with running_app(app) as client:
        await client.get("/bakeoff")  # the first page or bake-off imports the bake-off's heavy half

        async def one():
            t0 = time.monotonic()
            r = await client.post("/v1/bakeoff", json=body)
            return r, time.monotonic() - t0

        results = await asyncio.gather(one(), one())
        n_calls = len(calls)
        await asyncio.sleep(1.5)
        assert len(calls) == n_calls  # no arm work after the answers
        for r, took in results:
            assert r.status_code == 200, r.text
            assert took < 1.0 + GRACE_S, took
            status = {e["arm"]: e for e in r.json()["scorecard"]}
            assert status["majority"]["status"] == "scored"
            assert status["tfidf_logreg"]["status"] == "failed" and "time budget" in status["tfidf_logreg"]["error"]
            assert (await client.get(f"/v1/bakeoffs/{r.json()['id']}")).status_code == 200


@pytest.mark.timeout(180)
def test_a_client_that_disconnects_cancels_its_bakeoff_frees_the_slot_and_stores_nothing(bert_dir, bakeoff_env,
                                                                                          monkeypatch):
    import json as jsonlib
    import socket

    import httpx
    from conftest import make_settings
    from http_support import ThreadServer, request_bytes

    calls = _slow_tfidf(monkeypatch)
    monkeypatch.setenv("ZSNLI_BAKEOFF_MAX_CONCURRENT", "1")
    srv = ThreadServer(make_bakeoff_app(bert_dir), make_settings(bert_dir))
    with srv:
        base = f"http://127.0.0.1:{srv.port}"
        sock = socket.create_connection(("127.0.0.1", srv.port))
        sock.sendall(request_bytes("POST", "/v1/bakeoff",
                                   jsonlib.dumps({**TWELVE, "candidates": ["tfidf_logreg"]}).encode()))
        deadline = time.monotonic() + 30
        while not calls and time.monotonic() < deadline:
            time.sleep(0.05)
        assert calls, "the bake-off did not start"
        sock.close()  # the client hangs up mid-run
        t0 = time.monotonic()
        while True:  # the slot frees at once: a new bake-off is admitted, not 503
            r = httpx.post(base + "/v1/bakeoff", json={**TWELVE, "candidates": ["majority"]}, timeout=30)
            if r.status_code != 503 or time.monotonic() - t0 > 10:
                break
            time.sleep(0.1)
        assert r.status_code == 200, r.text
        assert time.monotonic() - t0 < 2.0
        n_calls = len(calls)
        time.sleep(1.0)
        assert len(calls) <= n_calls + 0  # the abandoned arm stopped
        stored = httpx.get(base + "/v1/bakeoffs").json()["bakeoffs"]
        assert [b["id"] for b in stored] == [r.json()["id"]]  # nothing stored for the abandoned one


async def test_bakeoff_errors_are_rows_of_the_error_table_with_the_apps_retry_after(bert_dir, bakeoff_env):
    app = make_bakeoff_app(bert_dir, loader=cached_loader, embedding_dir=str(bert_dir), retry_after_s=7)
    async with running_app(app) as client:
        app.state.bakeoff["running"]["n"] = app.state.bakeoff["settings"].max_concurrent  # every slot taken
        r = await client.post("/v1/bakeoff", json=ISSUE_REQUEST)
        assert r.status_code == 503 and r.headers["retry-after"] == "7", r.headers
        assert r.json()["error_type"] == "overloaded" and "ZSNLI_BAKEOFF_MAX_CONCURRENT" in r.json()["error"]
        app.state.bakeoff["running"]["n"] = 0
        (bakeoff_env / "not-a-key.pem").write_text("not a key")
        app.state.bakeoff["signer"].path = bakeoff_env / "not-a-key.pem"
        r = await client.get("/v1/receipts/public-key")
        assert r.status_code == 503 and r.headers["retry-after"] == "7" and r.json()["error_type"] == "receipt"


def test_the_service_front_end_uses_the_classifier_through_its_public_methods_only():
    """No module of the bake-off service reads the classifier's internal state or builds its own error answer."""
    import ast
    from pathlib import Path

    import zsnli.compare.service as package

    for path in sorted(Path(package.__file__).parent.glob("*.py")):
        text = path.read_text(encoding="utf-8")
        assert not re.search(r"[\"']Retry-After[\"']", text), path.name  # a header of its own
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.Attribute) and node.attr == "state":  # only FastAPI's app.state
                assert isinstance(node.value, ast.Name) and node.value.id == "app", (path.name, node.lineno)
            if isinstance(node, ast.keyword) and node.arg == "status_code":
                raise AssertionError(f"{path.name}:{node.value.lineno}: an answer built with its own status code")


@pytest.mark.parametrize("dear, budget_s, candidates, dropped", [
    ("nli", 120, ["majority", "served", "served_about", "tfidf_logreg"], "served_about, served"),
    ("nli", 30, ["served", "char_nb"], "served"),
    ("tfidf_linearsvc", 60, ["tfidf_linearsvc", "tfidf_linearsvc_raw", "majority", "served"], "tfidf_linearsvc"),
    ("encoder", 5, ["embedding_logreg", "keyword_rules", "embedding_knn"], "embedding_logreg, embedding_knn"),
    ("encoder", 5, ["embedding_logreg", "embedding_knn"], None),
])
async def test_a_plan_over_its_budget_is_refused_before_any_arm_runs(app, monkeypatch, dear, budget_s, candidates,
                                                                   dropped):
    """Issue 57: at the documented maxima 6 of 11 arms failed on the 120 s budget, and the page still named a
    winner. The plan is now estimated first (zsnli.compare.budget) and refused in a 422 when it is over."""
    from zsnli.compare import budget
    from zsnli.compare.service import runner

    monkeypatch.setitem(budget.COSTS, dear, budget.Cost(doc_s=100.0, token_s=100.0))  # this kind is dear
    monkeypatch.setattr(runner, "run_bakeoff", lambda *a, **k: pytest.fail("an arm ran"))
    object.__setattr__(app.state.bakeoff["settings"], "time_budget_s", float(budget_s))
    async with running_app(app) as client:
        r = await client.post("/v1/bakeoff", json={**ISSUE_REQUEST, "candidates": candidates, "challenger_model": None})
        assert r.status_code == 422, r.text
        err = r.json()
        assert err["field"] == "candidates" and err["error_type"] == "validation"
        assert f"against a time budget of {budget_s} s (ZSNLI_BAKEOFF_TIME_BUDGET_S)" in err["error"]
        assert "nothing was run" in err["error"] and len(err["error"].splitlines()) == 1
        if dropped:
            assert f"leave out {dropped}, " in err["error"]
        else:  # every arm needs the dear pass: no subset fits, only fewer examples or a bigger budget
            assert "leave out" not in err["error"] and budget.SHARED_EMBEDDING in err["error"]
        assert (await client.get("/v1/bakeoffs")).json()["bakeoffs"] == []  # nothing stored
