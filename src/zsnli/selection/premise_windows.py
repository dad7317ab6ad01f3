"""Long premises read as overlapping windows (issue 30, item 4): a measurement of long-document reading for
``train.py select --premise-windows`` and the pair cache (`zsnli.selection.score_cache`), not what the server does.

`PremiseWindows` is the ``WINDOW:OVERLAP:RULE`` setting; `window_logits` scores each (premise window, hypothesis)
pair with the server's model code (`NliRuntime.premise_windows` at `NliRuntime.premise_width`) and folds the windows'
logits into one row per pair (`zsnli.scoring.aggregate_window_logits`).

May import numpy, `zsnli.selection.devsets` (the `DevSet` type), and inside functions `zsnli.scoring` and
`zsnli.runtime.progress`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .devsets import DevSet


class PremiseWindowsError(ValueError):
    """A `PremiseWindows` window cannot hold a set's pairs (its longest hypothesis leaves no premise token)."""


@dataclass(frozen=True)
class PremiseWindows:
    """Long premises read as overlapping windows (issue 30, item 4), written ``WINDOW:OVERLAP:RULE``.

    window: the pair window in tokens, special tokens and the request's longest hypothesis included (128:
    the length the model was trained at); overlap: the fraction of a window shared with the next one;
    rule: how the windows' logits fold into one row per pair (`zsnli.scoring.WINDOW_RULES`); max_tokens:
    the premise tokens read at most (the rest is cut, as the 512-token window cuts the uncut premise).
    """

    window: int
    overlap: float
    rule: str
    max_tokens: int = 2048

    @classmethod
    def parse(cls, text: str) -> "PremiseWindows":
        """``"128:0.5:max"`` -> PremiseWindows; ``ValueError`` naming the text when it is not of that form."""
        from ..scoring import WINDOW_RULES

        parts = text.split(":")
        try:
            window, overlap, rule = int(parts[0]), float(parts[1]), parts[2]
            if len(parts) != 3:
                raise IndexError
        except (IndexError, ValueError):
            raise ValueError(f"--premise-windows expects WINDOW:OVERLAP:RULE such as 128:0.5:max, got {text!r}") from None
        if window < 8 or not 0.0 <= overlap < 1.0 or rule not in WINDOW_RULES:
            raise ValueError(f"--premise-windows {text!r}: WINDOW >= 8, 0 <= OVERLAP < 1 and RULE one of "
                             f"{', '.join(WINDOW_RULES)} expected")
        return cls(window, overlap, rule)

    def __str__(self) -> str:
        return f"{self.window}:{self.overlap:g}:{self.rule}"

    def windows_of(self, nli, ds: DevSet) -> list[list[str]]:
        """Each row's premise windows (``NliRuntime.premise_windows`` at the row's `NliRuntime.premise_width`).
        Raises `PremiseWindowsError` when a row's hypotheses leave no room for a premise in the window."""
        out = []
        for text, hyps in zip(ds.texts, ds.hypotheses):
            width = nli.premise_width(hyps, self.window)
            if width < 1:
                raise PremiseWindowsError(f"--premise-windows {self}: {ds.name} has a hypothesis that leaves no "
                                          f"premise token in a {self.window}-token window; give a larger WINDOW")
            out.append(nli.premise_windows(text, width, self.overlap, self.max_tokens))
        return out


def window_logits(nli, ds: DevSet, windows: PremiseWindows, desc: str) -> tuple[np.ndarray, int]:
    """float32 ``[P, C]``: each pair's logits from its premise's windows (`PremiseWindows`), in `compute_set`'s
    pair order, and the number of (window, hypothesis) pairs scored."""
    from ..runtime.progress import predict_logits
    from ..scoring import aggregate_window_logits

    premises, hyps, owner = [], [], []
    pair = 0
    for row_windows, row_hyps in zip(windows.windows_of(nli, ds), ds.hypotheses):
        for h in row_hyps:
            premises += row_windows
            hyps += [h] * len(row_windows)
            owner += [pair] * len(row_windows)
            pair += 1
    logits = predict_logits(nli, premises, hyps, desc=desc)
    return aggregate_window_logits(logits, np.asarray(owner), pair, windows.rule, nli.entail_idx), len(premises)
