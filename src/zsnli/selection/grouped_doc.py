"""``train.py select --kinds FILE``: the kind-weighted choice (`zsnli.selection.grouped`) as a calibration document.

The arms (`zsnli.selection.grouped.SPECS`) are compared leave-one-dataset-out on the zsc-dev sets, each
dataset weighted by its task kind as the benchmark is (`grouped.kind_weights`); the shipped arm is the one
with the highest kind-weighted mean among those that lose no kind by more than `KIND_TOLERANCE` points
against plain entailment (the pipeline's scoring), else the highest overall. It is then fitted on every
zsc-dev set. The team dev set (`dev/zeroshot_dev.jsonl`) plays no part in the choice and is reported.

The document keeps the shape `zsnli.selection.cli` writes (``chosen``, ``selection.out_of_fold`` rows with
``ours`` and ``embedding`` scorecards, ``selection.summary``), so the tables of docs/quality.md render the
same way, and adds ``selection.kind_weighted`` (weights, every arm's weighted / unweighted / per-kind
figures, the previous scoring's and plain entailment's beside them; ``leave_one_kind_out``: every arm and the
served arm with its cascade scored with each task kind held out at once, `zsnli.selection.grouped.kind_folds`;
``served_leave_one_dataset_out``: the served arm with its cascade, one set held out at a time;
``embedding_scoring``: the fast path's figures both ways, `embedding_row`).

Imports: numpy, ``zsnli.selection.grouped``, ``zsnli.selection.search`` (embedding figures),
``zsnli.selection.score_cache`` (types), ``zsnli.request_scoring``, ``zsnli.scoring``.
"""

from __future__ import annotations

from typing import Any, Callable, Mapping

from . import grouped as G
from . import search as sel
from ..request_scoring import EMBEDDING_CASCADE, EMBEDDING_WEIGHT, Cascade, RequestScoring
from ..scoring import ScoringConfig
from .score_cache import CachedSet

KIND_TOLERANCE = 1.0
"""Normalised points a kind may fall below plain entailment before an arm is passed over (issue 30)."""


def _round(card: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in card.items()}


def _embedding_card(cs: CachedSet) -> dict[str, Any]:
    card = sel.score_cached(cs, sel.embedding_probabilities(cs)).as_dict()
    return _round({k: card[k] for k in ("n", "n_classes", "macro_f1", "ece", "calibrated_macro_f1", "normalised")})


def pick_spec(summaries: Mapping[str, Mapping[str, Any]], plain: Mapping[str, Any],
              by_kind: Mapping[str, Mapping[str, Any]] | None = None) -> str:
    """The arm label to ship: highest kind-weighted mean normalised (leave-one-dataset-out, ``summaries``) among
    the arms whose every kind is within `KIND_TOLERANCE` of plain entailment's both ways of holding out
    (``by_kind``: the same arms' leave-one-kind-out summaries, when given); the highest overall when none is."""
    def ok(s: Mapping[str, Any]) -> bool:
        return all(v >= plain["per_kind"][k] - KIND_TOLERANCE for k, v in s["per_kind"].items())

    pool = [a for a, s in summaries.items() if ok(s) and (by_kind is None or ok(by_kind[a]))] or list(summaries)
    return max(pool, key=lambda a: summaries[a]["weighted_normalised"])


def _rounded_summary(s: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (round(v, 4) if isinstance(v, float) else {kk: round(vv, 2) for kk, vv in v.items()}
                if isinstance(v, dict) else v) for k, v in s.items()}


