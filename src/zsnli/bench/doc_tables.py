"""The Markdown of the docs' generated figures, from the files that hold them (no model runs here).

Pure functions from a ``validate.py bakeoff`` report (``baselines/main.json``: `ranking_table`,
`escalation_table`, `slices_table`), from a ``POST /v1/bakeoff`` answer (`bakeoff_answer_json`), from
``calibration.json``'s ``selection`` (`oof_table`, `oof_summary_table`, `public_table`,
`readme_quality_table`) and from answers of the server (`answer_json`: floats rounded to 6 decimals,
compact). `zsnli.bench.doc_figures` runs what produces them and writes each between its markers;
``tests/bench/test_doc_figures.py`` renders the committed report and calibration again and compares.

May import: the standard library and `zsnli.runtime.embedding` (a constant; it imports no torch at load).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any, Mapping, Sequence

from ..runtime.embedding import PUBLISHED_EMBEDDING_DIGEST

#: How many of each arm's worst slices `slices_table` lists.
SLICES_PER_ARM = 2


def rounded(value: Any, digits: int = 6) -> Any:
    """``value`` with every float rounded to ``digits`` decimals (nested lists and dicts too)."""
    if isinstance(value, float):
        return round(value, digits)
    if isinstance(value, list):
        return [rounded(v, digits) for v in value]
    if isinstance(value, dict):
        return {k: rounded(v, digits) for k, v in value.items()}
    return value


def answer_json(answer: Any) -> str:
    """A server's answer as the docs show it: compact JSON (as the server sends it), floats rounded to 6
    decimals (the last digits depend on the machine: CPU kernels, thread count)."""
    return json.dumps(rounded(answer), separators=(",", ":"), ensure_ascii=False)


def _num(x: float | None, digits: int = 3) -> str:
    """``x`` with ``digits`` decimals, ``n/a`` for None or NaN."""
    return "n/a" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.{digits}f}"


def _speed(x: float | None) -> str:
    """Milliseconds or documents/s: thousands separated from 100 up, one decimal below."""
    if x is None:
        return "n/a"
    return f"{x:,.0f}" if x >= 100 else f"{x:.1f}"


def _table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A Markdown table of ``header`` and ``rows`` (cells already text), ending with a newline."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def ranking_table(report: Mapping[str, Any]) -> str:
    """The bake-off report's leaderboard as a Markdown table: one row per arm in rank order, means over
    datasets (macro-F1, accuracy, ECE, calibrated macro-F1, normalised), latency, fit, RSS, cost."""
    header = ["#", "arm", "kind", "macro-F1", "accuracy", "ECE", "cal. F1", "normalised", "p50 ms/doc",
              "p95 ms/doc", "docs/s", "fit s", "peak RSS MiB", "cost"]
    rows = []
    for rank, row in enumerate(report["leaderboard"], 1):
        note = str(row.get("fit_note", ""))
        replayed = re.search(r"; (\d+) replayed from the fit cache", note)
        fit = "trained offline" if note.startswith("trained offline") else "none" if row["fit_s"] is None else \
            f"{row['fit_s']:.1f} ({note.split(' ')[0]} fits{f', {replayed.group(1)} replayed' if replayed else ''})"
        rows.append([str(rank), row["arm"], row["kind"], _num(row["macro_f1"]), _num(row["accuracy"]),
                     _num(row["ece"]), _num(row["calibrated_macro_f1"]), _num(row["normalised"], 1),
                     _speed(row["p50_ms"]), _speed(row["p95_ms"]), _speed(row["docs_per_s"]), fit,
                     f"{row['peak_rss_mb']:,.0f}" if row.get("peak_rss_mb") else "n/a", row.get("cost", "")])
    return _table(header, rows)


def escalation_table(report: Mapping[str, Any]) -> str:
    """Per arm, the first escalation target's threshold, % kept, % to a person and kept accuracy
    (pooled over the test rows), in leaderboard order."""
    by_name = {arm["name"]: arm for arm in report["arms"]}
    rows = []
    for row in report["leaderboard"]:
        esc = (by_name[row["arm"]].get("escalation") or [None])[0]
        if esc is None:
            continue
        if not esc["reachable"]:
            rows.append([row["arm"], "unreachable", "0", "100", "n/a"])
            continue
        rows.append([row["arm"], _num(esc["threshold"]), f"{100 * esc['kept_fraction']:.1f}",
                     f"{100 * esc['escalated_fraction']:.1f}", _num(esc["kept_accuracy"])])
    return _table(["arm", "threshold", "% kept", "% to a person", "kept accuracy"], rows)


def escalation_facts(report: Mapping[str, Any]) -> dict[str, Any]:
    """``{"target", "n"}`` of the report's first escalation target (what the table's heading says)."""
    esc = next(a["escalation"][0] for a in report["arms"] if a.get("escalation"))
    return {"target": esc["target"], "n": esc["n"]}


def slices_table(report: Mapping[str, Any], per_arm: int = SLICES_PER_ARM) -> str:
    """The top ``per_arm`` worst-slice findings of each arm (leaderboard order; arms without a finding
    are left out): slice, declared / discovered, n, accuracy, Wilson 95% interval, gap x sqrt(n)."""
    by_name = {arm["name"]: arm for arm in report["arms"]}
    rows = []
    for row in report["leaderboard"]:
        arm = by_name[row["arm"]]
        findings = [s for s in arm.get("slices") or [] if s.get("finding")][:per_arm]
        pooled = arm["scores"].get("pooled_accuracy")
        for i, s in enumerate(findings):
            who = f"{row['arm']} ({_num(pooled)})" if i == 0 else row["arm"]
            rows.append([who, f"{s['facet']} = {s['name']}", s["kind"], str(s["n"]), _num(s["accuracy"]),
                         f"{_num(s['low'])}-{_num(s['high'])}", f"{s['rank_score']:.2f}"])
    return _table(["arm (pooled accuracy)", "slice", "declared / discovered", "n", "accuracy", "95% interval",
                   "gap x sqrt(n)"], rows)


#: The keys of a scorecard entry the docs show (reliability bins, the arm view's figures and the receipt's
#: identities left out).
SCORECARD_KEYS = ("rank", "arm", "role", "accuracy", "macro_f1", "ece", "n", "latency_ms_p50", "fit_s", "status")


def bakeoff_answer_json(answer: Mapping[str, Any]) -> str:
    """A ``POST /v1/bakeoff`` answer as docs/bakeoff.md shows it: one scorecard entry a line, figures
    rounded to 4 decimals, each entry's reliability bins left out, the receipt's signature cut to 40
    characters and its arm identities left out (``...``)."""
    def dumps(value: Any) -> str:
        return json.dumps(rounded(value, 4), ensure_ascii=False)

    head = [f'"{k}": {dumps(answer[k])}' for k in ("id", "created_at", "task_description", "labels", "n")
            if k in answer]
    cards = [dumps({k: card[k] for k in SCORECARD_KEYS if k in card}) for card in answer["scorecard"]]
    receipt = answer.get("receipt") or {}
    signature = str(receipt.get("signature") or "")
    receipt_text = (f'{{"sha256": {dumps(receipt.get("sha256"))},\n             "signature": '
                    f'{dumps(signature[:40] + "...")}, "key_id": {dumps(receipt.get("key_id"))}, ...}}')
    return ("{" + ", ".join(head[:2]) + ",\n " + ",\n ".join(head[2:]) + ",\n \"scorecard\": [\n  "
            + ",\n  ".join(cards) + "],\n" + f' "winner": {dumps(answer.get("winner"))},\n'
            + f' "receipt": {receipt_text}}}\n')


# --------------------------------------------------------------------------- calibration.json's selection


def _short(dataset: str) -> str:
    """A dataset's name without its ``owner/`` prefix."""
    return dataset.split("/", 1)[-1]


