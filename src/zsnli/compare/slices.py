"""Slices of the test rows where an arm does worse than on average: declared and discovered.

* **declared** slices come from what the examples file says about each row:
  its dataset, its gold label (``dataset: label``), its length bucket
  (`LENGTH_BUCKETS`), and the value of every extra
  field of the row beyond the format's five (``id``, ``dataset``, ``text``,
  ``labels``, ``label``), e.g. ``"source": "email"``;
* **discovered** slices are word n-grams (1..``ngram_max`` words, English stop
  words dropped; scikit-learn ``CountVectorizer``) present in at least
  ``min_support`` test rows; n-grams covering exactly the same rows are
  merged (the first, most frequent, names them).

A slice is a *finding* for an arm when it has at least ``min_support`` rows
and the top of its 95% Wilson interval (`zsnli.metrics.wilson_interval`) is
below the arm's own accuracy over all test rows; findings are ranked by
gap x sqrt(n) (gap = arm accuracy - slice accuracy), largest first.
Discovered slices are many candidate groups, so expect some chance findings
among them; declared ones are few and fixed in advance.

Imports: numpy, scikit-learn, `zsnli.metrics`, `zsnli.harness.examples`.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Sequence

import numpy as np

from zsnli.metrics import wilson_interval
from zsnli.harness.cli import jsonl_lines
from zsnli.harness.examples import Example

FORMAT_FIELDS = ("id", "dataset", "text", "labels", "label")
DEFAULT_MIN_SUPPORT = 10
DEFAULT_NGRAM_MAX = 2
MAX_DISCOVERED = 300  # most frequent n-gram groups kept as candidates
#: Text-length buckets in whitespace-separated words: (lowest, highest inclusive, name).
LENGTH_BUCKETS = ((0, 15, "1-15 words"), (16, 63, "16-63 words"), (64, 255, "64-255 words"), (256, None, "256+ words"))


@dataclass
class Slice:
    """One group of test rows and one arm's accuracy on it.

    ``kind`` is "declared" or "discovered"; ``facet`` is dataset | label |
    length | meta:FIELD | ngram; ``key`` = "facet=name" (stable across runs,
    what the gate matches on). ``gap`` = arm accuracy - slice accuracy.
    """

    kind: str
    facet: str
    name: str
    key: str
    n: int
    accuracy: float
    low: float
    high: float
    gap: float
    rank_score: float
    finding: bool

    def as_dict(self) -> dict:
        return asdict(self)


def length_bucket(text: str) -> str:
    """The `LENGTH_BUCKETS` name of a text's whitespace word count (empty text joins the first bucket)."""
    words = len(text.split())
    for low, high, name in LENGTH_BUCKETS:
        if words >= low and (high is None or words <= high):
            return name
    return LENGTH_BUCKETS[-1][2]  # pragma: no cover


def read_metadata(path: str | Path, examples: Sequence[Example]) -> list[dict[str, str]]:
    """Per example, its extra scalar fields (beyond `FORMAT_FIELDS`) as strings, read again from the JSONL file.

    Rows are matched by id; lists and objects are skipped. A path that is not
    a plain readable file (``hub:btzsc``, a ``.gz`` file) gives empty dicts:
    no metadata slices for it.
    """
    p = Path(str(path))
    extra: dict[str, dict[str, str]] = {}
    if p.is_file() and p.suffix != ".gz":
        for line in jsonl_lines(p.read_text(encoding="utf-8-sig")):
            if not line.strip():
                continue
            obj = json.loads(line)
            fields = {k: str(v) for k, v in obj.items()
                      if k not in FORMAT_FIELDS and isinstance(v, (str, int, float, bool)) and str(v) != ""}
            extra[repr(obj.get("id"))] = fields
    return [extra.get(repr(e.id), {}) for e in examples]


def declared_groups(examples: Sequence[Example], metadata: Sequence[dict[str, str]] | None = None
                    ) -> dict[tuple[str, str], list[int]]:
    """(facet, name) -> positions in ``examples``, for the declared facets, in first-seen order."""
    groups: dict[tuple[str, str], list[int]] = {}
    for i, e in enumerate(examples):
        groups.setdefault(("dataset", e.dataset), []).append(i)
        groups.setdefault(("label", f"{e.dataset}: {e.labels[e.label]}"), []).append(i)
        groups.setdefault(("length", length_bucket(e.text)), []).append(i)
        for field_name, value in (metadata[i] if metadata else {}).items():
            groups.setdefault((f"meta:{field_name}", value), []).append(i)
    return groups


def discovered_groups(texts: Sequence[str], min_support: int = DEFAULT_MIN_SUPPORT,
                      ngram_max: int = DEFAULT_NGRAM_MAX) -> dict[tuple[str, str], list[int]]:
    """("ngram", n-gram) -> positions of the texts containing it, for n-grams in >= ``min_support`` texts.

    At most `MAX_DISCOVERED` groups (most frequent first); n-grams with the
    same set of texts are one group.
    """
    from sklearn.feature_extraction.text import CountVectorizer

    if len(texts) < max(min_support, 1):
        return {}
    vec = CountVectorizer(ngram_range=(1, ngram_max), stop_words="english", min_df=min_support, binary=True)
    try:
        x = vec.fit_transform(list(texts)).tocsc()
    except ValueError:  # no n-gram reaches min_support
        return {}
    vocab = vec.get_feature_names_out()
    df = np.asarray(x.sum(axis=0)).ravel()
    groups: dict[tuple[str, str], list[int]] = {}
    seen: set[tuple[int, ...]] = set()
    for j in sorted(range(len(vocab)), key=lambda j: (-df[j], vocab[j])):
        rows = tuple(sorted(x.indices[x.indptr[j]:x.indptr[j + 1]].tolist()))
        if rows in seen:
            continue
        seen.add(rows)
        groups[("ngram", str(vocab[j]))] = list(rows)
        if len(groups) >= MAX_DISCOVERED:
            break
    return groups


def score_slices(groups: dict[tuple[str, str], list[int]], correct: Sequence[bool], kind: str,
                 min_support: int = DEFAULT_MIN_SUPPORT) -> list[Slice]:
    """One `Slice` per group, ``correct[i]`` saying whether row i's top-1 label was right.

    ``finding`` is n >= ``min_support`` and Wilson top < the accuracy over all
    rows. Raises ``ValueError`` when ``correct`` is empty.
    """
    hits = np.asarray(correct, dtype=bool)
    if hits.size == 0:
        raise ValueError("no rows to slice")
    mean = float(hits.mean())
    out = []
    for (facet, name), rows in groups.items():
        n = len(rows)
        s = int(hits[rows].sum())
        low, high = wilson_interval(s, n)
        acc = s / n
        gap = mean - acc
        out.append(Slice(kind, facet, name, f"{facet}={name}", n, acc, low, high, gap, gap * math.sqrt(n),
                         bool(n >= min_support and high < mean - 1e-9)))
    return out


def findings(slices: Sequence[Slice]) -> list[Slice]:
    """The slices marked as findings, ranked by gap x sqrt(n), largest first."""
    return sorted((s for s in slices if s.finding), key=lambda s: s.rank_score, reverse=True)
