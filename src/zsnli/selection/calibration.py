"""Choose the scoring rule and fit the temperature on held-out NLI rows.

Synthetic zero-shot choice tasks are built from the calibration hold-out
(`zsnli.training.nli_data.hold_out_by_premise`: train-role rows never trained on): one
premise, K candidate hypotheses, exactly one of them labelled as entailed by
that premise; the others are the premise's own neutral/contradiction
hypotheses and then hypotheses of other premises. K is drawn uniformly from
`K_CHOICES` (2 to 20). Tasks are split in two halves by premise: the *fit*
half fits each candidate's temperature parameters by minimising the negative
log-likelihood (NLL) of the entailed hypothesis; the *select* half scores
every fitted candidate (NLL, ECE with 15 bins, accuracy).

Candidates are `zsnli.selection.search.candidates` (the one grid definition):
score rule (`zsnli.scoring.RULES`) x content-free correction (none, or
subtracting each label's score against `CONTENT_FREE_PREMISE`) x embedding
weight w (here `EMBEDDING_WEIGHTS`: ``w * cos`` of the base encoder's sentence
embeddings added to the score, `zsnli.runtime.embedding`) x temperature form
(one global T, or ``T(K) = t0 * K ** b``). Temperatures are fitted by
`zsnli.selection.search.fit_temperature` (the one fitter; every task weighted
equally) and scored with its `nll_and_grad`. Which decides what:

* the temperature form of NLI-fitted candidates, and everything when no dev
  set is given: lowest NLL on the NLI *select* half (the issue's rule);
* the score rule, the content-free correction, w, and whether T comes from
  the NLI tasks or from the team-written zero-shot dev set
  (``dev/zeroshot_dev.jsonl``), when that dev set is given: highest mean
  calibrated macro-F1 over its datasets, since the NLI tasks do not contain
  the label-description wording the product is used with. A dev-fitted T
  competes on cross-fitted figures (fitted on one half of the dev datasets,
  scored on the other, both ways), so that no candidate is scored on the
  rows its temperature was fitted on.

The choice and every candidate's figures are written to ``calibration.json``;
the server reads its ``chosen`` object as a `zsnli.scoring.ScoringConfig`.
`calibrate` runs the steps in order: `rebuild_holdout` -> `build_choice_tasks`
and `split_tasks` -> `score_pairs` (the slow part, with progress) ->
`fit_candidate` for each candidate -> `choose` ->
`calibration_document` -> `write_calibration`.

May import numpy, `zsnli.metrics`, `zsnli.training.nli_data`, `zsnli.training.presets`,
`zsnli.manifest`, `zsnli.scoring` (rules and config), `zsnli.selection.search` / `devsets` /
`score_cache` / `targets` (the fitter, grid, example reader, content-free constant, the one pair cache, the
model's digest and whose folder an output is in) and,
inside functions, `zsnli.runtime.embedding` and `zsnli.runtime.model` (torch).
"""

from __future__ import annotations

import logging
import math
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from .. import metrics
from ..runtime.embedding import EMBEDDING_MODEL_ID, encoder_id
from ..manifest import CALIBRATION_NAME, MANIFEST_NAME, holdout_digest, load_manifest, write_json
from ..training.manifest_writer import calibration_sources, declare_sources
from ..training.nli_data import build_nli_data
from ..training.presets import Preset
from ..scoring import ScoringConfig, label_probabilities
from .devsets import DevSet, read_example_rows
from .score_cache import CONTENT_FREE_PREMISE, CachedSet, score_in_memory
from . import search
from .targets import check_owned, model_sha256
from .search import Candidate, Packed, fit_temperature, nll_and_grad, row_temperatures, softmax_rows

log = logging.getLogger(__name__)

K_CHOICES = (2, 3, 4, 5, 6, 8, 10, 12, 15, 20)
"""Number of candidate hypotheses per synthetic task, drawn uniformly."""

EMBEDDING_WEIGHTS = (0.0, 2.5, 5.0, 10.0, 20.0, 40.0)
"""Weights w of the cosine term tried by ``train.py calibrate`` (cosines of MiniLM embeddings differ by
~0.1-0.5 between labels); ``train.py select`` tries the wider `zsnli.selection.search.EMBEDDING_WEIGHTS`."""


@dataclass(frozen=True)
class ChoiceTask:
    """One synthetic task: ``premise``, ``hypotheses`` [K], index ``gold`` of the entailed one."""

    premise: str
    hypotheses: tuple[str, ...]
    gold: int


