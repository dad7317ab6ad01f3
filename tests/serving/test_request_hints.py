"""Hints for a body brought from another API (issue 31 item 8, issue 32 item 6): a legacy or foreign name of a
field that would change the answer is a 422 naming the field to use, on ``/classify`` (one request and an
array item) and on the Inference API routes; the Inference API payload sent to ``/classify`` (and the reverse)
names the right route; ``label`` without ``labels`` and labels as one string say what to send."""

from __future__ import annotations

import pytest
from conftest import running_app

pytestmark = pytest.mark.anyio

TEXT = "The team won the match after a late goal."
NAMES = ["sport", "business"]
ZERO_SHOT_ROUTES = ("/v1/zero-shot-classification", "/")


@pytest.mark.parametrize("key, value, current", [
    ("multi_class", True, "multi_label"),
    ("multi_class", False, "multi_label"),
    ("sequences", TEXT, "text"),
    ("sequence", TEXT, "text"),
    ("template", "About {}.", "hypothesis_template"),
    ("hypothesis", "About {}.", "hypothesis_template"),
])
async def test_a_legacy_classify_field_is_a_422_naming_the_current_one(bert_dir, make_app, key, value, current):
    async with running_app(make_app(bert_dir)) as client:
        body = {"text": TEXT, "candidate_labels": NAMES, key: value}
        r = await client.post("/classify", json=body)
        assert r.status_code == 422, r.text
        out = r.json()
        assert out["field"] == key and f"did you mean {current}?" in out["error"], out
        assert out["errors"][0]["type"] == "legacy_field"
        arr = await client.post("/classify", json=[body, {"text": TEXT, "candidate_labels": NAMES}])
        items = arr.json()
        assert arr.status_code == 200 and items[0]["status"] == 422 and items[0]["field"] == key
        assert "probabilities" in items[1]


@pytest.mark.parametrize("key, value, current", [
    ("multi_class", True, "multi_label"),
    ("labels", NAMES, "candidate_labels"),
    ("template", "About {}.", "hypothesis_template"),
    ("hypothesis", "About {}.", "hypothesis_template"),
])
@pytest.mark.parametrize("route", ZERO_SHOT_ROUTES)
async def test_a_legacy_pipeline_parameter_is_a_422_naming_the_current_one(bert_dir, make_app, route, key, value,
                                                                           current):
    async with running_app(make_app(bert_dir)) as client:
        r = await client.post(route, json={"inputs": TEXT, "parameters": {"candidate_labels": NAMES, key: value}})
        assert r.status_code == 422, r.text
        out = r.json()
        assert out["field"] == f"parameters.{key}" and f"did you mean parameters.{current}?" in out["error"], out


async def test_multi_class_no_longer_answers_single_label(bert_dir, make_app):
    """The fault itself: ``multi_class: true`` was ignored and the answer came back single-label (summing to 1)."""
    async with running_app(make_app(bert_dir)) as client:
        multi = await client.post("/classify", json={"text": TEXT, "candidate_labels": NAMES, "multi_label": True})
        assert multi.status_code == 200
        legacy = await client.post("/classify", json={"text": TEXT, "candidate_labels": NAMES, "multi_class": True})
        assert legacy.status_code == 422 and "multi_label" in legacy.json()["error"]


@pytest.mark.parametrize("body", [
    {"inputs": TEXT, "parameters": {"candidate_labels": NAMES}},
    {"inputs": [TEXT], "parameters": {"candidate_labels": "sport, business"}},
    {"inputs": TEXT},
])
async def test_an_inference_api_payload_on_classify_names_the_right_route(bert_dir, make_app, body):
    async with running_app(make_app(bert_dir)) as client:
        r = await client.post("/classify", json=body)
        assert r.status_code == 422, r.text
        out = r.json()
        assert out["field"] == "text" and "POST /v1/zero-shot-classification" in out["error"], out
        assert "Inference API" in out["error"]


@pytest.mark.parametrize("route", ZERO_SHOT_ROUTES)
async def test_a_classify_body_on_the_inference_api_route_names_classify(bert_dir, make_app, route):
    async with running_app(make_app(bert_dir)) as client:
        r = await client.post(route, json={"text": TEXT, "labels": NAMES})
        assert r.status_code == 422, r.text
        assert r.json()["field"] == "inputs" and "POST /classify" in r.json()["error"]


