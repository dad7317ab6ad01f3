"""Side-by-side throughput benchmark: transformers zero-shot pipeline vs the zsnli server.

``python -m zsnli.bench [--model-dir model] [--examples FILE|hub:btzsc] [--docs N] [--out report.json]``
(also ``python -m zsnli.bench.side_by_side``)

Arms, all on the same model, the same documents, one run:

* (a) ``pipeline("zero-shot-classification")``, one document at a time,
  labels as given (``hypothesis_template="{}"``), default ``batch_size`` 1;
* (b) the same pipeline with ``batch_size`` in a sweep (``--batch-sizes``),
  documents grouped by label set and streamed (see `zsnli.bench.pipeline_arm`;
  ``--pipeline-mode doc`` or ``stream,doc`` also tries batching within each
  document); the best (highest docs/s) is reported as (b);
* (c) the zsnli server (serve.sh, 127.0.0.1, free port) driven over HTTP at
  concurrency 1 and 32 (``--concurrency``); each ``--variant NAME:ZSNLI_X=v,...``
  starts another server with those settings and drives it at the top
  concurrency (e.g. ``bf16:ZSNLI_DTYPE=bfloat16``), with its own ratios and
  agreement lines. Variants are checked before any arm runs (known
  ``ZSNLI_*`` names, values that `zsnli.config.Settings` accepts); a server
  that still fails to start, or whose arm fails, is recorded in the report
  (``server.variants.NAME.error``) and the run goes on (exit code 1);
* (d) the zsnli server with the shipped default scoring (``--calibration``,
  default the ``calibration.json`` the server finds beside ``--model-dir``:
  e.g. the cosine term of the sentence encoder), at the same concurrencies;
  its answers at the top concurrency are compared with concurrency 1 (each
  request alone), and its docs/s with (c) and (a) against the issue's targets.

Each pipeline arm runs in its own process (its peak RSS is its own); the
server's RSS is sampled from outside during each of its arms. Every arm
first runs ``--warmup`` untimed documents. The server is pointed at a
calibration file with the pipeline's semantics (entailment logit, T = 1, no
K correction, no content-free premise), so its answers are compared with
arm (a)'s: same argmax count and max |dp|. Then ratios (c@32)/(a) and
(c@32)/(b), (d@32)/(c@32) and (d@32)/(a), and the compute ceilings (see
`zsnli.bench.ceiling`): the NLI pairs' for (a)-(c), and the shipped default's
real token mix (its NLI pairs plus the sentence encoder's texts and labels) for
(d). The CPU model and flags (`zsnli.bench.ceiling.cpu_info`) head the table
and every figure line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from ..config import closest_setting, setting_names
from ..harness.cli import UsageParser, non_negative_int, positive_int
from ..harness.examples import DEV_EXAMPLES, SHARED_PUBLIC_EXAMPLES, ExamplesError, first_existing, load_examples, write_examples
from ..harness.load import run_requests
from ..harness.server import ServerError, offline_env, start_server
from ..harness.stats import latency_summary, per_second
from .ceiling import (LabelTooLong, combined_ceiling, compute_ceiling, cpu_info, cpu_line, cpu_tag,
                      embedding_token_counts, matmul_rate, pair_token_counts, param_counts)
from .resources import RssSampler, hwm_bytes, mib

#: the server's log level in every server arm (its output goes to a log file)
SERVER_LOG_LEVEL = "warning"
#: 503 retries per document (the bench measures throughput; the self-check counts a 503 as a failure)
RETRY_503 = 20

#: calibration.json content giving the transformers pipeline's semantics.
PIPELINE_SEMANTICS = {
    "chosen": {"rule": "entailment", "temperature": 1.0, "k_exponent": 0.0, "content_free_premise": None},
    "note": "zsnli.bench: transformers zero-shot pipeline semantics (entailment-logit softmax, T = 1)",
}

#: the file name of `PIPELINE_SEMANTICS` in the run's scratch directory
PIPELINE_CALIBRATION_NAME = "calibration.pipeline-semantics.json"

#: settings every server arm gets (besides ZSNLI_CALIBRATION_PATH); a variant's own settings override them.
SERVER_BASE_SETTINGS = {"ZSNLI_DEVICE": "cpu", "ZSNLI_DTYPE": "float32"}

#: Issue 24's targets for the shipped default at the top concurrency: docs/s against the plain NLI
#: scoring (c) and against the pipeline one document per call (a); max |dp| batched vs alone.
TARGET_VS_PLAIN = 0.8
TARGET_VS_PIPELINE = 3.0
TARGET_MAX_DP_ALONE = 1e-5


def one_line(exc: BaseException) -> str:
    """``Type: first line`` of an error, plus its last non-empty line when it has more (a server log
    tail's last line usually holds the reason)."""
    lines = [x.strip() for x in str(exc).splitlines() if x.strip()]
    text = f"{type(exc).__name__}: {lines[0]}" if lines else type(exc).__name__
    if len(lines) > 1:
        text += f" ... {lines[-1]}"
    return text


def server_arm_errors() -> tuple[type[BaseException], ...]:
    """What a server arm may raise that ends that arm only: the server refused to start or timed out
    (``ServerError``), could not be launched (``OSError``), the connection broke (``httpx.HTTPError``), or an
    answer was malformed (``ValueError``, ``KeyError``)."""
    import httpx

    return (ServerError, OSError, httpx.HTTPError, ValueError, KeyError)


def agreement(reference: Sequence[Sequence[float] | None], other: Sequence[Sequence[float] | None]) -> dict[str, Any]:
    """Compare two runs' per-document probabilities (same documents, same label order).

    Returns ``{"docs" (compared), "same_argmax" (count), "missing" (docs
    absent from either run), "max_abs_dp" (max over docs and labels of
    ``|p_ref - p_other|``), "worst_doc" (index)}``.
    """
    same = missing = 0
    compared = 0
    max_dp = 0.0
    worst = None
    for i, (ref, oth) in enumerate(zip(reference, other)):
        if ref is None or oth is None or len(ref) != len(oth):
            missing += 1
            continue
        compared += 1
        if max(range(len(ref)), key=ref.__getitem__) == max(range(len(oth)), key=oth.__getitem__):
            same += 1
        dp = max(abs(a - b) for a, b in zip(ref, oth))
        if worst is None or dp > max_dp:
            max_dp, worst = dp, i
    return {"docs": compared, "same_argmax": same, "missing": missing, "max_abs_dp": max_dp, "worst_doc": worst}


def arm_row(name: str, docs: int, pairs: int, wall_s: float, latencies_s: Sequence[float],
            peak_rss_bytes: int | None, hwm: int | None, **extra: Any) -> dict[str, Any]:
    """One arm's figures: docs/s, pairs/s, latency summary (s/doc), peak RSS (MiB)."""
    lat = latency_summary(latencies_s)
    return {
        "arm": name,
        "docs": docs,
        "pairs": pairs,
        "wall_s": wall_s,
        "docs_per_s": per_second(docs, wall_s),
        "pairs_per_s": per_second(pairs, wall_s),
        **{k: lat[k] for k in ("mean_s", "p50_s", "p95_s", "max_s")},
        "peak_rss_mib": mib(peak_rss_bytes),
        "hwm_rss_mib": mib(hwm),
        **extra,
    }


def run_pipeline_arm(model_dir: Path, examples: Path, docs: int, batch_size: int, mode: str, warmup: int,
                     threads: int | None, workdir: Path, progress: bool) -> dict[str, Any]:
    """Run one pipeline arm in a child process (``zsnli.bench.pipeline_arm``); returns its result JSON."""
    out = workdir / f"pipeline-{mode}-bs{batch_size}.json"
    cmd = [sys.executable, "-m", "zsnli.bench.pipeline_arm", "--model-dir", str(model_dir), "--examples",
           str(examples), "--docs", str(docs), "--batch-size", str(batch_size), "--mode", mode,
           "--warmup", str(warmup), "--out", str(out)]
    if threads:
        cmd += ["--threads", str(threads)]
    if not progress:
        cmd.append("--no-progress")
    proc = subprocess.run(cmd, env={**os.environ, **offline_env(threads)}, stderr=None if progress else subprocess.PIPE,
                          text=True)
    if proc.returncode != 0:
        raise RuntimeError(f"pipeline arm {mode} bs={batch_size} failed (exit {proc.returncode}): "
                           f"{(proc.stderr or '')[-2000:]}")
    return json.loads(out.read_text(encoding="utf-8"))


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Run every arm and return the report dict (also what ``--out`` gets).

    Scratch files (the documents, per-arm results, the calibration file) live
    in a temporary directory removed at the end.
    """
    workdir = Path(tempfile.mkdtemp(prefix="zsnli-bench-"))
    try:
        return _run(args, workdir)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def _run(args: argparse.Namespace, workdir: Path) -> dict[str, Any]:
    model_dir = Path(args.model_dir).resolve()
    try:
        loaded = load_examples(args.examples, limit=args.docs).examples
    except ExamplesError as exc:
        raise SystemExit(f"zsnli.bench: {exc}") from None
    # transformers' pipeline raises on an empty text ("at least one sequence"); the server takes it.
    docs = [d for d in loaded if d.text]
    skipped_empty = len(loaded) - len(docs)
    n_pairs = sum(len(d.labels) for d in docs)
    progress = not args.no_progress
    examples = write_examples(workdir / "docs.jsonl", docs)  # the exact documents every arm gets
    log = (lambda *a: print(*a, file=sys.stderr, flush=True)) if progress else (lambda *a: None)
    cpu = cpu_info()

    log(f"[bench] {len(docs)} documents, {n_pairs} pairs; model {model_dir}; CPU {cpu_line(cpu)}"
        + (f" ({skipped_empty} empty-text documents left out: the pipeline refuses them)" if skipped_empty else ""))
    if args.shipped is None:
        log(f"[bench] {args.calibration_note}: no shipped-default arm (d); pass --calibration PATH")
    params = param_counts(model_dir)
    try:
        tokens = pair_token_counts(model_dir, docs, args.max_length)
    except LabelTooLong as exc:
        raise SystemExit(f"zsnli.bench: {exc} (the server would answer 422): choose documents whose labels fit")
    log(f"[bench] measuring fp32 matmul rate (n={args.matmul_n or 1024})")
    rate = matmul_rate("cpu", "float32", n=args.matmul_n, min_time_s=args.matmul_seconds, threads=args.threads)
    ceiling = compute_ceiling(tokens, params, rate["flops_per_s"])
    ceilings = {"nli": ceiling["ceiling_docs_per_s"]}
    default_ceiling = None
    if args.shipped is not None:
        default_ceiling = shipped_ceiling(args, model_dir, docs, params, rate["flops_per_s"])
        ceilings["default"] = default_ceiling["ceiling_docs_per_s"]

    rows: list[dict[str, Any]] = []
    probs: dict[str, list] = {}
    best_b = _pipeline_arms(args, model_dir, examples, len(docs), workdir, progress, rows, probs)
    server_info = _server_arms(args, model_dir, docs, workdir, progress, log, rows, probs)

    for r in rows:
        r["ceiling"] = "default" if r.get("scoring") == "shipped" else "nli"
        r["fraction_of_ceiling"] = r["docs_per_s"] / ceilings[r["ceiling"]]
        work = default_ceiling if r["ceiling"] == "default" else ceiling
        r["achieved_flops_per_s"] = work["total_flops"] / r["wall_s"] if r["wall_s"] > 0 else float("nan")
    return {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "cpu": cpu,
        "model_dir": str(model_dir),
        "examples": args.examples if args.examples.startswith("hub:") else str(Path(args.examples).resolve()),
        "docs": len(docs),
        "pairs": n_pairs,
        "skipped_empty_text": skipped_empty,
        "threads": args.threads,
        "cpu_count": os.cpu_count(),
        "warmup": args.warmup,
        "arms": rows,
        "best_b": best_b,
        "ratios": ratios(rows, best_b, max(args.concurrency)),
        "agreement_vs_a": {r["key"]: agreement(probs["a"], probs[r["key"]]) for r in rows
                           if r["key"] != "a" and r.get("scoring", "pipeline") == "pipeline"},
        "agreement_batched_vs_alone": batched_vs_alone(probs, args.concurrency),
        "params": params.to_dict(),
        "matmul": rate,
        "ceiling": ceiling,
        "default_ceiling": default_ceiling,
        "ceiling_formula": "FLOPs(pair) = 2 * P_enc * L + 2 * P_head (Kaplan et al. 2020, arXiv:2001.08361, "
                           "C_forward ~ 2N per token; attention-context term dropped; L = real unpadded tokens)",
        "server": server_info,
        "pipeline_semantics": PIPELINE_SEMANTICS["chosen"],
        "shipped_scoring": args.shipped[1].to_dict() if args.shipped else None,
        "shipped_calibration": str(args.shipped[0]) if args.shipped else None,
    }


def shipped_ceiling(args: argparse.Namespace, model_dir: Path, docs: list, params, rate: float) -> dict[str, Any]:
    """The compute ceiling of the shipped default's real token mix (`zsnli.bench.ceiling.combined_ceiling`):
    its NLI pairs (each distinct label once), the content-free pairs when the calibration has a
    content-free premise, and the sentence encoder's text and distinct labels when it has a cosine term."""
    _, scoring = args.shipped
    parts = {"nli": (pair_token_counts(model_dir, docs, args.max_length, distinct=True), params)}
    if scoring.content_free_premise is not None:
        parts["content_free"] = (pair_token_counts(model_dir, docs, args.max_length,
                                                   premise=scoring.content_free_premise, distinct=True), params)
    if scoring.embedding_weight != 0:
        emb_dir = shipped_embedding_dir(args)
        parts["embedding"] = (embedding_token_counts(emb_dir, docs), param_counts(emb_dir))
    return combined_ceiling(parts, rate)


def shipped_embedding_dir(args: argparse.Namespace) -> Path:
    """The sentence encoder the shipped-default server loads: ``--embedding-dir``, else the server's default."""
    from ..runtime.embedding import default_embedding_dir

    return Path(args.embedding_dir) if args.embedding_dir else default_embedding_dir(args.model_dir)


def _scoring_of(args: argparse.Namespace, settings: dict[str, str]) -> str:
    """Which scoring a server arm ran: ``shipped`` when its calibration is arm (d)'s (a variant may set
    ``ZSNLI_CALIBRATION_PATH`` to it, e.g. with ``ZSNLI_SHARE_IDENTICAL_ROWS=0``), ``pipeline`` for the
    pipeline-semantics file, else ``other``."""
    path = Path(settings["ZSNLI_CALIBRATION_PATH"]).resolve()
    if args.shipped is not None and path == args.shipped[0]:
        return "shipped"
    return "pipeline" if path.name == PIPELINE_CALIBRATION_NAME else "other"


def ratios(rows: list[dict[str, Any]], best_b: dict[str, Any] | None, top: int) -> dict[str, float]:
    """docs/s ratios at the top concurrency: each plain server row (``c{top}``, ``c{top}-NAME``) over (a)
    and the best (b); the shipped default (``d{top}``) over ``c{top}``, (a) and the best (b). A server
    that failed has no row and no ratio."""
    by_key = {r["key"]: r for r in rows}
    out: dict[str, float] = {}
    c_top, d_top = f"c{top}", f"d{top}"
    for key in [k for k in by_key if k == c_top or k.startswith(c_top + "-") or k == d_top]:
        if key == d_top and c_top in by_key:
            out[f"{key}/{c_top}"] = by_key[key]["docs_per_s"] / by_key[c_top]["docs_per_s"]
        out[f"{key}/a"] = by_key[key]["docs_per_s"] / by_key["a"]["docs_per_s"]
        if best_b is not None:
            out[f"{key}/b"] = by_key[key]["docs_per_s"] / best_b["docs_per_s"]
    return out


def batched_vs_alone(probs: dict[str, list], levels: Sequence[int]) -> dict[str, dict[str, Any]]:
    """`agreement` of each server's answers at the top concurrency with its answers at concurrency 1
    (each request alone): ``{"c32": ..., "d32": ...}``; empty without a concurrency-1 level."""
    top = max(levels)
    if 1 not in levels or top == 1:
        return {}
    return {f"{p}{top}": agreement(probs[f"{p}1"], probs[f"{p}{top}"]) for p in ("c", "d")
            if f"{p}1" in probs and f"{p}{top}" in probs}


def _pipeline_arms(args: argparse.Namespace, model_dir: Path, examples: Path, n_docs: int, workdir: Path,
                   progress: bool, rows: list[dict[str, Any]], probs: dict[str, list]) -> dict[str, Any] | None:
    """Arms (a) and the (b) sweep, each in its own process; appends their rows and probabilities.
    Returns the best (b) row (highest docs/s), or None without a sweep."""
    # (a) pipeline, one document at a time
    res = run_pipeline_arm(model_dir, examples, n_docs, 1, "doc", args.warmup, args.threads, workdir, progress)
    rows.append(arm_row("(a) pipeline, 1 doc/call", res["docs"], res["pairs"], res["wall_s"],
                        res["latencies_s"], res["peak_rss_bytes"], res["hwm_bytes"], key="a", batch_size=1,
                        mode="doc"))
    probs["a"] = res["probabilities"]

    # (b) pipeline batch_size sweep
    sweep = []
    for mode in args.pipeline_mode:
        for bs in args.batch_sizes:
            key = f"b{bs}" if mode == "stream" else f"b{bs}doc"
            res = run_pipeline_arm(model_dir, examples, n_docs, bs, mode, args.warmup, args.threads,
                                   workdir, progress)
            row = arm_row(f"(b) pipeline, bs={bs} {mode}", res["docs"], res["pairs"], res["wall_s"],
                          res["latencies_s"], res["peak_rss_bytes"], res["hwm_bytes"], key=key, batch_size=bs,
                          mode=mode)
            sweep.append(row)
            probs[key] = res["probabilities"]
    best_b = max(sweep, key=lambda r: r["docs_per_s"]) if sweep else None
    if best_b is not None:
        best_b = {**best_b, "key": "b", "arm": best_b["arm"] + " (best)"}
        rows.extend(sweep)
    return best_b


def _server_arms(args: argparse.Namespace, model_dir: Path, docs: list, workdir: Path, progress: bool, log,
                 rows: list[dict[str, Any]], probs: dict[str, list]) -> dict[str, Any]:
    """Arms (c): the server with the pipeline's semantics at every concurrency, then (d) the shipped
    default at every concurrency, then each variant at the top one; appends rows and probabilities.
    A server that fails is recorded (``error``) and skipped. Returns the server info."""
    calib = workdir / PIPELINE_CALIBRATION_NAME
    calib.write_text(json.dumps(PIPELINE_SEMANTICS), encoding="utf-8")
    plain = {"ZSNLI_CALIBRATION_PATH": str(calib), **server_base_settings(args)}
    servers: dict[str, Any] = {}
    plan = [("default", {}, plain, args.concurrency)]
    if args.shipped is not None:
        shipped = {**server_base_settings(args), "ZSNLI_CALIBRATION_PATH": str(args.shipped[0])}
        if args.embedding_dir:
            shipped["ZSNLI_EMBEDDING_DIR"] = str(Path(args.embedding_dir).resolve())
        plan.append(("shipped", {}, shipped, args.concurrency))
    plan += [(name, extra, plain, [max(args.concurrency)]) for name, extra in args.variant]
    for name, extra, settings, levels in plan:
        servers[name] = _one_server(args, model_dir, docs, progress, log, rows, probs, name, extra, settings, levels)
    server_info = servers.pop("default")
    server_info["shipped"] = servers.pop("shipped", None)
    server_info["variants"] = servers
    return server_info


def _one_server(args, model_dir: Path, docs: list, progress: bool, log, rows: list[dict[str, Any]],
                probs: dict[str, list], name: str, extra: dict[str, str], settings: dict[str, str],
                levels: Sequence[int]) -> dict[str, Any]:
    """Start one server (``settings`` + the variant's ``extra``) and drive it at each of ``levels``;
    rows keyed ``c{n}`` (plain), ``d{n}`` (shipped default) or ``c{n}-NAME`` (a variant)."""
    n_pairs = sum(len(d.labels) for d in docs)
    log(f"[bench] starting the zsnli server ({args.launcher}) {name} {extra or ''}")
    info: dict[str, Any] = {"settings": extra if name != "shipped" else
                            {k: v for k, v in settings.items() if k not in SERVER_BASE_SETTINGS}}
    try:
        with start_server(model_dir, {"ZSNLI_LOG_LEVEL": SERVER_LOG_LEVEL, **settings, **extra}, args.launcher,
                          args.repo_root, args.threads) as server:
            info.update({"launcher": server.launcher, "startup_s": server.startup_s, "health": server.health})
            for conc in levels:
                key = {"default": f"c{conc}", "shipped": f"d{conc}"}.get(name, f"c{conc}-{name}")
                with RssSampler(server.pid) as rss:
                    load = run_requests(server.url, docs, concurrency=conc,
                                        warmups=args.warmup if conc == 1 else max(args.warmup, conc),
                                        progress=progress, desc=f"zsnli c={conc} {name}", request_timeout=600.0,
                                        retry_503=RETRY_503)
                label = {"default": f"(c) zsnli, concurrency {conc}",
                         "shipped": f"(d) zsnli shipped default, concurrency {conc}"}.get(
                             name, f"(c) zsnli, concurrency {conc}, {name}")
                rows.append(arm_row(label, len(docs), n_pairs, load.wall_s, load.seconds,
                                    rss.peak_bytes, hwm_bytes(server.pid), key=key, concurrency=conc,
                                    errors=load.error_counts(), retries_503=load.retries_503, variant=name,
                                    scoring=_scoring_of(args, {**settings, **extra})))
                probs[key] = load.probabilities
            info["exit_code"] = server.stop()
    except server_arm_errors() as exc:
        # Recorded, and the run goes on: the arms already measured (minutes) still make the report.
        info["error"] = one_line(exc)
        info["error_detail"] = str(exc)
        print(f"zsnli.bench: server {name} failed, skipped: {info['error']}", file=sys.stderr, flush=True)
    return info


def _fmt(x: Any, spec: str) -> str:
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
    for col in ("arm", "docs/s", "pairs/s", "p50 s/doc", "p95 s/doc", "peak RSS MiB", "% ceiling", "ceiling"):
        t.add_column(col, justify="left" if col in ("arm", "ceiling") else "right")
    for r in report["arms"]:
        t.add_row(r["arm"], _fmt(r["docs_per_s"], ".2f"), _fmt(r["pairs_per_s"], ".1f"), _fmt(r["p50_s"], ".3f"),
                  _fmt(r["p95_s"], ".3f"), _fmt(r["peak_rss_mib"], ".0f"), _fmt(100 * r["fraction_of_ceiling"], ".1f"),
                  "NLI + embedding" if r["ceiling"] == "default" else "NLI pairs")
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
            f"{'met' if v >= target else 'NOT met'})" if target else "") + f" [CPU: {cpu}]")
    for k, a in report["agreement_vs_a"].items():
        say(f"agreement {k} vs (a): same argmax {a['same_argmax']}/{a['docs']}"
            f"{' (' + str(a['missing']) + ' missing)' if a['missing'] else ''}, max |dp| {a['max_abs_dp']:.2e}")
    for k, a in report.get("agreement_batched_vs_alone", {}).items():
        shipped = k.startswith("d")
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


