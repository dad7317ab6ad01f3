"""Static int8 quantisation of the NLI model, and its out-of-fold measurement (issue 24, item 6).

Dynamic int8 (`zsnli.runtime.onnx_export`, ``ZSNLI_BACKEND=onnx-int8``) ran 2.5x faster
but lost 4.7 points of macro-F1. This module tries the quantisations that
usually hold accuracy, offline, and measures them; nothing here is served.

* **Calibration texts**: training-role data only, `calibration_pairs` reads the
  zsc-train sets by path (``../shared/data/zsc-train``): a seeded sample of texts
  across its sets, each paired with its own class's hypothesis and others of its
  set, as the server would pair them. Never benchmark or selection documents.
* **Quantisation** (`quantize_static_int8`): ONNX Runtime's static QDQ
  quantisation of the exported fp32 graph (`zsnli.runtime.onnx_export.export_onnx`):
  uint8 activations with ranges calibrated on those pairs (MinMax, or
  percentile / entropy), int8 weights per channel; only the linear layers
  (``MatMul``/``Gemm`` with a weight initializer): the embedding lookups,
  layer norms, softmax and the attention score products stay fp32. ``keep``
  leaves more of them fp32 (`KEEP_CHOICES`): the first and the last encoder
  layer and the classifier head (pooler and classifier), the usual
  sensitive parts.
* **Measurement** (`main`): for the torch fp32 reference and each quantised
  variant, the zsc-dev and team dev sets are scored with that runtime into a
  score cache of their own (`zsnli.selection.score_cache.fill_cache`, resumable), then the
  served-scoring selection is run out of fold exactly as ``train.py select``
  does (`zsnli.selection.leave_one_out`): each dataset scored with the
  candidate and temperature chosen without it. Printed: mean held-out
  normalised score and ECE over zsc-dev per variant, their change from fp32
  (the issue's rule: at most 1 point of normalised score and of ECE), the
  offline pairs/s of each, and the CPU's model and int8 flags (int8 matmuls
  are fast only with VNNI / AMX).

``python -m zsnli.selection.static_int8 --model-dir model --zsc-train-dir ../shared/data/zsc-train
--zsc-dev-dir ../shared/data/zsc-dev [--dev-examples dev/zeroshot_dev.jsonl] [--out-dir runs/int8_static]``

May import: numpy, `zsnli.selection.devsets`, `zsnli.runtime.onnx_export`, `zsnli.runtime.onnx_model`,
`zsnli.runtime.embedding`, `zsnli.selection.score_cache`, `zsnli.selection.search`, `zsnli.selection.cli`,
`zsnli.harness.cli`, `zsnli.bench.ceiling` (the CPU); onnx and onnxruntime lazily. Nothing imports it.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import random
import re
import sys
import time
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from ..harness.cli import UsageParser, positive_int

logger = logging.getLogger(__name__)

#: What ``keep`` may name: ``first`` / ``last`` (encoder layers) and ``head`` (pooler and classifier).
KEEP_CHOICES = ("first", "last", "head")
#: The variants the script measures by default: name -> parts kept in fp32.
DEFAULT_VARIANTS = {"int8-static": (), "int8-static-keep": ("first", "last", "head")}
#: Calibration methods (`onnxruntime.quantization.CalibrationMethod` names).
METHODS = ("MinMax", "Percentile", "Entropy")
#: The issue's rule for a quantisation to become a default: at most this much worse than fp32, in points.
MAX_LOSS_POINTS = 1.0
_LAYER = re.compile(r"(?:^|[/.])layers?[./_](\d+)(?:[/.]|$)")


# --------------------------------------------------------------------------- calibration data


def calibration_pairs(zsc_train_dir: str | Path, n_texts: int = 256, hyps_per_text: int = 4,
                      seed: int = 0) -> tuple[list[str], list[str]]:
    """``(premises, hypotheses)`` for calibrating activation ranges, from the zsc-train sets only.

    ``n_texts`` texts drawn with ``seed`` evenly across the sets (`zsnli.selection.devsets.read_zsc_dev` reads
    their format), each paired with its gold hypothesis and up to ``hyps_per_text - 1`` other
    hypotheses of its set. Raises ``DevSetError`` when the directory holds no set.
    """
    from .devsets import list_zsc_dev, read_zsc_dev

    rng = random.Random(seed)
    names = list_zsc_dev(zsc_train_dir)
    per_set = max(1, n_texts // len(names))
    premises: list[str] = []
    hyps: list[str] = []
    for name in names:
        ds = read_zsc_dev(zsc_train_dir, name)
        for i in rng.sample(range(len(ds)), min(per_set, len(ds))):
            row, gold = ds.hypotheses[i], int(ds.gold[i])
            others = [h for j, h in enumerate(row) if j != gold]
            for h in [row[gold], *rng.sample(others, min(hyps_per_text - 1, len(others)))]:
                premises.append(ds.texts[i])
                hyps.append(h)
    return premises, hyps


class _PairReader:
    """An ONNX Runtime calibration data reader: collated batches of encoded pairs (`zsnli.runtime.model.collate`)."""

    def __init__(self, runtime, premises: Sequence[str], hyps: Sequence[str], input_names: Sequence[str],
                 batch_size: int) -> None:
        encoded = runtime.encode(premises, hyps)
        order = sorted(range(len(encoded)), key=lambda i: len(encoded[i]))
        self._batches = [[encoded[i] for i in order[s:s + batch_size]] for s in range(0, len(order), batch_size)]
        self._runtime, self._names = runtime, list(input_names)
        self._it: Iterator | None = None

    def get_next(self) -> dict[str, np.ndarray] | None:
        if self._it is None:
            self._it = iter(self._batches)
        batch = next(self._it, None)
        if batch is None:
            return None
        inputs = self._runtime.collate(batch)
        return {name: inputs[name] for name in self._names}

    def rewind(self) -> None:
        self._it = None


# --------------------------------------------------------------------------- graph


def linear_nodes(model) -> list[dict[str, Any]]:
    """The graph's linear layers: ``MatMul``/``Gemm`` nodes with a weight initializer, as
    ``{"name", "op", "layer" (encoder layer index or None), "head" (pooler / classifier)}``."""
    weights = {init.name for init in model.graph.initializer}
    out = []
    for node in model.graph.node:
        if node.op_type not in ("MatMul", "Gemm") or not any(i in weights for i in node.input):
            continue
        match = _LAYER.search(node.name)
        lowered = node.name.lower()
        out.append({"name": node.name, "op": node.op_type, "layer": int(match.group(1)) if match else None,
                    "head": match is None and ("classifier" in lowered or "pooler" in lowered)})
    return out


def nodes_to_quantize(model, keep: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(quantised, kept fp32)`` node names among `linear_nodes`: ``keep`` names parts of `KEEP_CHOICES`
    left in fp32. Raises ``ValueError`` on an unknown part, or when the graph names no encoder layer
    (the export's node names changed) while ``first``/``last`` is asked for."""
    bad = [k for k in keep if k not in KEEP_CHOICES]
    if bad:
        raise ValueError(f"unknown part(s) to keep in fp32: {bad}; choose from {', '.join(KEEP_CHOICES)}")
    nodes = linear_nodes(model)
    layers = sorted({n["layer"] for n in nodes if n["layer"] is not None})
    if not layers and {"first", "last"} & set(keep):
        raise ValueError("no encoder layer index found in the graph's node names: cannot keep first/last in fp32")
    kept_layers = ({layers[0]} if "first" in keep else set()) | ({layers[-1]} if "last" in keep else set())
    quantised, kept = [], []
    for n in nodes:
        fp32 = n["layer"] in kept_layers or (n["head"] and "head" in keep)
        (kept if fp32 else quantised).append(n["name"])
    return quantised, kept


