"""Side-by-side throughput benchmark: transformers zero-shot pipeline vs the zsnli server.

``python -m zsnli.bench [--model-dir model] [--examples FILE|hub:btzsc] [--docs N] [--out report.json]``
(the command line: `zsnli.bench.side_by_side_cli`; the printed table: `zsnli.bench.side_by_side_table`)

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
  request alone), and its docs/s with (c) and (a) against the issue's targets;
* (f) with ``--fast-path``: the same shipped server with ``ZSNLI_SCORING=embedding`` (the fast path, the
  sentence encoder's cosine alone), at the same concurrencies, against (d) (issue 50's targets: (f) >= 2.5x
  (d), (d) >= 2.0x (c)), its answers at the top concurrency against each request alone.

Beside the speeds, ``quality`` gives each scoring's figures as calibration.json records them (`recorded_quality`:
kind-weighted normalised macro-F1 on zsc-dev, leaving one dataset out and leaving one kind out).

Each pipeline arm runs in its own process (its peak RSS is its own); the
server's RSS is sampled from outside during each of its arms. Every arm
first runs ``--warmup`` untimed documents. The server is pointed at a
calibration file with the pipeline's semantics (entailment logit, T = 1, no
K correction, no content-free premise), so its answers are compared with
arm (a)'s: same argmax count and max |dp|. Every arm is compared with the first arm serving the same model
and scoring (`zsnli.bench.arm_agreement`: a variant with ``ZSNLI_SCORING=pipeline`` against (a), one with the
shipped calibration against (d)); an arm no other arm matches is named with what it serves. Then ratios (c@32)/(a) and
(c@32)/(b), (d@32)/(c@32) and (d@32)/(a), and the compute ceilings (see
`zsnli.bench.ceiling`): the NLI pairs' for (a)-(c), and the shipped default's
real token mix (its NLI pairs plus the sentence encoder's texts and labels) for
(d); every server arm, a variant included, is measured against the ceiling of the model(s) it serves
(`zsnli.bench.arm_ceiling`: its own model, window, calibration and encoder), each line naming that model.
The CPU model and flags (`zsnli.bench.ceiling.cpu_info`) head the table and every figure line; the 1-minute
load average is read before and after every arm (``load1``) and printed beside every ratio.
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

from ..harness.examples import ExamplesError, load_examples, write_examples
from ..harness.load import run_requests
from ..harness.server import ServerError, offline_env, start_server
from ..harness.stats import latency_summary, per_second
from .arm_agreement import agreement, agreements, scoring_name
from .arm_ceiling import ArmWork, apply_ceilings, arm_ceilings, arm_work, pipeline_work, work_ceiling
from .ceiling import LabelTooLong, cpu_info, cpu_line, load_average, matmul_rate
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

#: the built-in server arms' names, which the report uses as keys (``server.shipped``, ``server.fast``, each row's
#: ``variant``, `failed_servers`, each arm's ceiling): (c) plain, (d) the shipped default, (f) the fast path. A
#: ``--variant`` may not take one (`zsnli.bench.side_by_side_cli.parse_variant`).
BUILTIN_SERVERS = {"default": "c", "shipped": "d", "fast": "f"}

#: settings every server arm gets (besides ZSNLI_CALIBRATION_PATH); a variant's own settings override them.
SERVER_BASE_SETTINGS = {"ZSNLI_DEVICE": "cpu", "ZSNLI_DTYPE": "float32"}

#: Issue 24's targets for the shipped default at the top concurrency: docs/s against the plain NLI
#: scoring (c) and against the pipeline one document per call (a); max |dp| batched vs alone.
TARGET_VS_PLAIN = 0.8
TARGET_VS_PIPELINE = 3.0
TARGET_MAX_DP_ALONE = 1e-5
#: issue 50's targets: the fast path (f) over the shipped default (d), and (d) over plain NLI scoring (c), in docs/s.
TARGET_FAST_VS_DEFAULT = 2.5
TARGET_DEFAULT_VS_PLAIN_50 = 2.0


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
                     threads: int | None, workdir: Path, progress: bool, device: str = "cpu") -> dict[str, Any]:
    """Run one pipeline arm in a child process (``zsnli.bench.pipeline_arm``, fp32 on ``device``); returns its
    result JSON."""
    out = workdir / f"pipeline-{mode}-bs{batch_size}.json"
    cmd = [sys.executable, "-m", "zsnli.bench.pipeline_arm", "--model-dir", str(model_dir), "--examples",
           str(examples), "--docs", str(docs), "--batch-size", str(batch_size), "--mode", mode,
           "--warmup", str(warmup), "--out", str(out), "--device", device]
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
    """`run`'s body, with its scratch files in ``workdir``: the documents, every arm in turn, the ceilings and
    agreements; returns the report."""
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
    log(f"[bench] measuring fp32 matmul rate (n={args.matmul_n or 1024})")
    rate = matmul_rate("cpu", "float32", n=args.matmul_n, min_time_s=args.matmul_seconds, threads=args.threads)
    pipeline = pipeline_work(model_dir, args.max_length)
    try:  # the pipeline arms' ceiling, and the check that every label fits the window
        pipeline_entry = work_ceiling(pipeline, docs, rate["flops_per_s"], strict=True)
    except LabelTooLong as exc:
        raise SystemExit(f"zsnli.bench: {exc} (the server would answer 422): choose documents whose labels fit")

    rows: list[dict[str, Any]] = []
    probs: dict[str, list] = {}
    best_b = _pipeline_arms(args, model_dir, examples, len(docs), workdir, progress, rows, probs)
    plan = server_plan(args, workdir)
    server_info = _server_arms(args, model_dir, docs, plan, progress, log, rows, probs)
    # each server arm against the ceiling of the model(s) it served (`zsnli.bench.arm_ceiling`)
    works = arm_works(args, model_dir, plan)
    ceilings, of_arm = arm_ceilings(works, docs, rate["flops_per_s"], {pipeline: pipeline_entry})
    apply_ceilings(rows, ceilings, of_arm)
    for r in rows:  # what each server arm serves, from its resolved settings (`zsnli.bench.arm_agreement`)
        if "variant" in r:
            r["scoring"] = scoring_name(works[r["variant"]], str(args.shipped[0]) if args.shipped else None)
    alone = batched_vs_alone(probs, args.concurrency)
    compared, unmatched = agreements(rows, probs, works, skip=[(k, k[0] + "1") for k in alone])
    shipped = ceilings.get(of_arm.get("shipped")) if args.shipped is not None else None
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
        "agreement": compared,
        "agreement_unmatched": unmatched,
        "agreement_batched_vs_alone": alone,
        "params": pipeline_entry["params"],
        "matmul": rate,
        "ceiling": pipeline_entry["ceiling"],
        "default_ceiling": (shipped or {}).get("ceiling"),
        "ceilings": ceilings,
        "ceiling_formula": "FLOPs(pair) = 2 * P_enc * L + 2 * P_head (Kaplan et al. 2020, arXiv:2001.08361, "
                           "C_forward ~ 2N per token; attention-context term dropped; L = real unpadded tokens)",
        "server": server_info,
        "pipeline_semantics": PIPELINE_SEMANTICS["chosen"],
        "shipped_scoring": args.shipped[1].to_dict() if args.shipped else None,
        "shipped_calibration": str(args.shipped[0]) if args.shipped else None,
        "quality": recorded_quality(args.shipped[0]) if args.shipped else {},
    }


def recorded_quality(calibration: Path) -> dict[str, dict[str, float | None]]:
    """Each scoring's quality as ``calibration`` records it (written by ``train.py select --kinds``): kind-weighted
    normalised macro-F1 on zsc-dev, ``{"plain": ..., "default": ..., "fast": ...}`` each ``{"lodo", "loko"}``
    (leave one dataset out / one kind out; plain entailment has nothing fitted, so one figure serves both);
    a scoring the file has no figures for is left out (an older or hand-written calibration: ``{}``)."""
    try:
        kw = json.loads(Path(calibration).read_text(encoding="utf-8"))["selection"]["kind_weighted"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    out: dict[str, dict[str, float | None]] = {}
    plain = kw.get("plain_entailment", {}).get("weighted_normalised")
    if plain is not None:
        out["plain"] = {"lodo": plain, "loko": plain}
    served = kw.get("served_leave_one_dataset_out", {}).get("weighted_normalised")
    if served is not None:
        out["default"] = {"lodo": served,
                          "loko": kw.get("leave_one_kind_out", {}).get("served", {}).get("weighted_normalised")}
    fast = kw.get("embedding_scoring")
    if fast:
        out["fast"] = {"lodo": fast["leave_one_dataset_out"]["weighted_normalised"],
                       "loko": fast["leave_one_kind_out"]["weighted_normalised"]}
    return out


def shipped_embedding_dir(args: argparse.Namespace) -> Path:
    """The sentence encoder the shipped-default server loads: ``--embedding-dir``, else the server's default."""
    from ..runtime.embedding import default_embedding_dir

    return Path(args.embedding_dir) if args.embedding_dir else default_embedding_dir(args.model_dir)