def oof_table(selection: Mapping[str, Any]) -> str:
    """``train.py select``'s out-of-fold table (calibration.json ``selection.out_of_fold``): per dataset the
    configuration chosen without it, ours and embedding similarity's macro-F1, ECE and normalised score."""
    rows = []
    for name, row in selection["out_of_fold"].items():
        ours, emb = row["ours"], row["embedding"]
        rows.append([name, row["chosen_without_it"], _num(ours["macro_f1"]), _num(ours["ece"]), _num(ours["normalised"], 1),
                     _num(emb["macro_f1"]), _num(emb["ece"]), _num(emb["normalised"], 1)])
    return _table(["dataset", "chosen without it", "ours macro-F1", "ours ECE", "ours normalised", "embedding macro-F1",
                   "embedding ECE", "embedding normalised"], rows)


def oof_summary_table(selection: Mapping[str, Any]) -> str:
    """The out-of-fold summary (``selection.summary``): zsc-dev, the team dev set and all, as means."""
    rows = []
    for group, s in selection["summary"].items():
        rows.append([group, str(s["datasets"]), _num(s["ours_macro_f1"]), _num(s["embedding_macro_f1"]),
                     f"{_num(s['ours_ece_mean'])} / {_num(s['ours_ece_max'])}", _num(s["embedding_ece_mean"]),
                     _num(s["ours_normalised"], 1), _num(s["embedding_normalised"], 1),
                     f"{s['worst_below_embedding']:.1f} ({_short(s['worst_dataset'])})"])
    return _table(["out of fold", "datasets", "ours macro-F1", "embedding macro-F1", "ours ECE mean / max",
                   "embedding ECE mean", "ours normalised", "embedding normalised", "worst below embedding"], rows)


