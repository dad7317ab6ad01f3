"""Side-by-side throughput benchmark: transformers zero-shot pipeline vs the zsnli server.

``python -m zsnli.bench --model-dir model --examples ../shared/data/zsc/public.jsonl [--docs N] [--out report.json]``

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
  (``server.variants.NAME.error``) and the run goes on (exit code 1).

Each pipeline arm runs in its own process (its peak RSS is its own); the
server's RSS is sampled from outside during each of its arms. Every arm
first runs ``--warmup`` untimed documents. The server is pointed at a
calibration file with the pipeline's semantics (entailment logit, T = 1, no
K correction, no content-free premise), so its answers are compared with
arm (a)'s: same argmax count and max |dp|. Then ratios (c@32)/(a) and
(c@32)/(b), and the compute ceiling (see `zsnli.bench.common`).
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

from .common import (
    DEFAULT_EXAMPLES,
    LabelTooLong,
    RssSampler,
    agreement,
    child_env,
    compute_ceiling,
    hwm_bytes,
    latency_summary,
    load_examples,
    matmul_rate,
    mib,
    pair_token_counts,
    param_counts,
    write_examples,
)
from ..config import closest_setting, setting_names
from .serving import ServerError, ServerProcess, run_load

#: calibration.json content giving the transformers pipeline's semantics.
PIPELINE_SEMANTICS = {
    "chosen": {"rule": "entailment", "temperature": 1.0, "k_exponent": 0.0, "content_free_premise": None},
    "note": "zsnli.bench: transformers zero-shot pipeline semantics (entailment-logit softmax, T = 1)",
}

#: settings every server arm gets (besides ZSNLI_CALIBRATION_PATH); a variant's own settings override them.
SERVER_BASE_SETTINGS = {"ZSNLI_DEVICE": "cpu", "ZSNLI_DTYPE": "float32"}


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
    lat = latency_summary([x for x in latencies_s if x == x])
    return {
        "arm": name,
        "docs": docs,
        "pairs": pairs,
        "wall_s": wall_s,
        "docs_per_s": docs / wall_s if wall_s > 0 else float("nan"),
        "pairs_per_s": pairs / wall_s if wall_s > 0 else float("nan"),
        **lat,
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
    proc = subprocess.run(cmd, env=child_env(threads=threads), stderr=None if progress else subprocess.PIPE,
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
    loaded = load_examples(args.examples, args.docs)
    # transformers' pipeline raises on an empty text ("at least one sequence"); the server takes it.
    docs = [d for d in loaded if d["text"]]
    skipped_empty = len(loaded) - len(docs)
    n_pairs = sum(len(d["labels"]) for d in docs)
    progress = not args.no_progress
    examples = write_examples(workdir / "docs.jsonl", docs)  # the exact documents every arm gets
    log = (lambda *a: print(*a, file=sys.stderr, flush=True)) if progress else (lambda *a: None)

    log(f"[bench] {len(docs)} documents, {n_pairs} pairs; model {model_dir}"
        + (f" ({skipped_empty} empty-text documents left out: the pipeline refuses them)" if skipped_empty else ""))
    params = param_counts(model_dir)
    try:
        tokens = pair_token_counts(model_dir, docs, args.max_length)
    except LabelTooLong as exc:
        raise SystemExit(f"zsnli.bench: {exc} (the server would answer 422): choose documents whose labels fit")
    log(f"[bench] measuring fp32 matmul rate (n={args.matmul_n or 1024})")
    rate = matmul_rate("cpu", "float32", n=args.matmul_n, min_time_s=args.matmul_seconds, threads=args.threads)
    ceiling = compute_ceiling(tokens, params, rate["flops_per_s"])

    rows: list[dict[str, Any]] = []
    probs: dict[str, list] = {}

    # (a) pipeline, one document at a time
    res = run_pipeline_arm(model_dir, examples, len(docs), 1, "doc", args.warmup, args.threads, workdir, progress)
    rows.append(arm_row("(a) pipeline, 1 doc/call", res["docs"], res["pairs"], res["wall_s"],
                        res["latencies_s"], res["peak_rss_bytes"], res["hwm_bytes"], key="a", batch_size=1,
                        mode="doc"))
    probs["a"] = res["probabilities"]

    # (b) pipeline batch_size sweep
    sweep = []
    for mode in args.pipeline_mode:
        for bs in args.batch_sizes:
            key = f"b{bs}" if mode == "stream" else f"b{bs}doc"
            res = run_pipeline_arm(model_dir, examples, len(docs), bs, mode, args.warmup, args.threads,
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

    # (c) the server: the default configuration at every concurrency, then each
    # --variant (extra ZSNLI_* settings) at the top concurrency only.
    calib = workdir / "calibration.pipeline-semantics.json"
    calib.write_text(json.dumps(PIPELINE_SEMANTICS), encoding="utf-8")
    settings = {"ZSNLI_CALIBRATION_PATH": str(calib), **server_base_settings(args)}
    servers: dict[str, Any] = {}
    arm_errors = server_arm_errors()
    for name, extra in [("default", {}), *args.variant]:
        levels = args.concurrency if name == "default" else [max(args.concurrency)]
        log(f"[bench] starting the zsnli server ({args.launcher}) {name} {extra or ''}")
        info: dict[str, Any] = {"settings": extra}
        try:
            with ServerProcess(model_dir, {**settings, **extra}, launcher=args.launcher, repo_root=args.repo_root,
                               threads=args.threads) as server:
                info.update({"launcher": server.launcher, "startup_s": server.startup_s, "health": server.health})
                for conc in levels:
                    key = f"c{conc}" if name == "default" else f"c{conc}-{name}"
                    with RssSampler(server.pid) as rss:
                        load = run_load(server.url, docs, conc,
                                        warmup=args.warmup if conc == 1 else max(args.warmup, conc),
                                        progress=progress, desc=f"zsnli c={conc} {name}")
                    label = f"(c) zsnli, concurrency {conc}" + ("" if name == "default" else f", {name}")
                    rows.append(arm_row(label, load.docs, load.pairs, load.wall_s, load.latencies_s,
                                        rss.peak_bytes, hwm_bytes(server.pid), key=key, concurrency=conc,
                                        errors=load.errors, retries_503=load.retries_503, variant=name))
                    probs[key] = load.probabilities
                info["exit_code"] = server.stop()
        except arm_errors as exc:
            # Recorded, and the run goes on: the arms already measured (minutes) still make the report.
            info["error"] = one_line(exc)
            info["error_detail"] = str(exc)
            print(f"zsnli.bench: server {name} failed, skipped: {info['error']}", file=sys.stderr, flush=True)
        servers[name] = info
    server_info = servers.pop("default")
    server_info["variants"] = servers

    by_key = {r["key"]: r for r in rows}
    c_top = f"c{max(args.concurrency)}"
    ratios = {}
    for key in [k for k in by_key if k == c_top or k.startswith(c_top + "-")]:  # a failed server has no row
        ratios[f"{key}/a"] = by_key[key]["docs_per_s"] / by_key["a"]["docs_per_s"]
        if best_b is not None:
            ratios[f"{key}/b"] = by_key[key]["docs_per_s"] / best_b["docs_per_s"]
    agree = {k: agreement(probs["a"], v) for k, v in probs.items() if k != "a"}
    for r in rows:
        r["fraction_of_ceiling"] = r["docs_per_s"] / ceiling["ceiling_docs_per_s"]
        r["achieved_flops_per_s"] = ceiling["total_flops"] / r["wall_s"] if r["wall_s"] > 0 else float("nan")
    return {
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "model_dir": str(model_dir),
        "examples": str(Path(args.examples).resolve()),
        "docs": len(docs),
        "pairs": n_pairs,
        "skipped_empty_text": skipped_empty,
        "threads": args.threads,
        "cpu_count": os.cpu_count(),
        "warmup": args.warmup,
        "arms": rows,
        "best_b": best_b,
        "ratios": ratios,
        "agreement_vs_a": agree,
        "params": params.to_dict(),
        "matmul": rate,
        "ceiling": ceiling,
        "ceiling_formula": "FLOPs(pair) = 2 * P_enc * L + 2 * P_head (Kaplan et al. 2020, arXiv:2001.08361, "
                           "C_forward ~ 2N per token; attention-context term dropped; L = real unpadded tokens)",
        "server": server_info,
        "pipeline_semantics": PIPELINE_SEMANTICS["chosen"],
    }


def _fmt(x: Any, spec: str) -> str:
    if x is None or (isinstance(x, float) and x != x):
        return "-"
    return format(x, spec)


def render(report: dict[str, Any], console=None) -> None:
    """Print the report as a rich table plus ratio, agreement and ceiling lines."""
    from rich.console import Console
    from rich.table import Table

    console = console or Console(width=max(Console().width, 110))
    t = Table(title=f"zsnli bench: {report['docs']} docs, {report['pairs']} pairs, {Path(report['model_dir']).name}")
    for col in ("arm", "docs/s", "pairs/s", "p50 s/doc", "p95 s/doc", "peak RSS MiB", "% ceiling"):
        t.add_column(col, justify="left" if col == "arm" else "right")
    for r in report["arms"]:
        t.add_row(r["arm"], _fmt(r["docs_per_s"], ".2f"), _fmt(r["pairs_per_s"], ".1f"), _fmt(r["p50_s"], ".3f"),
                  _fmt(r["p95_s"], ".3f"), _fmt(r["peak_rss_mib"], ".0f"), _fmt(100 * r["fraction_of_ceiling"], ".1f"))
    console.print(t)
    if report.get("best_b"):
        best = report["best_b"]
        console.print(f"(b) best: {best['arm']} ({best['docs_per_s']:.2f} docs/s)"
                      + ("; stream arms' p50/p95 are intervals between completed documents (cross-document "
                         "batching)" if any(r.get("mode") == "stream" for r in report["arms"]) else ""))
    for k, v in report["ratios"].items():
        console.print(f"ratio ({k.replace('/', ')/(')}) docs/s: {v:.2f}x")
    for k, a in report["agreement_vs_a"].items():
        console.print(f"agreement {k} vs (a): same argmax {a['same_argmax']}/{a['docs']}"
                      f"{' (' + str(a['missing']) + ' missing)' if a['missing'] else ''}, max |dp| {a['max_abs_dp']:.2e}")
    c, m, p = report["ceiling"], report["matmul"], report["params"]
    console.print(
        f"compute ceiling: FLOPs/pair = 2 x {p['per_token']:,} (encoder params) x L + 2 x {p['per_pair']:,} (head); "
        f"mean L = {c['mean_tokens_per_pair']:.1f} tokens -> {c['flops_per_doc'] / 1e9:.3f} GFLOP/doc; "
        f"matmul {m['dtype']} {m['flops_per_s'] / 1e9:.1f} GFLOP/s (n={m['n']}, threads={m['threads']}) "
        f"-> ceiling {c['ceiling_docs_per_s']:.2f} docs/s")
    for r in report["arms"]:
        if r["key"].startswith("c"):
            console.print(f"  {r['arm']}: {r['docs_per_s']:.2f} docs/s = {100 * r['fraction_of_ceiling']:.1f}% of the "
                          f"ceiling ({r['achieved_flops_per_s'] / 1e9:.1f} useful GFLOP/s)")
    errs = {r["key"]: r.get("errors") for r in report["arms"] if r.get("errors")}
    if errs:
        console.print(f"[red]server errors: {errs}[/red]")
    for name, info in failed_servers(report).items():
        console.print(f"server {name} failed: {info['error']}", style="red", markup=False, highlight=False)


def failed_servers(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{name: server info}`` of the servers (default and variants) that failed (have an ``error``)."""
    server = report.get("server") or {}
    out = {"default": server} if server.get("error") else {}
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
    if not sep or not name or name == "default" or not name.replace("-", "").replace("_", "").isalnum():
        raise ValueError(f"{spec!r}: expected NAME:KEY=VALUE[,KEY=VALUE] with a plain NAME other than 'default'")
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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """CLI arguments (see module docstring).

    Refused here (argparse error, exit 2, before any arm runs): a missing
    ``--examples`` file, ``--batch-sizes``/``--concurrency`` items that are
    not positive integers, malformed or duplicate ``--variant`` names, and
    variants whose settings the server would refuse (unknown ``ZSNLI_*``
    name, bad value).
    """
    ap = argparse.ArgumentParser(prog="python -m zsnli.bench", description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", default="model")
    ap.add_argument("--examples", default=DEFAULT_EXAMPLES,
                    help="examples JSONL, one {text, labels} document a line "
                         "(default: %(default)s, relative to the current directory)")
    ap.add_argument("--docs", type=int, default=None, help="first N documents (default all)")
    ap.add_argument("--out", default=None, help="write the JSON report here")
    ap.add_argument("--batch-sizes", type=_positive_ints, default="8,32,64",
                    help="pipeline batch_size sweep for (b) (default: %(default)s)")
    ap.add_argument("--pipeline-mode", default="stream",
                    help="(b) modes, comma-separated: stream (label-set groups streamed across documents, "
                         "default) and/or doc (one call per document, pairs batched within it)")
    ap.add_argument("--concurrency", type=_positive_ints, default="1,32",
                    help="server concurrency levels for (c) (default: %(default)s)")
    ap.add_argument("--warmup", type=int, default=4, help="untimed documents before each arm")
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
    if not Path(args.examples).is_file():
        ap.error(f"--examples: no such file {args.examples} (resolved: {Path(args.examples).resolve()}); "
                 "pass --examples PATH to an examples JSONL file")
    args.pipeline_mode = [m.strip() for m in str(args.pipeline_mode).split(",") if m.strip()]
    bad = [m for m in args.pipeline_mode if m not in ("stream", "doc")]
    if bad:
        ap.error(f"--pipeline-mode: unknown mode(s) {bad}; use stream and/or doc")
    return args


def main(argv: Sequence[str] | None = None) -> int:
    """Run the benchmark, print the table, write ``--out``; returns 0, or 1 when a server request failed
    or a server (default or variant) failed to start or run."""
    args = parse_args(argv)
    report = run(args)
    render(report)
    if args.out:
        Path(args.out).write_text(json.dumps(report, indent=2), encoding="utf-8")
    return 1 if any(r.get("errors") for r in report["arms"]) or failed_servers(report) else 0
