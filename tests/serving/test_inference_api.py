"""POST /v1/zero-shot-classification and POST /: the Hugging Face Inference API's zero-shot payload.

The answers are the transformers pipeline's (same model, text, labels, template,
multi_label), and the scores are ``/classify``'s probabilities for the same
request; errors name the payload's own fields.
"""

from __future__ import annotations

import numpy as np
import pytest
from conftest import CONTENT_FREE_CALIBRATION, NLI_LABELS_2WAY, build_nli, running_app, write_calibration

from zsnli.serving.inference_api import PIPELINE_TEMPLATE, pipeline_answer, split_labels

pytestmark = pytest.mark.anyio

TEXT = "the team won the match and the player scored a goal"
LABELS = ["sport", "business", "science"]
ROUTES = ["/v1/zero-shot-classification", "/"]


def _by_label(answer: dict) -> dict:
    assert answer["scores"] == sorted(answer["scores"], reverse=True)
    return dict(zip(answer["labels"], answer["scores"]))


async def _classify(client, **body) -> list[float]:
    r = await client.post("/classify", json={"text": TEXT, **body})
    assert r.status_code == 200, r.text
    return r.json()["probabilities"]


@pytest.fixture(scope="module")
def two_way_dir(tmp_path_factory):
    return build_nli(tmp_path_factory.mktemp("zs") / "model", "roberta", NLI_LABELS_2WAY)


@pytest.mark.parametrize("route", ROUTES)
async def test_one_input_is_classify_with_the_pipeline_template_sorted(bert_dir, make_app, route):
    async with running_app(make_app(bert_dir)) as client:
        r = await client.post(route, json={"inputs": TEXT, "parameters": {"candidate_labels": LABELS}})
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["sequence"] == TEXT and sorted(answer["labels"]) == sorted(LABELS)
        want = await _classify(client, labels=LABELS, hypothesis_template=PIPELINE_TEMPLATE)
        got = _by_label(answer)
        np.testing.assert_allclose([got[lb] for lb in LABELS], want, rtol=0, atol=1e-12)


async def test_a_list_of_inputs_gets_a_list_in_order(bert_dir, make_app):
    texts = [TEXT, "the bank cut its profit forecast", "", TEXT]
    params = {"candidate_labels": "sport, business,, science ", "hypothesis_template": "This text is about {}.",
              "multi_label": True}
    async with running_app(make_app(bert_dir)) as client:
        r = await client.post("/v1/zero-shot-classification", json={"inputs": texts, "parameters": params})
        assert r.status_code == 200, r.text
        answers = r.json()
        assert isinstance(answers, list) and [a["sequence"] for a in answers] == texts
        for text, answer in zip(texts, answers):
            r1 = await client.post("/classify", json={"text": text, "labels": LABELS, "multi_label": True,
                                                      "hypothesis_template": "This text is about {}."})
            got = _by_label(answer)
            np.testing.assert_allclose([got[lb] for lb in LABELS], r1.json()["probabilities"], atol=1e-12)
        one = await client.post("/", json={"inputs": [TEXT], "parameters": params})
        assert isinstance(one.json(), list) and len(one.json()) == 1  # a list of one stays a list


async def test_same_probabilities_as_classify_under_a_calibration(tmp_path, bert_dir, make_app):
    calib = write_calibration(tmp_path / "calibration.json", **CONTENT_FREE_CALIBRATION)
    async with running_app(make_app(bert_dir, calibration_path=str(calib))) as client:
        r = await client.post("/", json={"inputs": TEXT, "parameters": {"candidate_labels": LABELS,
                                                                          "hypothesis_template": "About {}."}})
        want = await _classify(client, labels=LABELS, hypothesis_template="About {}.")
        got = _by_label(r.json())
        np.testing.assert_allclose([got[lb] for lb in LABELS], want, atol=1e-12)


