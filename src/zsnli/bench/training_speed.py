"""``python -m zsnli.bench.training_speed``: training pairs/s against the compute ceiling, fp32 and bf16.

One run measures, on the same batches of the real training mix (NLI pairs
plus classification pairs, `zsnli.training.zsc_nli`), the optimiser steps of the
training code's model and loss (`zsnli.training.trainer.nli_loss`, AdamW, frozen word
embeddings as the minilm-cpu preset) in each precision, and the machine's
matmul rate in each (`zsnli.bench.ceiling.matmul_rate`). Batches are cut
like the Trainer's: length-grouped (as transformers' `LengthGroupedSampler`:
sorted within mega-batches), padded to the longest pair rounded up
to a multiple of 8.

Ceiling: a training step costs about 3x the forward (forward, then backward
for activations and weights: Kaplan et al. 2020, arXiv:2001.08361, section
2.1, C ~ 6N per token), so FLOPs(pair) = ``3 * (2 * P_enc * L + 2 * P_head)``
for L real tokens (`zsnli.bench.ceiling.pair_flops`); padding is not useful
work. ceiling pairs/s = matmul rate / mean FLOPs(pair), per precision.
Every figure is printed with the CPU model and its avx512/amx/bf16 flags.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path
from typing import Any, Sequence

from zsnli.bench.ceiling import matmul_rate, pair_flops, param_counts
from zsnli.harness.cli import UsageParser, non_negative_int, output_file, path_type, positive_int
from zsnli.bench.bench_args import check_model_dir, command_description


def cpu_description() -> dict[str, Any]:
    """``{"model", "flags"}``: the CPU model name and its vector/matrix flags (avx2, avx512*, amx*, *bf16*, vnni)."""
    model, flags = "unknown", set()
    try:
        for line in Path("/proc/cpuinfo").read_text(encoding="utf-8", errors="replace").splitlines():
            if line.startswith("model name") and model == "unknown":
                model = line.partition(":")[2].strip()
            elif line.startswith("flags"):
                flags.update(line.partition(":")[2].split())
    except OSError:
        pass
    keep = sorted(f for f in flags if f.startswith(("avx2", "avx512", "amx")) or "bf16" in f or "vnni" in f)
    return {"model": model, "flags": keep}


def sample_pairs(nli_files: Sequence[Path], zsc_dir: Path | None, n: int, seed: int) -> list[dict[str, str]]:
    """``n`` training pairs: half NLI rows from ``nli_files``, half classification pairs from ``zsc_dir`` (if given)."""
    from zsnli.training.nli_data import Source, load_source
    from zsnli.training.zsc_nli import build_zsc_pairs, zsc_sources

    rng = random.Random(seed)
    nli: list[dict[str, str]] = []
    for path in nli_files:
        rows, _ = load_source(Source(name=path.name, kind="local", role="train", path=str(path)))
        nli.extend(rows)
    n_zsc = n // 2 if zsc_dir else 0
    pairs = rng.sample(nli, min(len(nli), n - n_zsc))
    if n_zsc:
        zsc, _ = build_zsc_pairs(zsc_sources(zsc_dir), n_nli=n_zsc, ratio=1.0, seed=seed)
        pairs += zsc[:n_zsc]
    rng.shuffle(pairs)
    return pairs


def grouped_batches(lengths: Sequence[int], batch: int, seed: int) -> list[list[int]]:
    """Indices cut into batches of ``batch`` after sorting by length within mega-batches of 50 batches."""
    idx = list(range(len(lengths)))
    random.Random(seed).shuffle(idx)
    mega = 50 * batch
    order = [i for s in range(0, len(idx), mega) for i in sorted(idx[s:s + mega], key=lambda j: -lengths[j])]
    return [order[s:s + batch] for s in range(0, len(order) - batch + 1, batch)]


def time_steps(model_dir: Path, encoded: dict[str, list], batches: list[list[int]], bf16: bool,
               warmup: int) -> dict[str, float]:
    """Seconds per optimiser step over ``batches`` (after ``warmup`` untimed steps) and the padded tokens seen."""
    import torch
    from transformers import AutoModelForSequenceClassification, DataCollatorWithPadding, AutoTokenizer

    from zsnli.training.trainer import ID2LABEL, LABEL2ID, nli_loss

    tok = AutoTokenizer.from_pretrained(model_dir)
    collate = DataCollatorWithPadding(tok, pad_to_multiple_of=8)
    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=3, id2label=ID2LABEL,
                                                               label2id=LABEL2ID, ignore_mismatched_sizes=True)
    model.get_input_embeddings().weight.requires_grad_(False)
    model.train()
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-5)
    took, padded, pairs = 0.0, 0, 0
    for step, batch in enumerate(batches):
        feats = collate([{k: encoded[k][i] for k in ("input_ids", "attention_mask", *(
            ["token_type_ids"] if "token_type_ids" in encoded else []))} for i in batch])
        labels = torch.tensor([encoded["labels"][i] for i in batch])
        start = time.perf_counter()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            logits = model(**feats).logits
        loss = nli_loss(logits, labels)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step >= warmup:
            took += time.perf_counter() - start
            padded += int(feats["input_ids"].numel())
            pairs += len(batch)
    return {"seconds": took, "pairs": pairs, "padded_tokens": padded}


def run(args: argparse.Namespace) -> dict[str, Any]:
    """The whole measurement; returns the JSON report (also printed)."""
    import torch
    import transformers

    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()  # the new head's "newly initialized" load report, once per precision
    try:
        return _measure(args, torch)
    finally:
        transformers.logging.set_verbosity(verbosity)


def _measure(args: argparse.Namespace, torch) -> dict[str, Any]:
    """`run`'s body: sample, tokenise, time every precision; returns the report."""
    from transformers import AutoTokenizer

    from zsnli.training.trainer import TARGET_IDS

    if args.threads:
        torch.set_num_threads(args.threads)
    steps = args.steps + args.warmup
    pairs = sample_pairs(args.nli_file, args.zsc_dir, steps * args.batch_size, args.seed)
    tok = AutoTokenizer.from_pretrained(args.model_dir)
    enc = tok([p["premise"] for p in pairs], [p["hypothesis"] for p in pairs], truncation=True,
              max_length=args.max_length)
    encoded = {k: list(v) for k, v in enc.items()}
    encoded["labels"] = [TARGET_IDS[p["label"]] for p in pairs]
    lengths = [len(ids) for ids in encoded["input_ids"]]
    batches = grouped_batches(lengths, args.batch_size, args.seed)[:steps]
    params = param_counts(args.model_dir)
    timed = [i for b in batches[args.warmup:] for i in b]
    real_tokens = sum(lengths[i] for i in timed)
    flops_per_pair = 3.0 * sum(pair_flops(lengths[i], params) for i in timed) / len(timed)
    report: dict[str, Any] = {"cpu": cpu_description(), "threads": torch.get_num_threads(),
                              "batch_size": args.batch_size, "max_length": args.max_length, "timed_steps": args.steps,
                              "real_tokens_per_pair": round(real_tokens / len(timed), 1),
                              "train_flops_per_pair": flops_per_pair, "params": params.to_dict(), "precisions": {}}
    for precision in args.precisions:
        bf16 = precision == "bf16"
        rate = matmul_rate("cpu", "bfloat16" if bf16 else "float32", min_time_s=1.0)["flops_per_s"]
        t = time_steps(args.model_dir, encoded, batches, bf16, args.warmup)
        pairs_per_s = t["pairs"] / t["seconds"]
        ceiling = rate / flops_per_pair
        report["precisions"][precision] = {
            "pairs_per_s": round(pairs_per_s, 2), "matmul_gflops": round(rate / 1e9, 1),
            "ceiling_pairs_per_s": round(ceiling, 1), "percent_of_ceiling": round(100 * pairs_per_s / ceiling, 1),
            "padding_efficiency": round(real_tokens / t["padded_tokens"], 3)}
        print(f"{precision}: {pairs_per_s:.1f} pairs/s = {100 * pairs_per_s / ceiling:.1f} % of its ceiling "
              f"{ceiling:.0f} pairs/s (matmul {rate / 1e9:.0f} GFLOP/s); real/padded tokens "
              f"{real_tokens / t['padded_tokens']:.2f}", flush=True)
    base = report["precisions"].get("fp32", {}).get("pairs_per_s")
    for precision, fig in report["precisions"].items():
        if base:
            fig["vs_fp32"] = round(fig["pairs_per_s"] / base, 2)
    print(f"CPU: {report['cpu']['model']}; flags: {' '.join(report['cpu']['flags']) or 'none of avx2/avx512/amx'}")
    return report


