"""zsnli.serving.service without HTTP: start-up, the four classify steps, classify_many across documents, """

from __future__ import annotations

import numpy as np
import pytest
from conftest import cached_loader, direct_probabilities, make_settings

from zsnli.errors import ApiError, ErrorType
from zsnli.serving.service import ZeroShotClassifier, clean_text, fill_template

pytestmark = pytest.mark.anyio

TEXT = "The team won the match after a late goal, and the league title is theirs this season."
LABELS = ["sport", "business", "science", "sport"]
TEMPLATE = "This text is about {}."


async def started(model_dir, **overrides) -> ZeroShotClassifier:
    service = ZeroShotClassifier(make_settings(model_dir, **overrides), cached_loader, shutdown_hook=lambda: None)
    await service.start()
    await service.wait_ready(timeout=60)
    return service


async def test_classify_in_process(model_dir):
    service = await started(model_dir)
    try:
        probs = await service.classify(TEXT, LABELS, TEMPLATE)
        np.testing.assert_allclose(probs, direct_probabilities(service.state.model, TEXT, LABELS, TEMPLATE), atol=1e-6)
        assert probs[0] == probs[3] and abs(sum(probs) - 1) < 1e-9  # duplicates kept, in order
        multi = await service.classify(TEXT, LABELS, TEMPLATE, multi_label=True)
        assert len(multi) == 4 and all(0 <= p <= 1 for p in multi)
    finally:
        await service.stop()


async def test_label_that_does_not_fit_is_a_typed_error_naming_it(bert_dir):
    service = await started(bert_dir)
    try:
        with pytest.raises(ApiError) as info:
            await service.classify(TEXT, ["sport", "sport " * 100])
        assert (info.value.error_type, info.value.field) == (ErrorType.LABEL_TOO_LONG, "labels[1]")
        with pytest.raises(ApiError) as info:
            await service.classify(TEXT, ["sport", "\u200b"])
        assert (info.value.error_type, info.value.field) == (ErrorType.VALIDATION, "labels[1]")
        with pytest.raises(ApiError) as info:
            await service.classify(TEXT, ["a"] * 300)
        assert (info.value.error_type, info.value.field) == (ErrorType.VALIDATION, "labels")
        assert service.state.batcher.admitted_pairs == 0  # nothing left admitted by the refusals
    finally:
        await service.stop()


async def test_classify_many_batches_across_documents(bert_dir):
    service = await started(bert_dir, max_batch_wait_ms=50.0)
    try:
        docs = [{"text": f"{TEXT} {i}", "labels": LABELS[:3], "hypothesis_template": TEMPLATE} for i in range(12)]
        docs.append({"text": TEXT, "candidate_labels": ["sport", "sport " * 100]})
        before = service.state.batcher.stats.batches
        out = await service.classify_many(docs)
        forwards = service.state.batcher.stats.batches - before
        assert forwards < 12  # pairs of several documents share a forward
        for doc, probs in zip(docs[:12], out[:12]):
            np.testing.assert_allclose(probs, direct_probabilities(service.state.model, doc["text"], doc["labels"], TEMPLATE),
                                       atol=1e-5)
        assert isinstance(out[12], ApiError) and out[12].field == "labels[1]"
    finally:
        await service.stop()


async def test_not_ready_is_a_503_error(bert_dir):
    service = ZeroShotClassifier(make_settings(bert_dir), cached_loader, shutdown_hook=lambda: None)
    with pytest.raises(ApiError) as info:
        await service.classify(TEXT, LABELS)
    assert info.value.error_type is ErrorType.LOADING and info.value.headers(1) == {"Retry-After": "1"}


def test_clean_text_and_template():
    assert clean_text("a\ud800b") == "a\ufffdb" and clean_text("plain") == "plain"
    assert fill_template("About {}.", "{} x") == "About {} x." and fill_template(None, "x") == "x"
