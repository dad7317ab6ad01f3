"""``python -m zsnli.selection``: choose the served scoring by leave-one-dataset-out and write calibration.json.

Reads the zsc-dev suite and the team dev set (examples format), fills the
score cache for whatever is missing (`zsnli.selection.score_cache`, the shipped model),
runs `zsnli.selection.search`, and writes:

* ``calibration.json``: ``chosen`` (the selected `ScoringConfig`, fitted on all
  dev datasets; the key the server reads), ``model_sha256`` (of ``--model-dir``, `zsnli.selection.targets`),
  ``selection`` (method, out-of-fold per-dataset table, which dev files with
  which sha256 decided what, the targets), ``superseded`` (the previous choice) and, with ``--kinds``,
  ``embedding_scoring`` (the fast path's T(K), `zsnli.selection.grouped_doc.embedding_row`);
* ``data_sources.json``: one ``role: "selection"`` entry per zsc-dev set used (the path it was read from).

Both default to the model's own folder (`zsnli.selection.targets.select_targets`: inside a variant folder such as
``model/base``, else beside the model directory's manifest); a path in another model's folder is refused.

``--negation`` adds the negation-pair experiment (`zsnli.selection.search.negation_leave_one_out`):
``selection.negation_pairs`` (out-of-fold figures of the statement/negation rule) and a top-level
``negation_pairs`` object when that rule wins out of fold. Off by default: the server does not read
it, and it never changes ``chosen``.

``--report-public`` adds figures on the public examples (REPORTING ONLY: they
are computed after the choice and never passed to it).

Imports: ``zsnli.selection.search``, ``zsnli.selection.score_cache``, ``zsnli.selection.devsets``,
``zsnli.selection.targets``, ``zsnli.manifest``, ``zsnli.runtime.embedding``,
``zsnli.harness.cli``, ``zsnli.training.usage`` (the error class) and ``zsnli.selection.cli_args`` (the parser and
the checks of the arguments).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from . import grouped, grouped_doc
from . import search as sel
from .grouped import read_kinds
from ..request_scoring import RequestScoring, embedding_scoring
from ..harness.cli import json_problem, one_line_errors, usage_error
from ..training.usage import UsageError
from .cli_args import PROG, check_args, check_dev_data, check_targets, parser
from .devsets import DevSetError, read_examples
from ..manifest import sha256_file
from .memo import memoised
from .targets import recorded_path, select_targets
from .negation import NegationRule
from .premise_windows import PremiseWindowsError
from .score_cache import CONTENT_FREE_PREMISE, CachedSet, fill_cache
from ..scoring import ScoringConfig

logger = logging.getLogger(__name__)
SELECTION_ROLE = "selection"
TARGETS = {"mean_over_embedding": 3.0, "max_below_embedding": 10.0, "max_ece": 0.08}
"""Issue 12's targets, out of fold on zsc-dev."""
PUBLIC_MAX_ROWS = 1_000_000
"""The public examples are reported in full (no subsample)."""


def load_dev(args) -> tuple[dict[str, CachedSet], dict[str, Any]]:
    """Cached zsc-dev + team dev sets keyed ``group/name`` (read by `zsnli.selection.cli_args.check_dev_data`), and the zsc-dev `DevSet`s
    (for provenance)."""
    zsc = args.zsc
    jobs = [("zsc-dev", ds) for ds in zsc.values()] + [("dev", ds) for ds in args.dev_sets.values()]
    return fill_cache(jobs, args.cache, args.model_dir, max_rows=args.max_rows, max_rows_for=args.max_rows_for,
                      threads=args.threads, embedding_dir=args.embedding_dir, windows=args.premise_windows), zsc


def _card(card) -> dict[str, Any]:
    d = card.as_dict()
    return {k: (round(v, 4) if isinstance(v, float) else v) for k, v in d.items()
            if k in ("n", "n_classes", "macro_f1", "ece", "calibrated_macro_f1", "normalised")}


def oof_table(sets: dict[str, CachedSet], grid: sel.Grid, oof: Sequence[int], digest: str) -> dict[str, Any]:
    """Per held-out dataset: chosen candidate, its T, and served-code figures vs embedding similarity."""
    rows = {}
    for h, name in enumerate(grid.names):
        cand = grid.cands[oof[h]]
        cfg = cand.config(*grid.temps[oof[h], h], digest)
        ours = sel.score_cached(sets[name], sel.served_probabilities(sets[name], cfg))
        emb = sel.score_cached(sets[name], sel.embedding_probabilities(sets[name]))
        rows[name] = {"chosen_without_it": cand.label, "t0": cfg.temperature, "k_exponent": cfg.k_exponent,
                      "ours": _card(ours), "embedding": _card(emb)}
    return rows