def build_parser() -> argparse.ArgumentParser:
    """The CLI parser (`zsnli.harness.cli.UsageParser`: one-line errors, exit 2)."""
    p = UsageParser(prog="python -m zsnli.bench.training_speed", description=command_description(__doc__))
    p.add_argument("--model-dir", type=path_type, default=Path("model/embedding"),
                   help="the base encoder's model directory (default: %(default)s)")
    p.add_argument("--nli-file", type=path_type, action="append", required=True,
                   help="NLI JSONL(.gz) train file (repeatable), e.g. ../shared/data/nli/lingnli/train.jsonl.gz")
    p.add_argument("--zsc-dir", type=path_type, help="classification sets mixed in 1:1 (e.g. ../shared/data/zsc-train)")
    p.add_argument("--steps", type=positive_int, default=20,
                   help="timed optimiser steps per precision (default: %(default)s)")
    p.add_argument("--warmup", type=non_negative_int, default=2,
                   help="untimed optimiser steps before the timed ones, per precision (default: %(default)s)")
    p.add_argument("--batch-size", type=positive_int, default=32, help="pairs per optimiser step (default: %(default)s)")
    p.add_argument("--max-length", type=positive_int, default=128,
                   help="tokens per pair at most (longer pairs are truncated; default: %(default)s)")
    p.add_argument("--precisions", type=lambda s: s.split(","), default="fp32,bf16",
                   help="precisions to measure, comma-separated: fp32 and/or bf16 (default: %(default)s)")
    p.add_argument("--threads", type=positive_int, default=None,
                   help="torch.set_num_threads for the steps and the matmul rates (default: torch's)")
    p.add_argument("--seed", type=non_negative_int, default=0,
                   help="seed of the sampled pairs and of the batch order (default: %(default)s)")
    p.add_argument("--json", type=output_file, help="write the report here")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Parse, check, measure; exit 2 with one line on a bad argument (a ``--model-dir`` that is no model directory:
    `zsnli.bench.bench_args.check_model_dir`)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    check_model_dir(parser, args.model_dir, nli=False,
                    hint="give the base encoder's model directory (the shipped sentence encoder is model/embedding)")
    bad = [f"--precisions {p}" for p in args.precisions if p not in ("fp32", "bf16")]
    missing = [str(p) for p in [*args.nli_file, *([args.zsc_dir] if args.zsc_dir else [])] if not p.exists()]
    if bad or missing:
        parser.error("; ".join([*(f"{b}: out of range or unknown" for b in bad), *(f"{m}: not found" for m in missing)]))
    report = run(args)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
