"""Does a document's answer depend on its batch, and what do fixed shapes cost (issue 33, item 2)?

``python -m zsnli.bench.batch_invariance --model-dir model --examples ../shared/data/zsc/public.jsonl``
loads the NLI model in fp32 and in bf16 and, for each arm (fp32 as batched today, bf16 as batched
today, bf16 in fixed shapes, optionally fp32 in fixed shapes), scores the documents' (text, label)
pairs twice with `zsnli.runtime.model.NliModel.logits`:

* **alone**: each document's pairs in their own forward (what a request gets with nothing else
  queued: the server at concurrency 1);
* **batched**: every pair of every document, shuffled, in forwards under the token budget (length-sorted
  `zsnli.runtime.model.plan_batches` batches without fixed shapes; full `zsnli.runtime.shapes.FixedShapes`
  buckets with them: what the batcher forms when the queue is full).

It prints per arm the max |dp| between the two (the 3-way class probabilities of every pair, and the
pipeline's softmax of the entailment logits over each document's labels), pairs/s of each pass, and
the ratios against the fp32 arm of the same run; then the torch thread count and the CPU flags. The
arms run in turn, ``--repeats`` times (ABCABC), so a load that changes during the run moves all of them.
Figures only; nothing is asserted.

May import: numpy, torch, `zsnli.harness` (examples, argument parser), `zsnli.runtime`, `zsnli.bench.ceiling`,
`zsnli.bench.bench_args` (the model directory and examples checks).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from ..harness.cli import UsageParser, non_negative_int, positive_int
from ..harness.examples import load_examples
from ..runtime.model import NliModel, default_token_budget, plan_batches
from ..runtime.shapes import FixedShapes
from .bench_args import check_examples, check_model_dir, command_description
from .ceiling import cpu_info


@dataclass
class Arm:
    """One configuration: its name, dtype, whether fixed shapes are on, and what it measured."""

    name: str
    dtype: str
    fixed: bool
    seconds: dict[str, float] = field(default_factory=lambda: {"alone": 0.0, "batched": 0.0})
    max_dp_class: float = 0.0
    max_dp_labels: float = 0.0


def _softmax(x: np.ndarray, axis: int) -> np.ndarray:
    """Softmax of ``x`` along ``axis`` (the maximum subtracted first, so no overflow)."""
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def _batched(model: NliModel, encoded: list, budget: int, rng: np.random.Generator) -> np.ndarray:
    """Logits of all pairs in shuffled order, batched as a full queue would be (module docstring)."""
    order = rng.permutation(len(encoded))
    out = np.zeros((len(encoded), model.num_labels), np.float32)
    if model.shapes is not None:
        plan = [[int(order[i]) for i in idx] for _, idx in model.shapes.chunks([len(encoded[j]) for j in order])]
    else:
        plan = [[int(order[i]) for i in idx] for idx in plan_batches([len(encoded[j]) for j in order], budget)]
    for idx in plan:
        out[idx] = model.logits([encoded[i] for i in idx])
    return out


def run_arm(arm: Arm, model: NliModel, docs: list[list], budget: int, seed: int, fixed_budget: int = 0) -> None:
    """Score ``docs`` (each a list of encoded pairs) alone and batched with ``model`` set up as ``arm``
    (fixed shapes of ``fixed_budget`` padded tokens per forward, default ``budget``); add the seconds and
    fold the max |dp| into ``arm``."""
    model.shapes = FixedShapes.for_window(model.max_length, fixed_budget or budget) if arm.fixed else None
    t0 = time.perf_counter()
    alone = [model.logits(d) for d in docs]
    arm.seconds["alone"] += time.perf_counter() - t0
    flat = [e for d in docs for e in d]
    t0 = time.perf_counter()
    together = _batched(model, flat, budget, np.random.default_rng(seed))
    arm.seconds["batched"] += time.perf_counter() - t0
    start = 0
    for a in alone:
        b = together[start:start + len(a)]
        start += len(a)
        arm.max_dp_class = max(arm.max_dp_class, float(np.abs(_softmax(a, 1) - _softmax(b, 1)).max()))
        ent = model.entail_idx
        arm.max_dp_labels = max(arm.max_dp_labels, float(np.abs(_softmax(a[:, ent], 0) - _softmax(b[:, ent], 0)).max()))


def build_parser() -> UsageParser:
    """The command line (module docstring)."""
    ap = UsageParser(prog="python -m zsnli.bench.batch_invariance", description=command_description(__doc__))
    ap.add_argument("--model-dir", default="model",
                    help="the NLI model, loaded in fp32 and in bf16 (default: %(default)s)")
    ap.add_argument("--examples", required=True, help="examples JSONL (zsnli.harness.examples)")
    ap.add_argument("--docs", type=positive_int, default=40,
                    help="documents to score, the first N (default: %(default)s)")
    ap.add_argument("--max-labels", type=non_negative_int, default=0,
                    help="score only the first N labels of each document (0: all; 4: the label cascade's keep; "
                         "default: %(default)s)")
    ap.add_argument("--threads", type=positive_int, default=2, help="torch.set_num_threads (default: %(default)s)")
    ap.add_argument("--token-budget", type=non_negative_int, default=0,
                    help="padded tokens per forward (0: the CPU default; default: %(default)s)")
    ap.add_argument("--fixed-budget", type=non_negative_int, default=0,
                    help="padded tokens per fixed-shape forward (0: the token budget; default: %(default)s); rows = "
                         "this // width")
    ap.add_argument("--repeats", type=positive_int, default=1,
                    help="rounds of every arm in turn (ABCABC), their seconds summed (default: %(default)s)")
    ap.add_argument("--fp32-fixed", action="store_true", help="also measure fp32 in fixed shapes")
    return ap


def main(argv: list[str] | None = None) -> int:
    """Run the arms and print one line each, then the thread count and the CPU (module docstring)."""
    ap = build_parser()
    args = ap.parse_args(argv)
    check_model_dir(ap, args.model_dir)
    check_examples(ap, args.examples)

    import torch

    torch.set_num_threads(args.threads)
    examples = load_examples(args.examples, limit=args.docs).examples
    budget = args.token_budget or default_token_budget("cpu")
    models = {dt: NliModel.load(args.model_dir, device="cpu", dtype=dt) for dt in ("float32", "bfloat16")}
    m = models["float32"]
    docs = []
    for ex in examples:
        labels = list(ex.labels)[: args.max_labels or None]
        docs.append(m.encode([ex.text] * len(labels), labels))
    arms = [Arm("fp32", "float32", False), Arm("bf16", "bfloat16", False), Arm("bf16-fixed", "bfloat16", True)]
    if args.fp32_fixed:
        arms.append(Arm("fp32-fixed", "float32", True))
    for rep in range(args.repeats):
        for arm in arms:
            run_arm(arm, models[arm.dtype], docs, budget, seed=rep, fixed_budget=args.fixed_budget)
    pairs = sum(len(d) for d in docs) * args.repeats
    base = arms[0].seconds
    print(f"{len(docs)} documents, {pairs // args.repeats} pairs, token budget {budget} "
          f"(fixed shapes: {args.fixed_budget or budget}), "
          f"torch.set_num_threads({args.threads}), {args.repeats} repeat(s)")
    for arm in arms:
        s = arm.seconds
        print(f"{arm.name:11s} max|dp| alone vs batched: classes {arm.max_dp_class:.2e}, labels {arm.max_dp_labels:.2e}; "
              f"pairs/s alone {pairs / s['alone']:.1f} ({base['alone'] / s['alone']:.2f}x fp32), "
              f"batched {pairs / s['batched']:.1f} ({base['batched'] / s['batched']:.2f}x fp32)")
    cpu = cpu_info()
    print(f"CPU: {cpu.get('model')}, {cpu.get('logical_cpus')} logical CPUs, flags {' '.join(cpu.get('flags', []))}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