@pytest.mark.parametrize("multi_label", [False, True])
async def test_answers_are_the_transformers_pipeline_answers(two_way_dir, make_app, multi_label):
    from transformers import pipeline

    pipe = pipeline("zero-shot-classification", model=str(two_way_dir), device="cpu")
    async with running_app(make_app(two_way_dir)) as client:
        for labels in (LABELS, ["sport"], ["sport", "the weather", "business", "science"]):
            want = pipe(TEXT, candidate_labels=labels, multi_label=multi_label)
            r = await client.post("/v1/zero-shot-classification",
                                  json={"inputs": TEXT, "parameters": {"candidate_labels": labels,
                                                                       "multi_label": multi_label}})
            answer = r.json()
            assert answer["labels"] == want["labels"] and answer["sequence"] == want["sequence"]
            np.testing.assert_allclose(answer["scores"], want["scores"], atol=2e-5)


async def test_null_for_multi_label_or_cascade_is_the_default_on_both_routes(bert_dir, make_app):
    """``"multi_label": null`` and ``"cascade": null`` were 422 (``Input should be a valid boolean``) while a null
    ``hypothesis_template`` or ``scoring`` is taken as the default; clients that write unset fields as null broke."""
    async with running_app(make_app(bert_dir)) as client:
        plain = await _classify(client, labels=LABELS)
        assert await _classify(client, labels=LABELS, multi_label=None, cascade=None) == plain
        assert await _classify(client, labels=LABELS, multi_label=True) != plain
        r = await client.post("/", json={"inputs": TEXT, "parameters": {
            "candidate_labels": LABELS, "multi_label": None, "cascade": None, "hypothesis_template": None}})
        plain_api = await client.post("/", json={"inputs": TEXT, "parameters": {"candidate_labels": LABELS}})
        assert r.status_code == 200 and r.json() == plain_api.json(), r.text
        for bad in ("true", 1):
            refused = await client.post("/classify", json={"text": TEXT, "labels": LABELS, "multi_label": bad})
            assert refused.status_code == 422 and refused.json()["field"] == "multi_label"


async def test_every_place_of_an_error_names_the_field_the_client_sent(bert_dir, make_app):
    """``candidate_labels`` with a blank label answered ``field`` ``candidate_labels[1]`` but ``errors[0].error``
    ``labels[1]: ...`` (the internal name); each route's rename now reaches the entries' texts."""
    async with running_app(make_app(bert_dir)) as client:
        for label in (" ", "\u200b"):  # refused by the schema; by the service (empty after normalisation)
            for route, body, field in (
                    ("/classify", {"text": TEXT, "candidate_labels": ["sport", label]}, "candidate_labels[1]"),
                    ("/", {"inputs": TEXT, "parameters": {"candidate_labels": ["sport", label]}},
                     "parameters.candidate_labels[1]")):
                r = await client.post(route, json=body)
                answer = r.json()
                assert r.status_code == 422 and answer["field"] == field, r.text
                assert answer["errors"][0]["field"] == field, r.text
                for text in (answer["error"], answer["errors"][0]["error"]):
                    assert "labels[1]" not in text.replace(field, ""), r.text


async def test_one_label_is_scored_on_its_own_as_in_the_pipeline(bert_dir, make_app):
    async with running_app(make_app(bert_dir)) as client:
        r = await client.post("/", json={"inputs": TEXT, "parameters": {"candidate_labels": ["sport"]}})
        alone = await _classify(client, labels=["sport"], hypothesis_template=PIPELINE_TEMPLATE, multi_label=True)
        assert r.json()["scores"] == alone and alone[0] != 1.0
        assert await _classify(client, labels=["sport"]) == [1.0]  # /classify: one label, probability 1