def build(sets: Mapping[str, CachedSet], kinds: Mapping[str, Any], digest: str,
          previous: RequestScoring | None, log: Callable[[str], None] | None = None) -> dict[str, Any]:
    """``{"chosen", "rows", "kind_weighted", "spec"}`` of the kind-weighted choice on ``sets`` (keyed
    ``group/name``; the ``zsc-dev`` group decides, the others are reported with the final scoring).

    rows: ``{group/name: {"chosen_without_it", "t0", "k_exponent", "ours", "embedding"}}``, the out-of-fold
    figures for zsc-dev and the final scoring's for the rest, every figure from the served code.
    Raises ``ValueError`` when a zsc-dev set has no task kind in ``kinds``.
    """
    zsc = {n.split("/", 1)[1]: cs for n, cs in sets.items() if n.startswith("zsc-dev/")}
    names = sorted(zsc)
    weights = G.kind_weights(names, kinds)
    kind_of = {n: kinds["zsc_dev"][n] for n in names}
    selector = G.Selector(zsc, weights)
    oof = G.leave_one_out(selector, G.SPECS, digest, log=log)
    folds = oof.pop("_scoring")
    by_kind = G.leave_out(selector, G.kind_folds(names, kind_of), G.SPECS, digest, log=log)
    by_kind.pop("_scoring")
    plain = G.served_figures(zsc, RequestScoring(ScoringConfig()))
    summaries = {a: G.summary(per, weights, kind_of) for a, per in oof.items()}
    plain_summary = G.summary(plain, weights, kind_of)
    kind_summaries = {a: G.summary(per, weights, kind_of) for a, per in by_kind.items()}
    label = pick_spec(summaries, plain_summary, kind_summaries)
    spec = next(s for s in G.SPECS if s.label == label)
    today = previous.cascade if previous is not None and previous.cascade in [Cascade(*c) for c in CASCADES] else None
    cascade, cascades = choose_cascade(zsc, weights, kind_of, spec, digest, summaries[label],
                                       G.summary(by_kind[label], weights, kind_of), today, log)
    chosen_selector = selector if cascade is None else G.Selector(zsc, weights, cascade=cascade)
    served_by_kind = G.leave_out(chosen_selector, G.kind_folds(names, kind_of), [spec], digest)[spec.label]
    final = G.fold_scoring(chosen_selector, names, spec, digest)
    rows: dict[str, Any] = {}
    for n in names:
        cfg = folds[label][n].config_for(selector.group[n])
        rows[f"zsc-dev/{n}"] = {"chosen_without_it": label, "t0": cfg.temperature, "k_exponent": cfg.k_exponent,
                                "ours": _round({k: v for k, v in oof[label][n].items() if k != "pairs_per_row"}),
                                "embedding": _embedding_card(zsc[n])}
    others = {n: cs for n, cs in sets.items() if not n.startswith("zsc-dev/")}
    for n, fig in G.served_figures(others, final).items():
        try:
            cfg = final.config_for(G.dataset_group(others[n]))
        except ValueError:  # rows of several groups: the pooled config's temperature is reported
            cfg = final.default
        rows[n] = {"chosen_without_it": f"{label} (not used in the choice)", "t0": cfg.temperature,
                   "k_exponent": cfg.k_exponent, "ours": _round({k: v for k, v in fig.items() if k != "pairs_per_row"}),
                   "embedding": _embedding_card(others[n])}
    block = {"weights": {n: round(w, 4) for n, w in weights.items()}, "kinds": kind_of,
             "arms": {a: _rounded_summary(s) for a, s in summaries.items()},
             "plain_entailment": _rounded_summary(plain_summary), "chosen_arm": label,
             "leave_one_kind_out": {
                 "arms": {a: _rounded_summary(s) for a, s in kind_summaries.items()},
                 "served": _rounded_summary(G.summary(served_by_kind, weights, kind_of)),
                 "per_set": {n: round(f["normalised"], 2) for n, f in sorted(served_by_kind.items())}},
             "served_leave_one_dataset_out": ({k: v for k, v in cascades[f"{cascade.min_labels}:{cascade.keep}"].items()
                                               if k != "leave_one_kind_out"} if cascade is not None
                                              else _rounded_summary(summaries[label])),
             "kind_tolerance": KIND_TOLERANCE,
             "cascade": {"chosen": cascade.to_dict() if cascade is not None else None, "tolerance": CASCADE_TOLERANCE,
                         "reference": "exact" if today is None else f"exact and {today.min_labels}:{today.keep}",
                         "out_of_fold": cascades}}
    if previous is not None:
        block["previous_scoring"] = _rounded_summary(G.summary(G.served_figures(zsc, previous), weights, kind_of))
    fast, block["embedding_scoring"] = embedding_row(zsc, weights, kind_of, digest, log)
    return {"chosen": final, "rows": rows, "kind_weighted": block, "spec": spec, "embedding_scoring": fast}


CASCADES = ((4, 2), (4, 3), (6, 2), (6, 3), (6, 4), (8, 2), (8, 3), (8, 4), (10, 2), (10, 3), (10, 4), (10, 8),
            (20, 12))