def quantize_static_int8(fp32_path: str | Path, out_path: str | Path, runtime, premises: Sequence[str],
                         hyps: Sequence[str], keep: Sequence[str] = (), method: str = "MinMax",
                         batch_size: int = 16) -> dict[str, Any]:
    """Quantise the fp32 ONNX graph at ``fp32_path`` into ``out_path`` (static QDQ, see module docstring).

    runtime: an `zsnli.runtime.model.NliRuntime` of the same model (its tokenizer and padding make the
    calibration batches). premises / hyps: the calibration pairs (`calibration_pairs`).
    Returns ``{"quantised_nodes", "fp32_nodes", "keep", "method", "calibration_pairs", "sha256"}``.
    Raises ``OnnxUnavailableError`` without onnx/onnxruntime, ``ValueError`` on a bad ``keep`` or
    ``method``, no calibration pairs, or nothing left to quantise.
    """
    from ..runtime.onnx_export import require_onnx

    require_onnx()
    import onnx
    from onnxruntime.quantization import CalibrationMethod, QuantFormat, QuantType, quantize_static

    if method not in METHODS:
        raise ValueError(f"unknown calibration method {method!r}; choose from {', '.join(METHODS)}")
    if not premises:
        raise ValueError("no calibration pairs")
    model = onnx.load(str(fp32_path))
    quantised, kept = nodes_to_quantize(model, keep)
    if not quantised:  # ONNX Runtime reads an empty nodes_to_quantize as "every node"
        raise ValueError(f"keeping {', '.join(keep)} in fp32 leaves no linear layer to quantise")
    reader = _PairReader(runtime, premises, hyps, [i.name for i in model.graph.input], batch_size)
    root = logging.getLogger()
    guard = logging.NullHandler() if not root.handlers else None  # see zsnli.runtime.onnx_export._quantize
    if guard is not None:
        root.addHandler(guard)
    try:
        quantize_static(str(fp32_path), str(out_path), reader, quant_format=QuantFormat.QDQ,
                        op_types_to_quantize=["MatMul", "Gemm"], nodes_to_quantize=quantised, per_channel=True,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8,
                        calibrate_method=getattr(CalibrationMethod, method))
    finally:
        if guard is not None:
            root.removeHandler(guard)
    return {"quantised_nodes": len(quantised), "fp32_nodes": kept, "keep": list(keep), "method": method,
            "calibration_pairs": len(premises), "sha256": hashlib.sha256(Path(out_path).read_bytes()).hexdigest()}