def public_table(selection: Mapping[str, Any]) -> str:
    """The public examples' report (``selection.public_report``, reporting only): the means of the served
    scoring and of embedding similarity, then each set's normalised score."""
    pub = selection["public_report"]
    ours, emb = pub["new_default"], pub["embedding_similarity"]
    rows = [[label, _num(part["mean"]["macro_f1"]), _num(part["mean"]["ece"]), _num(part["mean"]["normalised"], 1)]
            for label, part in (("this model and its scoring", ours), ("embedding similarity", emb))]
    per_set = ", ".join(f"{name} {_num(ours['datasets'][name]['normalised'], 1)} / "
                        f"{_num(emb['datasets'][name]['normalised'], 1)}" for name in ours["datasets"])
    return (_table(["public (reporting only)", "macro-F1", "ECE", "normalised"], rows)
            + f"\n(Per set, this / embedding normalised: {per_set}.)\n")


def readme_quality_table(selection: Mapping[str, Any]) -> str:
    """The README's quality table: zsc-dev and the team dev set out of fold, the public examples."""
    summary, pub = selection["summary"], selection["public_report"]
    rows = []
    for group, label in (("zsc-dev", "zsc-dev (real sets not in the benchmark; weighted by kind to choose, unweighted here)"),
                         ("dev", "team dev set (`dev/zeroshot_dev.jsonl`)")):
        s = summary[group]
        rows.append([label, str(s["datasets"]), f"{_num(s['ours_macro_f1'])} / {_num(s['embedding_macro_f1'])}",
                     f"{_num(s['ours_ece_mean'])} / {_num(s['embedding_ece_mean'])}",
                     f"{_num(s['ours_normalised'], 1)} / {_num(s['embedding_normalised'], 1)}"])
    ours, emb = pub["new_default"]["mean"], pub["embedding_similarity"]["mean"]
    rows.append(["public benchmark documents (reporting only)", str(len(pub["new_default"]["datasets"])),
                 f"{_num(ours['macro_f1'])} / {_num(emb['macro_f1'])}", f"{_num(ours['ece'])} / {_num(emb['ece'])}",
                 f"{_num(ours['normalised'], 1)} / {_num(emb['normalised'], 1)}"])
    return _table(["out of fold", "datasets", "macro-F1 ours / embedding", "ECE mean ours / embedding",
                   "normalised ours / embedding"], rows)


