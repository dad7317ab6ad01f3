"""Progress for long offline work (calibration, evaluation): what is done, how fast, how long is left.

On a terminal a tqdm bar on stderr; otherwise (a log file, CI) one plain
log line at most every `LINE_INTERVAL_S` seconds plus one at the end, so
logs get neither silence nor carriage-return noise. `predict_logits` runs
a model's offline forward batch by batch under such a progress report, with
exactly the batches (and so exactly the logits) of the model's own
``predict_logits``.

May import tqdm and `zsnli.model` (batch planning); torch only through the model passed in.
"""

from __future__ import annotations

import logging
import sys
import time
from contextlib import contextmanager
from typing import Callable, Iterator, Sequence

import numpy as np

log = logging.getLogger(__name__)

LINE_INTERVAL_S = 15.0
"""Seconds between plain progress lines when stderr is not a terminal."""


@contextmanager
def progress(total: int, desc: str, unit: str = "pairs") -> Iterator[Callable[[int], None]]:
    """Yield ``advance(n)``, reporting ``n`` more of ``total`` units done.

    tqdm when stderr is a terminal; otherwise an INFO log line
    ``"<desc>: done/total unit (pct), rate/s, ~eta s left"`` every
    `LINE_INTERVAL_S` seconds and one when the block ends.
    """
    if sys.stderr.isatty():
        from tqdm.auto import tqdm

        with tqdm(total=total, desc=desc, unit=f" {unit}", unit_scale=True, dynamic_ncols=True) as bar:
            yield bar.update
        return
    start = last = time.monotonic()
    done = 0

    def line() -> None:
        elapsed = max(time.monotonic() - start, 1e-9)
        rate = done / elapsed
        eta = (total - done) / rate if rate > 0 else float("nan")
        log.info("%s: %d/%d %s (%.0f%%), %.1f/s, ~%.0f s left", desc, done, total, unit,
                 100.0 * done / max(total, 1), rate, eta)

    def advance(n: int) -> None:
        nonlocal done, last
        done += n
        if time.monotonic() - last >= LINE_INTERVAL_S:
            last = time.monotonic()
            line()

    yield advance
    line()


def predict_logits(nli, premises: Sequence[str], hypotheses: Sequence[str], desc: str,
                   token_budget: int | None = None) -> np.ndarray:
    """``nli.predict_logits(premises, hypotheses)`` with progress: float32 ``[N, C]`` in input order.

    Progress is counted in tokens (pairs x their batch's longest length), so
    the remaining time is estimated fairly although the longest pairs run first.

    The pairs are planned into the same length-sorted batches as
    `zsnli.model.NliModel.predict_logits` (`zsnli.model.plan_batches`
    under the same token budget) and each batch is passed to it on its own,
    so every logit is computed in the same batch as without progress.
    Raises ``ValueError`` as ``predict_logits`` does (a hypothesis that does
    not fit the model window, lists of different lengths).
    """
    from .model import default_token_budget, plan_batches

    n = len(premises)
    if n != len(hypotheses):
        raise ValueError(f"{n} premises but {len(hypotheses)} hypotheses")
    out = np.zeros((n, nli.num_labels), dtype=np.float32)
    if n == 0:
        return out
    budget = token_budget or default_token_budget(nli.device)
    uniq = list(dict.fromkeys(hypotheses))
    limit = nli.max_hypothesis_tokens()
    unfit = [h for h, length in zip(uniq, nli.hypothesis_lengths(uniq)) if length > limit]
    if unfit:  # let the model raise its own ValueError for the first one
        nli.predict_logits([premises[list(hypotheses).index(unfit[0])]], [unfit[0]])
    lengths = [len(e) for e in nli.encode(premises, hypotheses)]
    batches = plan_batches(lengths, budget)
    cost = [len(idx) * max(lengths[i] for i in idx) for idx in batches]  # tokens: the longest pairs come first
    with progress(sum(cost), f"{desc} ({n} pairs)", unit="tokens") as advance:
        for idx, tokens in zip(batches, cost):
            out[idx] = nli.predict_logits([premises[i] for i in idx], [hypotheses[i] for i in idx], token_budget=budget)
            advance(tokens)
    return out