def ratios(rows: list[dict[str, Any]], best_b: dict[str, Any] | None, top: int) -> dict[str, float]:
    """docs/s ratios at the top concurrency: each plain server row (``c{top}``, ``c{top}-NAME``) over (a)
    and the best (b); the shipped default (``d{top}``) over ``c{top}``, (a) and the best (b). A server
    that failed has no row and no ratio."""
    by_key = {r["key"]: r for r in rows}
    out: dict[str, float] = {}
    c_top, d_top = f"c{top}", f"d{top}"
    if f"f{top}" in by_key and d_top in by_key:
        out[f"f{top}/{d_top}"] = by_key[f"f{top}"]["docs_per_s"] / by_key[d_top]["docs_per_s"]
    for key in [k for k in by_key if k == c_top or k.startswith(c_top + "-") or k == d_top]:
        if key == d_top and c_top in by_key:
            out[f"{key}/{c_top}"] = by_key[key]["docs_per_s"] / by_key[c_top]["docs_per_s"]
        out[f"{key}/a"] = by_key[key]["docs_per_s"] / by_key["a"]["docs_per_s"]
        if best_b is not None:
            out[f"{key}/b"] = by_key[key]["docs_per_s"] / best_b["docs_per_s"]
    return out


def batched_vs_alone(probs: dict[str, list], levels: Sequence[int]) -> dict[str, dict[str, Any]]:
    """`agreement` of each server's answers at the top concurrency with its answers at concurrency 1
    (each request alone): ``{"c32": ..., "d32": ..., "f32": ...}``; empty without a concurrency-1 level."""
    top = max(levels)
    if 1 not in levels or top == 1:
        return {}
    return {f"{p}{top}": agreement(probs[f"{p}1"], probs[f"{p}{top}"]) for p in ("c", "d", "f")
            if f"{p}1" in probs and f"{p}{top}" in probs}


