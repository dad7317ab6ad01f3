"""zsnli.serving.batching with a fake forward: routing, budget, splitting, faults, cancellation, capacity."""

from __future__ import annotations

import asyncio
import threading

import numpy as np
import pytest

from zsnli.serving.batching import Batcher, BatcherClosed, BatchError, QueueFull, WorkKind
from zsnli.runtime.model import Encoded, pad_to

pytestmark = pytest.mark.anyio


def enc(tag: int, length: int) -> Encoded:
    """A fake pair whose first token is its tag."""
    return Encoded([tag] + [7] * (length - 1))


class FakeForward:
    """Logits row = (tag, length, batch number); records batches; can fail or block."""

    def __init__(self, fail_tag: int | None = None):
        self.batches: list[list[int]] = []
        self.fail_tag = fail_tag
        self.gate: threading.Event | None = None

    def __call__(self, batch):
        if self.gate is not None:
            self.gate.wait(10)
        self.batches.append([e.input_ids[0] for e in batch])
        if self.fail_tag is not None and any(e.input_ids[0] == self.fail_tag for e in batch):
            raise RuntimeError("injected fault")
        n = len(self.batches)
        return np.array([[e.input_ids[0], len(e), n] for e in batch], dtype=np.float32)


async def make(forward, **kw) -> Batcher:
    b = Batcher(forward, **{"token_budget": 256, "max_wait_s": 0.002, "capacity_pairs": 10_000, **kw})
    await b.start()
    return b


async def test_routes_results_in_each_jobs_order():
    fwd = FakeForward()
    b = await make(fwd)
    try:
        jobs = [b.submit([enc(100 * j + i, 1 + (7 * i + j) % 30) for i in range(5)]) for j in range(20)]
        results = await asyncio.gather(*(job.result() for job in jobs))
        for j, res in enumerate(results):
            assert res.shape == (5, 3) and res.dtype == np.float32
            assert res[:, 0].tolist() == [100 * j + i for i in range(5)]
            assert res[:, 1].tolist() == [1 + (7 * i + j) % 30 for i in range(5)]
    finally:
        await b.close()


async def test_budget_respected_and_request_split_across_batches():
    fwd = FakeForward()
    b = await make(fwd, token_budget=64)
    try:
        lengths = [3, 40, 17, 9, 33, 1, 25, 60, 12, 5] * 3
        job = b.submit([enc(i, n) for i, n in enumerate(lengths)])
        res = await job.result()
        assert res[:, 0].tolist() == list(range(len(lengths)))
        assert len(set(res[:, 2].tolist())) > 1  # split over several batches
        assert len(fwd.batches) > 1
        for batch in fwd.batches:
            width = max(pad_to(lengths[t]) for t in batch)
            assert width * len(batch) <= 64 or len(batch) == 1
    finally:
        await b.close()


async def test_batches_pairs_of_concurrent_requests_together():
    fwd = FakeForward()
    b = await make(fwd, token_budget=10_000, max_wait_s=0.05)
    try:
        jobs = [b.submit([enc(j, 10)]) for j in range(30)]
        await asyncio.gather(*(job.result() for job in jobs))
        assert len(fwd.batches) == 1 and sorted(fwd.batches[0]) == list(range(30))
        assert b.stats.max_batch_pairs == 30
    finally:
        await b.close()


async def test_length_homogeneous_batches():
    fwd = FakeForward()
    fwd.gate = threading.Event()
    b = await make(fwd, token_budget=8 * 8)
    try:
        warm = b.submit([enc(999, 8)])  # occupies the worker while the rest queue up
        await asyncio.sleep(0.05)
        short = [b.submit([enc(i, 8)]) for i in range(8)]
        long_ = [b.submit([enc(100 + i, 64)]) for i in range(2)]
        fwd.gate.set()
        await asyncio.gather(warm.result(), *(j.result() for j in short + long_))
        assert sorted(fwd.batches[1]) == list(range(8))  # the 8 short ones fill one batch
        assert all(len(batch) == 1 for batch in fwd.batches[2:])
    finally:
        await b.close()


