"""The side-by-side benchmark's printed report: a rich table of the arms, then one line per ratio (with
the issue-24 targets), agreement, compute ceiling and failed server, each naming the CPU.

Imports `zsnli.bench.side_by_side` (targets, `failed_servers`) and `zsnli.bench.ceiling`; rich lazily.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .ceiling import cpu_line, cpu_tag, load_text
from .side_by_side import (TARGET_DEFAULT_VS_PLAIN_50, TARGET_FAST_VS_DEFAULT, TARGET_MAX_DP_ALONE,
                           TARGET_VS_PIPELINE, TARGET_VS_PLAIN, failed_servers)

#: arm key prefix -> (the scoring's name in `zsnli.bench.side_by_side.recorded_quality`, what it is)
QUALITY_OF = {"a": ("plain", "pipeline scoring"), "b": ("plain", "pipeline scoring"), "c": ("plain", "plain NLI"),
              "d": ("default", "shipped default"), "f": ("fast", "fast path")}


def _fmt(x: Any, spec: str) -> str:
    """``x`` formatted by ``spec``, ``-`` for None or NaN."""
    if x is None or (isinstance(x, float) and x != x):
        return "-"
    return format(x, spec)


def render(report: dict[str, Any], console=None) -> None:
    """Print the report as a rich table plus ratio, target, agreement and ceiling lines, each naming the CPU."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=max(Console().width, 110))
    cpu = cpu_tag(report["cpu"])
    say = lambda text, **kw: console.print(text, markup=False, highlight=False, soft_wrap=True, **kw)  # noqa: E731
    t = Table(title=f"zsnli bench: {report['docs']} docs, {report['pairs']} pairs, {Path(report['model_dir']).name}")
    for col in ("arm", "docs/s", "pairs/s", "p50 s/doc", "p95 s/doc", "peak RSS MiB", "% ceiling", "ceiling", "load"):
        t.add_column(col, justify="left" if col in ("arm", "ceiling", "load") else "right")
    for r in report["arms"]:
        t.add_row(r["arm"], _fmt(r["docs_per_s"], ".2f"), _fmt(r["pairs_per_s"], ".1f"), _fmt(r["p50_s"], ".3f"),
                  _fmt(r["p95_s"], ".3f"), _fmt(r["peak_rss_mib"], ".0f"), _fmt(100 * r["fraction_of_ceiling"], ".1f"),
                  ceiling_column(report, r),
                  load_text(r.get("load1") or ()).removeprefix("load "))
    console.print(t)
    say(f"CPU: {cpu_line(report['cpu'])}")
    if report.get("best_b"):
        best = report["best_b"]
        say(f"(b) best: {best['arm']} ({best['docs_per_s']:.2f} docs/s)"
            + ("; stream arms' p50/p95 are intervals between completed documents (cross-document "
               "batching)" if any(r.get("mode") == "stream" for r in report["arms"]) else ""))
    for k, v in report["ratios"].items():
        target = _target(k)
        say(f"ratio ({k.replace('/', ')/(')}) docs/s: {v:.3f}x" + (f" (target >= {target:g}x: "
            f"{'met' if v >= target else 'NOT met'})" if target else "") + f" [{ratio_load(report, k)}; CPU: {cpu}]")
    _render_quality(report, say)
    for k, a in report.get("agreement", {}).items():
        say(f"agreement {k} vs ({a['vs']}): same argmax {a['same_argmax']}/{a['docs']}"
            f"{' (' + str(a['missing']) + ' missing)' if a['missing'] else ''}, max |dp| {a['max_abs_dp']:.2e}")
    for k, why in report.get("agreement_unmatched", {}).items():
        say(f"agreement {k}: none, {why}")
    for k, a in report.get("agreement_batched_vs_alone", {}).items():
        shipped = k[0] in "df"
        say(f"answers {k} vs each request alone ({k[0]}1): same argmax {a['same_argmax']}/{a['docs']}, max |dp| "
            f"{a['max_abs_dp']:.2e}" + (f" (target <= {TARGET_MAX_DP_ALONE:g}: "
                                          f"{'met' if a['max_abs_dp'] <= TARGET_MAX_DP_ALONE else 'NOT met'})"
                                          if shipped else ""))
    _render_ceilings(report, say, cpu)
    errs = {r["key"]: r.get("errors") for r in report["arms"] if r.get("errors")}
    if errs:
        say(f"server errors: {errs}", style="red")
    for name, info in failed_servers(report).items():
        say(f"server {name} failed: {info['error']}", style="red")


def ratio_load(report: dict[str, Any], ratio_key: str) -> str:
    """The 1-minute load average while each arm of a ratio ran (``"f32 load 1.50-2.10, d32 load 4.00"``): arms
    run one after another, so a ratio taken at two loads measures the loads too (issue 57: 0.772x, then 2.812x)."""
    rows = {r["key"]: r for r in report["arms"]}
    if report.get("best_b"):
        rows["b"] = report["best_b"]
    return ", ".join(f"{key} {load_text((rows.get(key) or {}).get('load1') or ())}" for key in ratio_key.split("/"))


