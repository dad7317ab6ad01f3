"""Issue 39 (A): fairness holds for every kind of a request's work, beside groups that keep joining.

A served single-label request has NLI pairs and embedding items (its text, its labels). Its pairs may
ride in anyone's NLI batch, but an embedding item is only served as an anchor, so it needs its group to
have the smallest tag. Before, the virtual time (where a group joining the line starts) was only the
tag of the last anchor: array requests that kept arriving (a client looping on arrays, or an array's
next document after its last one was taken) joined at it, anchored at it and kept it where it was, so
the small request's tag (the virtual time plus its one NLI row) was never the smallest and its
embedding item waited until the arrays stopped (the issue's 60 s, and "not at all within 120 s").
Now the virtual time advances with the work served (a batch's padded tokens over the groups in line),
and a group that leaves and comes back keeps the tag it had. Deterministic: everything is submitted
before the worker first runs, or from an observer between batches; no clock is read.
"""

from __future__ import annotations

import asyncio

import numpy as np
import pytest

from zsnli.runtime.model import Encoded
from zsnli.serving.batching import Batcher, WorkKind
from zsnli.serving.fair_queue import FairQueue

pytestmark = pytest.mark.anyio

ARRAYS = 30  # array requests that arrive, one after each NLI batch


def enc(tag: int, length: int) -> Encoded:
    return Encoded([tag] + [7] * (length - 1))


class Log:
    """A forward of ``width`` columns that records the first token of each row of each batch, by kind."""

    def __init__(self, batches: list, kind: str, width: int = 3):
        self.batches, self.kind, self.width = batches, kind, width

    def __call__(self, batch):
        self.batches.append((self.kind, [e.input_ids[0] for e in batch]))
        return np.zeros((len(batch), self.width), np.float32)


def batcher(batches: list, token_budget: int = 100_000) -> Batcher:
    kinds = {"text": WorkKind(Log(batches, "text", 4), 4), "label": WorkKind(Log(batches, "label", 4), 4)}
    return Batcher(Log(batches, "nli"), token_budget=token_budget, max_wait_s=0.0, capacity_pairs=100_000,
                   max_padding=0.5, kinds=kinds)


def served_at(batches: list, tag: int) -> int:
    """The index of the batch that held the item whose first token is ``tag``."""
    return next(i for i, (_, rows) in enumerate(batches) if tag in rows)


async def test_every_kind_of_a_small_request_is_served_while_new_arrays_keep_joining():
    batches: list = []
    b = batcher(batches)
    await b.start()
    try:
        arrived = iter(range(ARRAYS))
        # an array request of 16 pairs arrives after each NLI batch (its own group, as in the service)
        b.observers.append(lambda r: r.kind == "nli" and next(
            (b.submit([enc(1000 + 100 * i + j, 24) for j in range(16)], group=object()) for i in arrived), None))
        first = b.submit([enc(900 + j, 24) for j in range(16)], group=object())
        small = object()  # one request: 2 pairs, its text, its 2 labels
        jobs = [b.submit([enc(1, 24), enc(2, 24)], group=small), b.submit([enc(3, 40)], kind="text", group=small),
                b.submit([enc(4, 8), enc(5, 8)], kind="label", group=small)]
        await asyncio.gather(first.result(), *(job.result() for job in jobs))
        # its pairs ride in the first batch; its text and labels each anchor one of the next two
        where = {kind: served_at(batches, tag) for kind, tag in (("nli", 1), ("text", 3), ("label", 4))}
        assert where["nli"] == 0 and max(where.values()) <= 3, (where, batches[:6])
    finally:
        await b.close()