def summarise(rows: dict[str, Any], prefix: str) -> dict[str, Any]:
    """Means over the datasets whose name starts with ``prefix``, and the targets' status."""
    picked = {n: r for n, r in rows.items() if n.startswith(prefix)}
    ours = np.array([r["ours"]["normalised"] for r in picked.values()], dtype=float)
    emb = np.array([r["embedding"]["normalised"] for r in picked.values()], dtype=float)
    ece = np.array([r["ours"]["ece"] for r in picked.values()], dtype=float)
    gap = emb - ours
    out = {"datasets": len(picked), "ours_normalised": round(float(np.nanmean(ours)), 2),
           "embedding_normalised": round(float(np.nanmean(emb)), 2),
           "ours_macro_f1": round(float(np.mean([r["ours"]["macro_f1"] for r in picked.values()])), 4),
           "embedding_macro_f1": round(float(np.mean([r["embedding"]["macro_f1"] for r in picked.values()])), 4),
           "ours_ece_mean": round(float(ece.mean()), 4), "ours_ece_max": round(float(ece.max()), 4),
           "embedding_ece_mean": round(float(np.mean([r["embedding"]["ece"] for r in picked.values()])), 4),
           "worst_below_embedding": round(float(np.nanmax(gap)), 2),
           "worst_dataset": list(picked)[int(np.nanargmax(gap))]}
    out["targets_met"] = {
        "mean_over_embedding": bool(out["ours_normalised"] - out["embedding_normalised"] >= TARGETS["mean_over_embedding"]),
        "max_below_embedding": bool(out["worst_below_embedding"] <= TARGETS["max_below_embedding"]),
        "max_ece": bool(out["ours_ece_max"] <= TARGETS["max_ece"])}
    return out


def final_negation(sets: dict[str, CachedSet], grid: sel.Grid, final: int) -> tuple[NegationRule | None, dict]:
    """The negation rule chosen on all negation datasets (None: "off" wins), and its in-sample figures."""
    names = [n for n in grid.names if sel.is_negation_set(sets[n])]
    if not names:
        return None, {}
    bounds = {n: sel.dataset_bounds(sets[n]) for n in names}
    base = np.array([grid.baseline[grid.names.index(n)] for n in names])
    best, best_val = None, sel.objective(np.array([grid.full_norm[final, grid.names.index(n)] for n in names]), base)
    for v in sel.negation_variants():
        rule = sel.fit_negation([sets[n] for n in names], v)
        val = sel.objective(np.array([sel.negation_norm(sets[n], rule, bounds[n]) for n in names]), base)
        if val > best_val:
            best, best_val = rule, val
    return best, {"datasets": names, "objective": round(best_val, 2)}


def public_report(path: Path, args, configs: dict[str, ScoringConfig]) -> dict[str, Any]:
    """Figures on ``path`` (examples format) for each config and embedding similarity. REPORTING ONLY."""
    sets = fill_cache([("public", ds) for ds in read_examples(path).values()], args.cache, args.model_dir,
                      max_rows=PUBLIC_MAX_ROWS, threads=args.threads, embedding_dir=args.embedding_dir)
    out: dict[str, Any] = {"file": str(path), "sha256": sha256_file(path), "note": "reporting only; never used for a choice"}
    arms = {name: _probabilities_of(cfg) for name, cfg in configs.items()}
    arms["embedding_similarity"] = sel.embedding_probabilities
    for arm, probs_of in arms.items():
        per = {n.split("/", 1)[1]: _card(sel.score_cached(cs, probs_of(cs))) for n, cs in sets.items()}
        mean = {k: round(float(np.mean([d[k] for d in per.values()])), 4) for k in ("macro_f1", "ece", "normalised")}
        out[arm] = {"mean": mean, "datasets": per}
    return out


def _probabilities_of(config):
    """Per-row served probabilities under a `ScoringConfig` or a `RequestScoring` (groups, calibrator, cascade)."""
    if isinstance(config, RequestScoring):
        return lambda cs: grouped.served_probabilities(cs, config)[0]
    return lambda cs, c=config: sel.served_probabilities(cs, c)