def build_choice_tasks(rows: Sequence[dict[str, str]], n_tasks: int, seed: int) -> list[ChoiceTask]:
    """Build up to ``n_tasks`` choice tasks (at most one per premise) from labelled NLI rows.

    Each premise with at least one entailed hypothesis gives a task: that
    hypothesis (gold), the premise's own neutral/contradiction hypotheses,
    then hypotheses of other premises until K (drawn from `K_CHOICES`) is
    reached; the order is shuffled. Seeded with ``random.Random(seed)``.
    """
    rng = random.Random(seed)
    by_premise: dict[str, list[dict[str, str]]] = {}
    for row in rows:
        by_premise.setdefault(row["premise"], []).append(row)
    premises = sorted(p for p, rs in by_premise.items() if any(r["label"] == "entailment" for r in rs))
    rng.shuffle(premises)
    all_hypotheses = sorted({r["hypothesis"] for r in rows})
    tasks = []
    for premise in premises[:n_tasks]:
        own = by_premise[premise]
        gold_h = rng.choice(sorted(r["hypothesis"] for r in own if r["label"] == "entailment"))
        own_h = {r["hypothesis"] for r in own}
        k = min(rng.choice(K_CHOICES), len(all_hypotheses) - len(own_h) + 1)
        if k < 2:
            continue
        negatives = sorted({r["hypothesis"] for r in own if r["label"] != "entailment"} - {gold_h})
        rng.shuffle(negatives)
        negatives = negatives[: k - 1]
        chosen = set(negatives) | {gold_h}
        while len(negatives) < k - 1:
            h = rng.choice(all_hypotheses)
            if h not in chosen and h not in own_h:
                negatives.append(h)
                chosen.add(h)
        hyps = [gold_h, *negatives]
        rng.shuffle(hyps)
        tasks.append(ChoiceTask(premise, tuple(hyps), hyps.index(gold_h)))
    return tasks


def pack_tasks(score_lists: Sequence[np.ndarray], gold: Sequence[int]) -> Packed:
    """Variable-K score vectors and gold indices as a `Packed` ``[n, Kmax]`` (classes = positions)."""
    k = np.array([len(s) for s in score_lists])
    out = np.zeros((len(score_lists), int(k.max())))
    mask = np.zeros_like(out, dtype=bool)
    for i, s in enumerate(score_lists):
        out[i, : len(s)] = s
        mask[i, : len(s)] = True
    gold_arr = np.asarray(gold, dtype=np.int64)
    classes = np.broadcast_to(np.arange(out.shape[1]), out.shape).copy()
    return Packed(out, mask, classes, k.astype(np.float64), gold_arr, gold_arr, out.shape[1])


def subset(p: Packed, rows: np.ndarray) -> Packed:
    """The rows ``rows`` of ``p``."""
    return Packed(p.scores[rows], p.mask[rows], p.classes[rows], p.k[rows], p.gold[rows], p.gold_classes[rows],
                  p.n_classes)


def _uniform(p: Packed) -> np.ndarray:
    return np.full(len(p.gold), 1.0 / len(p.gold))


def fit_tasks(p: Packed, form: str) -> tuple[float, float]:
    """``(t0, b)`` minimising the mean NLL of ``p``'s gold labels (`search.fit_temperature`, equal row weights)."""
    return fit_temperature(p, _uniform(p), form)


def choice_figures(p: Packed, t0: float, b: float) -> dict[str, float]:
    """NLL (nats), ECE (15 bins) and accuracy of choice tasks ``p`` at temperature ``T(K) = t0 * K ** b``."""
    probs = softmax_rows(p, row_temperatures(p, math.log(t0), b))
    pred = probs.argmax(axis=1)
    return {
        "nll": round(nll_and_grad(p, _uniform(p), math.log(t0), b)[0], 5),
        "ece": round(metrics.expected_calibration_error(probs.max(axis=1), pred == p.gold), 5),
        "accuracy": round(metrics.accuracy(p.gold, pred), 5),
    }


def _cf(cand: Candidate) -> str | None:
    return CONTENT_FREE_PREMISE if cand.content_free else None


