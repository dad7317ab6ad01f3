"""``POST /classify``'s documented body is the one the server takes (found by a new-user pass): the OpenAPI schema
knows ``candidate_labels`` (the README's own first bodies send it without ``labels``, and a client generated from
the schema could not), and null is "not given" for the label fields as for every optional one."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import running_app

from zsnli.errors import ApiError
from zsnli.serving.http_request import parse_classify_request
from zsnli.serving.openapi_docs import CLASSIFY_OPENAPI, ZERO_SHOT_OPENAPI

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
TEXT = "The team won the match after a late goal."
NAMES = ["sport", "business"]
TAKEN = [
    {"text": TEXT, "labels": NAMES},
    {"text": TEXT, "candidate_labels": NAMES},
    {"text": TEXT, "labels": NAMES, "candidate_labels": None},
    {"text": TEXT, "labels": None, "candidate_labels": NAMES},
    {"text": TEXT, "labels": NAMES, "multi_label": None, "cascade": None, "hypothesis_template": None, "id": None},
]
REFUSED = [
    {"text": TEXT},
    {"text": TEXT, "labels": None},
    {"text": TEXT, "labels": None, "candidate_labels": None},
    {"text": TEXT, "labels": NAMES, "candidate_labels": NAMES},
    {"labels": NAMES},
]


@pytest.mark.parametrize("body", TAKEN)
def test_null_beside_the_other_label_field_is_not_given(body):
    """``{"labels": [...], "candidate_labels": null}`` was "give either labels or candidate_labels, not both"."""
    request, used_alias = parse_classify_request(body)
    assert request.labels == NAMES
    assert used_alias == (body.get("labels") is None)


@pytest.mark.parametrize("body", REFUSED)
def test_the_label_fields_are_still_required_and_exclusive(body):
    with pytest.raises(ApiError) as refused:
        parse_classify_request(body)
    want = "candidate_labels" if body.get("labels") and body.get("candidate_labels") else \
        "text" if "text" not in body else "labels"
    assert refused.value.status == 422 and refused.value.field == want, refused.value.message


def _readme_bodies() -> list[dict]:
    """The bodies of the README's ``curl .../classify -d '...'`` examples."""
    text = (ROOT / "README.md").read_text()
    bodies = [json.loads(m) for m in re.findall(r"curl -s \S+/classify .*?-d '(\{.*?\})'", text)]
    assert len(bodies) >= 3
    return bodies


async def test_the_documented_schema_takes_what_the_server_takes_and_no_more(bert_dir, make_app):
    jsonschema = pytest.importorskip("jsonschema")
    async with running_app(make_app(bert_dir)) as client:
        spec = (await client.get("/openapi.json")).json()
        body = spec["paths"]["/classify"]["post"]["requestBody"]["content"]["application/json"]
        one, many = body["schema"]["oneOf"]
        check = jsonschema.Draft202012Validator(one)
        examples = [e["value"] for e in CLASSIFY_OPENAPI["requestBody"]["content"]["application/json"]
                    ["examples"].values()]
        for example in [*TAKEN, *_readme_bodies(), *examples]:
            for item in example if isinstance(example, list) else [example]:
                assert check.is_valid(item), (item, [e.message for e in check.iter_errors(item)])
                answer = await client.post("/classify", json=item)
                assert answer.status_code == 200, (item, answer.text)
        for item in REFUSED:
            assert not check.is_valid(item), item
            assert (await client.post("/classify", json=item)).status_code == 422, item
    assert many["items"] == one


async def test_the_inference_api_schema_takes_null_parameters_as_the_route_does(bert_dir, make_app):
    """The route takes null for its optional parameters (their defaults, as /classify); its schema said string and
    boolean."""
    jsonschema = pytest.importorskip("jsonschema")
    check = jsonschema.Draft202012Validator(ZERO_SHOT_OPENAPI["requestBody"]["content"]["application/json"]["schema"])
    body = {"inputs": TEXT, "parameters": {"candidate_labels": NAMES, "hypothesis_template": None,
                                           "multi_label": None, "cascade": None, "scoring": None}}
    assert check.is_valid(body), [e.message for e in check.iter_errors(body)]
    async with running_app(make_app(bert_dir)) as client:
        for route in ("/v1/zero-shot-classification", "/"):
            answer = await client.post(route, json=body)
            assert answer.status_code == 200, answer.text