def chosen_sentence(calibration: Mapping[str, Any]) -> str:
    """calibration.json's ``chosen`` in words: rule, content-free correction, embedding weight, T(K)."""
    c, sel = calibration["chosen"], calibration.get("selection") or {}
    cf = f'"{c["content_free_premise"]}" correction' if c.get("content_free_premise") is not None \
        else "no content-free correction"
    w = c.get("embedding_weight") or 0
    encoder = ("the untouched all-MiniLM-L6-v2" if c.get("embedding_sha256") == PUBLISHED_EMBEDDING_DIGEST else
               f"the sentence encoder fine-tuned from all-MiniLM-L6-v2, embedding sha256 {str(c.get('embedding_sha256'))[:12]}")
    cos = f"embedding weight {w:g} (cosine of {encoder})" if w else "no cosine term"
    temp = f"T(K) = {c['temperature']:.3f} x K^{c['k_exponent']:.3f}" if c.get("k_exponent") else \
        f"T = {c['temperature']:.3f}"
    tail = (f"; in-sample mean normalised {sel['chosen_in_sample_mean_normalised']:.1f}"
            if "chosen_in_sample_mean_normalised" in sel else "")
    extra = []
    if c.get("groups"):
        extra.append("own scoring for the request groups " + ", ".join(sorted(c["groups"])))
    if c.get("calibrator"):
        extra.append("the confidence calibrator on T (" + ", ".join(c["calibrator"]["features"]) + ")")
    if c.get("cascade"):
        extra.append(f"the label cascade: from {c['cascade']['min_labels']} labels on, only the "
                     f"{c['cascade']['keep']} with the highest cosines go to the cross-encoder")
    more = ("; " + "; ".join(extra)) if extra else ""
    arm = f" (arm: {sel['chosen_candidate']})" if "kind_weighted" in sel else ""
    return f"rule `{c['rule']}`, {cf}, {cos}, {temp}{more}{arm}{tail}"


def _loko_table(block: Mapping[str, Any], other: Mapping[str, Any], kinds: list[str]) -> str:
    """Leave one kind out: the served arm's figures (``leave_one_kind_out.served``) and the compared run's."""
    rows = []
    for name, s in (("served arm (shipped)", block["leave_one_kind_out"]["served"]),
                    ("served arm of the compared run", (other or {}).get("leave_one_kind_out"))):
        if s:
            rows.append([name, _num(s["weighted_normalised"], 2), _num(s["unweighted_normalised"], 2),
                         _num(s["weighted_ece"]), _num(s["unweighted_ece"])]
                        + [_num(s["per_kind"].get(k), 1) for k in kinds])
    return _table(["leave one kind out, zsc-dev", "weighted normalised", "unweighted normalised", "weighted ECE",
                   "unweighted ECE"] + kinds, rows)


def kind_weighted_table(selection: Mapping[str, Any]) -> str:
    """The kind-weighted choice (``selection.kind_weighted`` of ``train.py select --kinds``): every arm's
    kind-weighted and unweighted mean normalised score and ECE out of fold, and its mean per task kind, with the
    previous scoring and plain entailment (the pipeline's scoring) beside them; then the cascades tried."""
    block = selection["kind_weighted"]
    other = block.get("compared_with") or {}
    other_name = (f"served arm of the compared run (`--compare-with`; encoder {str(other.get('embedding_sha256'))[:12]})"
                  if other else "")
    arms = {"previous scoring (as shipped before)": block.get("previous_scoring"),
            **({other_name: other["served_leave_one_dataset_out"]} if other else {}),
            "plain entailment (pipeline scoring)": block["plain_entailment"], **block["arms"]}
    kinds = sorted({k for s in arms.values() if s for k in s["per_kind"]})
    rows = []
    for name, s in arms.items():
        if not s:
            continue
        mark = " (shipped)" if name == block["chosen_arm"] else ""
        rows.append([name + mark, _num(s["weighted_normalised"], 2), _num(s["unweighted_normalised"], 2),
                     _num(s["weighted_ece"]), _num(s["unweighted_ece"])]
                    + [_num(s["per_kind"].get(k), 1) for k in kinds])
    table = _table(["out of fold, zsc-dev", "weighted normalised", "unweighted normalised", "weighted ECE",
                    "unweighted ECE"] + kinds, rows)
    table += "\n" + _loko_table(block, other, kinds)
    casc = block.get("cascade") or {}
    if casc.get("out_of_fold"):
        crow = [[name if name != "exact" else "exact (every label)", _num(s["weighted_normalised"], 2),
                 _num(s["pairs_per_row"], 2)] for name, s in casc["out_of_fold"].items()]
        chosen = casc.get("chosen")
        table += "\n" + _table(["label cascade min_labels:keep", "weighted normalised", "NLI pairs per document"], crow)
        table += (f"\n(Shipped cascade: {chosen['min_labels']}:{chosen['keep']}.)\n" if chosen else
                  "\n(No cascade ships: none kept the score within the tolerance with fewer pairs.)\n")
    return table
