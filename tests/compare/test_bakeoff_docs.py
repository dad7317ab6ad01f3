"""/docs documents POST /v1/bakeoff: its request model, its answers, and an example that runs as it is."""

from __future__ import annotations

import pytest
from bakeoff_support import make_bakeoff_app
from conftest import running_app

pytestmark = pytest.mark.anyio


async def test_bakeoff_is_documented_and_its_example_runs(bert_dir, tmp_path, monkeypatch):
    monkeypatch.setenv("ZSNLI_BAKEOFF_DB", str(tmp_path / "b.sqlite3"))
    monkeypatch.setenv("ZSNLI_RECEIPT_KEY", str(tmp_path / "key.pem"))
    async with running_app(make_bakeoff_app(bert_dir, embedding_dir=str(bert_dir))) as client:
        post = (await client.get("/openapi.json")).json()["paths"]["/v1/bakeoff"]["post"]
        body = post["requestBody"]["content"]["application/json"]
        assert {"task_description", "examples", "labels", "candidates", "challenger_model", "retain"} <= \
            set(body["schema"]["properties"])
        assert "$ref" not in str(body["schema"]) and {"422", "503"} <= set(post["responses"])
        example = body["examples"]["support"]["value"]
        r = await client.post("/v1/bakeoff", json=example)
        assert r.status_code == 200, r.text
        answer = r.json()
        assert answer["n"] == len(example["examples"]) and answer["winner"] in example["candidates"]