# --------------------------------------------------------------------------- measurement


def out_of_fold(sets: dict, digest: str) -> dict[str, Any]:
    """Held-out figures of the served-scoring selection on cached sets (as ``train.py select``):
    per dataset the `zsnli.selection.cli.oof_table` row, and the means of ``normalised`` and
    ``ece`` over the zsc-dev sets (points, i.e. x 100 for ECE too)."""
    from . import search as sel
    from .cli import oof_table

    grid = sel.evaluate_grid(sets, sel.candidates())
    rows = oof_table(sets, grid, sel.leave_one_out(grid), digest)
    zsc = [r["ours"] for name, r in rows.items() if name.startswith("zsc-dev/")] or [r["ours"] for r in rows.values()]
    return {"datasets": rows, "mean_normalised": float(np.mean([c["normalised"] for c in zsc])),
            "mean_ece_points": 100.0 * float(np.mean([c["ece"] for c in zsc])), "n_datasets": len(zsc)}


def verdict(reference: dict[str, Any], variant: dict[str, Any]) -> dict[str, Any]:
    """The change of a variant from the fp32 reference, and whether it meets the issue's rule
    (normalised score at most `MAX_LOSS_POINTS` lower and ECE at most that many points higher)."""
    d_norm = variant["mean_normalised"] - reference["mean_normalised"]
    d_ece = variant["mean_ece_points"] - reference["mean_ece_points"]
    return {"delta_normalised": d_norm, "delta_ece_points": d_ece,
            "holds_accuracy": d_norm >= -MAX_LOSS_POINTS and d_ece <= MAX_LOSS_POINTS}


def _cache_speed(sets: dict) -> float:
    """Offline pairs/s over the cached sets (pairs and seconds recorded when each set was computed)."""
    pairs = sum(int(cs.k.sum()) for cs in sets.values())
    seconds = sum(float(cs.meta.get("seconds") or 0) for cs in sets.values())
    return pairs / seconds if seconds > 0 else float("nan")


def _variant_spec(name: str, keep: Sequence[str]) -> str:
    return name + "=" + ",".join(keep)