async def test_fault_fails_only_jobs_in_that_batch_and_worker_survives():
    fwd = FakeForward(fail_tag=666)
    b = await make(fwd, token_budget=32)  # 2 pairs of 16 tokens per batch
    try:
        fwd.gate = threading.Event()
        blocker = b.submit([enc(1, 16)])
        await asyncio.sleep(0.05)
        bad = b.submit([enc(666, 16), enc(667, 16), enc(668, 16)])
        others = [b.submit([enc(10 + i, 16)]) for i in range(6)]
        fwd.gate.set()
        await blocker.result()
        with pytest.raises(BatchError, match="injected fault"):
            await bad.result()
        for job in others:
            res = await job.result()
            assert res.shape == (1, 3)
        # the failed job's remaining pairs were dropped, never computed
        seen = [t for batch in fwd.batches for t in batch]
        assert 667 in seen or 668 in seen or b.stats.dropped_pairs >= 1
        assert b.stats.failed_batches == 1 and b.running
        again = await b.submit([enc(5, 3)]).result()
        assert again[0, 0] == 5
    finally:
        await b.close()


async def test_bad_forward_shape_is_a_batch_error():
    b = await make(lambda batch: np.zeros((len(batch) + 1, 3), np.float32))
    try:
        with pytest.raises(BatchError, match="shape"):
            await b.submit([enc(1, 4)]).result()
        assert b.running
    finally:
        await b.close()


async def test_cancel_drops_queued_pairs():
    fwd = FakeForward()
    fwd.gate = threading.Event()
    b = await make(fwd)
    try:
        first = b.submit([enc(1, 4)])
        await asyncio.sleep(0.05)  # first is now inside the forward
        gone = b.submit([enc(50 + i, 4) for i in range(10)])
        assert b.pending_pairs == 10
        b.cancel(gone)
        assert b.pending_pairs == 0 and b.stats.dropped_pairs == 10
        fwd.gate.set()
        await first.result()
        kept = await b.submit([enc(2, 4)]).result()
        assert kept[0, 0] == 2
        assert not any(50 <= t < 60 for batch in fwd.batches for t in batch)
        assert gone.future.cancelled()
    finally:
        await b.close()


async def test_admission_capacity():
    b = await make(FakeForward(), capacity_pairs=10)
    try:
        with b.admit(6):
            assert b.admitted_pairs == 6
            with pytest.raises(QueueFull):
                with b.admit(5):
                    pass
            with b.admit(4):
                assert b.admitted_pairs == 10
        assert b.admitted_pairs == 0
        assert b.stats.rejected_requests == 1
    finally:
        await b.close()


async def test_single_pair_waits_at_most_a_few_ms():
    import time

    b = await make(FakeForward(), max_wait_s=0.003)
    try:
        t = time.monotonic()
        await b.submit([enc(1, 4)]).result()
        assert time.monotonic() - t < 0.5
    finally:
        await b.close()


async def test_close_fails_pending_jobs():
    fwd = FakeForward()
    fwd.gate = threading.Event()
    b = await make(fwd)
    first = b.submit([enc(1, 4)])
    await asyncio.sleep(0.05)
    queued = b.submit([enc(2, 4)])
    await b.close()
    fwd.gate.set()
    for job in (first, queued):
        with pytest.raises(BatcherClosed):
            await job.result()
    with pytest.raises(BatcherClosed):
        b.submit([enc(3, 4)])


