"""The bake-off (``python validate.py compare``): the same examples through several arms, one report.

For each arm: per-dataset metrics (`scorecards`), latency per document,
escalation at the target accuracies and the worst slices (`analysis`), and a
reliability diagram. Then one leaderboard over arms (ranked by the headline
mean normalised score), a JSON report, a one-file HTML report and a receipt.

May import `zsnli.harness`, `zsnli.metrics`, `zsnli.manifest` and the other
validation modules.
"""

from __future__ import annotations

import math
import time
from contextlib import nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Sequence


from rich.markup import escape

from zsnli import __version__
from zsnli.metrics import HEADLINE_METRIC, reliability_bins
from zsnli.compare.analysis import DEFAULT_MIN_SLICE_N, DEFAULT_TARGET_ACCURACY, escalation, worst_slices
from zsnli.compare.compare_arms import ArmOptions, ArmRun, ArmSpec, run_arm
from zsnli.harness.cli import heartbeat
from zsnli.harness.examples import DEFAULT_EXAMPLES, load_examples
from zsnli.harness.stats import latency_summary, per_second
from zsnli.compare.report import receipt, receipt_payload, render_html, reliability_png
from zsnli.compare.scorecards import score_examples

RECEIPT_COVERS = ("sha256 of the canonical JSON of: the examples sha256, each arm's manifest sha256 (else model "
                  "sha256 or model id), and every arm's per-dataset quality figures rounded to 6 decimals "
                  "(timings excluded: they vary from run to run)")


@dataclass
class CompareOptions:
    """Inputs of a bake-off; see ``validate.py compare --help``."""

    arms: list[ArmSpec]
    examples: str = DEFAULT_EXAMPLES
    max_per_dataset: int | None = None
    targets: list[float] = field(default_factory=lambda: [DEFAULT_TARGET_ACCURACY])
    min_slice_n: int = DEFAULT_MIN_SLICE_N
    pipeline_model: Path | None = None
    seed: int = 0
    arm_options: ArmOptions = field(default_factory=ArmOptions)


def _nan_none(x: Any) -> Any:
    return None if isinstance(x, float) and math.isnan(x) else x


def _arm_entry(run: ArmRun, examples, opts: CompareOptions) -> tuple[dict[str, Any], bytes | None]:
    entry: dict[str, Any] = {"name": run.spec.name, "kind": run.spec.kind, "target": run.spec.target,
                             "identity": run.identity, "receipt_id": run.receipt_id, "error": run.error}
    if run.error:
        return entry, None
    scores = score_examples(examples, run.probabilities, seed=opts.seed)
    lat = latency_summary(run.seconds)
    conf = [r.confidence for r in scores.rows]
    hits = [r.correct for r in scores.rows]
    bins = reliability_bins(conf, hits)
    entry.update({
        "concurrency": run.concurrency,
        "timing": {
            "wall_s": run.wall_s,
            "docs_per_s": _nan_none(per_second(len(examples), run.wall_s)),
            "mean_ms": _nan_none(lat["mean_s"] * 1000),
            "p50_ms": _nan_none(lat["p50_s"] * 1000),
            "p95_ms": _nan_none(lat["p95_s"] * 1000),
        },
        "n_failed": scores.n_failed,
        "errors": run.errors[:20],
        "scores": scores.as_dict(),
        "escalation": [escalation(conf, hits, t).as_dict() for t in opts.targets],
        "worst_slices": [s.as_dict() for s in worst_slices(examples, scores.rows, opts.min_slice_n)],
        "reliability": {"edges": bins.edges.tolist(), "counts": bins.counts.tolist(),
                        "confidence": [_nan_none(float(v)) for v in bins.confidence],
                        "accuracy": [_nan_none(float(v)) for v in bins.accuracy],
                        "pooled_ece": bins.ece},
    })
    png = reliability_png(bins, f"{run.spec.name}: ECE (pooled) {bins.ece:.3f}")
    return entry, png