def dev_files(sets: dict[str, CachedSet]) -> dict[str, Any]:
    """Per dev dataset: its files' sha256, rows used, and whether it is a negation-pair set."""
    return {n: {"files": cs.meta["key"]["files"], "rows_used": len(cs),
                "negation_pairs": sel.is_negation_set(cs)} for n, cs in sets.items()}


def superseded_block(old: dict[str, Any], chosen: dict[str, Any] | None = None) -> dict[str, Any]:
    """The previous choice, small. ``old``: the file this run replaces; ``chosen``: this run's choice.

    A file written by this procedure is superseded by its own ``chosen`` when this run chose otherwise;
    when it chose the same (a rerun, e.g. to add ``--report-public``) its ``superseded`` is kept."""
    if "selection" in old and "superseded" in old:
        if chosen is not None and old.get("chosen") not in (None, chosen):
            return {"chosen": old["chosen"], "decided_by": "train.py select: the calibration.json this run replaced",
                    "temperature_form": None, "dev_mean": None}
        return old["superseded"]
    figures = old.get("chosen_figures", {})
    return {"chosen": old.get("chosen"), "decided_by": old.get("decided_by"),
            "temperature_form": figures.get("temperature_form"), "dev_mean": figures.get("dev", {}).get("mean")}


def _compared_run(path: Path) -> dict[str, Any]:
    """``--compare-with``'s document; ``ValueError`` (one line) unless it is a ``--kinds`` selection output: why the
    file cannot be read as JSON (`json_problem`: an empty file called so), or the first key of
    ``selection.kind_weighted.leave_one_kind_out.served`` it lacks."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ValueError(f"--compare-with {path}: not readable JSON ({json_problem(exc)})") from None
    node: Any = doc
    for key in ("selection", "kind_weighted", "leave_one_kind_out", "served"):
        if not isinstance(node, dict) or key not in node:
            raise ValueError(f"--compare-with {path}: not the output of train.py select --kinds (no {key!r})")
        node = node[key]
    return doc


def compared_with(path: Path, decided_by: dict[str, Any]) -> dict[str, Any]:
    """The ``kind_weighted.compared_with`` record: another run's served figures, both ways of holding out.

    ``decided_by``: this run's `dev_files`; the other run must have been chosen on the same sets, files
    and rows, else `DevSetError`. Returns its file, encoder digest, chosen arm and the two summaries
    (weighted and unweighted normalised and ECE, per kind).
    """
    doc = _compared_run(path)
    if doc["selection"].get("decided_by") != decided_by:
        raise DevSetError(f"--compare-with {path}: chosen on other sets, files or rows than this run")
    kw = doc["selection"]["kind_weighted"]
    return {"file": str(path), "embedding_sha256": doc["chosen"].get("embedding_sha256"),
            "chosen_arm": kw.get("chosen_arm"), "served_leave_one_dataset_out": kw["served_leave_one_dataset_out"],
            "leave_one_kind_out": kw["leave_one_kind_out"]["served"]}


def write_data_sources(path: Path, zsc: dict[str, Any], sets: dict[str, CachedSet]) -> None:
    """Replace the ``role: selection`` entries of data_sources.json with one per zsc-dev set used, named by the
    path it was read from (`zsnli.selection.targets.recorded_path`) with the sha256 of its rows and labels."""
    doc = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {"sources": []}
    kept = [s for s in doc.get("sources", []) if s.get("role") != SELECTION_ROLE]
    for name, ds in zsc.items():
        files = {Path(p).name: d for p, d in ds.files.items()}
        rows = next(p for p in ds.files if Path(p).name == f"{name}.jsonl")
        kept.append({"name": f"zsc-dev:{name}", "kind": "local", "role": SELECTION_ROLE,
                     "licence": ds.source.get("licence", "not stated"), "path": recorded_path(rows),
                     "sha256": files[f"{name}.jsonl"], "labels_sha256": files[f"{name}.labels.json"],
                     "origin": ds.source.get("repo"), "rows": {"read": len(ds), "used": len(sets[f"zsc-dev/{name}"])}})
    doc["sources"] = kept
    path.write_text(json.dumps(doc, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


def cached_grid(cache_dir: Path, sets: dict[str, CachedSet], cands: Sequence[sel.Candidate]) -> sel.Grid:
    """`selection.evaluate_grid`, memoised in ``<cache>/selection_grid.pkl`` under a key of the cached
    sets' keys, the candidates and the selection constants (so a rerun, e.g. to add --report-public, is quick)."""
    key = [sorted((n, cs.meta["key"]) for n, cs in sets.items()), [c.label for c in cands],
           sel.LOG_T_BOUNDS, sel.K_EXPONENT_BOUNDS]
    return memoised(Path(cache_dir) / "selection_grid.pkl", key, "grid",
                    lambda: sel.evaluate_grid(sets, cands, log=logger.info))


