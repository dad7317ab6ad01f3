"""The ``train.py`` command line: parse, check every argument, then run one command.

Commands: ``train`` (the default), ``calibrate``, ``evaluate``, ``verify``, ``encoder``
(`zsnli.training.encoder`: fine-tune the cosine term's sentence encoder on zsc-train), and
``select`` (`zsnli.selection.cli`: the leave-one-dataset-out choice of the
served scoring, which replaces ``chosen`` in ``calibration.json``).
Every user mistake (an unknown value, a missing file or directory, a preset
without what it needs) ends as ONE line naming the flag and what is
accepted, exit status 2, before torch is imported or any data is read.
Failures of the work itself (unreadable data, a hold-out that does not
match the manifest) are one line too.

May import `zsnli.training.presets`, `zsnli.manifest`, `zsnli.training.nli_data` (errors and
paths only), `zsnli.training.data_parallel` (the launch environment), `zsnli.harness.cli` (the
parser) at module level, and `zsnli.training.trainer`, `zsnli.selection.calibration`, `zsnli.training.evaluation`,
`zsnli.training.encoder`, `zsnli.selection.cli` (torch) only inside the command that runs them.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from pathlib import Path
from typing import Any

from .harness.cli import UsageParser, non_negative_float, non_negative_int, positive_float, positive_int, usage_error
from .training.data_parallel import LaunchError, launch_from_env, per_device_batch
from .manifest import MANIFEST_NAME, ManifestError, load_manifest
from .training.nli_data import DataError
from .training.presets import DEFAULT_DATA_DIR, PRESETS, Preset, get_preset, sentence_encoder

COMMANDS = ("train", "calibrate", "evaluate", "verify", "encoder")

CHECKOUT = Path(__file__).resolve().parents[2]
"""The repository root (this file is ``src/zsnli/train_cli.py``)."""

DEV_EXAMPLES = "dev/zeroshot_dev.jsonl"
"""The team-written zero-shot dev set in the repository: the default of ``calibrate --dev-examples``."""

DEFAULT_ZSC_DIR = "../shared/data/zsc-train"
"""The classification training sets (``train.py encoder``'s default ``--zsc-dir``)."""

ENCODER_OUTPUT_DIR = "~/zsnli-runs/encoder"
"""``train.py encoder``'s default output: outside the work tree, so the next working period finds it."""

SHIPPED_MODEL_DIR = "model"
"""The model directory the server loads by default (``train`` never writes there unless told so)."""

USAGE = """Build the served model: fine-tune, calibrate, evaluate, verify, select the served scoring.

  python train.py --preset minilm-cpu                 # train -> runs/minilm-cpu/model (resumes from runs/<preset>/checkpoint-*)
  python train.py --preset minilm-cpu --model-dir model   # the same, replacing the shipped model/
  python train.py --preset deberta-v3-base --dry-run  # print the plan, download nothing
  torchrun --nproc_per_node 8 train.py --preset deberta-v3-base   # 8 GPUs, one process each, global batch 32 = 8 x 4
  python train.py calibrate --model-dir model         # fit the scoring rule + temperature -> calibration.json
  python train.py evaluate --model-dir model          # validation and test accuracy per split
  python train.py verify                              # re-hash model/ against training_manifest.json
  python train.py select                              # choose the served scoring on zsc-dev (leave one dataset out)
  python train.py encoder --time-budget-s 1800        # fine-tune the cosine term's encoder on zsc-train
                                                      #   -> ~/zsnli-runs/encoder/{model,run,encoder_manifest.json}
  python train.py select --embedding-dir DIR --out /tmp/cal.json   # choose the scoring with that encoder

Data: minilm-cpu reads the NLI files under --data-dir (default ../shared/data/nli; JSONL or
JSONL.gz rows {"premise", "hypothesis", "label"}); deberta-v3-base reads SNLI, MultiNLI and ANLI
from the Hugging Face hub at pinned revisions (needs a network); calibrate also reads the team's
dev/zeroshot_dev.jsonl (in the repository).
"""

log = logging.getLogger(__name__)


class UsageError(Exception):
    """A user mistake: its message is the one line printed (exit 2)."""


def _number(kind: type, low: float, what: str):
    def parse(text: str):
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not value >= low or value != value or value in (float("inf"), float("-inf")):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value

    parse.__name__ = what
    return parse


def _repo_default(rel: str) -> str:
    """``rel`` (relative to the checkout) as given when it exists from the current directory,
    else the checkout's copy when that exists, else ``rel`` (so the error names it as documented)."""
    return rel if Path(rel).exists() or not (CHECKOUT / rel).exists() else str(CHECKOUT / rel)


def _preset_args(p: argparse.ArgumentParser, model_dir: str | None) -> None:
    p.add_argument("--preset", choices=PRESETS, default="minilm-cpu")
    p.add_argument("--data-dir", default=_repo_default(DEFAULT_DATA_DIR),
                   help="local NLI files of minilm-cpu and tiny (default %(default)s; see docs/data.md)")
    p.add_argument("--base-model", help="local model directory or hub id replacing the preset's base (tiny: required)")
    p.add_argument("--model-dir", default=model_dir,
                   help="model directory (default: %(default)s)" if model_dir else
                        "where the trained model goes (default: runs/<preset>/model; 'model' replaces the shipped one)")
    p.add_argument("--manifest-dir", default=None, help="where the manifests are (default: parent of --model-dir)")


def build_parser() -> argparse.ArgumentParser:
    """The ``train.py`` parser: one sub-command each for train, calibrate, evaluate and verify; ``select``
    is listed here but parsed by its own parser (`zsnli.selection.cli`, see `main`)."""
    parser = UsageParser(prog="train.py", description=USAGE, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    t = sub.add_parser("train", help="fine-tune a preset and write the model and the manifests")
    _preset_args(t, None)
    t.add_argument("--output-dir", help="checkpoints and logs (default runs/<preset>)")
    t.add_argument("--dry-run", action="store_true", help="print the plan as JSON; load and download nothing")
    t.add_argument("--no-resume", action="store_true")
    t.add_argument("--reset-best", action="store_true",
                   help="on resume, forget the best checkpoint/metric of earlier processes (their evaluation "
                        "is not comparable, e.g. written before a fix to evaluation)")
    t.add_argument("--max-steps", type=positive_int)
    t.add_argument("--epochs", type=positive_float)
    t.add_argument("--batch-size", type=positive_int,
                   help="the GLOBAL batch: examples per optimiser step over all processes of a torchrun / "
                        "accelerate launch job, each taking batch / WORLD_SIZE (default: the preset's)")
    t.add_argument("--max-length", type=_number(int, 8, "an integer >= 8"))
    t.add_argument("--lr", type=positive_float)
    t.add_argument("--seed", type=non_negative_int)
    t.add_argument("--eval-steps", type=positive_int)
    t.add_argument("--time-budget-s", type=positive_float,
                   help="wall seconds for this invocation: then evaluate, save the best model and stop")
    t.add_argument("--checkpoint-every-s", type=positive_float,
                   help="write a checkpoint at least this often (default 900); SIGTERM also writes one and stops")
    t.add_argument("--keep-checkpoints", type=positive_int,
                   help="checkpoints kept in --output-dir (default 2: the best and the newest)")
    t.add_argument("--mixed-precision", choices=("auto", "bf16", "no"),
                   help="bf16 autocast (auto: on CUDA and on CPUs with avx512_bf16/amx_bf16; default auto)")
    t.add_argument("--word-embeddings", choices=("frozen", "trained"), help="default: the preset's")
    t.add_argument("--warmup-ratio", type=_number(float, 0.0, "a number in [0, 1)"))
    t.add_argument("--zsc-dir", help="classification sets to mix in as NLI pairs (zsc-train layout: "
                                     "<name>.jsonl + <name>.labels.json), e.g. ../shared/data/zsc-train")
    t.add_argument("--zsc-ratio", type=non_negative_float,
                   help="classification pairs per NLI train pair (default 1 with --zsc-dir; capped by what exists)")
    t.add_argument("--zsc-negative", choices=("not_entailment", "neutral", "contradiction"),
                   help="target of a text with another class's hypothesis (default not_entailment: "
                        "p(neutral)+p(contradiction)); binary negation sets always use contradiction")
    _zsc_selection_args(t)
    t.add_argument("--note", action="append", default=[], help="recorded in the manifest (repeatable)")

    _encoder_parser(sub)

    c = sub.add_parser("calibrate", help="fit scoring rule and temperature on held-out NLI choice tasks")
    _preset_args(c, _repo_default(SHIPPED_MODEL_DIR))
    c.add_argument("--out", default=None, help="calibration.json path (default: beside the manifest)")
    c.add_argument("--dev-examples", default=_repo_default(DEV_EXAMPLES),
                   help="team-written zero-shot dev set (JSONL, examples format) for the rule choice "
                        "(default: %(default)s)")
    c.add_argument("--no-dev-examples", action="store_true",
                   help="choose on the NLI tasks alone (lowest NLL on their select half)")
    c.add_argument("--tasks", type=positive_int, default=2000, help="synthetic choice tasks to build")

    e = sub.add_parser("evaluate", help="accuracy per validation and test split of a model directory")
    _preset_args(e, _repo_default(SHIPPED_MODEL_DIR))
    e.add_argument("--out", default=None, help="write the figures as JSON here")
    e.add_argument("--update-manifest", action="store_true",
                   help="record the figures as 'evaluation' in training_manifest.json (model hashes untouched)")

    v = sub.add_parser("verify", help="re-hash the model directory against the manifest")
    v.add_argument("--model-dir", default=_repo_default(SHIPPED_MODEL_DIR))
    v.add_argument("--manifest", default=None, help="default: training_manifest.json beside --model-dir")

    sub.add_parser("select", add_help=False,  # listed for --help; `main` hands select's argv to its own parser
                   help="choose the served scoring by leave-one-dataset-out on zsc-dev, rewrite calibration.json "
                        "(`train.py select --help`)")
    return parser


def _zsc_selection_args(p: argparse.ArgumentParser) -> None:
    """``--zsc-sets``, ``--zsc-exclude``, ``--zsc-commercial-only``: which sets and texts are trained on."""
    p.add_argument("--zsc-sets", help="comma-separated set names to use (default: all in --zsc-dir)")
    p.add_argument("--zsc-exclude", action="append", default=None, metavar="PATH",
                   help="JSONL file or folder whose texts are never trained on (repeatable; default: zsc-dev/ and "
                        "zsc/public.jsonl beside --zsc-dir, and dev/zeroshot_dev.jsonl, where they exist)")
    p.add_argument("--zsc-commercial-only", action="store_true",
                   help="leave out the research-only / non-commercial / unknown-licence sets")


def _encoder_parser(sub) -> None:
    """The ``encoder`` sub-command: fine-tune the cosine term's sentence encoder (`zsnli.training.encoder`)."""
    e = sub.add_parser("encoder", help="fine-tune the cosine term's sentence encoder on zsc-train (in-batch negatives)")
    e.add_argument("--zsc-dir", default=_repo_default(DEFAULT_ZSC_DIR),
                   help="classification sets (zsc-train layout; default %(default)s)")
    _zsc_selection_args(e)
    e.add_argument("--base-model", help="local encoder directory to start from (default: model/embedding, "
                                        "all-MiniLM-L6-v2)")
    e.add_argument("--output-dir", default=ENCODER_OUTPUT_DIR,
                   help="run/ (checkpoints), model/ (the encoder) and encoder_manifest.json (default %(default)s)")
    e.add_argument("--no-resume", action="store_true")
    e.add_argument("--max-steps", type=positive_int)
    e.add_argument("--epochs", type=positive_float)
    e.add_argument("--batch-size", type=positive_int, help="texts per step (default 64)")
    e.add_argument("--max-length", type=_number(int, 8, "an integer >= 8"), help="tokens per text (default 128)")
    e.add_argument("--lr", type=positive_float, help="peak AdamW learning rate (default 3e-5)")
    e.add_argument("--warmup-ratio", type=_number(float, 0.0, "a number in [0, 1)"))
    e.add_argument("--seed", type=non_negative_int)
    e.add_argument("--word-embeddings", choices=("frozen", "trained"), help="default frozen")
    e.add_argument("--scale", type=positive_float, default=None,
                   help="cosine scale of the loss (default 20, sentence-transformers' MultipleNegativesRankingLoss)")
    e.add_argument("--negatives", choices=("batch", "own-set"), default="batch",
                   help="batch: every candidate of the batch competes (default); own-set: only the text's own set's "
                        "hypotheses")
    e.add_argument("--checkpoint-steps", type=positive_int, help="a checkpoint every this many steps (default 500)")
    e.add_argument("--checkpoint-every-s", type=positive_float,
                   help="write a checkpoint at least this often (default 900); SIGTERM also writes one and stops")
    e.add_argument("--keep-checkpoints", type=positive_int, help="checkpoints kept (default 2)")
    e.add_argument("--time-budget-s", type=positive_float,
                   help="wall seconds for this invocation: then save the encoder and its manifest and stop")
    e.add_argument("--mixed-precision", choices=("auto", "bf16", "no"),
                   help="bf16 autocast (auto: on CUDA and on CPUs with avx512_bf16/amx_bf16; default auto)")
    e.add_argument("--note", action="append", default=[], help="recorded in the manifest (repeatable)")
    e.set_defaults(zsc_ratio=None, zsc_negative=None)


# --------------------------------------------------------------------------- checks (no torch, no data read)


def _check_base_model(preset_name: str, base_model: str | None) -> None:
    if preset_name == "tiny" and not base_model:
        raise UsageError("--preset tiny needs --base-model DIR: a local model directory with config.json "
                         "and tokenizer files (e.g. a small BERT); see `train.py --help`")
    if not base_model:
        return
    path = Path(base_model).expanduser()
    looks_local = preset_name == "tiny" or path.exists() or base_model.startswith(("/", ".", "~"))
    if looks_local and not (path / "config.json").is_file():
        raise UsageError(f"--base-model {base_model}: not a model directory (no config.json); give a local "
                         "model directory" + ("" if preset_name == "tiny" else " or a hub id such as org/name"))


def _data_hint(preset: Preset, training: bool) -> str:
    if preset.name == "tiny":
        return "--data-dir DIR with train.jsonl and validation.jsonl (JSONL rows {premise, hypothesis, label})"
    hint = (f"--data-dir DIR with the {preset.name} files (JSONL or JSONL.gz rows {{premise, hypothesis, label}}, "
            f"paths as in data_sources.json; see docs/data.md)")
    if training:
        return hint + (", or --preset deberta-v3-base, which reads SNLI, MultiNLI and ANLI from the Hugging Face "
                       "hub at pinned revisions (needs a network)")
    return hint + " (a deberta-v3-base model reads the hub at pinned revisions instead: --preset deberta-v3-base)"


def _check_data(preset: Preset, data_dir: str, roles: tuple[str, ...], what: str, training: bool = False) -> None:
    files = preset.required_files(roles)
    missing = [f for f in files if not f.is_file()]
    if not missing:
        return
    if not Path(data_dir).is_dir():
        raise UsageError(f"--data-dir {data_dir} not found; {what} reads NLI files from it: give "
                         + _data_hint(preset, training))
    raise UsageError(f"--data-dir {data_dir} lacks {len(missing)} of the {len(files)} files {what} reads "
                     f"(first: {missing[0]}); give " + _data_hint(preset, training))


def _check_model_dir(model_dir: str, flag: str = "--model-dir") -> None:
    path = Path(model_dir)
    if not path.is_dir():
        raise UsageError(f"{flag} {model_dir}: no such directory; give a model directory written by "
                         f"`train.py` (the shipped one is {SHIPPED_MODEL_DIR})")
    if not (path / "config.json").is_file():
        raise UsageError(f"{flag} {model_dir}: not a model directory (no config.json); give a model "
                         f"directory written by `train.py` (the shipped one is {SHIPPED_MODEL_DIR})")


def _check_manifest(path: Path, flag: str) -> dict[str, Any]:
    try:
        return load_manifest(path)
    except ManifestError as exc:
        raise UsageError(f"{flag}: {exc}; give the directory holding the model's {MANIFEST_NAME}") from None


def _check_out(out: str | None) -> None:
    if out is None:
        return
    path = Path(out)
    if path.is_dir():
        raise UsageError(f"--out {out} is a directory; give a file path")
    if not path.parent.is_dir():
        raise UsageError(f"--out {out}: directory {path.parent} does not exist")


def _check_dev_examples(args: argparse.Namespace) -> None:
    if args.no_dev_examples:
        args.dev_examples = None
        return
    if not Path(args.dev_examples).is_file():
        raise UsageError(f"--dev-examples {args.dev_examples}: no such file; give a JSONL file in the examples "
                         f"format (the repository's is {DEV_EXAMPLES}) or --no-dev-examples")
    if "zsc" in Path(args.dev_examples).parts:
        raise UsageError(f"--dev-examples {args.dev_examples}: the public zero-shot examples are for reporting "
                         f"only; give the team dev set ({DEV_EXAMPLES})")


def _launch():
    try:
        return launch_from_env()
    except LaunchError as exc:
        raise UsageError(str(exc)) from None


def _with_zsc(preset: Preset, args: argparse.Namespace) -> Preset:
    """The preset with ``--zsc-*`` applied (`zsnli.training.zsc_nli`); one-line `UsageError` for a folder without sets."""
    from .training.zsc_nli import zsc_sources

    if not args.zsc_dir:
        if args.zsc_ratio is not None or args.zsc_negative or args.zsc_sets or args.zsc_commercial_only \
                or args.zsc_exclude:
            raise UsageError("--zsc-ratio, --zsc-negative, --zsc-sets, --zsc-exclude and --zsc-commercial-only "
                             "need --zsc-dir")
        return preset
    names = [n.strip() for n in args.zsc_sets.split(",") if n.strip()] if args.zsc_sets else None
    sources = zsc_sources(args.zsc_dir, args.zsc_commercial_only, names)
    if not sources:
        raise UsageError(f"--zsc-dir {args.zsc_dir}: no <name>.jsonl with a <name>.labels.json beside it"
                         + (f" among --zsc-sets {args.zsc_sets}" if names else ""))
    missing = sorted(set(names or ()) - {s.name.split(":", 1)[1] for s in sources})
    if missing and not args.zsc_commercial_only:
        raise UsageError(f"--zsc-sets: {', '.join(missing)} not found in {args.zsc_dir}")
    exclude = args.zsc_exclude
    if exclude is None:
        beside = Path(args.zsc_dir).resolve().parent
        exclude = [str(p) for p in (beside / "zsc-dev", beside / "zsc" / "public.jsonl", CHECKOUT / DEV_EXAMPLES)
                   if p.exists()]
    missing = [p for p in exclude if not Path(p).exists()]
    if missing:
        raise UsageError(f"--zsc-exclude {missing[0]}: not found")
    return preset.with_overrides(zsc_sources=sources, zsc_ratio=1.0 if args.zsc_ratio is None else args.zsc_ratio,
                                 zsc_negative=args.zsc_negative, zsc_exclude=tuple(exclude))


def _check_encoder(args: argparse.Namespace) -> Preset:
    """``train.py encoder``: base directory, data folder, output directory; the preset with every flag applied."""
    if _launch().distributed:
        raise UsageError("train.py encoder runs in one process (its in-batch negatives are per batch); launch it "
                         "without torchrun / accelerate launch")
    if args.base_model is not None and not (Path(args.base_model).expanduser() / "config.json").is_file():
        raise UsageError(f"--base-model {args.base_model}: not a model directory (no config.json); give a local "
                         "encoder directory such as model/embedding")
    if not Path(args.zsc_dir).is_dir():
        raise UsageError(f"--zsc-dir {args.zsc_dir}: no such directory; give the zsc-train folder "
                         f"({DEFAULT_ZSC_DIR} beside the checkout)")
    output = Path(args.output_dir).expanduser()
    if output.exists() and not output.is_dir():
        raise UsageError(f"--output-dir {args.output_dir} is a file; give a directory")
    if output.resolve().is_relative_to((CHECKOUT / SHIPPED_MODEL_DIR).resolve()):
        raise UsageError(f"--output-dir {args.output_dir}: inside the shipped {SHIPPED_MODEL_DIR}/; train elsewhere "
                         "(shipping an encoder replaces model/embedding in its own commit)")
    args.output_dir = str(output)
    base = str(Path(args.base_model).expanduser()) if args.base_model else None
    preset = _with_zsc(sentence_encoder(base), args)
    return preset.with_overrides(
        max_steps=args.max_steps, epochs=args.epochs, batch_size=args.batch_size, max_length=args.max_length,
        lr=args.lr, warmup_ratio=args.warmup_ratio, seed=args.seed, eval_steps=args.checkpoint_steps,
        checkpoint_every_s=args.checkpoint_every_s, keep_checkpoints=args.keep_checkpoints,
        time_budget_s=args.time_budget_s, mixed_precision=args.mixed_precision,
        freeze_word_embeddings=None if args.word_embeddings is None else args.word_embeddings == "frozen")


def _check_batch_split(batch_size: int | None, preset: Preset) -> None:
    """The global batch (``--batch-size`` or the preset's) must split evenly over the launched processes."""
    world = _launch().world_size
    global_batch = batch_size or preset.batch_size
    try:
        per_device_batch(global_batch, world)
    except LaunchError:
        given = "--batch-size" if batch_size else f"the {preset.name} preset's batch"
        raise UsageError(f"{given} {global_batch} is the global batch and does not split evenly over WORLD_SIZE="
                         f"{world} processes; give a --batch-size that is a multiple of {world}, or launch a "
                         f"number of processes that divides {global_batch}") from None


def _manifest_dir(args: argparse.Namespace) -> Path:
    return Path(args.manifest_dir) if args.manifest_dir else Path(args.model_dir).resolve().parent


def check_args(args: argparse.Namespace) -> Preset | None:
    """Check the parsed arguments of any command; returns the preset (None for verify).

    Fills in the defaults that depend on the preset (``train``'s model
    directory). Raises `UsageError` with the one line to print. Reads no
    data and imports no torch (file existence only, and the small manifest).
    """
    _launch()
    if args.command == "encoder":
        return _check_encoder(args)
    if args.command == "verify":
        _check_model_dir(args.model_dir)
        args.manifest = args.manifest or str(Path(args.model_dir).resolve().parent / MANIFEST_NAME)
        _check_manifest(Path(args.manifest), "--manifest")
        return None
    _check_base_model(args.preset, args.base_model)
    preset = get_preset(args.preset, args.data_dir, args.base_model)
    if args.command == "train":
        preset = _with_zsc(preset, args)
        _check_batch_split(args.batch_size, preset)
        args.model_dir = args.model_dir or f"runs/{preset.name}/model"
        if Path(args.model_dir).exists() and not Path(args.model_dir).is_dir():
            raise UsageError(f"--model-dir {args.model_dir} is a file; give a directory")
        if not args.dry_run:
            _check_data(preset, args.data_dir, ("train", "validation"), f"training the {preset.name} preset",
                        training=True)
        return preset
    _check_model_dir(args.model_dir)
    _check_out(args.out)
    if args.command == "calibrate":
        _check_dev_examples(args)
        _check_manifest(_manifest_dir(args) / MANIFEST_NAME, "--manifest-dir")
        _check_data(preset, args.data_dir, ("train", "validation"),
                    f"calibration (it rebuilds the {preset.name} hold-out)")
    elif args.command == "evaluate":
        if args.update_manifest:
            _check_manifest(_manifest_dir(args) / MANIFEST_NAME, "--manifest-dir")
        _check_data(preset, args.data_dir, ("validation", "test"), f"evaluating on the {preset.name} splits")
    return preset


# --------------------------------------------------------------------------- commands


def _verify(args: argparse.Namespace) -> int:
    from .manifest import check_model_dir

    checks = check_model_dir(args.model_dir, load_manifest(args.manifest))
    for check in checks:
        print(f"{check.status.upper():9s} {check.name}")
    bad = [c for c in checks if c.status != "ok"]
    print(f"{'FAIL' if bad else 'OK'}: {len(checks) - len(bad)}/{len(checks)} files match {args.manifest}")
    return 1 if bad else 0


def _train(args: argparse.Namespace, preset: Preset) -> int:
    from .training import trainer as training

    preset = preset.with_overrides(
        max_steps=args.max_steps, epochs=args.epochs, batch_size=args.batch_size, max_length=args.max_length,
        lr=args.lr, seed=args.seed, eval_steps=args.eval_steps, time_budget_s=args.time_budget_s,
        checkpoint_every_s=args.checkpoint_every_s, mixed_precision=args.mixed_precision,
        keep_checkpoints=args.keep_checkpoints,
        warmup_ratio=args.warmup_ratio,
        freeze_word_embeddings=None if args.word_embeddings is None else args.word_embeddings == "frozen",
    )
    output_dir = args.output_dir or f"runs/{preset.name}"
    if args.dry_run:
        print(json.dumps(training.plan(preset, args.model_dir, output_dir), indent=2))
        return 0
    if Path(args.model_dir).resolve() == (CHECKOUT / SHIPPED_MODEL_DIR).resolve():
        log.warning("--model-dir %s: replacing the shipped model and its manifests", args.model_dir)
    manifest = training.train(preset, args.model_dir, output_dir, _manifest_dir(args), resume=not args.no_resume,
                              notes=tuple(args.note), reset_best=args.reset_best)
    if manifest.get("interrupted"):
        print(f"interrupted at step {manifest['steps']} (checkpoint written in {output_dir}); "
              "rerun the same command to resume")
    elif manifest:
        print(json.dumps(manifest["training"], indent=2))
    return 0


def _encoder(args: argparse.Namespace, preset: Preset) -> int:
    from .training.encoder import DEFAULT_SCALE, train_encoder

    manifest = train_encoder(preset, args.output_dir, scale=args.scale or DEFAULT_SCALE, negatives=args.negatives,
                             resume=not args.no_resume, notes=tuple(args.note))
    if manifest.get("interrupted"):
        print(f"interrupted at step {manifest['steps']} (checkpoint written in {args.output_dir}); "
              "rerun the same command to resume")
    else:
        print(json.dumps(manifest["training"], indent=2))
    return 0


def _calibrate(args: argparse.Namespace, preset: Preset) -> int:
    from .selection import calibration

    try:
        result = calibration.calibrate(preset, args.model_dir, _manifest_dir(args), out=args.out,
                                       dev_examples=args.dev_examples, n_tasks=args.tasks)
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
        record_evaluation(_manifest_dir(args), figures)
    return 0


def _drop_long_sequence_warning(record: logging.LogRecord) -> bool:
    return not str(record.msg).startswith("Token indices sequence length is longer")


def _quiet_known_noise() -> None:
    """Silence warnings that say nothing to a user of these commands.

    transformers' "Token indices sequence length is longer than the specified
    maximum" is logged when a text is tokenised in full to measure or clip it;
    every model input is truncated to the window anyway. (The Trainer's
    repeated ``pin_memory`` warning on CPU is avoided at the source: see
    `zsnli.training.trainer`.)
    """
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.getLogger("transformers.tokenization_utils_base").addFilter(_drop_long_sequence_warning)


def main(argv: list[str]) -> int:
    """Run ``train.py`` with ``argv`` (without the program name); returns the exit status.

    0 success; 1 ``verify`` found files that do not match; 2 a user mistake
    (one line on stderr, before any slow work). Under torchrun / accelerate
    launch every rank runs ``train``; the other commands run in rank 0
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
    if not argv or argv[0] not in COMMANDS and argv[0] not in ("-h", "--help"):
        argv = ["train", *argv]
    args = build_parser().parse_args(argv)
    try:
        preset = check_args(args)
    except UsageError as exc:
        return usage_error(f"train.py {args.command}", str(exc))
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    _quiet_known_noise()
    rank = launch_from_env().rank  # checked by check_args
    if args.command != "train" and rank > 0:
        log.info("rank %d: %s runs in rank 0 only (one process writes its output)", rank, args.command)
        return 0
    try:
        if args.command == "verify":
            return _verify(args)
        return {"train": _train, "calibrate": _calibrate, "evaluate": _evaluate,
                "encoder": _encoder}[args.command](args, preset)
    except (UsageError, LaunchError) as exc:
        return usage_error(f"train.py {args.command}", str(exc))
    except (DataError, ManifestError) as exc:
        print(f"train.py {args.command}: error: {exc}", file=sys.stderr)
        return 1