"""(min_labels, keep) of the label cascades tried on the chosen arm, out of fold (issue 33; the cheaper ones
below 10:4, issue 50, once the sentence encoder was trained)."""
CASCADE_TOLERANCE = 0.3
"""Kind-weighted normalised points a cascade may lose against exact scoring (issue 33's target) and against
the shipped cascade (issue 50), each both ways of holding out."""


def choose_cascade(zsc: Mapping[str, CachedSet], weights: Mapping[str, float], kind_of: Mapping[str, str], spec: G.Spec,
                   digest: str, exact: Mapping[str, Any], exact_by_kind: Mapping[str, Any], today: Cascade | None = None,
                   log: Callable[[str], None] | None = None) -> tuple[Cascade | None, dict[str, Any]]:
    """The cascade of `CASCADES` with the fewest NLI pairs per document whose kind-weighted mean is within
    `CASCADE_TOLERANCE` of the reference both leaving one dataset out and leaving one kind out, with no kind more
    than `KIND_TOLERANCE` below it (`pick_cascade`), or None; and
    every variant's figures (``"M:K"``: leave-one-dataset-out summary with ``leave_one_kind_out`` inside).

    exact, exact_by_kind: `zsnli.selection.grouped.summary` of exact scoring under the same arm, each way;
    today: the shipped cascade (None: none, or not among `CASCADES`). The reference each way is exact
    scoring's figure, and also today's cascade's when given (a cheaper cascade must lose at most the tolerance
    against both)."""
    names = sorted(zsc)
    out: dict[str, Any] = {}
    figures: dict[Cascade, tuple[dict[str, Any], dict[str, Any]]] = {}
    for min_labels, keep in CASCADES:
        cascade = Cascade(min_labels, keep)
        selector = G.Selector(zsc, weights, cascade=cascade)
        per = G.leave_one_out(selector, [spec], digest)[spec.label]
        per_kind = G.leave_out(selector, G.kind_folds(names, kind_of), [spec], digest)[spec.label]
        figures[cascade] = (G.summary(per, weights, kind_of), G.summary(per_kind, weights, kind_of))
        out[f"{min_labels}:{keep}"] = {**_rounded_summary(figures[cascade][0]),
                                       "leave_one_kind_out": _rounded_summary(figures[cascade][1])}
        if log is not None:
            log(f"cascade {min_labels}:{keep}: {figures[cascade][0]['weighted_normalised']:.2f} / "
                f"{figures[cascade][1]['weighted_normalised']:.2f}, {figures[cascade][0]['pairs_per_row']:.2f} pairs")
    refs = [(exact, exact_by_kind)] + ([figures[today]] if today is not None else [])
    out["exact"] = {**_rounded_summary(exact), "leave_one_kind_out": _rounded_summary(exact_by_kind)}
    return pick_cascade(figures, refs, exact["pairs_per_row"]), out


def pick_cascade(figures: Mapping[Cascade, tuple[Mapping[str, Any], Mapping[str, Any]]],
                 refs: list[tuple[Mapping[str, Any], Mapping[str, Any]]], exact_pairs: float) -> Cascade | None:
    """The cascade with the fewest ``pairs_per_row`` (under ``exact_pairs``) that, both ways (``figures[c] =
    (leave one dataset out, leave one kind out)`` summaries of `zsnli.selection.grouped.summary`), is at most
    `CASCADE_TOLERANCE` below every reference pair in ``refs`` (same shape) in ``weighted_normalised`` and loses
    no kind of its ``per_kind`` (weighted or not, as `pick_spec`) by more than `KIND_TOLERANCE` against any of
    them; None when none qualifies. Equal costs go to the better leave-one-dataset-out mean, then to the larger
    ``min_labels`` (the cascade that touches fewer requests).

    A summary without ``per_kind`` is held to the mean alone. Raises KeyError when a summary lacks
    ``weighted_normalised`` (or the first one ``pairs_per_row``)."""
    def within(fig: Mapping[str, Any], ref: Mapping[str, Any]) -> bool:
        if fig["weighted_normalised"] < ref["weighted_normalised"] - CASCADE_TOLERANCE:
            return False
        kinds, ref_kinds = fig.get("per_kind", {}), ref.get("per_kind", {})
        return all(v >= ref_kinds[k] - KIND_TOLERANCE for k, v in kinds.items() if k in ref_kinds)

    ok = [c for c, (lodo, loko) in figures.items()
          if lodo["pairs_per_row"] < exact_pairs and all(within(lodo, a) and within(loko, b) for a, b in refs)]
    if not ok:
        return None
    return min(ok, key=lambda c: (figures[c][0]["pairs_per_row"], -figures[c][0]["weighted_normalised"],
                                  -c.min_labels))