def run(args) -> dict[str, Any]:
    """The whole procedure; returns the calibration document (also written to ``args.out``)."""
    from ..runtime.embedding import default_embedding_dir, embedding_digest

    sets, zsc = load_dev(args)
    digest = embedding_digest(args.embedding_dir or default_embedding_dir(args.model_dir))
    if args.kinds is not None:
        return run_kind_weighted(args, sets, zsc, digest)
    cands = sel.candidates()
    grid = cached_grid(args.cache, sets, cands)
    oof = sel.leave_one_out(grid)
    final = sel.choose_on_all(grid)
    chosen = cands[final].config(*grid.full_temps[final], digest)
    rows = oof_table(sets, grid, oof, digest)
    old = json.loads(args.out.read_text(encoding="utf-8")) if args.out.is_file() else {}
    doc = {"chosen": chosen.to_dict(), "model_sha256": args.model_sha256,
           "selection": selection_block(sets, grid, oof, final, rows),
           "superseded": superseded_block(old, chosen.to_dict())}
    if args.negation:
        add_negation(doc, sets, grid, oof, final, digest)
    if args.report_public is not None:
        prev = superseded_block(old, chosen.to_dict()).get("chosen")
        configs = {"new_default": chosen}
        if prev and comparable_previous({"chosen": prev}, digest) is not None:
            configs["previous_calibration"] = ScoringConfig.from_dict(prev)
        doc["selection"]["public_report"] = public_report(args.report_public, args, configs)
    args.out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    write_data_sources(args.data_sources, zsc, sets)
    return doc


def cached_kind_weighted(args, sets: dict[str, CachedSet], digest: str, previous: RequestScoring | None) -> dict[str, Any]:
    """`zsnli.selection.grouped_doc.build`, memoised in ``<cache>/kind_weighted.pkl`` under a key of the cached
    sets' keys, the kinds file, the arms, the cascades and the previous scoring (a rerun, e.g. after a failure
    in the public report, takes seconds instead of the leave-one-out's minutes)."""
    key = [sorted((n, cs.meta["key"]) for n, cs in sets.items()), sha256_file(args.kinds),
           [s.label for s in grouped.SPECS], grouped_doc.CASCADES, digest, "folds: dataset, kind",
           "embedding scoring: " + ", ".join(s.label for s in grouped_doc.EMBEDDING_SPECS),
           previous.to_dict() if previous is not None else None,
           [int(cs.premise_tokens.sum()) if cs.premise_tokens is not None else None for cs in sets.values()]]
    return memoised(Path(args.cache) / "kind_weighted.pkl", key, "built",
                    lambda: grouped_doc.build(sets, read_kinds(args.kinds), digest, previous, log=logger.info))


def comparable_previous(old: dict[str, Any], digest: str) -> RequestScoring | None:
    """The previous calibration's scoring (``old["chosen"]``) when this run can score it as it was served.

    ``digest``: this run's sentence-encoder digest (its cached cosines). A previous scoring with a cosine
    term pinned to another encoder (``embedding_sha256``) would be scored with the wrong cosines, so it is
    left out (``None``, logged), as is a missing one; one without a cosine term is always comparable.
    """
    chosen = old.get("chosen")
    if not chosen:
        return None
    pinned = chosen.get("embedding_sha256")
    if chosen.get("embedding_weight") and pinned and pinned != digest:
        logger.info("the previous scoring's cosine term is of another encoder (%s, this run %s): not re-scored here",
                    pinned[:12], digest[:12])
        return None
    return RequestScoring.from_chosen(chosen)


