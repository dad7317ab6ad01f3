"""The app's /classify through the body reader (`zsnli.serving.http_body`): encodings, charsets, duplicate keys, exact ids."""

from __future__ import annotations

import gzip
import json
import zlib

import pytest
from conftest import running_app

pytestmark = pytest.mark.anyio

LABELS = ["sport", "business", "politics"]
BODY = {"id": "r2", "text": "the team won the match", "labels": LABELS}
J = "application/json"


async def _post(client, data: bytes, **headers):
    return await client.post("/classify", content=data, headers={"content-type": J, **headers})


async def test_encodings_and_charsets_score_like_plain_json(bert_dir, make_app):
    raw = json.dumps(BODY).encode()
    async with running_app(make_app(bert_dir)) as client:
        plain = (await _post(client, raw)).json()
        assert len(plain["probabilities"]) == 3
        for data, headers in [
            (gzip.compress(raw), {"content-encoding": "gzip"}),
            (zlib.compress(raw), {"content-encoding": "deflate"}),
            (raw, {"content-encoding": "identity"}),
            (raw.decode().encode("utf-16-le"), {"content-type": f"{J}; charset=utf-16le"}),
            (b"\xff\xfe\x00\x00" + raw.decode().encode("utf-32-le"), {}),
        ]:
            r = await _post(client, data, **headers)
            assert r.status_code == 200, (headers, r.text)
            assert r.json() == plain


@pytest.mark.parametrize("data,headers,status,field,error_type", [
    (json.dumps(BODY).encode(), {"content-encoding": "gzip"}, 400, "content-encoding", "invalid_encoding"),
    (json.dumps(BODY).encode(), {"content-encoding": "br"}, 415, "content-encoding", "unsupported_media_type"),
    (gzip.compress(json.dumps(BODY).encode())[:-4], {"content-encoding": "gzip"}, 400, "content-encoding",
     "invalid_encoding"),
    (json.dumps(BODY).encode(), {"content-type": f"{J}; charset=latin-1"}, 415, "content-type",
     "unsupported_media_type"),
    (b'{"id":"r2","text":"x","labels":["sport","business","politics"],"labels":["business","sport"]}', {}, 422,
     "labels", "validation"),
    (b'{"text":"x","text":"y","labels":["a"]}', {}, 422, "text", "validation"),
    (b'{"text":"x","labels":["a"],"hypothesis_template":"{}","hypothesis_template":"It is {}."}', {}, 422,
     "hypothesis_template", "validation"),
])
async def test_body_errors_are_json_naming_the_header_or_field(bert_dir, make_app, data, headers, status, field,
                                                               error_type):
    async with running_app(make_app(bert_dir)) as client:
        r = await _post(client, data, **headers)
        assert r.status_code == status, r.text
        err = r.json()
        assert (err["field"], err["error_type"]) == (field, error_type)
        if status == 422:
            assert err["errors"][0]["field"] == field


async def test_gzip_expanding_past_the_limit_is_413(bert_dir, make_app):
    big = json.dumps({**BODY, "text": "a " * 50_000}).encode()
    async with running_app(make_app(bert_dir, max_body_bytes=10_000)) as client:
        r = await _post(client, gzip.compress(big), **{"content-encoding": "gzip"})
        assert r.status_code == 413 and r.json()["error_type"] == "payload_too_large"


@pytest.mark.parametrize("text", ["1e-400", "0.10", "1E+2", "-0.0", "-0", "0", "-7", "12345678901234567890123"])
async def test_numeric_id_is_echoed_exactly(bert_dir, make_app, text):
    async with running_app(make_app(bert_dir)) as client:
        r = await _post(client, b'{"id":' + text.encode() + b',"text":"x","labels":["a","b"]}')
        assert r.status_code == 200 and r.text.startswith('{"id":' + text + ","), r.text
        assert len(r.json()["probabilities"]) == 2
        r = await _post(client, b'{"id":7,"text":"x","labels":["a"]}')
        assert r.json()["id"] == 7