def _target(ratio_key: str) -> float | None:
    """The issue-24 target of a ratio key (``d32/c32``, ``d32/a``), else None."""
    if ratio_key.startswith("d") and "/c" in ratio_key:
        return TARGET_VS_PLAIN
    if ratio_key.startswith("d") and ratio_key.endswith("/a"):
        return TARGET_VS_PIPELINE
    return None


def _render_ceilings(report: dict[str, Any], say, cpu: str) -> None:
    c, m, p = report["ceiling"], report["matmul"], report["params"]
    say(f"compute ceiling (NLI pairs): FLOPs/pair = 2 x {p['per_token']:,} (encoder params) x L + 2 x "
        f"{p['per_pair']:,} (head); mean L = {c['mean_tokens_per_pair']:.1f} tokens -> "
        f"{c['flops_per_doc'] / 1e9:.3f} GFLOP/doc; matmul {m['dtype']} {m['flops_per_s'] / 1e9:.1f} GFLOP/s "
        f"(n={m['n']}, threads={m['threads']}) -> ceiling {c['ceiling_docs_per_s']:.2f} docs/s [CPU: {cpu}]")
    d = report.get("default_ceiling")
    if d:
        parts = "; ".join(f"{name} {v['sequences']:,} sequences, {v['tokens']:,} tokens, {100 * v['share']:.0f}% of "
                          f"the FLOPs" for name, v in d["parts"].items())
        say(f"compute ceiling (shipped default, its real token mix: {parts}) -> {d['flops_per_doc'] / 1e9:.3f} "
            f"GFLOP/doc -> ceiling {d['ceiling_docs_per_s']:.2f} docs/s [CPU: {cpu}]")
    for r in report["arms"]:
        if r["key"][0] in "cd":
            say(f"  {r['arm']}: {r['docs_per_s']:.2f} docs/s = {100 * r['fraction_of_ceiling']:.1f}% of the "
                f"{'shipped default' if r['ceiling'] == 'default' else 'NLI'} ceiling "
                f"({r['achieved_flops_per_s'] / 1e9:.1f} useful GFLOP/s) [CPU: {cpu}]")


