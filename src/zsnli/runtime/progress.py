"""Progress for long offline work (calibration, evaluation): what is done, how fast, how long is left.

On a terminal a tqdm bar on stderr; otherwise (a log file, CI) one plain
log line at most every `LINE_INTERVAL_S` seconds plus one at the end, so
logs get neither silence nor carriage-return noise. `predict_logits` runs
a model's own offline ``predict_logits`` under such a progress report (the
model reports its planned and finished tokens through ``on_plan``); `encode_texts`
does the same for a sentence encoder's ``encode`` (through ``on_batch``).

May import tqdm; torch only through the model passed in.
"""

from __future__ import annotations

import logging
import sys
import time
from contextlib import ExitStack, contextmanager
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
    the remaining time is estimated fairly although the longest pairs run first;
    the model reports them through its ``on_plan`` hook
    (`zsnli.runtime.model.NliRuntime.predict_logits`), so the batches and logits are
    exactly those of a call without progress. Raises ``ValueError`` as
    ``predict_logits`` does.
    """
    with ExitStack() as stack:
        def on_plan(total_tokens: int):
            return stack.enter_context(progress(total_tokens, f"{desc} ({len(premises)} pairs)", unit="tokens"))

        return nli.predict_logits(premises, hypotheses, token_budget=token_budget, on_plan=on_plan)


def encode_texts(encoder, texts: Sequence[str], desc: str) -> np.ndarray:
    """``encoder.encode(texts)`` (a `zsnli.runtime.embedding.SentenceEncoder`) with progress counted in texts:
    float32 ``[N, D]`` in input order, the same vectors as a call without progress."""
    with progress(len(texts), f"{desc} ({len(texts)} texts)", unit="texts") as advance:
        return encoder.encode(texts, on_batch=advance)