def _pipeline_arms(args: argparse.Namespace, model_dir: Path, examples: Path, n_docs: int, workdir: Path,
                   progress: bool, rows: list[dict[str, Any]], probs: dict[str, list]) -> dict[str, Any] | None:
    """Arms (a) and the (b) sweep, each in its own process; appends their rows and probabilities.
    Returns the best (b) row (highest docs/s), or None without a sweep."""
    # (a) pipeline, one document at a time
    load0 = load_average()
    res = run_pipeline_arm(model_dir, examples, n_docs, 1, "doc", args.warmup, args.threads, workdir, progress,
                           getattr(args, "device", "cpu"))
    rows.append(arm_row("(a) pipeline, 1 doc/call", res["docs"], res["pairs"], res["wall_s"],
                        res["latencies_s"], res["peak_rss_bytes"], res["hwm_bytes"], key="a", batch_size=1,
                        mode="doc", load1=[load0, load_average()]))
    probs["a"] = res["probabilities"]

    # (b) pipeline batch_size sweep
    sweep = []
    for mode in args.pipeline_mode:
        for bs in args.batch_sizes:
            key = f"b{bs}" if mode == "stream" else f"b{bs}doc"
            load0 = load_average()
            res = run_pipeline_arm(model_dir, examples, n_docs, bs, mode, args.warmup, args.threads,
                                   workdir, progress,
                                   getattr(args, "device", "cpu"))
            row = arm_row(f"(b) pipeline, bs={bs} {mode}", res["docs"], res["pairs"], res["wall_s"],
                          res["latencies_s"], res["peak_rss_bytes"], res["hwm_bytes"], key=key, batch_size=bs,
                          mode=mode, load1=[load0, load_average()])
            sweep.append(row)
            probs[key] = res["probabilities"]
    best_b = max(sweep, key=lambda r: r["docs_per_s"]) if sweep else None
    if best_b is not None:
        best_b = {**best_b, "key": "b", "arm": best_b["arm"] + " (best)"}
        rows.extend(sweep)
    return best_b


