"""Offline and online agree by construction: `OfflineClassifier.classify_many` and ``POST /classify``
both run `ZeroShotClassifier.classify`; checked here on 200 documents under a calibration with
content-free pairs (issue 17, part 1)."""

from __future__ import annotations

import asyncio

import numpy as np
import pytest
from conftest import CONTENT_FREE_CALIBRATION, cached_loader, corpus_documents, make_settings, running_app, \
    write_calibration

from zsnli.serving.app import create_app
from zsnli.errors import ApiError
from zsnli.serving.offline import OfflineClassifier

N_DOCS = 200


async def _through_http(settings, docs: list[dict]) -> list:
    app = create_app(settings, loader=cached_loader)
    async with running_app(app) as client:
        gate = asyncio.Semaphore(16)

        async def one(doc):
            async with gate:
                r = await client.post("/classify", json=doc)
            return r.json()["probabilities"] if r.status_code == 200 else r.json()

        return list(await asyncio.gather(*(one(d) for d in docs)))


@pytest.mark.anyio
async def test_offline_and_classify_endpoint_agree_on_200_documents(tmp_path, bert_dir):
    calibration = write_calibration(tmp_path / "calibration.json", **CONTENT_FREE_CALIBRATION)
    settings = make_settings(bert_dir, calibration_path=str(calibration))
    docs = corpus_documents(N_DOCS)
    offline = await asyncio.to_thread(_offline, settings, docs)
    online = await _through_http(settings, docs)
    scored = 0
    max_dp = 0.0
    for doc, a, b in zip(docs, offline, online):
        if isinstance(a, ApiError):  # the same refusal, field included
            assert (a.body()["error_type"], a.field) == (b["error_type"], b["field"]), doc["id"]
            continue
        assert len(a) == len(doc["labels"]) and not isinstance(b, dict), doc["id"]
        assert int(np.argmax(a)) == int(np.argmax(b)), doc["id"]
        max_dp = max(max_dp, float(np.max(np.abs(np.asarray(a) - np.asarray(b)))))
        scored += 1
    assert scored >= N_DOCS - 10 and max_dp <= 1e-6


def _offline(settings, docs):
    with OfflineClassifier(settings, loader=cached_loader) as clf:
        assert clf.service.state.scoring.content_free_premise == "N/A"  # the calibration is in force
        return clf.classify_many(docs)
