"""What /docs and GET / show is real: each documented error example is what the server answers, and GET /
lists where things are (the bake-off's documented example: tests/compare/test_bakeoff_docs.py)."""

from __future__ import annotations

import asyncio
import re

import pytest
from conftest import cached_loader, make_settings, running_app

from zsnli.serving.openapi_docs import ERROR_EXAMPLES

pytestmark = pytest.mark.anyio

JSON = {"content-type": "application/json"}


async def test_every_documented_error_example_is_a_real_answer(bert_dir, make_app):
    from test_faults import FaultyModel

    from zsnli.serving.app import create_app

    async with running_app(make_app(bert_dir)) as client:
        provoked = {
            400: await client.post("/classify", content=b'{"text": "x", "labels": ["a",]}', headers=JSON),
            413: await client.post("/classify", content=b'{"text": "' + b"x" * 2_100_000 + b'"}', headers=JSON),
            415: await client.post("/classify", content=b"text=x",
                                   headers={"content-type": "application/x-www-form-urlencoded"}),
            422: await client.post("/classify", json={"text": "x", "labels": []}),
        }
        spec = (await client.get("/openapi.json")).json()
    for status, response in provoked.items():
        assert response.status_code == status and _same(response.json(), ERROR_EXAMPLES[status]), status
    # 503: a full queue (8 pairs here; the example has the default 8192)
    async with running_app(make_app(bert_dir, max_labels=4, queue_capacity_pairs=8)) as client:
        answers = await asyncio.gather(*(client.post("/classify", json={"text": "x " * 30, "labels": list("abcd")})
                                         for _ in range(6)))
    full = next(r for r in answers if r.status_code == 503)
    want = ERROR_EXAMPLES[503]
    assert _same(full.json(), {**want, "error": want["error"].replace("8192", "8")}) and full.headers["retry-after"]
    # 500: the batch holding the request raised
    message = ERROR_EXAMPLES[500]["error"].split(": ", 2)[2]

    def loader(settings):
        model = FaultyModel(cached_loader(settings), "terrible", "raise")
        model.logits = lambda batch, m=model: _raise(message) if any(m.marker_id in e.input_ids for e in batch) \
            else m._model.logits(batch)
        return model

    async with running_app(create_app(make_settings(bert_dir), loader=loader)) as client:
        failed = await client.post("/classify", json={"text": "a terrible match", "labels": ["a", "b"]})
    assert failed.status_code == 500 and _same(failed.json(), ERROR_EXAMPLES[500])
    # each status shows its own example in /docs (FastAPI's OpenAPI leaves out the null "field")
    responses = spec["paths"]["/classify"]["post"]["responses"]
    for status, example in ERROR_EXAMPLES.items():
        shown = responses[str(status)]["content"]["application/json"]["example"]
        assert shown == {k: v for k, v in example.items() if v is not None}


def _same(body: dict, example: dict) -> bool:
    """The same answer but for ``request_id``, each answer's own (32 hex digits in both)."""
    ids = (body.get("request_id", ""), example.get("request_id", ""))
    return all(re.fullmatch(r"[0-9a-f]{32}", i) for i in ids) and \
        {k: v for k, v in body.items() if k != "request_id"} == {k: v for k, v in example.items() if k != "request_id"}


def _raise(message: str):
    raise RuntimeError(message)


async def test_get_root_says_where_things_are(bert_dir, tmp_path, monkeypatch):
    from zsnli.serve import served_extensions

    monkeypatch.setenv("ZSNLI_BAKEOFF_DB", str(tmp_path / "b.sqlite3"))
    from zsnli.serving.app import create_app

    app = create_app(make_settings(bert_dir), loader=cached_loader, extend=served_extensions())
    async with running_app(app) as client:
        index = (await client.get("/")).json()
        page = await client.get("/", headers={"accept": "text/html,application/xhtml+xml"})
    assert page.headers["content-type"].startswith("text/html") and "<a href='/health'>/health</a>" in page.text
    routes = {r["route"]: r["what"] for r in index["routes"]}
    assert index["status"] == "ok" and index["docs"] == "/docs" and index["openapi"] == "/openapi.json"
    for route in ("POST /classify", "POST /v1/zero-shot-classification", "POST /", "GET /health", "GET /metrics",
                  "POST /v1/bakeoff", "GET /bakeoff", "GET /bakeoffs/{bakeoff_id}"):
        assert routes.get(route), route
    assert not any("static" in r for r in routes)