def task_set(tasks: Sequence[ChoiceTask]) -> DevSet:
    """The choice tasks as a `DevSet` (texts = premises, classes = positions), for the pair cache."""
    kmax = max((len(t.hypotheses) for t in tasks), default=0)
    return DevSet(name="nli-choice-tasks", task_kind="", texts=[t.premise for t in tasks],
                  hypotheses=[list(t.hypotheses) for t in tasks], gold=np.array([t.gold for t in tasks], dtype=np.int64),
                  label_classes=[np.arange(len(t.hypotheses)) for t in tasks], classes=[str(i) for i in range(kmax)],
                  row_ids=np.arange(len(tasks)))


def dev_set(dev_rows: Sequence[dict[str, Any]]) -> DevSet:
    """The team dev set's rows (examples format, every dataset) as one `DevSet` in file order, for the pair cache."""
    return DevSet(name="team-dev", task_kind="", texts=[r["text"] for r in dev_rows],
                  hypotheses=[list(r["labels"]) for r in dev_rows],
                  gold=np.array([r["label"] for r in dev_rows], dtype=np.int64),
                  label_classes=[np.arange(len(r["labels"])) for r in dev_rows], classes=[],
                  row_ids=np.arange(len(dev_rows)))


@dataclass(frozen=True)
class PairScores:
    """Every pair the candidates need, scored once (`zsnli.selection.score_cache.score_in_memory`, the one
    pair cache): the choice tasks' and, when given, the team dev set's."""

    tasks: CachedSet
    dev: CachedSet | None

    @staticmethod
    def row_scores(cs: CachedSet, cand: Candidate) -> list[np.ndarray]:
        """The served pre-temperature score of each row's hypotheses under ``cand`` (`search.candidate_scores`)."""
        flat, off = search.candidate_scores(cs, cand), cs.offsets
        return [flat[off[i]:off[i + 1]] for i in range(len(cs))]


DevItem = tuple[dict[str, Any], np.ndarray]
"""A dev document (examples format) and its combined scores under one candidate (`PairScores.row_scores`)."""


def _dev_figures(items: Sequence[DevItem], config: ScoringConfig) -> dict[str, Any]:
    """Per-dataset and mean metrics of a scoring config on the team dev set.

    ``items`` carry scores that already include the correction and the cosine
    term, so only ``config``'s temperature is applied here.
    """
    temperature_only = ScoringConfig(rule=config.rule, temperature=config.temperature, k_exponent=config.k_exponent)
    by_ds: dict[str, tuple[list[np.ndarray], list[int]]] = {}
    for row, s in items:
        probs, gold = by_ds.setdefault(row["dataset"], ([], []))
        probs.append(label_probabilities(s, temperature_only))
        gold.append(int(row["label"]))
    per = {name: metrics.score_rows(probs, gold).as_dict() for name, (probs, gold) in sorted(by_ds.items())}
    return _with_mean({n: {k: (round(v, 4) if isinstance(v, float) else v) for k, v in d.items()} for n, d in per.items()})


def _with_mean(per: dict[str, dict[str, Any]]) -> dict[str, Any]:
    keys = ("accuracy", "macro_f1", "ece", "calibrated_macro_f1", "normalised")
    mean = {key: round(float(np.nanmean([d[key] if d[key] is not None else np.nan for d in per.values()])), 5)
            for key in keys}
    return {"mean": mean, "datasets": dict(sorted(per.items()))}


