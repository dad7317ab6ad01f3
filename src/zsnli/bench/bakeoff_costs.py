"""Measure the bake-off's per-arm costs and fit the coefficients of its cost model (`zsnli.compare.budget.COSTS`).

``python -m zsnli.bench.bakeoff_costs [--model-dir model] [--quick] [--out costs.json]``

Times, on synthetic examples (random words with a few words per label that give it away), what a service
bake-off times: the served model's ``classify`` one document at a time (`zsnli.serving.offline`, the code of
``POST /classify``), the sentence encoder one text at a time, and every fitted arm of the registry through the
engine's arm runner (`zsnli.compare.engine.run_plan`) under the service's fold rule at several plan shapes (the
embedding arms on fixed random vectors: the encoder's pass is timed on its own). Each kind's coefficients are a
non-negative least-squares fit (``scipy.optimize.nnls``) of its measured seconds on the model's terms
(`zsnli.compare.budget`'s formulas); the output is the ``COSTS`` table to paste into `zsnli.compare.budget`,
each measurement beside what the fitted model says, the CPU (model and flags) and the load average before and
after. On a shared machine the figures are those of its load: say which with them.

Imports `zsnli.compare` (budget, arms, engine, protocol), `zsnli.harness.examples`, `zsnli.bench.ceiling` (the
CPU line, the load), `zsnli.bench.bench_args` (the description, the model directory checks), and lazily
`zsnli.serving.offline`, `zsnli.config`, `zsnli.runtime.embedding`, scipy.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from ..compare import budget
from ..compare.arms import build_arm
from ..compare.engine import ArmResult, run_plan
from ..compare.protocol import SERVICE_PROTOCOL, make_plan
from ..harness.cli import UsageParser, output_file
from .bench_args import check_model_dir, command_description
from ..harness.examples import Example
from .ceiling import cpu_info, cpu_line, load_average, load_text

WORDS = ("account order ship price login screen report team data model money travel music health sport food "
         "weather market school court policy energy water garden phone video cloud email card bank store").split()
FITTED = ("majority", "keyword_rules", "tfidf_logreg", "tfidf_linearsvc", "tfidf_linearsvc_raw", "char_nb",
          "embedding_logreg", "embedding_similarity")
SHAPES = ((30, 3, 200), (100, 10, 800), (200, 20, 2000))
QUICK_SHAPES = ((30, 3, 200), (60, 6, 600))


def synthetic(n: int, k: int, chars: int, seed: int = 0) -> list[Example]:
    """``n`` examples over ``k`` labels (``label0``...), each about ``chars`` characters of random words, three
    words per label that give it away mixed in."""
    rng = random.Random(seed)
    labels = tuple(f"label{j}" for j in range(k))
    out = []
    for i in range(n):
        g = i % k
        words = []
        while sum(len(w) + 1 for w in words) < chars:
            words.append(rng.choice(WORDS) if rng.random() > 0.1 else f"cue{g}x{rng.randrange(3)}")
        out.append(Example(id=i, dataset="synthetic", text=" ".join(words)[:chars], labels=labels, label=g))
    return out


class RandomVectors:
    """A stand-in sentence encoder: a fixed random 384-vector per text (the fitted embedding arms' own cost)."""

    model_dir, digest = ".", "random"

    def __init__(self) -> None:
        self._cache: dict[str, np.ndarray] = {}

    def encode(self, texts: Sequence[str], batch_size: int = 64) -> np.ndarray:
        """Unit vectors of ``texts`` (``(len(texts), 384)`` float32), each fixed by its text's hash for this
        process."""
        for t in texts:
            if t not in self._cache:
                v = np.random.default_rng(abs(hash(t)) % 2**32).standard_normal(384).astype(np.float32)
                self._cache[t] = v / np.linalg.norm(v)
        return np.stack([self._cache[t] for t in texts])

    def cosine(self, text: str, labels: Sequence[str]) -> np.ndarray:
        """Cosine of ``text`` with each of ``labels`` (float64, one per label), as the encoder's ``cosine``."""
        return (self.encode(list(labels)) @ self.encode([text])[0]).astype(np.float64)


def _arm(name: str):
    """The fitted arm ``name`` set up to run (``tfidf_linearsvc_raw``: ``tfidf_linearsvc`` without calibration); an
    arm that embeds gets `RandomVectors`."""
    type_name, params = ("tfidf_linearsvc", {"calibration": "raw"}) if name == "tfidf_linearsvc_raw" else (name, {})
    arm = build_arm(type_name, name, params)
    if arm.uses_encoder:
        arm.use_encoder(RandomVectors())
    else:
        arm.setup()
    return arm


def time_fitted(shapes: Sequence[tuple[int, int, int]]) -> list[dict[str, Any]]:
    """Every `FITTED` arm through `run_plan` on `synthetic` examples of each ``(n, k, chars)`` shape."""
    rows = []
    warm = synthetic(12, 2, 60)
    for name in FITTED:  # the first fit imports scikit-learn's modules: not the arm's cost
        run_plan(_arm(name), warm, make_plan(warm, **SERVICE_PROTOCOL), ArmResult(name, name, True, ""))
    for n, k, chars in shapes:
        examples = synthetic(n, k, chars)
        plan = make_plan(examples, **SERVICE_PROTOCOL)
        shape = budget.PlanShape.of(examples, plan)
        for name in FITTED:
            arm = _arm(name)
            t0 = time.perf_counter()
            run_plan(arm, examples, plan, ArmResult(name, name, arm.trains, ""), strict=True)
            rows.append({"arm": name, "shape": [n, k, chars], "plan": shape.__dict__,
                         "seconds": time.perf_counter() - t0})
            print(f"[costs] {name} on {n} x {k} labels x {chars} chars: {rows[-1]['seconds']:.2f} s", flush=True)
    return rows


def time_nli(model_dir: str, points: Sequence[tuple[int, int]], per_point: int) -> list[dict[str, Any]]:
    """Seconds per document of the served model's ``classify`` (one at a time) at ``(labels, chars)`` points, with
    the pipeline's scoring: every label a cross-encoder pair, no cosine term, no cascade (the served scoring's
    sentence-encoder pass and cascade are counted by `zsnli.compare.budget.nli_pairs` and the encoder's
    coefficients)."""
    from ..config import Settings
    from ..serving.offline import OfflineClassifier

    rows = []
    settings = Settings.from_env({}, model_dir=model_dir, log_level="warning")
    with OfflineClassifier(settings) as clf:
        clf.classify_many([{"text": "warm up", "labels": ["a", "b"]}], concurrency=1)
        for k, chars in points:
            for ex in synthetic(per_point, k, chars, seed=k * chars):
                t0 = time.perf_counter()
                clf.classify_many([{"text": ex.text, "labels": list(ex.labels), "scoring": "pipeline"}],
                                  concurrency=1)
                rows.append({"labels": k, "chars": chars, "seconds": time.perf_counter() - t0})
            print(f"[costs] served, {k} labels x {chars} chars: {rows[-1]['seconds']:.2f} s/doc", flush=True)
    return rows


def time_encoder(encoder_dir: str, lengths: Sequence[int], per_point: int) -> list[dict[str, Any]]:
    """Seconds per text of the sentence encoder (one text per call) at each length in characters."""
    from ..runtime.embedding import SentenceEncoder

    enc, rows = SentenceEncoder(encoder_dir), []
    enc.encode(["warm up"])
    for chars in lengths:
        for ex in synthetic(per_point, 2, chars, seed=chars):
            t0 = time.perf_counter()
            enc.encode([ex.text])
            rows.append({"chars": chars, "seconds": time.perf_counter() - t0})
    return rows


def _nnls(features: list[list[float]], seconds: list[float]) -> list[float]:
    """Non-negative least-squares coefficients of ``seconds`` on ``features`` (``scipy.optimize.nnls``), each column
    scaled to its largest value first (the terms differ by orders of magnitude) and the coefficients scaled back."""
    from scipy.optimize import nnls

    a = np.asarray(features, dtype=np.float64)
    scale = np.maximum(a.max(axis=0), 1e-12)  # columns of very different magnitudes
    coef, _ = nnls(a / scale, np.asarray(seconds, dtype=np.float64))
    return [float(c) for c in coef / scale]


def fit(fitted: list[dict[str, Any]], nli: list[dict[str, Any]], enc: list[dict[str, Any]]) -> dict[str, dict]:
    """The coefficients of each kind (`zsnli.compare.budget.Cost` fields) fitted to the measurements."""
    tok = budget.CHARS_PER_TOKEN
    out = {}
    if nli:
        c = _nnls([[1.0, r["labels"] * min(budget.NLI_WINDOW, r["chars"] / tok + 6 / tok + 3)] for r in nli],
                  [r["seconds"] for r in nli])
        out["nli"] = {"doc_s": c[0], "pair_token_s": c[1]}
    if enc:
        c = _nnls([[1.0, min(budget.ENCODER_WINDOW, r["chars"] / tok + 2)] for r in enc], [r["seconds"] for r in enc])
        out["encoder"] = {"doc_s": c[0], "token_s": c[1]}
    for name in dict.fromkeys(r["arm"] for r in fitted):
        rows = [r for r in fitted if r["arm"] == name]
        feats = [[p["fits"], p["fits"] * p["train_chars"] * p["labels"], p["n"], p["n"] * p["chars"]]
                 for p in (r["plan"] for r in rows)]
        c = _nnls(feats, [r["seconds"] for r in rows])
        out["embedding_fitted" if name == "embedding_logreg" else name] = {
            "fit_s": c[0], "fit_unit_s": c[1], "doc_s": c[2], "doc_char_s": c[3]}
    return out


def build_parser() -> UsageParser:
    """The command line (module docstring): one help line for every option."""
    ap = UsageParser(prog="python -m zsnli.bench.bakeoff_costs", description=command_description(__doc__))
    ap.add_argument("--model-dir", default="model",
                    help="the served model: nli times its classify, encoder its sentence encoder <model-dir>/embedding; "
                         "checked to be an NLI model directory for nli, to hold one for encoder (default: %(default)s)")
    ap.add_argument("--quick", action="store_true", help="small shapes only (a check of the command, seconds)")
    ap.add_argument("--parts", default="fitted,nli,encoder",
                    help="what to measure, comma-separated: fitted (the scikit-learn arms), nli, encoder "
                         "(default: %(default)s)")
    ap.add_argument("--out", type=output_file, default=None,
                    help="also write the CPU, load, every measurement and the fitted coefficients here as JSON")
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """The command line (module docstring): measure, fit, print the ``COSTS`` table and each fit; ``--out``."""
    ap = build_parser()
    args = ap.parse_args(argv)
    parts = {x.strip() for x in args.parts.split(",") if x.strip()}
    if parts - {"fitted", "nli", "encoder"} or not parts:
        ap.error(f"--parts {args.parts}: give fitted, nli and/or encoder")
    if "nli" in parts:
        check_model_dir(ap, args.model_dir, hint="give an NLI model directory (the shipped one is model), or leave nli "
                                                  "out of --parts")
    if "encoder" in parts:
        check_model_dir(ap, Path(args.model_dir) / "embedding", nli=False, hint="encoder times the sentence encoder in "
                        "<model-dir>/embedding (the shipped one is model/embedding), or leave encoder out of --parts")
    cpu, loads = cpu_info(), [load_average()]
    print(f"[costs] CPU {cpu_line(cpu)}; {load_text(loads)}", flush=True)
    fitted = time_fitted(QUICK_SHAPES if args.quick else SHAPES) if "fitted" in parts else []
    nli = enc = []
    if "nli" in parts:
        points = ((2, 200), (4, 600)) if args.quick else ((2, 100), (3, 400), (4, 1000), (3, 2000), (8, 2000))
        nli = time_nli(args.model_dir, points, 1 if args.quick else 3)
    if "encoder" in parts:
        enc = time_encoder(str(Path(args.model_dir) / "embedding"), (50, 500) if args.quick else (50, 400, 1000, 2000),
                           3 if args.quick else 8)
    loads.append(load_average())
    coef = fit(fitted, nli, enc)
    print("COSTS = {")
    for kind, c in coef.items():
        print(f'    "{kind}": Cost(' + ", ".join(f"{k}={v:.3g}" for k, v in c.items()) + "),")
    print("}")
    print(f"[costs] measured on {cpu_line(cpu)}; {load_text(loads)} (before and after)")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps({"cpu": cpu, "load1": loads, "fitted": fitted, "nli": nli,
                                              "encoder": enc, "coefficients": coef}, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