def run_kind_weighted(args, sets: dict[str, CachedSet], zsc: dict[str, Any], digest: str) -> dict[str, Any]:
    """``--kinds``: the kind-weighted choice (`zsnli.selection.grouped_doc.build`) written as calibration.json."""
    old = json.loads(args.out.read_text(encoding="utf-8")) if args.out.is_file() else {}
    previous = comparable_previous(old, digest)
    built = cached_kind_weighted(args, sets, digest, previous)
    final, rows = built["chosen"], built["rows"]
    selection = {
        "method": grouped_doc.describe_method(),
        "candidates": {"arms": [s.label for s in grouped.SPECS], "rules": ["entailment"],
                       "embedding_weights": list(sel.EMBEDDING_WEIGHTS),
                       "count": len(grouped.SPECS) * len(sel.EMBEDDING_WEIGHTS)},
        "chosen_candidate": built["spec"].label,
        "out_of_fold_choices": {n: r["chosen_without_it"] for n, r in rows.items()},
        "decided_by": dev_files({n: cs for n, cs in sets.items() if n.startswith("zsc-dev/")}),
        "decisions": {"chosen: w, temperatures per group, calibrator": sorted(n for n in sets if n.startswith("zsc-dev/"))},
        "kinds_file": {"path": str(args.kinds), "sha256": sha256_file(args.kinds)},
        "premise_windows": None if args.premise_windows is None else str(args.premise_windows),
        "out_of_fold": rows,
        "summary": {"zsc-dev": summarise(rows, "zsc-dev/"), "dev": summarise(rows, "dev/"), "all": summarise(rows, "")},
        "kind_weighted": built["kind_weighted"],
        "targets": TARGETS,
    }
    if args.compare_with is not None:
        selection["kind_weighted"] = {**selection["kind_weighted"],
                                      "compared_with": compared_with(args.compare_with, selection["decided_by"])}
    doc = {"chosen": final.to_dict(), "model_sha256": args.model_sha256, "selection": selection,
           "superseded": superseded_block(old, final.to_dict()), "embedding_scoring": built["embedding_scoring"]}
    if args.report_public is not None:
        row = built["embedding_scoring"]
        configs = {"new_default": final, "embedding_scoring": embedding_scoring(
            row["temperature"], row["k_exponent"], row["embedding_sha256"])}
        if previous is not None:
            configs["previous_calibration"] = previous
        selection["public_report"] = public_report(args.report_public, args, configs)
    args.out.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    write_data_sources(args.data_sources, zsc, sets)
    return doc


def add_negation(doc: dict[str, Any], sets: dict[str, CachedSet], grid: sel.Grid, oof: Sequence[int],
                 final: int, digest: str) -> None:
    """Add the negation-pair experiment (``--negation``) to ``doc``: ``selection.negation_pairs``, the
    datasets it was decided on, and a top-level ``negation_pairs`` when the rule wins out of fold."""
    neg_rows = sel.negation_leave_one_out(sets, grid, oof)["datasets"]
    neg_rule, neg_fit = final_negation(sets, grid, final)
    ours_neg = [r["scorecard"]["normalised"] for r in neg_rows.values()]
    main_neg = [r["main_scorecard"]["normalised"] for r in neg_rows.values()]
    wins = bool(neg_rows) and float(np.mean(ours_neg)) > float(np.mean(main_neg))
    selection = doc["selection"]
    selection["decisions"]["negation_pairs: whether the negation rule is used, its variant and T_neg"] = \
        sorted(n for n in sets if sel.is_negation_set(sets[n]))
    selection["negation_pairs"] = {
        "out_of_fold": neg_rows, "wins_out_of_fold": wins,
        "mean_normalised_with_rule": round(float(np.mean(ours_neg)), 2) if neg_rows else None,
        "mean_normalised_main_only": round(float(np.mean(main_neg)), 2) if neg_rows else None,
        "fitted_on_all": None if neg_rule is None else vars(neg_rule), "fit": neg_fit}
    if neg_rule is not None and wins:
        doc["negation_pairs"] = {
            "rule": "positive statement only: sigmoid(d / T), negation 1 - p (zsnli.selection.negation)",
            "temperature": neg_rule.temperature,
            "content_free_premise": CONTENT_FREE_PREMISE if neg_rule.content_free else None,
            "embedding_weight": neg_rule.embedding_weight,
            "embedding_sha256": digest if neg_rule.embedding_weight else None}


