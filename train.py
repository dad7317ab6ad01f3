#!/usr/bin/env python
"""Build the served model: fine-tune, calibrate, evaluate, verify.

  python train.py --preset minilm-cpu                 # train (resumes from runs/<preset>/checkpoint-*)
  python train.py --preset deberta-v3-base --dry-run  # print the plan, download nothing
  python train.py calibrate --model-dir model         # fit the scoring rule + temperature -> calibration.json
  python train.py evaluate --model-dir model          # validation and test accuracy per split
  python train.py verify                              # re-hash model/ against training_manifest.json

The work lives in zsnli.training, zsnli.calibration and zsnli.manifest.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path

from zsnli.presets import DEFAULT_DATA_DIR, PRESETS, get_preset

COMMANDS = ("train", "calibrate", "evaluate", "verify")


def _preset_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--preset", choices=PRESETS, default="minilm-cpu")
    p.add_argument("--data-dir", default=DEFAULT_DATA_DIR, help="local NLI files (minilm-cpu, tiny)")
    p.add_argument("--base-model", help="local model directory or hub id replacing the preset's base")
    p.add_argument("--model-dir", default="model")
    p.add_argument("--manifest-dir", default=None, help="where the manifests go (default: parent of --model-dir)")


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS and argv[0] not in ("-h", "--help"):
        argv = ["train", *argv]
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="fine-tune a preset and write model/ and the manifests")
    _preset_args(t)
    t.add_argument("--output-dir", help="checkpoints and logs (default runs/<preset>)")
    t.add_argument("--dry-run", action="store_true", help="print the plan as JSON; load and download nothing")
    t.add_argument("--no-resume", action="store_true")
    t.add_argument("--reset-best", action="store_true",
                   help="on resume, forget the best checkpoint/metric of earlier processes (their evaluation "
                        "is not comparable, e.g. written before a fix to evaluation)")
    t.add_argument("--max-steps", type=int)
    t.add_argument("--epochs", type=float)
    t.add_argument("--batch-size", type=int)
    t.add_argument("--max-length", type=int)
    t.add_argument("--lr", type=float)
    t.add_argument("--seed", type=int)
    t.add_argument("--eval-steps", type=int)
    t.add_argument("--time-budget-s", type=float)
    t.add_argument("--note", action="append", default=[], help="recorded in the manifest (repeatable)")

    c = sub.add_parser("calibrate", help="fit scoring rule and temperature on held-out NLI choice tasks")
    _preset_args(c)
    c.add_argument("--out", default=None, help="calibration.json path (default: beside the manifest)")
    c.add_argument("--dev-examples", default=None, help="team-written zero-shot dev set (JSONL) for the rule choice")
    c.add_argument("--tasks", type=int, default=2000, help="synthetic choice tasks to build")

    e = sub.add_parser("evaluate", help="accuracy per validation and test split of a model directory")
    _preset_args(e)
    e.add_argument("--out", default=None, help="write the figures as JSON here")
    e.add_argument("--update-manifest", action="store_true",
                   help="record the figures as 'evaluation' in training_manifest.json (model hashes untouched)")

    v = sub.add_parser("verify", help="re-hash the model directory against the manifest")
    v.add_argument("--model-dir", default="model")
    v.add_argument("--manifest", default=None, help="default: training_manifest.json beside --model-dir")

    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    manifest_dir = Path(args.manifest_dir) if getattr(args, "manifest_dir", None) else Path(args.model_dir).resolve().parent

    if args.command == "verify":
        from zsnli.manifest import MANIFEST_NAME, ManifestError, check_model_dir, load_manifest

        path = args.manifest or Path(args.model_dir).resolve().parent / MANIFEST_NAME
        try:
            checks = check_model_dir(args.model_dir, load_manifest(path))
        except ManifestError as exc:
            print(f"FAIL {exc}")
            return 1
        for check in checks:
            print(f"{check.status.upper():9s} {check.name}")
        bad = [c for c in checks if c.status != "ok"]
        print(f"{'FAIL' if bad else 'OK'}: {len(checks) - len(bad)}/{len(checks)} files match {path}")
        return 1 if bad else 0

    preset = get_preset(args.preset, args.data_dir, args.base_model)

    if args.command == "train":
        from zsnli import training

        preset = preset.with_overrides(
            max_steps=args.max_steps, epochs=args.epochs, batch_size=args.batch_size, max_length=args.max_length,
            lr=args.lr, seed=args.seed, eval_steps=args.eval_steps, time_budget_s=args.time_budget_s,
        )
        output_dir = args.output_dir or f"runs/{preset.name}"
        if args.dry_run:
            print(json.dumps(training.plan(preset, args.model_dir, output_dir), indent=2))
            return 0
        manifest = training.train(preset, args.model_dir, output_dir, manifest_dir, resume=not args.no_resume,
                                  notes=tuple(args.note), reset_best=args.reset_best)
        if manifest:
            print(json.dumps(manifest["training"], indent=2))
        return 0

    if args.command == "calibrate":
        from zsnli import calibration

        result = calibration.calibrate(preset, args.model_dir, manifest_dir, out=args.out,
                                       dev_examples=args.dev_examples, n_tasks=args.tasks)
        print(json.dumps(result["chosen"], indent=2))
        return 0

    if args.command == "evaluate":
        from zsnli.training import evaluate_model, record_evaluation

        figures = evaluate_model(args.model_dir, preset)
        text = json.dumps(figures, indent=2)
        print(text)
        if args.out:
            Path(args.out).write_text(text + "\n", encoding="utf-8")
        if args.update_manifest:
            record_evaluation(manifest_dir, figures)
        return 0
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