def server_plan(args: argparse.Namespace, workdir: Path) -> list[tuple[str, dict[str, str], dict[str, str],
                                                                         list[int]]]:
    """The server arms of a run, in order: ``(name, the variant's own settings, the arm's base settings,
    concurrencies)``: ``default`` (c) with the pipeline-semantics calibration (written into ``workdir``),
    ``shipped`` (d) and ``fast`` (f) with the shipped calibration, then each ``--variant`` at the top concurrency."""
    calib = workdir / PIPELINE_CALIBRATION_NAME
    calib.write_text(json.dumps(PIPELINE_SEMANTICS), encoding="utf-8")
    plain = {"ZSNLI_CALIBRATION_PATH": str(calib), **server_base_settings(args)}
    plan = [("default", {}, plain, args.concurrency)]
    if args.shipped is not None:
        shipped = {**server_base_settings(args), "ZSNLI_CALIBRATION_PATH": str(args.shipped[0])}
        if args.embedding_dir:
            shipped["ZSNLI_EMBEDDING_DIR"] = str(Path(args.embedding_dir).resolve())
        plan.append(("shipped", {}, shipped, args.concurrency))
        if getattr(args, "fast_path", False):
            plan.append(("fast", {"ZSNLI_SCORING": "embedding"}, shipped, args.concurrency))
    return plan + [(name, extra, plain, [max(args.concurrency)]) for name, extra in args.variant]


def server_env(model_dir: Path, settings: dict[str, str]) -> dict[str, str]:
    """The environment a server arm's process gets (`zsnli.harness.server.ServerProcess`): this process's, then
    ``ZSNLI_MODEL_DIR`` (absolute), then ``settings`` (an arm's own ``ZSNLI_MODEL_DIR`` wins)."""
    return {**os.environ, "ZSNLI_MODEL_DIR": str(Path(model_dir).resolve()), **settings}


def arm_works(args: argparse.Namespace, model_dir: Path, plan: list) -> dict[str | None, ArmWork]:
    """What each arm's ceiling counts (`zsnli.bench.arm_ceiling.arm_work`): None -> the pipeline arms' (``model_dir``),
    then each server arm of ``plan`` (`server_plan`) by name, from the environment its server gets (`server_env`),
    so a variant serving another model, window, calibration or encoder is measured against its own."""
    works: dict[str | None, ArmWork] = {None: pipeline_work(model_dir, args.max_length)}
    for name, extra, settings, _ in plan:
        works[name] = arm_work(server_env(model_dir, {**settings, **extra}), args.max_length)
    return works


def _server_arms(args: argparse.Namespace, model_dir: Path, docs: list, plan: list, progress: bool, log,
                 rows: list[dict[str, Any]], probs: dict[str, list]) -> dict[str, Any]:
    """Run each arm of ``plan`` (`server_plan`): (c) at every concurrency, (d) and (f) at every concurrency, each
    variant at the top one; appends rows and probabilities. A server that fails is recorded (``error``) and
    skipped. Returns the server info."""
    servers: dict[str, Any] = {}
    for name, extra, settings, levels in plan:
        servers[name] = _one_server(args, model_dir, docs, progress, log, rows, probs, name, extra, settings, levels)
    server_info = servers.pop("default")
    server_info["shipped"] = servers.pop("shipped", None)
    server_info["fast"] = servers.pop("fast", None)
    server_info["variants"] = servers
    return server_info


