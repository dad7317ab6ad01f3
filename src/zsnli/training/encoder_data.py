"""zsc-train rows as (text, own class's hypothesis) examples for the sentence encoder, and their batches.

`build_encoder_data` reads the classification sets (`zsnli.training.zsc_nli`: the same files,
hypotheses, exclusions and licences as the NLI builder) into one example per text: the text and
the hypothesis of its class (a binary property set's negated class has the negated hypothesis,
e.g. "This tweet is not sarcastic.", as its own). `batch_candidates` turns a batch into the
candidates of the in-batch contrastive loss (`zsnli.training.encoder.in_batch_loss`):

* the DISTINCT hypotheses of the batch's rows, so two rows of the same class share one
  candidate and neither is the other's negative (naive in-batch negatives, one candidate per
  row as in sentence-transformers' MultipleNegativesRankingLoss, would push a text away from
  its own class's hypothesis whenever that class occurs twice in the batch);
* plus every hypothesis of each set in the batch (its other classes: the zero-shot choice the
  encoder is served for, and for a binary set the negation of the row's own hypothesis).

``negatives="batch"`` lets every candidate compete for every row (other sets' hypotheses are
negatives too); ``"own-set"`` keeps, for each row, only its own set's hypotheses;
``"label-subsets"`` keeps, for each row, its own hypothesis and a random subset of the others
(`label_subset`: 2 to `MAX_SUBSET_LABELS` candidates in all, the label-set augmentation GLiClass
trains with), so the encoder sees label sets of every size, as requests bring them.

For ``train.py encoder --loss margin-mse`` (`zsnli.training.encoder.margin_mse_loss`) the teacher scores
`own_set_pairs`: each text against every hypothesis of its own set, the raw text and hypothesis strings the
encoder itself reads (so the cache's pairs are exactly the encoder's); `own_set_scores` gives each example
its set's scores as the ``teacher`` column, and the collator places them on the batch's candidates
(`teacher_matrix`). Only own-set hypotheses get a teacher score: they are among every row's candidates
whatever the batch holds, while the other sets' candidates change with the random batches (scoring those
would mean every text against every hypothesis).

May import the standard library and `zsnli.training.zsc_nli`, `zsnli.training.nli_data` (Source,
DataError); torch only inside `EncoderCollator.__call__`.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field
from typing import Any, Sequence

from .nli_data import DataError, Source
from .zsc_nli import normalise_text, read_zsc_set

NEGATIVES = ("batch", "own-set", "label-subsets")

MAX_SUBSET_LABELS = 50
"""The largest label set `label_subset` draws (GLiClass's augmentation draws 2 to 50 labels)."""


@dataclass
class EncoderData:
    """The training examples: ``texts[i]`` with target hypothesis ``hypotheses[hyp_ids[i]]`` from set ``set_ids[i]``.

    hypotheses: the distinct hypothesis texts of all sets (a text shared by two sets is one entry);
    set_names, set_hypotheses: per set, its name and its classes' hypothesis ids (class order);
    counts: per set rows read / dropped as overlap / used, task kind and licence (for the manifest).
    """

    texts: list[str]
    hyp_ids: list[int]
    set_ids: list[int]
    hypotheses: list[str]
    set_names: list[str]
    set_hypotheses: list[tuple[int, ...]]
    counts: dict[str, Any] = field(default_factory=dict)


def build_encoder_data(sources: Sequence[Source], exclude: set[str] | None = None) -> EncoderData:
    """One example per text of every set in ``sources`` (kind ``"zsc"``), in file order.

    A text whose `zsnli.training.zsc_nli.normalise_text` is in ``exclude`` (the choosing and
    reporting data, `zsnli.training.zsc_nli.texts_of`) is dropped and counted. Raises `DataError`
    for an unreadable set or when nothing is left.
    """
    exclude = exclude or set()
    hyp_index: dict[str, int] = {}
    data = EncoderData([], [], [], [], [], [], {"sets": {}})
    for set_id, src in enumerate(sources):
        zset = read_zsc_set(src.path)
        ids = tuple(hyp_index.setdefault(h, len(hyp_index)) for h in zset.hypotheses)
        data.set_names.append(src.name)
        data.set_hypotheses.append(ids)
        kept = 0
        for text, gold in zip(zset.texts, zset.labels):
            if normalise_text(text) in exclude:
                continue
            data.texts.append(text)
            data.hyp_ids.append(ids[gold])
            data.set_ids.append(set_id)
            kept += 1
        data.counts["sets"][src.name] = {"rows": len(zset.texts), "dropped_overlap": len(zset.texts) - kept,
                                         "rows_used": kept, "classes": len(zset.classes),
                                         "task_kind": zset.task_kind, "licence": src.licence}
    data.hypotheses = list(hyp_index)
    data.counts["texts"] = len(data.texts)
    data.counts["hypotheses"] = len(data.hypotheses)
    if not data.texts:
        raise DataError("no classification text left to train the encoder on (every set empty or excluded)")
    return data


def batch_candidates(hyp_ids: Sequence[int], set_ids: Sequence[int], set_hypotheses: Sequence[Sequence[int]],
                     negatives: str = "batch") -> tuple[list[int], list[int], list[list[bool]] | None]:
    """The candidates of one batch: ``(candidate hypothesis ids, target per row, allowed or None)``.

    Candidates: the distinct ids of ``hyp_ids`` in first-seen order, then the other hypotheses
    of each set in ``set_ids`` (see the module text). ``targets[i]`` is the position of row i's
    own hypothesis among them. ``allowed`` (``[B][C]``) is None for ``negatives="batch"``; for
    ``"own-set"`` it is True where a candidate belongs to row i's set; for ``"label-subsets"``
    it is `label_subset`'s draw. Raises ``ValueError`` for another ``negatives``.
    """
    if negatives not in NEGATIVES:
        raise ValueError(f"negatives {negatives!r}: choose from {', '.join(NEGATIVES)}")
    order = dict.fromkeys(hyp_ids)
    for s in dict.fromkeys(set_ids):
        order.update(dict.fromkeys(set_hypotheses[s]))
    candidates = list(order)
    position = {h: i for i, h in enumerate(candidates)}
    targets = [position[h] for h in hyp_ids]
    if negatives == "batch":
        return candidates, targets, None
    if negatives == "label-subsets":
        seed = zlib.crc32(",".join(map(str, (*hyp_ids, -1, *set_ids))).encode())
        return candidates, targets, label_subset(targets, len(candidates), random.Random(seed))
    allowed = [[c in set(set_hypotheses[s]) for c in candidates] for s in set_ids]
    return candidates, targets, allowed


def label_subset(targets: Sequence[int], n_candidates: int, rng: random.Random) -> list[list[bool]]:
    """``allowed[i][c]`` (``[B][C]``): row i's target and ``k - 1`` other candidates drawn without replacement,
    ``k`` uniform in ``[2, min(MAX_SUBSET_LABELS, C)]`` per row (all C when C < 2). ``rng`` decides the
    draws (`batch_candidates` seeds it from the batch's hypothesis and set ids, so a resumed run draws the
    same subsets)."""
    rows = []
    for target in targets:
        others = [c for c in range(n_candidates) if c != target]
        k = rng.randint(2, min(MAX_SUBSET_LABELS, n_candidates)) if n_candidates >= 2 else n_candidates
        keep = set(rng.sample(others, k - 1)) | {target}
        rows.append([c in keep for c in range(n_candidates)])
    return rows


def own_set_pairs(data: EncoderData) -> list[tuple[str, str]]:
    """The distinct ``(text, hypothesis)`` pairs of every example and each hypothesis of its own set, in example
    then class order: the pairs the teacher scores for Margin-MSE (`zsnli.training.distill.build_cache`)."""
    return list(dict.fromkeys((text, data.hypotheses[h]) for text, s in zip(data.texts, data.set_ids)
                              for h in data.set_hypotheses[s]))


def own_set_scores(data: EncoderData, pairs: Sequence[tuple[str, str]], scores: Sequence[float]) -> list[list[float]]:
    """Per example, the teacher's score of its text with each hypothesis of its own set (``set_hypotheses`` order).

    ``pairs`` / ``scores``: `own_set_pairs` and one score per pair
    (`zsnli.training.distill.teacher_pair_scores`). Raises ``KeyError`` for a pair that ``pairs`` lacks."""
    index = {pair: i for i, pair in enumerate(pairs)}
    return [[float(scores[index[(text, data.hypotheses[h])]]) for h in data.set_hypotheses[s]]
            for text, s in zip(data.texts, data.set_ids)]


def teacher_matrix(own_scores: Sequence[Sequence[float]], set_ids: Sequence[int], candidates: Sequence[int],
                   set_hypotheses: Sequence[Sequence[int]]) -> list[list[float]]:
    """``[B][C]``: row i's teacher score of each candidate of its own set (`own_set_scores`' row), NaN for the
    candidates the teacher did not score (other sets' hypotheses)."""
    position = {h: c for c, h in enumerate(candidates)}
    out = []
    for scores, s in zip(own_scores, set_ids):
        row = [float("nan")] * len(candidates)
        for h, score in zip(set_hypotheses[s], scores):
            row[position[h]] = float(score)
        out.append(row)
    return out


class EncoderCollator:
    """Batches of tokenised texts -> padded text inputs, padded candidate hypotheses, targets.

    ``hypothesis_tokens``: the tokenizer's output for ``EncoderData.hypotheses`` (one dict of lists
    per hypothesis: ``input_ids`` and, for BERT-style tokenizers, ``token_type_ids``). Each
    feature needs ``input_ids``, ``hyp`` and ``set``. Returns tensors: the text inputs
    (``input_ids``, ``attention_mask``, ``token_type_ids`` when the tokenizer uses them), the same
    with a ``hyp_`` prefix for the candidates, ``labels`` (int ``[B]``) and, for ``own-set`` and ``label-subsets``,
    ``candidate_mask`` (bool ``[B, C]``); when the features carry ``teacher`` (`own_set_scores`' rows),
    ``teacher_scores`` (float ``[B, C]``, `teacher_matrix`). Padded to a multiple of 8 tokens.
    """

    def __init__(self, tokenizer, hypothesis_tokens: Sequence[dict[str, list[int]]],
                 set_hypotheses: Sequence[Sequence[int]], negatives: str = "batch") -> None:
        if negatives not in NEGATIVES:
            raise ValueError(f"negatives {negatives!r}: choose from {', '.join(NEGATIVES)}")
        self.tokenizer = tokenizer
        self.hypothesis_tokens = list(hypothesis_tokens)
        self.set_hypotheses = [tuple(ids) for ids in set_hypotheses]
        self.negatives = negatives
        self._keys = [k for k in ("input_ids", "token_type_ids") if k in tokenizer.model_input_names]

    def _pad(self, rows: Sequence[dict[str, Any]]) -> dict[str, Any]:
        encoded = [{k: row[k] for k in self._keys if k in row} for row in rows]
        return self.tokenizer.pad(encoded, padding=True, pad_to_multiple_of=8, return_tensors="pt",
                                  return_attention_mask=True)

    def __call__(self, features: Sequence[dict[str, Any]]) -> dict[str, Any]:
        import torch

        hyp_ids = [int(f["hyp"]) for f in features]
        set_ids = [int(f["set"]) for f in features]
        candidates, targets, allowed = batch_candidates(hyp_ids, set_ids, self.set_hypotheses, self.negatives)
        batch = dict(self._pad(features))
        batch.update({f"hyp_{k}": v for k, v in self._pad([self.hypothesis_tokens[c] for c in candidates]).items()})
        batch["labels"] = torch.tensor(targets, dtype=torch.long)
        if allowed is not None:
            batch["candidate_mask"] = torch.tensor(allowed, dtype=torch.bool)
        if features and "teacher" in features[0]:
            own = [f["teacher"] for f in features]
            batch["teacher_scores"] = torch.tensor(teacher_matrix(own, set_ids, candidates, self.set_hypotheses),
                                                   dtype=torch.float32)
        return batch