async def test_a_group_that_leaves_and_comes_back_keeps_its_tag():
    """An array request whose documents come one at a time (the next one tokenised while the last is
    computed) has nothing pending between them. Before, it left the line and came back at the last
    anchor's tag after every batch, ahead of the small request's text for all 30 documents."""
    batches: list = []
    b = batcher(batches)
    array, small = object(), object()
    docs = iter(range(ARRAYS))
    b.observers.append(lambda r: r.kind == "nli" and next(
        (b.submit([enc(1000 + 100 * i + j, 24) for j in range(16)], group=array) for i in docs), None))
    await b.start()
    try:
        first = b.submit([enc(900 + j, 24) for j in range(16)], group=array)
        jobs = [b.submit([enc(1, 24)], group=small), b.submit([enc(3, 40)], kind="text", group=small)]
        await asyncio.gather(first.result(), *(job.result() for job in jobs))
        assert served_at(batches, 1) == 0 and served_at(batches, 3) == 1, batches[:4]
    finally:
        await b.close()


def test_a_group_that_left_comes_back_at_its_tag_and_is_forgotten_once_the_virtual_time_passes_it():
    fair = FairQueue()
    many, small, others = object(), object(), [object() for _ in range(8)]
    for group in (many, small, *others):
        fair.add(group, 1)
    assert fair.tag(many) == fair.tag(small) == 0.0
    fair.served(0.0, {many: 100.0, small: 20.0}, in_line=10)  # 120 tokens over 10 groups in line
    assert fair.vtime == 12.0 and fair.tag(many) == 100.0 and fair.tag(small) == 20.0
    fair.remove(many)  # nothing pending: out of line, remembered (100 > 12)
    assert many not in fair and fair.away() == 1
    fair.add(many, 1)  # back: at 100, not at the virtual time (12, ahead of small's 20)
    assert fair.tag(many) == 100.0 > fair.tag(small)
    fair.remove(many)
    newcomer = object()
    fair.add(newcomer, 1)
    assert fair.tag(newcomer) == 12.0  # a new group starts at the virtual time
    fair.served(20.0, {small: 1000.0}, in_line=10)  # the virtual time passes 100: many is forgotten
    assert fair.vtime == 120.0 and fair.away() == 0
    fair.add(many, 1)
    assert fair.tag(many) == 120.0
    with pytest.raises(KeyError):
        fair.tag(object())


async def test_a_text_embedding_waits_one_batch_for_its_kind_not_for_every_group_ahead():
    """Six arrays in line, each filling a batch (16 pairs x 24 tokens = the budget), then a small request
    (one pair, its text). Its group's tag ties theirs and they are older, so with fairness by group alone
    its text waited until all six had anchored (batch 6 or later). The kinds take turns first: the text
    is the next batch after the first NLI one."""
    batches: list = []
    b = batcher(batches, token_budget=16 * 24)
    await b.start()
    try:  # all submitted before the worker first runs
        arrays = [b.submit([enc(1000 + 100 * i + j, 24) for j in range(16)], group=object()) for i in range(6)]
        small = object()
        jobs = [b.submit([enc(1, 24)], group=small), b.submit([enc(3, 40)], kind="text", group=small)]
        await asyncio.gather(*(a.result() for a in arrays), *(job.result() for job in jobs))
        assert served_at(batches, 3) == 1, batches[:3]
        assert [kind for kind, _ in batches].count("text") == 1
        assert sorted(t for kind, rows in batches if kind == "nli" for t in rows) == sorted(
            [1] + [1000 + 100 * i + j for i in range(6) for j in range(16)])  # every pair once
    finally:
        await b.close()


async def test_requests_sending_the_same_items_pay_for_the_rows_they_share():
    """Six clients sending the same array: their identical pairs share rows. Before, the oldest item's
    request paid each row and the others rode free, kept the smallest tags, anchored batch after batch,
    and a small request of another length (it cannot ride in their batches) waited until they were
    done (batch 10 of 10 here). Each sharer now pays its part of the row."""
    batches: list = []
    b = batcher(batches, token_budget=16 * 24)
    await b.start()
    try:
        same = [b.submit([enc(1000 + j, 24) for j in range(160)], group=object()) for _ in range(6)]
        small = b.submit([enc(1, 200)], group=object())  # 200 tokens: never in a 24-token batch (max_padding)
        await asyncio.gather(small.result(), *(job.result() for job in same))
        assert served_at(batches, 1) <= 2, [len(rows) for _, rows in batches]
        assert len(batches) == 11  # 160 distinct rows in 10 batches, and the small one's
    finally:
        await b.close()