def selection_block(sets, grid: sel.Grid, oof, final: int, rows) -> dict[str, Any]:
    """The ``selection`` object of calibration.json (method, provenance, out-of-fold table, targets)."""
    return {
        "method": ("leave-one-dataset-out over the zsc-dev and team dev datasets: for each held-out dataset, every "
                   "candidate's temperature is fitted by NLL on the others (each dataset weighted equally) and the "
                   "candidate is chosen on the others by objective = mean normalised calibrated macro-F1 - "
                   f"{sel.ROBUSTNESS_LAMBDA:g} x max(0, worst shortfall below embedding similarity - "
                   f"{sel.ROBUSTNESS_MARGIN:g}); the shipped choice applies the same objective to all datasets"),
        "candidates": {"rules": sorted({c.rule for c in grid.cands}), "content_free": [False, True],
                       "embedding_weights": list(sel.EMBEDDING_WEIGHTS), "temperature_forms": list(sel.TEMPERATURE_FORMS),
                       "count": len(grid.cands)},
        "chosen_candidate": grid.cands[final].label,
        "chosen_in_sample_mean_normalised": round(float(np.mean(grid.full_norm[final])), 2),
        "out_of_fold_choices": {n: rows[n]["chosen_without_it"] for n in grid.names},
        "decided_by": dev_files(sets),
        "decisions": {"chosen: rule, content-free correction, embedding weight, temperature form, t0 and b": sorted(sets)},
        "out_of_fold": rows,
        "summary": {"zsc-dev": summarise(rows, "zsc-dev/"), "dev": summarise(rows, "dev/"), "all": summarise(rows, "")},
        "targets": TARGETS,
    }


def quality_markdown(doc: dict[str, Any]) -> str:
    """The quality tables of docs/quality.md (out-of-fold per dataset, summaries, public report) from a calibration document."""
    sel_doc = doc["selection"]
    lines = ["| dataset | chosen without it | ours macro-F1 | ours ECE | ours normalised | "
             "embedding macro-F1 | embedding ECE | embedding normalised |", "|---|---|---|---|---|---|---|---|"]
    for name, r in sel_doc["out_of_fold"].items():
        o, e = r["ours"], r["embedding"]
        lines.append(f"| {name} | {r['chosen_without_it']} | {o['macro_f1']:.3f} | {o['ece']:.3f} | {o['normalised']:.1f} | "
                     f"{e['macro_f1']:.3f} | {e['ece']:.3f} | {e['normalised']:.1f} |")
    lines += ["", "| out of fold | datasets | ours macro-F1 | embedding macro-F1 | ours ECE mean / max | embedding ECE mean | "
              "ours normalised | embedding normalised | worst below embedding |", "|---|---|---|---|---|---|---|---|---|"]
    for group, s in sel_doc["summary"].items():
        lines.append(f"| {group} | {s['datasets']} | {s['ours_macro_f1']:.3f} | {s['embedding_macro_f1']:.3f} | "
                     f"{s['ours_ece_mean']:.3f} / {s['ours_ece_max']:.3f} | {s['embedding_ece_mean']:.3f} | "
                     f"{s['ours_normalised']:.1f} | {s['embedding_normalised']:.1f} | "
                     f"{s['worst_below_embedding']:.1f} ({s['worst_dataset']}) |")
    pub = sel_doc.get("public_report")
    if pub:
        lines += ["", "| public 500 (reporting only) | macro-F1 | ECE | normalised |", "|---|---|---|---|"]
        for arm in ("new_default", "previous_calibration", "embedding_similarity"):
            if arm in pub:
                m = pub[arm]["mean"]
                lines.append(f"| {arm.replace('_', ' ')} | {m['macro_f1']:.3f} | {m['ece']:.3f} | {m['normalised']:.1f} |")
    return "\n".join(lines) + "\n"


@one_line_errors(PROG)
def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry; exit 2 with one line on a flag/data mistake (e.g. a clone without ../shared)."""
    args = parser().parse_args(argv)
    try:
        check_args(args)
        if args.compare_with is not None:
            _compared_run(args.compare_with)
        check_targets(args, *select_targets(args.model_dir, args.out, args.data_sources))
        check_dev_data(args)
    except (ValueError, UsageError) as exc:
        return usage_error(PROG, str(exc))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    try:
        doc = run(args)
    except (DevSetError, PremiseWindowsError) as exc:
        return usage_error(PROG, str(exc))
    s = doc["selection"]["summary"]["zsc-dev"]
    print(f"chosen {doc['selection']['chosen_candidate']}; zsc-dev out of fold: ours {s['ours_normalised']} vs "
          f"embedding {s['embedding_normalised']}, worst {s['worst_below_embedding']} below, ECE max {s['ours_ece_max']}")
    return 0
