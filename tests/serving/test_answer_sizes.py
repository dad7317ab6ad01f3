"""No answer outgrows its request (issue 57, item 3): ``/tokenize`` answered 72 MB for a 2 MiB body, a list of a
million bad items got a million error entries (93 MB), and the Inference API's answer named every label again for
each input. Each route's answer is now bounded: ``/tokenize``'s texts by ``ZSNLI_MAX_TEXT_CHARS`` in all, an error
answer by `zsnli.errors.MAX_ERROR_ENTRIES` entries of at most `zsnli.errors.MAX_ERROR_CHARS` characters, the
Inference API's repeated labels by ``ZSNLI_MAX_BODY_BYTES``."""

from __future__ import annotations

import json

import pytest
from conftest import cached_loader, make_settings, running_app

from zsnli.errors import MAX_ERROR_CHARS, MAX_ERROR_ENTRIES, ApiError, ErrorType

pytestmark = pytest.mark.anyio

BODY_LIMIT = 256 * 1024
TEXT_CHARS = 2000


@pytest.fixture
def app(bert_dir):
    from zsnli.serve import served_extensions
    from zsnli.serving.app import create_app

    return create_app(make_settings(bert_dir, max_body_bytes=BODY_LIMIT, max_text_chars=TEXT_CHARS),
                      loader=cached_loader, extend=served_extensions())


def _post(client, path, body: str):
    return client.post(path, content=body.encode(), headers={"Content-Type": "application/json"})


def _filled(prefix: str, item: str, suffix: str) -> str:
    """A JSON body of ``prefix item,item,... suffix`` just under the body limit."""
    n = (BODY_LIMIT - len(prefix) - len(suffix) - 16) // (len(item) + 1)
    return prefix + ",".join([item] * n) + suffix


async def test_tokenize_bounds_its_texts_so_its_answer_is_bounded(app):
    async with running_app(app) as client:
        for body in ({"inputs": "a " * TEXT_CHARS}, {"inputs": ["a " * (TEXT_CHARS // 4)] * 3},
                     {"inputs": ["a"] * 10 + ["b" * (TEXT_CHARS - 9)]}):
            r = await _post(client, "/tokenize", json.dumps(body))
            assert r.status_code == 413 and r.json()["field"] == "inputs", r.text
            assert "ZSNLI_MAX_TEXT_CHARS" in r.json()["error"] and len(r.content) < 1000
        at_limit = {"inputs": ["a " * (TEXT_CHARS // 4)] * 2}  # TEXT_CHARS characters in all: answered
        r = await _post(client, "/tokenize", json.dumps(at_limit))
        assert r.status_code == 200 and sum(len(tokens) for tokens in r.json()) >= TEXT_CHARS // 2
        assert len(r.content) < 80 * TEXT_CHARS  # about 70 bytes per token, one token per 2 characters here


@pytest.mark.parametrize("path, body", [
    ("/classify", _filled('{"text": "x", "labels": [', "1", "]}")),
    ("/classify", _filled("[", '{"text": "x", "labels": [1, 2]}', "]")),
    ("/classify", "{" + ",".join(f'"k{i}": 0, "k{i}": 0' for i in range(8000)) + "}"),  # every key twice
    ("/v1/zero-shot-classification", _filled('{"inputs": "x", "parameters": {"candidate_labels": [', "1", "]}}")),
    ("/v1/bakeoff", _filled('{"task_description": "t", "examples": [', '{"input": 1}', "]}")),
    ("/predict", _filled('{"inputs": [', "[1, 2]", "]}")),
    ("/tokenize", _filled('{"inputs": [', "1", "]}")),
    ("/embed", _filled('{"inputs": [', "1", "]}")),
    ("/v1/embeddings", _filled('{"model": "m", "input": [', "1", "]}")),
    ("/classify", json.dumps({"text": "x", "labels": ["a"], "multi_label": "y" * 200_000})),
])
async def test_an_error_answer_is_bounded_whatever_the_request_held(app, path, body):
    async with running_app(app) as client:
        r = await _post(client, path, body)
    assert 400 <= r.status_code < 500 and len(body) > 100_000, (r.status_code, len(body))
    answer = r.json()
    assert len(r.content) < (MAX_ERROR_ENTRIES + 2) * 3 * MAX_ERROR_CHARS, len(r.content)
    assert len(r.content) < 64 * 1024, (path, len(r.content))
    entries = answer.get("errors") or []
    assert len(entries) <= MAX_ERROR_ENTRIES + 1
    if len(entries) == MAX_ERROR_ENTRIES + 1:
        assert entries[-1]["type"] == "truncated" and "more problems not listed" in entries[-1]["error"]


def test_the_error_bounds_keep_the_first_problems_and_say_how_many_were_left_out():
    error = ApiError(ErrorType.VALIDATION, "m" * 10_000, "f" * 10_000,
                     errors=[{"field": f"labels[{i}]", "error": "bad", "type": "t"} for i in range(1000)])
    body = error.body()
    assert len(body["error"]) < MAX_ERROR_CHARS + 40 and body["error"].endswith("... (10000 characters)")
    assert len(body["field"]) < MAX_ERROR_CHARS + 40
    assert [e["field"] for e in body["errors"][:MAX_ERROR_ENTRIES]] == [f"labels[{i}]" for i in range(MAX_ERROR_ENTRIES)]
    assert body["errors"][-1] == {"field": "body", "type": "truncated", "error": (
        f"{1000 - MAX_ERROR_ENTRIES} more problems not listed (the first {MAX_ERROR_ENTRIES} are; fix those and send "
        "again)")}
    assert ApiError(ErrorType.VALIDATION, "short", "labels").body()["errors"] == [
        {"field": "labels", "error": "short", "type": "validation"}]


async def test_the_inference_api_never_repeats_its_labels_past_the_body_limit(app):
    labels = [f"label number {i} " + "w " * 40 for i in range(64)]  # about 6 KB of labels, each in the window
    async with running_app(app) as client:
        many = {"inputs": ["x"] * 48, "parameters": {"candidate_labels": labels}}  # 48 x 6 KB > 256 KiB
        r = await _post(client, "/v1/zero-shot-classification", json.dumps(many))
        assert r.status_code == 413 and r.json()["field"] == "inputs" and "ZSNLI_MAX_BODY_BYTES" in r.json()["error"]
        r = await _post(client, "/", json.dumps(many))
        assert r.status_code == 413
        few = {"inputs": ["x"] * 4, "parameters": {"candidate_labels": labels}}
        r = await _post(client, "/v1/zero-shot-classification", json.dumps(few))
        assert r.status_code == 200 and len(r.content) < len(json.dumps(few)) + BODY_LIMIT
        one = {"inputs": "x", "parameters": {"candidate_labels": labels * 3}}  # one input: its labels named once
        assert (await _post(client, "/v1/zero-shot-classification", json.dumps(one))).status_code == 200