def _one_server(args, model_dir: Path, docs: list, progress: bool, log, rows: list[dict[str, Any]],
                probs: dict[str, list], name: str, extra: dict[str, str], settings: dict[str, str],
                levels: Sequence[int]) -> dict[str, Any]:
    """Start one server (``settings`` + the variant's ``extra``) and drive it at each of ``levels``;
    rows keyed ``c{n}`` (plain), ``d{n}`` (shipped default), ``f{n}`` (the fast path) or ``c{n}-NAME`` (a variant)."""
    n_pairs = sum(len(d.labels) for d in docs)
    log(f"[bench] starting the zsnli server ({args.launcher}) {name} {extra or ''}")
    info: dict[str, Any] = {"settings": extra if name not in ("shipped", "fast") else
                            {k: v for k, v in {**settings, **extra}.items() if k not in SERVER_BASE_SETTINGS}}
    try:
        with start_server(model_dir, {"ZSNLI_LOG_LEVEL": SERVER_LOG_LEVEL, **settings, **extra}, args.launcher,
                          args.repo_root, args.threads) as server:
            info.update({"launcher": server.launcher, "startup_s": server.startup_s, "health": server.health})
            for conc in levels:
                key = f"{BUILTIN_SERVERS[name]}{conc}" if name in BUILTIN_SERVERS else f"c{conc}-{name}"
                load0 = load_average()
                with RssSampler(server.pid) as rss:
                    load = run_requests(server.url, docs, concurrency=conc,
                                        warmups=args.warmup if conc == 1 else max(args.warmup, conc),
                                        progress=progress, desc=f"zsnli c={conc} {name}", request_timeout=600.0,
                                        retry_503=RETRY_503)
                label = {"default": f"(c) zsnli, concurrency {conc}",
                         "shipped": f"(d) zsnli shipped default, concurrency {conc}",
                         "fast": f"(f) zsnli fast path (scoring embedding), concurrency {conc}"}.get(
                             name, f"(c) zsnli, concurrency {conc}, {name}")
                rows.append(arm_row(label, len(docs), n_pairs, load.wall_s, load.seconds,
                                    rss.peak_bytes, hwm_bytes(server.pid), key=key, concurrency=conc,
                                    errors=load.error_counts(), retries_503=load.retries_503, variant=name,
                                    load1=[load0, load_average()]))
                probs[key] = load.probabilities
            info["exit_code"] = server.stop()
    except server_arm_errors() as exc:
        # Recorded, and the run goes on: the arms already measured (minutes) still make the report.
        info["error"] = one_line(exc)
        info["error_detail"] = str(exc)
        print(f"zsnli.bench: server {name} failed, skipped: {info['error']}", file=sys.stderr, flush=True)
    return info


def failed_servers(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{name: server info}`` of the servers (default, shipped, fast and variants) that failed (have an ``error``)."""
    server = report.get("server") or {}
    out = {"default": server} if server.get("error") else {}
    for name in ("shipped", "fast"):
        if (server.get(name) or {}).get("error"):
            out[name] = server[name]
    out.update({k: v for k, v in (server.get("variants") or {}).items() if v.get("error")})
    return out


def server_base_settings(args: argparse.Namespace) -> dict[str, str]:
    """The ``ZSNLI_*`` settings every server arm gets from the CLI (calibration path aside): fp32 on
    ``--device`` (default cpu); a variant's own ``ZSNLI_DTYPE`` (e.g. ``bfloat16``) overrides it."""
    settings = {**SERVER_BASE_SETTINGS, "ZSNLI_DEVICE": getattr(args, "device", "cpu")}
    if args.skip_manifest_check:
        settings["ZSNLI_SKIP_MANIFEST_CHECK"] = "1"
    return settings