def _parser() -> UsageParser:
    ap = UsageParser(prog="python -m zsnli.selection.static_int8", description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", default="model")
    ap.add_argument("--zsc-train-dir", required=True, help="calibration texts (training role): zsc-train, by path")
    ap.add_argument("--zsc-dev-dir", required=True, help="the out-of-fold measurement's data (zsc-dev)")
    ap.add_argument("--dev-examples", default="dev/zeroshot_dev.jsonl",
                    help="the team dev set, scored with zsc-dev as train.py select does (default: %(default)s)")
    ap.add_argument("--out-dir", default="runs/int8_static", help="ONNX files, score caches, report.json")
    defaults = ", ".join(_variant_spec(k, v) for k, v in DEFAULT_VARIANTS.items())
    ap.add_argument("--variant", action="append", default=[], metavar="NAME=PART[,PART]",
                    help="a variant keeping PARTs (first, last, head; empty: none) in fp32; repeatable "
                         f"(default: {defaults})")
    ap.add_argument("--method", choices=METHODS, default="MinMax", help="activation range calibration")
    ap.add_argument("--calibration-texts", type=positive_int, default=256)
    ap.add_argument("--max-rows", type=positive_int, default=None, help="rows per dev set (default: the score cache's)")
    ap.add_argument("--threads", type=positive_int, default=None)
    return ap


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Arguments; a missing directory or a bad ``--variant`` is one usage line (exit 2)."""
    ap = _parser()
    args = ap.parse_args(argv)
    for flag in ("model_dir", "zsc_train_dir", "zsc_dev_dir"):
        if not Path(getattr(args, flag)).is_dir():
            ap.error(f"--{flag.replace('_', '-')}: no such directory {getattr(args, flag)}")
    if not Path(args.dev_examples).is_file():
        ap.error(f"--dev-examples: no such file {args.dev_examples}")
    variants = {}
    for spec in args.variant or [_variant_spec(k, v) for k, v in DEFAULT_VARIANTS.items()]:
        name, sep, parts = spec.partition("=")
        keep = tuple(p.strip() for p in parts.split(",") if p.strip())
        if not sep or not re.fullmatch(r"[A-Za-z0-9_-]+", name) or name in variants or name == "fp32":
            ap.error(f"--variant {spec!r}: expected NAME=PART[,PART] with a new plain NAME (not fp32)")
        if any(p not in KEEP_CHOICES for p in keep):
            ap.error(f"--variant {spec!r}: parts kept in fp32 are {', '.join(KEEP_CHOICES)}")
        variants[name] = keep
    args.variants = variants
    return args


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Export, quantise each variant, score the dev sets with each (cached), measure out of fold."""
    from ..bench.ceiling import cpu_info
    from .devsets import list_zsc_dev, read_examples, read_zsc_dev
    from ..runtime.embedding import default_embedding_dir, embedding_digest
    from ..runtime.onnx_export import export_onnx
    from ..runtime.onnx_model import OnnxNliModel
    from .score_cache import DEFAULT_MAX_ROWS, fill_cache

    out = Path(args.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    fp32 = out / "fp32.onnx"
    if not fp32.is_file():
        export_onnx(args.model_dir, fp32, quantize=False)
    reference = OnnxNliModel.from_file(args.model_dir, fp32, "fp32", threads=args.threads)
    premises, hyps = calibration_pairs(args.zsc_train_dir, args.calibration_texts)
    files = {}
    for name, keep in args.variants.items():
        path = out / f"{name}.onnx"
        files[name] = {"path": str(path), **quantize_static_int8(fp32, path, reference, premises, hyps, keep,
                                                                 args.method)}
    jobs = [("zsc-dev", read_zsc_dev(args.zsc_dev_dir, n)) for n in list_zsc_dev(args.zsc_dev_dir)]
    jobs += [("dev", ds) for ds in read_examples(args.dev_examples).values()]
    rows = {"max_rows": args.max_rows or DEFAULT_MAX_ROWS, "threads": args.threads}
    digest = embedding_digest(default_embedding_dir(args.model_dir))
    sets = fill_cache(jobs, out / "cache-fp32", args.model_dir, **rows)
    figures = {"fp32": {**out_of_fold(sets, digest), "pairs_per_s": _cache_speed(sets), "runtime": "torch fp32"}}
    for name, info in files.items():
        def runtime(path=info["path"]):
            return OnnxNliModel.from_file(args.model_dir, path, "int8-static", threads=args.threads)
        sets = fill_cache(jobs, out / f"cache-{name}", args.model_dir, runtime=runtime,
                          runtime_digest=info["sha256"], **rows)
        held_out = out_of_fold(sets, digest)
        figures[name] = {**held_out, "pairs_per_s": _cache_speed(sets), **verdict(figures["fp32"], held_out),
                         "quantisation": info}
    report = {"when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "cpu": cpu_info(),
              "model_dir": str(Path(args.model_dir).resolve()), "calibration_data": str(Path(args.zsc_train_dir).resolve()),
              "calibration_pairs": len(premises), "method": args.method, "rule_points": MAX_LOSS_POINTS,
              "variants": figures}
    (out / "report.json").write_text(json.dumps(report, indent=1), encoding="utf-8")
    return report


def render(report: dict[str, Any]) -> list[str]:
    """The report's lines: one per variant (held-out normalised, ECE, their change, pairs/s), the CPU."""
    from ..bench.ceiling import cpu_tag

    cpu = report["cpu"]
    lines = [f"static int8 on {report['calibration_pairs']} zsc-train pairs ({report['method']}); out of fold on "
             f"zsc-dev; rule: at most {report['rule_points']:g} point lower normalised and higher ECE"]
    for name, f in report["variants"].items():
        change = "" if name == "fp32" else (
            f"; {f['delta_normalised']:+.2f} / {f['delta_ece_points']:+.2f} points: "
            f"{'holds' if f['holds_accuracy'] else 'does NOT hold'} accuracy")
        lines.append(f"{name}: normalised {f['mean_normalised']:.2f}, ECE {f['mean_ece_points']:.2f} points "
                     f"({f['n_datasets']} sets), {f['pairs_per_s']:.1f} pairs/s offline{change} [CPU: {cpu_tag(cpu)}]")
    if not cpu["native_int8_dot"]:
        lines.append("this CPU has no fast int8 dot product (avx512_vnni / avx_vnni / amx_int8): "
                     "int8 is not a default candidate here whatever its accuracy")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    """Run (see module docstring), print the lines, write ``<out-dir>/report.json``; returns 0."""
    args = parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s", stream=sys.stderr)
    for line in render(run(args)):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
