"""Issue 39 (D): ``ZSNLI_MAX_REQUEST_PAIRS`` counts a request's whole work, not only what the cascade scores.

Before, a cascaded 64 x 256 single-label array counted 64 x keep pairs (192 here) and was accepted under the
default cap of 8,192, although its documents rank all 16,384 (document, label) pairs by cosine and embed
256 labels each; now it is one 413 naming the setting, nothing admitted.
"""

from __future__ import annotations

import pytest
from conftest import cached_loader, make_settings, write_calibration

from zsnli.errors import ApiError, ErrorType
from zsnli.serving.service import ZeroShotClassifier

pytestmark = pytest.mark.anyio

TEXT = "The team won the match after a late goal, and the league title is theirs this season."
CASCADED = dict(rule="entailment", temperature=1.3, k_exponent=-0.2, embedding_weight=4.0,
                cascade={"min_labels": 6, "keep": 3})


@pytest.fixture
async def cascaded(tmp_path, bert_dir, deberta_dir):
    from zsnli.runtime.embedding import embedding_digest

    calib = write_calibration(tmp_path / "calibration.json", **CASCADED, embedding_sha256=embedding_digest(bert_dir))
    service = ZeroShotClassifier(make_settings(deberta_dir, calibration_path=str(calib), embedding_dir=str(bert_dir)),
                                 cached_loader, shutdown_hook=lambda: None)
    await service.start()
    await service.wait_ready(timeout=60)
    yield service
    await service.stop()


async def test_a_cascaded_64_x_256_array_is_413_under_the_default_cap(cascaded):
    settings = cascaded.settings
    assert settings.max_request_pairs == 8192 and settings.max_labels >= 256  # the defaults
    labels = [f"topic number {i}" for i in range(256)]
    docs = [cascaded.preprocess(f"{TEXT} ({i})", labels, None, False) for i in range(64)]
    assert all(d.cascade is not None and d.n_pairs == 3 for d in docs)  # the cascade scores 3 of 256
    assert cascaded.request_work(docs[0]) == 256 + 256  # every pair before the cascade + the label embeddings
    submitted = []
    real = cascaded.state.batcher.submit
    cascaded.state.batcher.submit = lambda items, *a, **k: submitted.append(len(items)) or real(items, *a, **k)
    with pytest.raises(ApiError) as info:
        await cascaded.classify_request(docs)
    err = info.value
    assert err.status == 413 and err.error_type is ErrorType.PAYLOAD_TOO_LARGE and err.field == "body"
    assert "ZSNLI_MAX_REQUEST_PAIRS=8192" in err.message and str(64 * 512) in err.message
    assert submitted == []  # refused before anything was admitted


async def test_the_count_and_a_one_document_request(cascaded, monkeypatch):
    labels = [f"topic number {i}" for i in range(8)]
    cascaded_doc = cascaded.preprocess(TEXT, labels, None, False)
    multi = cascaded.preprocess(TEXT, labels, None, True)  # multi-label: no cosine term, no cascade
    assert cascaded.request_work(cascaded_doc) == 16 and cascaded_doc.n_pairs == 3
    assert cascaded.request_work(multi) == 8 and multi.work(embeds=False) == 8
    # a one-document request is never refused by the cap (as one /classify document is not): even when
    # its work is over it (a content-free premise with the cosine term at ZSNLI_MAX_LABELS labels)
    monkeypatch.setattr(cascaded, "request_work", lambda prep: 10 ** 6)
    answers = await cascaded.classify_request([cascaded_doc])
    assert len(answers) == 1 and len(answers[0]) == len(labels)
    with pytest.raises(ApiError, match="ZSNLI_MAX_REQUEST_PAIRS"):
        await cascaded.classify_request([cascaded_doc, multi])