def _render_quality(report: dict[str, Any], say) -> None:
    """One line per scoring measured: its quality as calibration.json records it (`recorded_quality`)."""
    quality = report.get("quality") or {}
    seen = set()
    for r in report["arms"]:
        name, what = QUALITY_OF.get(r["key"][0], (None, None))
        if name in quality and name not in seen:
            seen.add(name)
            q = quality[name]
            say(f"quality {what} ({name}; calibration.json, zsc-dev kind-weighted normalised): leave one dataset "
                f"out {_fmt(q['lodo'], '.2f')}, leave one kind out {_fmt(q['loko'], '.2f')}")


def _target(ratio_key: str) -> float | None:
    """The target of a ratio key: issue 50's for ``f32/d32`` (2.5x) and ``d32/c32`` (2.0x; issue 24 asked 0.8x),
    issue 24's for ``d32/a`` (3x); else None."""
    if ratio_key.startswith("f") and "/d" in ratio_key:
        return TARGET_FAST_VS_DEFAULT
    if ratio_key.startswith("d") and "/c" in ratio_key:
        return max(TARGET_VS_PLAIN, TARGET_DEFAULT_VS_PLAIN_50)
    if ratio_key.startswith("d") and ratio_key.endswith("/a"):
        return TARGET_VS_PIPELINE
    return None


def ceiling_column(report: dict[str, Any], row: dict[str, Any]) -> str:
    """The table's ``ceiling`` cell of a row: what its ceiling counts (``NLI pairs``, ``NLI + embedding``, ``NLI
    pairs (calibrated)``), ``-`` without one, ``unknown`` when it could not be counted; followed by the model's
    folder name when it is not ``--model-dir``'s."""
    entry = (report.get("ceilings") or {}).get(row.get("ceiling_id"))
    if entry is None or row["ceiling"] == "none":
        return "-"
    if entry.get("ceiling") is None:
        return "unknown"
    parts = entry["ceiling"].get("parts") or {}
    what = ("NLI + embedding" if "embedding" in parts else "NLI pairs (calibrated)") if parts else "NLI pairs"
    other = entry["model_dir"] and entry["model_dir"] != report["model_dir"]
    return f"{what}, {Path(entry['model']).name}" if other else what


def ceiling_name(report: dict[str, Any], entry: dict[str, Any]) -> str:
    """How a line names a ceiling: ``NLI pairs of MODEL``, ``shipped default of MODEL`` (the shipped calibration),
    else ``served scoring of CALIBRATION on MODEL``; ``with encoder DIR`` when it counts a sentence encoder."""
    if entry["kind"] == "nli" or entry.get("calibration") is None:
        text = f"NLI pairs of {entry['model']}"
    elif entry["calibration"] == report.get("shipped_calibration"):
        text = f"shipped default of {entry['model']}"
    else:
        text = f"served scoring of {entry['calibration']} on {entry['model']}"
    return text + (f" with encoder {entry['embedding_dir']}" if entry.get("embedding_dir") else "")


def _render_ceilings(report: dict[str, Any], say, cpu: str) -> None:
    """One line per ceiling (each names its model: FLOPs per pair from its parameters, its tokens, its window), then
    one per server arm: its docs/s as a fraction of its own ceiling, or why it has none."""
    m, entries = report["matmul"], report.get("ceilings") or {}
    for entry in entries.values():
        c, p = entry["ceiling"], entry["params"]
        if c is None:
            say(f"compute ceiling of {entry['model']}: not computed: {entry['error']} [CPU: {cpu}]")
        elif "parts" not in c:
            say(f"compute ceiling ({ceiling_name(report, entry)}, window {entry['window']}): FLOPs/pair = 2 x "
                f"{p['per_token']:,} (encoder params) x L + 2 x {p['per_pair']:,} (head); mean L = "
                f"{c['mean_tokens_per_pair']:.1f} tokens -> {c['flops_per_doc'] / 1e9:.3f} GFLOP/doc; matmul "
                f"{m['dtype']} {m['flops_per_s'] / 1e9:.1f} GFLOP/s (n={m['n']}, threads={m['threads']}) -> ceiling "
                f"{c['ceiling_docs_per_s']:.2f} docs/s [CPU: {cpu}]")
        else:
            parts = "; ".join(f"{name} {v['sequences']:,} sequences, {v['tokens']:,} tokens, {100 * v['share']:.0f}% "
                              f"of the FLOPs" for name, v in c["parts"].items())
            say(f"compute ceiling ({ceiling_name(report, entry)}, window {entry['window']}, {p['per_token']:,} "
                f"encoder params; the least work it does: {parts}) -> {c['flops_per_doc'] / 1e9:.3f} GFLOP/doc -> "
                f"ceiling {c['ceiling_docs_per_s']:.2f} docs/s [CPU: {cpu}]")
    for r in report["arms"]:
        entry = entries.get(r.get("ceiling_id"))
        if r["key"][0] not in "cd" or entry is None:
            continue
        if entry["ceiling"] is None:
            say(f"  {r['arm']}: {r['docs_per_s']:.2f} docs/s; no compute ceiling: {entry['error']} [CPU: {cpu}]")
            continue
        say(f"  {r['arm']}: {r['docs_per_s']:.2f} docs/s = {100 * r['fraction_of_ceiling']:.1f}% of the ceiling of "
            f"the {ceiling_name(report, entry)} ({r['achieved_flops_per_s'] / 1e9:.1f} useful GFLOP/s) "
            f"[CPU: {cpu}]")