EMBEDDING_SPECS = (G.Spec(), G.Spec(t_fit="objective"))
"""How the embedding scoring's T(K) may be fitted: by NLL or on the objective (pooled, no calibrator)."""


def embedding_row(zsc: Mapping[str, CachedSet], weights: Mapping[str, float], kind_of: Mapping[str, str],
                  digest: str, log: Callable[[str], None] | None = None) -> tuple[dict[str, Any], dict[str, Any]]:
    """The ``embedding`` scoring (`zsnli.request_scoring.embedding_scoring`: softmax(20 cos / T(K)), no NLI pair)
    chosen as the served arm is: each of `EMBEDDING_SPECS` fitted out of fold, leave one dataset out and leave
    one kind out, every figure from the served code (the cascade that keeps no label,
    `zsnli.request_scoring.EMBEDDING_CASCADE`); the fit with the better kind-weighted leave-one-dataset-out mean
    is then fitted on every zsc-dev set.

    Returns ``(row, figures)``: row is calibration.json's top-level ``embedding_scoring`` object
    (``temperature``, ``k_exponent``, ``embedding_sha256``, ``fitted_by``); figures its both-ways summaries
    (``leave_one_dataset_out``, ``leave_one_kind_out``, ``per_set`` LODO normalised) and each fit's."""
    names = sorted(zsc)
    selector = G.Selector(zsc, weights, cands=[G.GroupCandidate("entailment", EMBEDDING_WEIGHT)], cascade=EMBEDDING_CASCADE)
    lodo = G.leave_one_out(selector, EMBEDDING_SPECS, digest)
    loko = G.leave_out(selector, G.kind_folds(names, kind_of), EMBEDDING_SPECS, digest)
    fits = {sp.label: (G.summary(lodo[sp.label], weights, kind_of), G.summary(loko[sp.label], weights, kind_of))
            for sp in EMBEDDING_SPECS}
    best = max(EMBEDDING_SPECS, key=lambda sp: fits[sp.label][0]["weighted_normalised"])
    final = G.fold_scoring(selector, names, best, digest).default
    if log is not None:
        log(f"embedding scoring ({best.label}): {fits[best.label][0]['weighted_normalised']:.2f} / "
            f"{fits[best.label][1]['weighted_normalised']:.2f}, T = {final.temperature:g} x K^{final.k_exponent:g}")
    row = {"temperature": final.temperature, "k_exponent": final.k_exponent, "embedding_sha256": digest,
           "fitted_by": best.label.replace("w pooled, ", "")}
    figures = {"fit": best.label, "leave_one_dataset_out": _rounded_summary(fits[best.label][0]),
               "leave_one_kind_out": _rounded_summary(fits[best.label][1]),
               "per_set": {n: round(f["normalised"], 2) for n, f in sorted(lodo[best.label].items())},
               "fits": {k: {"leave_one_dataset_out": _rounded_summary(a), "leave_one_kind_out": _rounded_summary(b)}
                        for k, (a, b) in fits.items()}}
    return row, figures


def describe_method() -> str:
    """The ``selection.method`` text of a kind-weighted choice."""
    return ("leave-one-dataset-out over the zsc-dev sets, each weighted by its task kind's share of the benchmark's "
            "22 datasets split evenly over the dev sets of that kind (benchmark_kinds.json; question and stance weigh "
            "0): for each held-out set every arm (selection.kind_weighted.arms) is fitted on the others (w from "
            f"{list(sel.EMBEDDING_WEIGHTS)} with the entailment rule; temperatures by NLL or on the objective itself; "
            "pooled or per request group; optionally the confidence calibrator on top) and scored on it with the "
            "served code; the same arms are also scored leave-one-kind-out (every set of a kind held out at once, "
            "the choice made on the other kinds); the arm shipped is the best kind-weighted mean (leave-one-dataset-out) "
            f"that loses no kind by more than {KIND_TOLERANCE:g} point against plain entailment both ways of holding "
            "out, fitted on every zsc-dev set. The team dev set is reported only.")