async def test_label_without_labels_suggests_labels(bert_dir, make_app):
    async with running_app(make_app(bert_dir)) as client:
        r = await client.post("/classify", json={"text": TEXT, "label": ["sport", "business"]})
        assert r.status_code == 422, r.text
        out = r.json()
        assert out["field"] == "labels" and "did you mean labels" in out["error"], out
        # an examples line (labels and its gold label index) is still answered as it is
        line = {"id": 1, "dataset": "d", "text": TEXT, "labels": ["About sport.", "About money."], "label": 0}
        assert (await client.post("/classify", json=line)).status_code == 200


@pytest.mark.parametrize("field", ["labels", "candidate_labels"])
async def test_labels_as_one_string_say_classify_wants_a_list(bert_dir, make_app, field):
    async with running_app(make_app(bert_dir)) as client:
        r = await client.post("/classify", json={"text": TEXT, field: "sport, business"})
        assert r.status_code == 422, r.text
        out = r.json()
        assert out["field"] == field and "must be a list of strings" in out["error"]
        assert "/v1/zero-shot-classification" in out["error"] and "comma" in out["error"]
        # what the hint says the other route does, it does
        zs = await client.post("/v1/zero-shot-classification",
                               json={"inputs": TEXT, "parameters": {"candidate_labels": "sport, business"}})
        assert zs.status_code == 200 and sorted(zs.json()["labels"]) == sorted(NAMES)


@pytest.mark.parametrize("key, value", [("candidate_labels", NAMES), ("multi_label", True), ("multi_class", True),
                                        ("hypothesis_template", "About {}.")])
@pytest.mark.parametrize("route", ZERO_SHOT_ROUTES)
async def test_a_parameter_beside_parameters_is_a_422_naming_its_place(bert_dir, make_app, route, key, value):
    async with running_app(make_app(bert_dir)) as client:
        r = await client.post(route, json={"inputs": TEXT, "parameters": {"candidate_labels": NAMES}, key: value})
        assert r.status_code == 422, r.text
        want = "parameters.multi_label" if key == "multi_class" else f"parameters.{key}"
        assert r.json()["field"] == key and f"did you mean {want}?" in r.json()["error"], r.json()
        seq = await client.post(route, json={"sequences": TEXT, "parameters": {"candidate_labels": NAMES}})
        assert seq.status_code == 422 and "did you mean inputs?" in seq.json()["error"]


async def test_parameters_beside_text_on_classify_is_a_422(bert_dir, make_app):
    """``parameters.multi_label`` on /classify used to be ignored (the answer single-label)."""
    async with running_app(make_app(bert_dir)) as client:
        r = await client.post("/classify", json={"text": TEXT, "candidate_labels": NAMES,
                                                 "parameters": {"multi_label": True}})
        assert r.status_code == 422, r.text
        assert r.json()["field"] == "parameters" and "POST /v1/zero-shot-classification" in r.json()["error"]


async def test_cascade_is_a_known_field_on_both_routes(bert_dir, make_app):
    """``cascade`` changes the answer: misspelt it is a 422 on /classify; on the Inference API route
    ``parameters.cascade`` is read (checked as /classify checks it), not ignored."""
    async with running_app(make_app(bert_dir)) as client:
        r = await client.post("/classify", json={"text": TEXT, "candidate_labels": NAMES, "cascad": False})
        assert r.status_code == 422 and "did you mean cascade?" in r.json()["error"], r.text
        ok = await client.post("/v1/zero-shot-classification",
                               json={"inputs": TEXT, "parameters": {"candidate_labels": NAMES, "cascade": False}})
        assert ok.status_code == 200, ok.text
        bad = await client.post("/v1/zero-shot-classification",
                                json={"inputs": TEXT, "parameters": {"candidate_labels": NAMES, "cascade": "no"}})
        assert bad.status_code == 422 and bad.json()["field"] == "parameters.cascade", bad.text
        top = await client.post("/", json={"inputs": TEXT, "parameters": {"candidate_labels": NAMES}, "cascade": False})
        assert top.status_code == 422 and "did you mean parameters.cascade?" in top.json()["error"]