def failed_servers(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{name: server info}`` of the servers (default, shipped and variants) that failed (have an ``error``)."""
    server = report.get("server") or {}
    out = {"default": server} if server.get("error") else {}
    if (server.get("shipped") or {}).get("error"):
        out["shipped"] = server["shipped"]
    out.update({k: v for k, v in (server.get("variants") or {}).items() if v.get("error")})
    return out


def parse_variant(spec: str) -> tuple[str, dict[str, str]]:
    """``"bf16:ZSNLI_DTYPE=bfloat16,ZSNLI_TOKEN_BUDGET=2048"`` -> ``("bf16", {...})``.

    Raises ``ValueError`` on a missing name, an item without ``=`` or a key
    that is not a ``ZSNLI_*`` setting the server knows (the message suggests
    the closest known name). Values are checked by `check_variant`.
    """
    name, sep, rest = spec.partition(":")
    name = name.strip()
    if not sep or not name or name in ("default", "shipped") or not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"{spec!r}: expected NAME:KEY=VALUE[,KEY=VALUE] with a plain NAME other than 'default' "
                         "and 'shipped'")
    env: dict[str, str] = {}
    for item in filter(None, (x.strip() for x in rest.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key.startswith("ZSNLI_"):
            raise ValueError(f"{spec!r}: {item!r} is not ZSNLI_NAME=VALUE")
        known = setting_names()
        if key not in known:
            close = closest_setting(key)
            hint = f"did you mean {close}?" if close else f"known: {', '.join(sorted(known))}"
            raise ValueError(f"{spec!r}: unknown setting {key} ({hint})")
        env[key] = value.strip()
    if not env:
        raise ValueError(f"{spec!r}: no settings")
    return name, env


def server_base_settings(args: argparse.Namespace) -> dict[str, str]:
    """The ``ZSNLI_*`` settings every server arm gets from the CLI (calibration path aside)."""
    settings = dict(SERVER_BASE_SETTINGS)
    if args.skip_manifest_check:
        settings["ZSNLI_SKIP_MANIFEST_CHECK"] = "1"
    return settings


def check_variant(name: str, env: dict[str, str], base: dict[str, str] | None = None) -> None:
    """Raise ``ValueError`` (one line) when the server would refuse ``base`` + ``env``: the same
    `zsnli.config.Settings.from_env` parse and checks it runs at startup."""
    from ..config import Settings, SettingsError

    try:
        Settings.from_env({**(base or {}), **env})
    except SettingsError as exc:
        raise ValueError(f"{name}: {exc}") from None


def _positive_ints(text: str) -> list[int]:
    """argparse type: ``"1,32"`` -> ``[1, 32]``; every item a positive integer, at least one."""
    items = [x.strip() for x in str(text).split(",") if x.strip()]
    if not items:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated positive integers, e.g. 1,32")
    values = []
    for item in items:
        try:
            value = int(item)
        except ValueError:
            value = 0
        if value < 1:
            raise argparse.ArgumentTypeError(f"{item!r} is not a positive integer (expected e.g. 1,32)")
        values.append(value)
    return values


def _batch_sizes(text: str) -> list[int]:
    """argparse type of ``--batch-sizes``: `_positive_ints`, or ``none`` (no (b) sweep: ``[]``)."""
    return [] if str(text).strip().lower() == "none" else _positive_ints(text)


def resolve_shipped(ap: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Set ``args.shipped`` to ``(calibration path, ScoringConfig)`` of arm (d), or None with
    ``args.calibration_note`` saying why (``--calibration none``, or no calibration.json where the
    server looks: ``<model-dir>/calibration.json``, else beside ``<model-dir>``).

    Usage errors (one line, exit 2): an explicit ``--calibration`` or ``--embedding-dir`` that does
    not exist, a calibration the server would refuse, a cosine term whose sentence encoder is missing.
    """
    from ..config import Settings
    from ..scoring import ScoringConfigError, load_scoring_config

    args.shipped, args.calibration_note = None, ""
    if args.embedding_dir and not Path(args.embedding_dir).is_dir():
        ap.error(f"--embedding-dir: no such directory {args.embedding_dir}")
    if args.calibration is not None and args.calibration.strip().lower() == "none":
        args.calibration_note = "--calibration none"
        return
    if args.calibration is None:
        path = Settings(model_dir=args.model_dir).resolved_calibration_path()
        if not path.is_file():
            args.calibration_note = f"no calibration.json at {path} (where the server looks)"
            return
    else:
        path = Path(args.calibration)
        if not path.is_file():
            ap.error(f"--calibration: no such file {args.calibration} (resolved: {path.resolve()}); pass the "
                     "shipped calibration.json, or none to leave out arm (d)")
    try:
        scoring, _ = load_scoring_config(path)
    except ScoringConfigError as exc:
        ap.error(f"--calibration: {exc}")
    if scoring.embedding_weight != 0 and not shipped_embedding_dir(args).is_dir():
        ap.error(f"--calibration {path} has a cosine term but its sentence encoder {shipped_embedding_dir(args)} is "
                 "missing; pass --embedding-dir")
    args.shipped = (path.resolve(), scoring)


def resolve_examples(ap: argparse.ArgumentParser, given: str | None) -> str:
    """The examples to use: ``given`` when it exists (or is ``hub:...``), else the default (the shared
    public examples, else the repository's dev set, said in one line on stderr); a usage error when
    neither is there."""
    if given is not None:
        if not given.startswith("hub:") and not Path(given).is_file():
            ap.error(f"--examples: no such file {given} (resolved: {Path(given).resolve()}); pass --examples PATH "
                     "(JSONL in DESIGN.md's examples format) or --examples hub:btzsc (needs network)")
        return given
    found = first_existing(SHARED_PUBLIC_EXAMPLES, DEV_EXAMPLES)
    if found is None:
        ap.error(f"--examples: neither {SHARED_PUBLIC_EXAMPLES} nor {DEV_EXAMPLES} is here (run from the repository "
                 "root); pass --examples PATH (JSONL in DESIGN.md's examples format) or --examples hub:btzsc")
    if str(found) != SHARED_PUBLIC_EXAMPLES:
        print(f"zsnli.bench: {SHARED_PUBLIC_EXAMPLES} not found: using the repository's {found} "
              "(pass --examples PATH or hub:btzsc for other data)", file=sys.stderr, flush=True)
    return str(found)


OTHER_COMMANDS = """the other benchmark commands (each with its own --help):
  python -m zsnli.bench.throughput_gate   the grading-style throughput gate (what bench/gpu.sh runs)
  python -m zsnli.bench.overload          a burst far above capacity: every answer 200 or 503 + Retry-After
  python -m zsnli.bench.bakeoff_priority  /classify p50/p95 alone and while a bake-off runs
  python -m zsnli.bench.read_routes       read-route p50/p95 idle and while two bake-offs run
  python -m zsnli.bench.training_speed    training pairs/s, fp32 vs bf16, against the compute ceiling
  python -m zsnli.bench.random_models     a random-weight model of a given architecture, built offline
  python -m zsnli.bench.pipeline_arm      one pipeline arm in its own process (run by this benchmark)"""
"""The epilog of ``python -m zsnli.bench --help``: every other ``python -m zsnli.bench.*`` command."""


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """CLI arguments (see module docstring).

    Refused here (argparse error, exit 2, before any arm runs): a missing
    ``--examples`` file, ``--batch-sizes``/``--concurrency`` items that are
    not positive integers, malformed or duplicate ``--variant`` names,
    variants whose settings the server would refuse (unknown ``ZSNLI_*``
    name, bad value), and a bad ``--calibration`` / ``--embedding-dir``
    (`resolve_shipped`).
    """
    ap = UsageParser(prog="python -m zsnli.bench", description=__doc__.splitlines()[0], epilog=OTHER_COMMANDS,
                     formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", default="model")
    ap.add_argument("--examples", default=None,
                    help=f"examples JSONL in DESIGN.md's format or hub:btzsc (default: {SHARED_PUBLIC_EXAMPLES} where "
                         f"the team's shared data is mounted, else the repository's {DEV_EXAMPLES}; relative to the "
                         "current directory)")
    ap.add_argument("--docs", type=positive_int, default=None, help="first N documents (default all)")
    ap.add_argument("--out", default=None, help="write the JSON report here")
    ap.add_argument("--batch-sizes", type=_batch_sizes, default="8,32,64",
                    help="pipeline batch_size sweep for (b), or none to leave (b) out (default: %(default)s)")
    ap.add_argument("--pipeline-mode", default="stream",
                    help="(b) modes, comma-separated: stream (label-set groups streamed across documents, "
                         "default) and/or doc (one call per document, pairs batched within it)")
    ap.add_argument("--concurrency", type=_positive_ints, default="1,32",
                    help="server concurrency levels for (c) and (d) (default: %(default)s)")
    ap.add_argument("--calibration", default=None, metavar="PATH|none",
                    help="calibration.json of arm (d), the shipped default scoring (default: the one the server "
                         "finds: <model-dir>/calibration.json, else beside <model-dir>); none: no arm (d)")
    ap.add_argument("--embedding-dir", default=None,
                    help="sentence encoder of arm (d)'s cosine term (ZSNLI_EMBEDDING_DIR; default: the server's, "
                         "<model-dir>/embedding)")
    ap.add_argument("--warmup", type=non_negative_int, default=4, help="untimed documents before each arm")
    ap.add_argument("--threads", type=int, default=None,
                    help="torch/OMP threads for every arm (default: leave the environment's)")
    ap.add_argument("--launcher", choices=("auto", "serve.sh", "uvicorn"), default="auto")
    ap.add_argument("--repo-root", default=".", help="where serve.sh lives (default .)")
    ap.add_argument("--skip-manifest-check", action="store_true",
                    help="set ZSNLI_SKIP_MANIFEST_CHECK for the server (model dirs without a matching manifest)")
    ap.add_argument("--max-length", type=int, default=None, help="window for token counts (default: the server's)")
    ap.add_argument("--matmul-n", type=int, default=None, help="matmul side for the rate (default 1024)")
    ap.add_argument("--matmul-seconds", type=float, default=2.0)
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:KEY=VALUE[,KEY=VALUE]",
                    help="also run the server with these ZSNLI_* settings at the top concurrency (repeatable), "
                         "e.g. bf16:ZSNLI_DTYPE=bfloat16 or int8:ZSNLI_BACKEND=onnx-int8")
    ap.add_argument("--no-progress", action="store_true")
    args = ap.parse_args(argv)
    try:
        args.variant = [parse_variant(v) for v in args.variant]
        for name, env in args.variant:
            check_variant(name, env, server_base_settings(args))
    except ValueError as exc:
        ap.error(f"--variant {exc}")
    names = [name for name, _ in args.variant]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        ap.error(f"--variant: duplicate name(s) {', '.join(dup)}; give each variant its own NAME")
    args.examples = resolve_examples(ap, args.examples)
    resolve_shipped(ap, args)
    args.pipeline_mode = [m.strip() for m in str(args.pipeline_mode).split(",") if m.strip()]
    bad = [m for m in args.pipeline_mode if m not in ("stream", "doc")]
    if bad:
        ap.error(f"--pipeline-mode: unknown mode(s) {bad}; use stream and/or doc")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print the table, write ``--out``; returns 0, or 1 when a server request failed
    or a server (plain, shipped default or variant) failed to start or run."""
    args = parse_args(argv)
    report = run(args)
    render(report)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 1 if any(r.get("errors") for r in report["arms"]) or failed_servers(report) else 0
