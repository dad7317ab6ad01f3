"""Fixed forward shapes: the rule that makes a row's answer independent of the rest of its batch.

A GEMM's result for one row depends only on that row's inputs *given the
shapes*: change the batch's width or row count and the library may pick other
kernels, blocking or thread splits, which round differently. In fp32 that
moves probabilities by about 1e-6; in bf16 every layer's output is rounded to
8 bits of mantissa, so a different kernel can move them by 1e-2. With fixed
shapes every forward of a width sees exactly one shape, whatever the batch
holds:

* **width**: a sequence of n tokens runs in the smallest bucket of `FixedShapes.widths`
  that holds it (default `WIDTH_BUCKETS`, capped at the model window: the window
  itself is the last bucket), right-padded with the pad token and a zero attention mask;
* **rows**: every forward of a bucket of width w has exactly ``rows(w)`` =
  max(1, min(token_budget // w, max_rows)) rows; a batch with fewer real rows is filled with
  copies of its last real row (dropped on the device afterwards), a batch with more is
  split into forwards of ``rows(w)`` rows.

On an accelerator every bucket runs the rows of the widest one, ``max_rows`` = `accelerator_rows`
(token_budget // 512: 8 rows at the default 4,096 tokens, so a forward is 8 x 16 to 8 x 512 tokens):
at concurrency 32 a bucket rarely holds more real rows than that when a forward starts (a GPU drains
the queue faster than requests fill it), and each missing row is a filler row computed for nothing.
Measured on the fake accelerator, 300 public documents at concurrency 32: the padded tokens per real
token fell from 36x (16,384 tokens, no cap) to 1.8x with real forwards and 2.2x with simulated ones
(docs/performance.md, issue 58). On a CPU there is no cap (``max_rows`` None: rows = token_budget // w).

So a request scored alone and the same request among 31 others see the same
kernels in the same order (measured: 0.0 difference on the shipped model in
fp32 and bf16, docs/performance.md); the price is the filler rows of a partly
filled forward. `FixedShapes.chunks` is the split, `FixedShapes.fill` the padding;
`zsnli.runtime.model.NliModel.logits` and `zsnli.runtime.embedding.SentenceEncoder.embed`
apply them when given a `FixedShapes`, and `zsnli.serving.batching.Batcher` forms batches of one
bucket of at most ``rows(w)`` rows so that they waste nothing when the queue is full.

May import: numpy. Imported by `zsnli.runtime.model`, `zsnli.runtime.embedding`, `zsnli.serving.batching`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

import numpy as np

#: Default width buckets in tokens (special tokens included); the window is always added as the last.
WIDTH_BUCKETS = (16, 32, 48, 64, 96, 128, 192, 256, 384, 512)
#: On an accelerator every forward in fixed shapes has the rows of a forward this wide (module docstring).
ROWS_REFERENCE_WIDTH = 512


def accelerator_rows(token_budget: int) -> int:
    """Rows of every fixed-shape forward on an accelerator: max(1, token_budget // `ROWS_REFERENCE_WIDTH`),
    8 for the default budget of 4,096 tokens (`zsnli.runtime.model.ACCELERATOR_TOKEN_BUDGET`)."""
    return max(1, int(token_budget) // ROWS_REFERENCE_WIDTH)


@dataclass(frozen=True)
class FixedShapes:
    """The forward shapes of one runtime.

    widths: the width buckets in tokens, ascending, the last one >= every sequence the runtime
        sees (`for_window` builds it from a window). token_budget: padded tokens per forward, at most;
        max_rows: rows per forward, at most (None: no cap); a bucket of width w runs ``rows(w)`` =
        max(1, min(token_budget // w, max_rows)) rows.
    Raises ``ValueError`` on an empty, unsorted or non-positive ``widths``, a budget < 1 or max_rows < 1.
    """

    widths: tuple[int, ...]
    token_budget: int
    max_rows: int | None = None

    def __post_init__(self) -> None:
        w = tuple(int(x) for x in self.widths)
        if not w or any(x < 1 for x in w) or list(w) != sorted(set(w)):
            raise ValueError(f"fixed-shape widths must be distinct positive ascending integers, got {self.widths!r}")
        if int(self.token_budget) < 1:
            raise ValueError(f"fixed-shape token budget must be >= 1, got {self.token_budget!r}")
        if self.max_rows is not None and int(self.max_rows) < 1:
            raise ValueError(f"fixed-shape max_rows must be >= 1 or None, got {self.max_rows!r}")
        object.__setattr__(self, "widths", w)

    @classmethod
    def for_window(cls, window: int, token_budget: int, buckets: Sequence[int] = WIDTH_BUCKETS,
                   max_rows: int | None = None) -> "FixedShapes":
        """``buckets`` below ``window`` plus ``window`` itself: every sequence of the runtime has a bucket."""
        return cls(tuple(b for b in buckets if b < window) + (int(window),), int(token_budget), max_rows)

    def width(self, n: int) -> int:
        """The bucket of a sequence of ``n`` tokens. Raises ``ValueError`` when ``n`` exceeds the last bucket."""
        for w in self.widths:
            if n <= w:
                return w
        raise ValueError(f"a sequence of {n} tokens is longer than the largest fixed-shape width {self.widths[-1]}")

    def rows(self, width: int) -> int:
        """Rows of every forward of bucket ``width``: max(1, min(token_budget // width, max_rows))."""
        rows = self.token_budget // int(width)
        return max(1, rows if self.max_rows is None else min(rows, self.max_rows))

    def chunks(self, lengths: Sequence[int]) -> list[tuple[int, list[int]]]:
        """Split items (their token counts) into forwards: ``[(width, [item index, ...]), ...]``, each
        of one bucket and at most ``rows(width)`` items, the items in input order within a bucket."""
        by_width: dict[int, list[int]] = {}
        for i, n in enumerate(lengths):
            by_width.setdefault(self.width(n), []).append(i)
        out = []
        for w in sorted(by_width):
            idx, step = by_width[w], self.rows(w)
            out.extend((w, idx[k:k + step]) for k in range(0, len(idx), step))
        return out

    def fill(self, inputs: Mapping[str, np.ndarray], width: int, pad_token_id: int) -> dict[str, np.ndarray]:
        """Pad collated ``[B, W]`` arrays (``input_ids``, ``attention_mask``, optional ``token_type_ids``;
        W <= ``width``, B <= ``rows(width)``) to ``[rows(width), width]``: columns with ``pad_token_id``
        (ids) or 0, rows with copies of the last row. The caller keeps the first B output rows.
        Raises ``ValueError`` when B or W is too large or B is 0."""
        b, w = inputs["input_ids"].shape
        rows = self.rows(width)
        if b < 1 or b > rows or w > width:
            raise ValueError(f"a batch of {b} x {w} does not fit the fixed shape {rows} x {width}")
        out = {}
        for key, arr in inputs.items():
            value = pad_token_id if key == "input_ids" else 0
            arr = np.pad(arr, ((0, 0), (0, width - w)), constant_values=value)
            out[key] = np.concatenate([arr, np.repeat(arr[-1:], rows - b, axis=0)]) if rows > b else arr
        return out
