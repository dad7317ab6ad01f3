"""Issue 39 (5): a kept label embedding costs the same whatever the label's length, and the cache's
``nbytes`` (shown on /metrics) is what the entries hold, measured with tracemalloc."""

from __future__ import annotations

import gc
import tracemalloc

import numpy as np
import pytest

from zsnli.runtime.model import Encoded
from zsnli.serving.label_cache import LabelEmbeddings, label_key

DIM = 384  # all-MiniLM-L6-v2
ENTRIES = 500


def fill(length: int) -> tuple[float, LabelEmbeddings]:
    """Bytes per entry held after ``ENTRIES`` labels of ``length`` tokens are kept and the requests'
    own token lists are gone (as after the requests are answered)."""
    gc.collect()
    tracemalloc.start()
    try:
        cache = LabelEmbeddings(10 * ENTRIES)
        base = tracemalloc.get_traced_memory()[0]
        items = [Encoded([int(x) for x in np.arange(length) + 1000 + 7 * i]) for i in range(ENTRIES)]
        found, computed = cache.lookup(items)
        cache.complete(items, found, computed, np.ones((ENTRIES, DIM), np.float32))
        del items, found, computed
        gc.collect()
        return (tracemalloc.get_traced_memory()[0] - base) / ENTRIES, cache
    finally:
        tracemalloc.stop()


def test_an_entry_costs_the_same_for_a_short_and_a_window_long_label():
    short, cache = fill(10)
    long, _ = fill(512)
    assert abs(long - short) < 0.05 * short, (short, long)
    # the vector (1,536 bytes) and a little bookkeeping; keyed by the ids themselves it was 22,000 at 512
    assert DIM * 4 < long < 2.0 * 1024, long
    assert len(cache) == ENTRIES
    assert cache.nbytes / ENTRIES == pytest.approx(short, rel=0.10), (cache.nbytes / ENTRIES, short)


def test_nbytes_follows_what_is_kept_and_dropped():
    cache = LabelEmbeddings(2)
    items = [Encoded([1, i, 2]) for i in range(3)]
    found, computed = cache.lookup(items)
    cache.complete(items, found, computed, np.ones((3, DIM), np.float32))
    assert len(cache) == 2
    two = cache.nbytes
    cache.complete(items[:1], *cache.lookup(items[:1]), np.ones((1, DIM), np.float32))  # re-kept: no growth
    assert len(cache) == 2 and cache.nbytes == two
    off = LabelEmbeddings(0)
    off.complete(items, *off.lookup(items), np.ones((3, DIM), np.float32))
    assert off.nbytes == 0 and len(off) == 0


def test_the_key_tells_ids_and_segment_ids_apart_and_is_16_bytes():
    plain = Encoded([5, 6, 7])
    typed = Encoded([5, 6, 7], token_type_ids=[0, 0, 0])
    assert len(label_key(plain)) == len(label_key(Encoded(list(range(512))))) == 16
    assert label_key(plain) != label_key(typed) != label_key(Encoded([5, 6, 7], token_type_ids=[0, 1, 1]))
    assert label_key(plain) == label_key(Encoded([5, 6, 7]))
