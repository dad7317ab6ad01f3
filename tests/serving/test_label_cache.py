"""Label embeddings kept across requests (zsnli.serving.label_cache): the store, and the service using it."""

from __future__ import annotations

import numpy as np
import pytest

from zsnli.runtime.model import Encoded
from zsnli.serving.label_cache import LabelEmbeddings


def _item(*ids):
    return Encoded(list(ids))


def test_lookup_returns_kept_vectors_and_each_missing_item_once():
    cache = LabelEmbeddings(8)
    a, b = _item(1, 2), _item(3)
    found, todo = cache.lookup([a, b, _item(1, 2)])
    assert found == [None, None, None] and [t.input_ids for t in todo] == [[1, 2], [3]]
    out = cache.complete([a, b, _item(1, 2)], found, todo, np.array([[1.0, 0.0], [0.0, 1.0]]))
    np.testing.assert_array_equal(out, [[1, 0], [0, 1], [1, 0]])
    found, todo = cache.lookup([_item(3), _item(4)])
    assert todo == [_item(4)] and found[0].tolist() == [0.0, 1.0] and found[1] is None
    out = cache.complete([_item(3), _item(4)], found, todo, np.array([[0.5, 0.5]]))
    np.testing.assert_array_equal(out, [[0, 1], [0.5, 0.5]])
    assert (cache.hits, cache.misses, len(cache)) == (1, 4, 3)


def test_the_least_recently_used_go_first_and_zero_keeps_nothing():
    cache = LabelEmbeddings(2)
    for ids in ((1,), (2,)):
        found, todo = cache.lookup([_item(*ids)])
        cache.complete([_item(*ids)], found, todo, np.ones((1, 2)))
    cache.lookup([_item(1)])  # (1,) is now the most recent
    found, todo = cache.lookup([_item(3)])
    cache.complete([_item(3)], found, todo, np.ones((1, 2)))
    assert [f is None for f in cache.lookup([_item(1), _item(2), _item(3)])[0]] == [False, True, False]
    off = LabelEmbeddings(0)
    found, todo = off.lookup([_item(1)])
    off.complete([_item(1)], found, todo, np.ones((1, 2)))
    assert len(off) == 0 and off.lookup([_item(1)])[1] == [_item(1)]
    with pytest.raises(ValueError, match=">= 0"):
        LabelEmbeddings(-1)
    with pytest.raises(ValueError, match="1 label embeddings expected"):
        LabelEmbeddings(2).complete([_item(1)], [None], [_item(1)], np.ones((2, 2)))


async def _twice(tmp_path, bert_dir, deberta_dir, docs, **settings):
    """``classify_many(docs)`` twice on one service (entailment + cosine calibration, the bert model as the
    encoder): both passes' answers, the batcher's items and label forwards in the second pass, and the label
    cache (an empty one when ``label_cache_entries=0``)."""
    from conftest import write_calibration
    from test_service import started

    from zsnli.runtime.embedding import embedding_digest

    calib = write_calibration(tmp_path / "calibration.json", rule="entailment", embedding_weight=4.0,
                              embedding_sha256=embedding_digest(bert_dir))
    service = await started(deberta_dir, calibration_path=str(calib), embedding_dir=str(bert_dir), **settings)
    try:
        stats = service.state.batcher.stats
        first = await service.classify_many(docs)
        items, label_batches = stats.pairs, stats.batches_by_kind.get("embedding_label", 0)
        second = await service.classify_many(docs)
        return (first, second, stats.pairs - items, stats.batches_by_kind.get("embedding_label", 0) - label_batches,
                service.state.label_cache)
    finally:
        await service.stop()


@pytest.mark.anyio
async def test_kept_label_embeddings_answer_as_computed_ones_and_skip_the_encoder(tmp_path, bert_dir, deberta_dir):
    from conftest import corpus_documents

    docs = corpus_documents(12)
    k1, k2, kept_items, kept_forwards, cache = await _twice(tmp_path, bert_dir, deberta_dir, docs)
    f1, f2, fresh_items, fresh_forwards, off = await _twice(tmp_path, bert_dir, deberta_dir, docs, label_cache_entries=0)
    for a, b in zip(k1 + k2, f1 + f2):
        assert np.abs(np.array(a) - np.array(b)).max() <= 1e-6
    assert kept_forwards == 0 and fresh_forwards > 0  # the second pass embedded no label
    assert 0 < fresh_items - kept_items <= cache.hits and len(off) == 0