async def test_priority_zero_pairs_go_first_and_never_share_a_batch_with_background_pairs():
    fwd = FakeForward()
    fwd.gate = threading.Event()
    b = await make(fwd, token_budget=64, max_wait_s=0.0)
    try:
        first = b.submit([enc(1, 8)], priority=1)  # occupies the forward thread (gated)
        await asyncio.sleep(0.05)
        background = b.submit([enc(200 + i, 30) for i in range(6)], priority=1)  # 3 batches of 2
        urgent = b.submit([enc(100 + i, 30) for i in range(2)])  # priority 0, arrives later
        fwd.gate.set()
        await asyncio.gather(first.result(), background.result(), urgent.result())
        tags = [[t // 100 for t in batch] for batch in fwd.batches]
        assert tags[0] == [0]  # the batch that was already running
        assert tags[1] == [1, 1]  # the later priority-0 pairs overtake all queued background pairs
        assert all(len(set(batch)) == 1 for batch in tags)
        assert sorted(t for batch in fwd.batches[2:] for t in batch) == [200 + i for i in range(6)]
    finally:
        await b.close()


# --------------------------------------------------------------- kinds of work and identical items


class WideForward(FakeForward):
    """Like FakeForward, with rows of ``width`` columns (column 0 the tag) and its own batch log."""

    def __init__(self, width: int):
        super().__init__()
        self.width = width

    def __call__(self, batch):
        rows = super().__call__(batch)
        return np.pad(rows, ((0, 0), (0, self.width - rows.shape[1])))


async def test_kinds_never_share_a_batch_and_each_gets_its_own_rows():
    nli, embed = FakeForward(), WideForward(5)
    b = await make(nli, token_budget=10_000, max_wait_s=0.05, kinds={"embed": WorkKind(embed, 5)})
    try:
        pairs = b.submit([enc(i, 12) for i in range(4)])
        texts = b.submit([enc(100 + i, 12) for i in range(3)], kind="embed")
        got_pairs, got_texts = await asyncio.gather(pairs.result(), texts.result())
        assert got_pairs.shape == (4, 3) and got_pairs[:, 0].tolist() == [0, 1, 2, 3]
        assert got_texts.shape == (3, 5) and got_texts[:, 0].tolist() == [100, 101, 102]
        assert nli.batches == [[0, 1, 2, 3]] and embed.batches == [[100, 101, 102]]
        assert b.stats.batches_by_kind == {"nli": 1, "embed": 1}
        assert b.pending_pairs == b.pending_items("embed") == 0
        with pytest.raises(KeyError, match="unknown kind"):
            b.submit([enc(1, 4)], kind="nope")
    finally:
        await b.close()
    with pytest.raises(ValueError, match="own forward"):
        Batcher(nli, kinds={"nli": WorkKind(embed, 5)})


async def test_the_oldest_item_of_any_kind_goes_first():
    nli, embed = FakeForward(), WideForward(3)
    nli.gate = threading.Event()
    b = await make(nli, token_budget=10_000, max_wait_s=0.0, kinds={"embed": WorkKind(embed, 3)})
    try:
        first = b.submit([enc(1, 8)])  # occupies the forward thread (gated)
        await asyncio.sleep(0.05)
        order: list[str] = []
        b.observers.append(lambda r: order.append(r.kind))
        texts = b.submit([enc(10, 8)], kind="embed")
        pairs = b.submit([enc(20, 8)])
        nli.gate.set()
        await asyncio.gather(first.result(), texts.result(), pairs.result())
        assert order == ["nli", "embed", "nli"]  # the running batch, then arrival order across kinds
    finally:
        await b.close()


async def test_identical_items_share_one_row_and_the_budget_counts_rows():
    fwd = FakeForward()
    b = await make(fwd, token_budget=2 * 16, max_wait_s=0.05)  # room for two rows of 16 tokens
    try:
        same = [b.submit([enc(7, 16), enc(8, 16)]) for _ in range(5)]  # five requests, the same two items
        results = await asyncio.gather(*(job.result() for job in same))
        for res in results:
            assert res[:, 0].tolist() == [7, 8]
        assert fwd.batches == [[7, 8]]  # computed once, in one batch under the budget
        assert b.stats.pairs == 10 and b.stats.shared_items == 8 and b.stats.padded_tokens == 2 * 16
    finally:
        await b.close()


async def test_without_sharing_every_item_is_its_own_row():
    fwd = FakeForward()
    b = await make(fwd, token_budget=2 * 16, max_wait_s=0.05, share_identical=False)
    try:
        same = [b.submit([enc(7, 16), enc(8, 16)]) for _ in range(3)]
        results = await asyncio.gather(*(job.result() for job in same))
        assert all(res[:, 0].tolist() == [7, 8] for res in results)
        assert sum(len(batch) for batch in fwd.batches) == 6 and all(len(batch) <= 2 for batch in fwd.batches)
        assert b.stats.shared_items == 0
    finally:
        await b.close()


async def test_a_request_cancelled_mid_forward_does_not_take_a_shared_row_from_another():
    fwd = FakeForward()
    fwd.gate = threading.Event()
    b = await make(fwd, token_budget=10_000, max_wait_s=0.02)
    try:
        gone, kept = b.submit([enc(5, 8)]), b.submit([enc(5, 8)])
        await asyncio.sleep(0.1)
        assert b.pending_pairs == 0  # both are in the (gated) forward, sharing one row
        b.cancel(gone)
        fwd.gate.set()
        assert (await kept.result())[0, 0] == 5 and gone.future.cancelled()
        assert fwd.batches == [[5]]
    finally:
        await b.close()


async def test_a_wrong_width_of_another_kind_is_a_batch_error():
    b = await make(FakeForward(), kinds={"embed": WorkKind(WideForward(4), 6)})
    try:
        with pytest.raises(BatchError, match="shape"):
            await b.submit([enc(1, 4)], kind="embed").result()
        assert (await b.submit([enc(2, 4)]).result())[0, 0] == 2  # the worker carries on
    finally:
        await b.close()


@pytest.mark.parametrize("max_padding, batches", [(0.5, [[0, 1, 4], [2, 3]]), (1.0, [[0, 1, 4, 2, 3]]),
                                                 (0.375, [[0, 1, 4], [2, 3]]), (0.25, [[0, 1], [2, 3], [4]])])
async def test_padding_bound_keeps_short_items_out_of_a_long_batch(max_padding, batches):
    """With max_padding 0.5 no row is more than half padding: the 16-token items wait for a batch of
    their own instead of being padded to 64 (1.0: no bound, one batch under the budget)."""
    fwd = FakeForward()
    lengths = [64, 60, 16, 12, 40]  # padded widths 64, 64, 16, 16, 40
    b = await make(fwd, token_budget=10_000, max_wait_s=0.05, max_padding=max_padding)
    try:
        res = await b.submit([enc(i, n) for i, n in enumerate(lengths)]).result()
        assert res[:, 0].tolist() == [0, 1, 2, 3, 4]
        assert fwd.batches == batches
        for batch in fwd.batches:
            widths = [pad_to(lengths[t]) for t in batch]
            assert min(widths) >= (1 - max_padding) * max(widths)
    finally:
        await b.close()
    with pytest.raises(ValueError, match="max_padding"):
        Batcher(fwd, max_padding=1.5)


async def test_a_small_job_waits_about_one_batch_behind_a_large_group():
    """Anchors go to the group (one request's jobs) served the fewest padded tokens: a one-item job
    submitted after a group of 20 pending items is in the second batch after the running one
    (oldest-first put it in the eleventh), and the group still gets every batch after it."""
    fwd = FakeForward()
    fwd.gate = threading.Event()
    b = await make(fwd, token_budget=2 * 8, max_wait_s=0.0)  # two 8-token items per batch
    try:
        first = b.submit([enc(999, 8)])  # occupies the (gated) forward thread
        await asyncio.sleep(0.05)
        request = object()
        big = [b.submit([enc(100 + 10 * j + i, 8) for i in range(4)], group=request) for j in range(5)]
        small = b.submit([enc(1, 8)])
        fwd.gate.set()
        await asyncio.gather(first.result(), small.result(), *(job.result() for job in big))
        where = next(k for k, batch in enumerate(fwd.batches) if 1 in batch)
        assert where == 2, fwd.batches
        assert sum(len(batch) for batch in fwd.batches) == 22 and len(fwd.batches) == 12
    finally:
        await b.close()


async def test_fixed_shapes_batch_one_bucket_of_at_most_its_rows():
    """With fixed shapes a batch holds one width bucket and at most rows(width) items; padded tokens count
    the rows the forward computes (filler rows included)."""
    from zsnli.runtime.shapes import FixedShapes

    shapes = FixedShapes((16, 32, 64), 64)  # rows: 4 of 16, 2 of 32, 1 of 64
    fwd = FakeForward()
    b = await make(fwd, token_budget=64, shapes=shapes)
    try:
        lengths = [3, 20, 10, 40, 5, 30, 12, 2, 16, 17]
        job = b.submit([enc(i, n) for i, n in enumerate(lengths)])
        res = await job.result()
        assert res[:, 0].tolist() == list(range(10))
        for batch in fwd.batches:
            widths = {shapes.width(lengths[t]) for t in batch}
            assert len(widths) == 1 and len(batch) <= shapes.rows(widths.pop())
        assert b.stats.padded_tokens == 64 * len(fwd.batches)
    finally:
        await b.close()