def leaderboard(arms: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """One row per arm that ran, ranked by mean normalised score (best first); failed arms last, with their error."""
    rows = []
    for a in arms:
        if a.get("error"):
            rows.append({"arm": a["name"], "kind": a["kind"], "error": a["error"], "normalised": None, "macro_f1": None,
                         "accuracy": None, "ece": None, "calibrated_macro_f1": None, "p50_ms": None, "p95_ms": None,
                         "docs_per_s": None, "concurrency": None, "failed": "arm failed"})
            continue
        m = a["scores"]["means"]
        rows.append({"arm": a["name"], "kind": a["kind"], "macro_f1": m["macro_f1"], "accuracy": m["accuracy"],
                     "ece": m["ece"], "calibrated_macro_f1": m["calibrated_macro_f1"], "normalised": m["normalised"],
                     "p50_ms": a["timing"]["p50_ms"], "p95_ms": a["timing"]["p95_ms"],
                     "docs_per_s": a["timing"]["docs_per_s"], "concurrency": a["concurrency"], "failed": a["n_failed"]})
    return sorted(rows, key=lambda r: (r["normalised"] is None, -(r["normalised"] or 0.0)))


def run_compare(opts: CompareOptions, console=None) -> tuple[dict[str, Any], dict[str, bytes]]:
    """Run every arm in turn over the examples; return (JSON report, {arm name: reliability PNG}).

    Raises ``ExamplesError`` when the examples cannot be loaded and
    ``ValueError`` when no arm is given or two arms share a name. A failing
    arm does not raise: its entry carries ``error``.
    """
    if not opts.arms:
        raise ValueError("no arms to compare")
    names = [a.name for a in opts.arms]
    if len(set(names)) != len(names):
        raise ValueError(f"arm names must be unique, got {names}; name them with NAME=TARGET")
    example_set = load_examples(opts.examples, opts.max_per_dataset)
    examples = example_set.examples
    arms: list[dict[str, Any]] = []
    pngs: dict[str, bytes] = {}
    for i, spec in enumerate(opts.arms, 1):
        if console is not None:
            console.print(f"[bold]arm {i}/{len(opts.arms)}[/bold] {escape(spec.name)} ({spec.kind}) on "
                          f"{len(examples)} documents", highlight=False)
        t0 = time.monotonic()
        with heartbeat(f"arm {spec.name}") if console is not None else nullcontext():
            run = run_arm(spec, examples, opts.arm_options, opts.pipeline_model)
        entry, png = _arm_entry(run, examples, opts)
        entry["elapsed_s"] = time.monotonic() - t0
        arms.append(entry)
        if png:
            pngs[spec.name] = png
        if console is not None:
            if run.error:
                console.print(f"  [red]failed[/red]: {escape(run.error)}", highlight=False)
            else:
                h = entry["scores"]["headline_mean_normalised"]
                console.print(f"  done in {entry['elapsed_s']:.1f} s; mean normalised score "
                              f"{'n/a' if h is None or math.isnan(h) else f'{h:.1f}'}", highlight=False)
    report: dict[str, Any] = {
        "tool": "zsnli validate compare",
        "version": __version__,
        "created_unix": time.time(),
        "metric": HEADLINE_METRIC,
        "examples": {"source": example_set.source, "sha256": example_set.sha256, "n": len(examples),
                     "datasets": example_set.datasets(), "notes": example_set.notes},
        "options": {"targets": opts.targets, "min_slice_n": opts.min_slice_n, "seed": opts.seed,
                    "max_per_dataset": opts.max_per_dataset,
                    "pipeline_model": str(opts.pipeline_model) if opts.pipeline_model else None,
                    "arm_options": {k: (str(v) if isinstance(v, Path) else v) for k, v in asdict(opts.arm_options).items()}},
        "arms": arms,
        "leaderboard": leaderboard(arms),
    }
    report["receipt"] = {"sha256": receipt(example_set.sha256, arms), "covers": RECEIPT_COVERS,
                         "payload": receipt_payload(example_set.sha256, arms)}
    return report, pngs


def print_compare(report: dict[str, Any], console) -> None:
    """Leaderboard, escalation and worst-slice tables (rich), then the receipt."""
    from rich.table import Table

    def f(x, spec=".3f"):
        return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else format(x, spec)

    lb = Table(title=f"Leaderboard ({report['examples']['n']} documents, {len(report['examples']['datasets'])} datasets; "
                     "quality columns are means over datasets)")
    for col in ("#", "arm", "kind", "macro-F1 (mean)", "acc. (mean)", "ECE (mean)", "cal. F1 (mean)", "normalised (mean)",
                "p50 ms/doc", "p95 ms/doc", "docs/s", "conc.", "failed"):
        lb.add_column(col, justify="left" if col in ("arm", "kind") else "right")
    for rank, r in enumerate(report["leaderboard"], 1):
        lb.add_row(str(rank), r["arm"], r["kind"], f(r["macro_f1"]), f(r["accuracy"]), f(r["ece"]),
                   f(r["calibrated_macro_f1"]), f(r["normalised"], ".1f"), f(r["p50_ms"], ".1f"), f(r["p95_ms"], ".1f"),
                   f(r["docs_per_s"], ".2f"), str(r["concurrency"] or ""), str(r["failed"]))
    console.print(lb)

    esc = Table(title="Escalation: lowest confidence threshold whose kept documents reach the target accuracy "
                      "(pooled over documents)")
    for col in ("arm", "target", "threshold", "% kept", "% to a person", "kept acc. (pooled)"):
        esc.add_column(col, justify="left" if col == "arm" else "right")
    for arm in report["arms"]:
        for e in arm.get("escalation", []):
            if e["reachable"]:
                esc.add_row(arm["name"], f(e["target"], ".2f"), f(e["threshold"], ".4f"), f(100 * e["kept_fraction"], ".1f"),
                            f(100 * e["escalated_fraction"], ".1f"), f(e["kept_accuracy"]))
            else:
                esc.add_row(arm["name"], f(e["target"], ".2f"), "unreachable", "0.0", "100.0", "n/a")
    console.print(esc)

    sl = Table(title=f"Worst slices (n >= {report['options']['min_slice_n']}, Wilson 95% top below the arm's pooled "
                     "accuracy; ranked by gap x sqrt(n); top 10 per arm)")
    for col in ("arm", "slice", "kind", "n", "slice acc.", "95% interval", "arm acc. (pooled)", "gap x sqrt(n)"):
        sl.add_column(col, justify="left" if col in ("arm", "slice", "kind") else "right")
    for arm in report["arms"]:
        if arm.get("error"):
            continue
        slices = arm.get("worst_slices", [])
        if not slices:
            sl.add_row(arm["name"], "(none)", "", "", "", "", f(arm["scores"]["pooled_accuracy"]), "")
        for s in slices[:10]:
            sl.add_row(arm["name"], s["name"][:60], s["kind"], str(s["n"]), f(s["accuracy"]),
                       f"{s['low']:.3f}-{s['high']:.3f}", f(arm["scores"]["pooled_accuracy"]), f(s["rank_score"], ".2f"))
    console.print(sl)
    for arm in report["arms"]:
        if arm.get("error"):
            console.print(f"[red]arm {escape(arm['name'])} failed:[/red] {escape(arm['error'])}", highlight=False)
    console.print(f"receipt sha256: [bold]{report['receipt']['sha256']}[/bold]", highlight=False)