def dev_folds(dev_rows: Sequence[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """Two folds of the dev set by whole datasets (sorted names, alternating), for cross-fitting."""
    names = sorted({r["dataset"] for r in dev_rows})
    fold_of = {name: i % 2 for i, name in enumerate(names)}
    return [[r for r in dev_rows if fold_of[r["dataset"]] == f] for f in (0, 1)]


def _fit_on_items(items: Sequence[DevItem], form: str) -> tuple[float, float]:
    return fit_tasks(pack_tasks([s for _, s in items], [int(row["label"]) for row, _ in items]), form)


def _dev_fitted_entry(items: list[DevItem], cand: Candidate, emb_digest: str | None) -> dict[str, Any]:
    """A candidate whose temperature is fitted on the team dev set.

    Its dev figures are cross-fitted (T fitted on one fold of datasets,
    scored on the other, both ways), so they compare fairly with candidates
    whose T comes from the NLI tasks; the final T is fitted on the whole dev set.
    """
    fold_names = [{r["dataset"] for r in fold} for fold in dev_folds([row for row, _ in items])]
    folds = [[it for it in items if it[0]["dataset"] in names] for names in fold_names]
    per: dict[str, dict[str, Any]] = {}
    for train_fold, test_fold in ((folds[0], folds[1]), (folds[1], folds[0])):
        if train_fold and test_fold:
            fitted = cand.config(*_fit_on_items(train_fold, cand.temperature_form), emb_digest)
            per.update(_dev_figures(test_fold, fitted)["datasets"])
    final = cand.config(*_fit_on_items(items, cand.temperature_form), emb_digest)
    return {"config": final.to_dict(), "temperature_form": cand.temperature_form,
            "temperature_fitted_on": "team dev set (figures cross-fitted over 2 folds of datasets)",
            "dev": _with_mean(per)}


class HoldoutMismatch(RuntimeError):
    """The rebuilt hold-out is not the one the manifest records (other data, preset or seed)."""


def rebuild_holdout(preset: Preset, manifest: dict[str, Any]) -> tuple[list[dict[str, str]], str]:
    """The calibration hold-out rebuilt from ``preset`` exactly as training built it, and its digest.

    Raises `HoldoutMismatch` (a ``RuntimeError``) when the digest differs from the
    manifest's ``data.holdout_sha256`` (calibrating on other rows could leak training data).
    """
    data = build_nli_data(list(preset.train_sources), list(preset.validation_sources), preset.n_holdout,
                          preset.seed, preset.max_validation_rows)
    digest = holdout_digest(data.holdout)
    if digest != manifest.get("data", {}).get("holdout_sha256"):
        raise HoldoutMismatch("rebuilt calibration hold-out differs from the one recorded in the manifest")
    return data.holdout, digest


def split_tasks(n_tasks: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Seeded halves of ``range(n_tasks)``: (fit indices, select indices), each sorted."""
    order = list(range(n_tasks))
    random.Random(seed).shuffle(order)
    half = len(order) // 2
    return np.array(sorted(order[:half]), dtype=int), np.array(sorted(order[half:]), dtype=int)


def read_dev_examples(path: str | Path) -> list[dict[str, Any]]:
    """The team dev set's rows (`devsets.read_example_rows`, examples format).

    Raises ``ValueError`` for the public examples (``zsc``): reporting only; `devsets.DevSetError`
    (a ``ValueError``) on a malformed row.
    """
    if "zsc" in Path(path).parts:
        raise ValueError("the public zero-shot examples (shared/data/zsc) are for reporting only")
    return read_example_rows(path)


def load_encoder(model_dir: str | Path, embedding_dir: str | Path | None, embedding_weights: Sequence[float]):
    """The sentence encoder of the cosine term and its digest; ``(None, None)`` when every w is 0."""
    if not any(w != 0 for w in embedding_weights):
        return None, None
    from ..runtime.embedding import SentenceEncoder, default_embedding_dir

    encoder = SentenceEncoder(embedding_dir or default_embedding_dir(model_dir))
    return encoder, encoder.digest


def score_pairs(nli, encoder, tasks: Sequence[ChoiceTask], dev_rows: Sequence[dict[str, Any]]) -> PairScores:
    """Compute, once each, every pair the candidates need: tasks and dev documents, each hypothesis also against
    "N/A", and (with an ``encoder``) the cosines, with progress (`zsnli.selection.score_cache.score_in_memory`)."""
    log.info("scoring %d tasks and %d dev documents", len(tasks), len(dev_rows))
    return PairScores(score_in_memory(task_set(tasks), "calibration", nli, encoder),
                      score_in_memory(dev_set(dev_rows), "calibration", nli, encoder) if dev_rows else None)


def fit_candidate(
    cand: Candidate,
    scores: PairScores,
    tasks: Sequence[ChoiceTask],
    halves: tuple[np.ndarray, np.ndarray],
    dev_rows: Sequence[dict[str, Any]],
    emb_digest: str | None,
) -> list[dict[str, Any]]:
    """Fit one candidate's temperature on the NLI fit half and score it; returns its entries.

    The first entry has T fitted on the NLI tasks (figures on the select half
    before/after, and on the dev set when given); with a dev set a second
    entry has T fitted on the dev set (`_dev_fitted_entry`).
    """
    packed = pack_tasks(PairScores.row_scores(scores.tasks, cand), [t.gold for t in tasks])
    fit_half, sel_half = subset(packed, halves[0]), subset(packed, halves[1])
    before = choice_figures(sel_half, 1.0, 0.0)
    t0, b = fit_tasks(fit_half, cand.temperature_form)
    after = choice_figures(sel_half, t0, b)
    config = cand.config(t0, b, emb_digest)
    entry = {"config": config.to_dict(), "temperature_form": cand.temperature_form,
             "nli_select_before": before, "nli_select_after": after, "temperature_fitted_on": "NLI fit half"}
    entries = [entry]
    if dev_rows:
        dev_items = list(zip(dev_rows, PairScores.row_scores(scores.dev, cand)))
        entry["dev"] = _dev_figures(dev_items, config)
        dev_entry = _dev_fitted_entry(dev_items, cand, emb_digest)
        dev_entry["nli_select_after"] = choice_figures(
            sel_half, dev_entry["config"]["temperature"], dev_entry["config"]["k_exponent"])
        entries.append(dev_entry)
    log.info("%s cf=%s w=%g %s: NLL %.4f -> %.4f ECE %.4f -> %.4f%s", cand.rule, _cf(cand), cand.embedding_weight,
             entry["temperature_form"], before["nll"], after["nll"], before["ece"], after["ece"],
             f" dev calF1 {entry['dev']['mean']['calibrated_macro_f1']:.4f}" if dev_rows else "")
    return entries


def calibrate(
    preset: Preset,
    model_dir: str | Path,
    manifest_dir: str | Path,
    out: str | Path | None = None,
    dev_examples: str | Path | None = None,
    n_tasks: int = 2000,
    embedding_dir: str | Path | None = None,
    embedding_weights: Sequence[float] = EMBEDDING_WEIGHTS,
    manifest_given: bool = True,
) -> dict[str, Any]:
    """Fit and choose the scoring config of ``model_dir``; write ``calibration.json``.

    The hold-out rows are rebuilt from ``preset`` and checked against the
    manifest (`rebuild_holdout`, `HoldoutMismatch` on a difference).
    ``dev_examples`` is a JSONL file in the examples format written by the
    team; the public zero-shot examples are refused (``ValueError``).
    ``embedding_dir`` is the sentence-embedding model for the cosine term
    (default: ``<model_dir>/embedding``, else the checkout's);
    ``embedding_weights`` lists the w tried (``(0.0,)`` turns the term off).
    ``out``: where to write (default ``calibration.json`` in ``manifest_dir``,
    which also declares the dev set and the embedding weights in
    ``data_sources.json``). The document records ``model_dir``'s own digest
    (`zsnli.selection.targets.model_sha256`). Returns the written document.
    Raises `zsnli.selection.targets.TargetError` (before any scoring) when ``manifest_dir`` or ``out`` lies in
    a folder whose manifest records another model (``manifest_given``: ``--manifest-dir`` named ``manifest_dir``;
    else it is the default, and the refusal names where its manifest was found).
    """
    from ..runtime.model import NliModel

    t_start = time.time()
    manifest_dir = Path(manifest_dir)
    manifest = load_manifest(manifest_dir / MANIFEST_NAME)
    digest_of_model = model_sha256(model_dir)
    check_owned(model_dir, digest_of_model, {"--manifest-dir": manifest_dir, **({"--out": Path(out)} if out else {})},
                given=["--out", *(["--manifest-dir"] if manifest_given else [])])
    dev_rows = read_dev_examples(dev_examples) if dev_examples else []
    holdout, digest = rebuild_holdout(preset, manifest)
    tasks = build_choice_tasks(holdout, n_tasks, preset.seed)
    halves = split_tasks(len(tasks), preset.seed + 1)

    encoder, emb_digest = load_encoder(model_dir, embedding_dir, embedding_weights)
    scores = score_pairs(NliModel.load(model_dir), encoder, tasks, dev_rows)
    candidates = [e for cand in search.candidates(embedding_weights)
                  for e in fit_candidate(cand, scores, tasks, halves, dev_rows, emb_digest)]
    chosen, decided_by = choose(candidates, use_dev=bool(dev_rows))
    doc = calibration_document(
        chosen, decided_by, candidates,
        method={"tasks": tasks, "halves": halves, "holdout_rows": len(holdout), "holdout_sha256": digest,
                "embedding_weights": embedding_weights, "emb_digest": emb_digest,
                "encoder_dir": encoder.model_dir if encoder else None, "dev_examples": dev_examples,
                "dev_documents": len(dev_rows), "seconds": round(time.time() - t_start, 1),
                "model_sha256": digest_of_model},
    )
    write_calibration(doc, Path(out) if out else manifest_dir / CALIBRATION_NAME)
    if out is None:
        used = emb_digest if chosen["config"].get("embedding_weight") else None
        name = encoder_id(encoder.model_dir, encoder.digest) if encoder else EMBEDDING_MODEL_ID
        declare_sources(manifest_dir, calibration_sources(dev_examples, len(dev_rows), name, used))
    return doc


def calibration_document(chosen: dict[str, Any], decided_by: str, candidates: list[dict[str, Any]],
                         method: dict[str, Any]) -> dict[str, Any]:
    """The ``calibration.json`` document: the chosen config, why, its figures, the method and every candidate.

    ``method`` carries the run's facts: ``tasks``, ``halves`` (`split_tasks`),
    ``holdout_rows``, ``holdout_sha256``, ``embedding_weights``,
    ``emb_digest``, ``encoder_dir``, ``dev_examples``, ``dev_documents``, ``seconds``, ``model_sha256`` (the
    calibrated model's digest, `zsnli.selection.targets.model_sha256`, hashed from its files).
    """
    tasks, (fit_idx, sel_idx) = method["tasks"], method["halves"]
    ks = np.array([len(t.hypotheses) for t in tasks])
    return {
        "chosen": chosen["config"],
        "decided_by": decided_by,
        "chosen_figures": {k: v for k, v in chosen.items() if k != "config"},
        "model_sha256": method["model_sha256"],
        "method": {
            "tasks": "synthetic K-way choice tasks from the calibration hold-out (train-role rows never trained on): "
                     "one premise, one entailed hypothesis, the premise's own neutral/contradiction hypotheses, "
                     "then hypotheses of other premises",
            "k_distribution": f"uniform over {list(K_CHOICES)}",
            "k_counts": {str(kk): int((ks == kk).sum()) for kk in K_CHOICES},
            "n_tasks": len(tasks),
            "n_fit": len(fit_idx),
            "n_select": len(sel_idx),
            "holdout_rows": method["holdout_rows"],
            "holdout_sha256": method["holdout_sha256"],
            "fit": "temperature parameters by minimising NLL (zsnli.selection.search.fit_temperature) on the fit half",
            "ece_bins": metrics.N_BINS,
            "content_free_premise": CONTENT_FREE_PREMISE,
            "embedding_weights": list(method["embedding_weights"]),
            "embedding_model": {"id": encoder_id(method["encoder_dir"], method["emb_digest"]) if method["encoder_dir"] else EMBEDDING_MODEL_ID,
                                "sha256": method["emb_digest"],
                                "dir": str(method["encoder_dir"]) if method["encoder_dir"] else None},
            "dev_examples": str(method["dev_examples"]) if method["dev_examples"] else None,
            "dev_documents": method["dev_documents"],
            "seconds": method["seconds"],
        },
        "candidates": candidates,
    }


def write_calibration(doc: dict[str, Any], path: str | Path) -> None:
    """Write the calibration document as indented JSON (mode 644)."""
    write_json(path, doc)


def choose(candidates: list[dict[str, Any]], use_dev: bool) -> tuple[dict[str, Any], str]:
    """Pick the candidate: see the module docstring for which data decides what.

    Returns ``(candidate, explanation)``.
    """
    if not use_dev:
        best = min(candidates, key=lambda c: c["nli_select_after"]["nll"])
        return best, "lowest NLL on the NLI select half"

    def key(c):
        return (c["config"]["rule"], c["config"]["content_free_premise"], c["config"]["embedding_weight"])

    groups: dict[Any, list[dict[str, Any]]] = {}
    for c in candidates:
        groups.setdefault(key(c), []).append(c)
    # Within each (rule, correction, w): the NLI-fitted temperature form with the lowest NLI select NLL,
    # and the dev-fitted forms, which compete on their cross-fitted dev figures.
    finalists = []
    for g in groups.values():
        nli_fitted = [c for c in g if c.get("temperature_fitted_on", "").startswith("NLI")]
        finalists.append(min(nli_fitted, key=lambda c: c["nli_select_after"]["nll"]))
        finalists.extend(c for c in g if not c.get("temperature_fitted_on", "").startswith("NLI"))
    best = max(finalists, key=lambda c: c["dev"]["mean"]["calibrated_macro_f1"])
    return best, ("rule, content-free correction, embedding weight and where T is fitted (NLI tasks, or the team "
                  "dev set with cross-fitted figures): highest mean calibrated macro-F1 on the team dev set; "
                  f"chosen T fitted on: {best['temperature_fitted_on']}")