@pytest.mark.parametrize("body, status, field", [
    ({"parameters": {"candidate_labels": LABELS}}, 422, "inputs"),
    ({"inputs": [], "parameters": {"candidate_labels": LABELS}}, 422, "inputs"),
    ({"inputs": [TEXT, 3], "parameters": {"candidate_labels": LABELS}}, 422, "inputs[1]"),
    ({"inputs": TEXT}, 422, "parameters"),
    ({"inputs": TEXT, "parameters": ["sport"]}, 422, "parameters"),
    ({"inputs": TEXT, "parameters": {}}, 422, "parameters.candidate_labels"),
    ({"inputs": TEXT, "parameters": {"candidate_labels": " , ,"}}, 422, "parameters.candidate_labels"),
    ({"inputs": TEXT, "parameters": {"candidate_labels": ["sport", " "]}}, 422, "parameters.candidate_labels[1]"),
    ({"inputs": TEXT, "parameters": {"candidate_labels": [], "multi_label": True}}, 422, "parameters.candidate_labels"),
    ({"inputs": TEXT, "parameters": {"candidate_labels": LABELS, "hypothesis_template": "no slot"}}, 422,
     "parameters.hypothesis_template"),
    ({"inputs": TEXT, "parameters": {"candidate_labels": LABELS, "multi_label": "yes"}}, 422, "parameters.multi_label"),
    ({"inputs": TEXT, "parameters": {"candidate_labels": ["sport " * 80]}}, 422, "parameters.candidate_labels[0]"),
    ({"inputs": [TEXT] * 5, "parameters": {"candidate_labels": LABELS}}, 422, "inputs"),
    ([TEXT], 422, "body"),
])
async def test_errors_name_the_payload_fields(bert_dir, make_app, body, status, field):
    async with running_app(make_app(bert_dir, max_batch_items=4)) as client:
        r = await client.post("/v1/zero-shot-classification", json=body)
        assert r.status_code == status, r.text
        assert r.json()["field"] == field and r.json()["error"]
        assert client._transport.app.state.classifier.state.batcher.admitted_pairs == 0


async def test_inputs_beyond_the_queue_capacity_are_admitted_in_turn_and_answered(bert_dir, make_app):
    """The inputs of one payload are admitted progressively within its share of the queue: 3 inputs x 2
    pairs through a queue of 4 pairs are all answered (they used to be one 503: the third did not fit)."""
    async with running_app(make_app(bert_dir, max_labels=2, queue_capacity_pairs=4)) as client:
        r = await client.post("/", json={"inputs": [TEXT] * 3, "parameters": {"candidate_labels": ["a", "b"]}})
        assert r.status_code == 200 and len(r.json()) == 3, r.text
        assert "retry-after" not in r.headers


async def test_inputs_over_the_request_cap_are_one_413(bert_dir, make_app):
    async with running_app(make_app(bert_dir, max_labels=2, max_request_pairs=4)) as client:
        r = await client.post("/", json={"inputs": [TEXT] * 3, "parameters": {"candidate_labels": ["a", "b"]}})
        assert r.status_code == 413 and r.json()["field"] == "body"
        assert "ZSNLI_MAX_REQUEST_PAIRS=4" in r.json()["error"]


async def test_documented_in_openapi_with_examples(bert_dir, make_app):
    async with running_app(make_app(bert_dir)) as client:
        spec = (await client.get("/openapi.json")).json()
    for route in ROUTES:
        body = spec["paths"][route]["post"]["requestBody"]["content"]["application/json"]
        assert set(body["examples"]) == {"one", "list"} and "$defs" not in str(body["schema"])
        assert "200" in spec["paths"][route]["post"]["responses"]


def test_split_labels_and_sorting():
    assert split_labels(" a, b ,,c,") == ["a", "b", "c"]
    answer = pipeline_answer("t", ["x", "y", "z", "y"], [0.2, 0.5, 0.2, 0.1])
    assert answer == {"sequence": "t", "labels": ["y", "x", "z", "y"], "scores": [0.5, 0.2, 0.2, 0.1]}
