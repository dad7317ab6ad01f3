"""Fine-tune an encoder as a 3-way NLI cross-encoder with the Hugging Face `Trainer`.

`plan` builds the whole run description without loading anything heavy (used by ``--dry-run``); `train` runs
it: data (`zsnli.training.nli_data`) -> a new 3-way head on the base encoder -> Trainer (AdamW, linear decay
with warm-up, dynamic padding, length-grouped batches, periodic evaluation and checkpoints, best checkpoint
kept, resumable) -> the model saved to the model directory -> the manifests (`zsnli.manifest`).

Under ``torchrun`` / ``accelerate launch`` (N processes, one per device; `zsnli.training.data_parallel`) the
preset's batch stays the global batch (each process gets batch/N), rank 0 alone builds and tokenises the data
(the others load its saved copy), only rank 0 writes the hold-out, the logs, the model and the manifests, and
the time-budget stop is one decision for all ranks. The run is then step for step the single-process run at
the same global batch: same examples per optimiser step, same mean loss and gradient.

The model side (label ids, loss, sampler, Trainer subclass, loading, saving): `zsnli.training.nli_trainer`.

A distilling run (``distill``: `zsnli.training.distill.Distillation`) adds augmented pairs to the train rows,
builds or resumes the teacher's cache of every train pair, gives the train set the teacher's log-probabilities
and trains with `zsnli.training.distill.distillation_loss`.

May import the `zsnli.training` modules it runs (`nli_trainer`, `nli_data`, `zsc_nli`, `presets`,
`arguments`, `callbacks`, `evaluation`, `data_parallel`, `manifest_writer`, `distill`) and, inside functions,
torch, transformers, datasets, `zsnli.runtime.embedding` and `zsnli.training.hard_negatives` (the
hard-negative table, only when the preset asks for one).
"""

from __future__ import annotations

import json
import logging
import random
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from .arguments import training_arguments
from .callbacks import StopRequest, stop_on_signals, trainer_callbacks
from .distill import (NO_GOLD, NO_GOLD_ID, TEACHER_COLUMN, Distillation, augmented_pairs, build_cache,
                      distill_trainer_class, row_teacher_log_probs, teacher_entry, unique_pairs)
from .data_parallel import LaunchError, any_rank, launch_from_env, leave_process_group, per_device_batch, replicas
from .evaluation import accuracy_by_split
from .manifest_writer import build_manifest, run_base_identity, write_manifests
from .nli_data import DataError, NliData, build_nli_data
from .nli_trainer import (COMPUTE_DTYPE, ID2LABEL, LABEL2ID, NOT_ENTAILMENT_ID, TARGET_IDS,  # noqa: F401 (re-exported)
                          global_length_grouped_sampler, load_base, nli_loss, nli_trainer_class, save_model)
from .presets import Preset
from .run_settings import RunSettingsMismatch, check_run_settings, nli_settings  # noqa: F401 (documented)
from .zsc_nli import build_zsc_pairs, texts_of

log = logging.getLogger(__name__)


def plan(preset: Preset, model_dir: str | Path, output_dir: str | Path) -> dict[str, Any]:
    """Describe the run without downloading or loading anything.

    Returns a JSON-ready dict: preset hyperparameters, data sources with roles, the output paths and the
    manifest skeleton the run will fill in.
    """
    hp = preset.hyperparameters()
    world = launch_from_env().world_size
    return {
        "preset": preset.name,
        "data_parallel": {"world_size": world, "global_batch": preset.batch_size,
                          "per_device_batch": per_device_batch(preset.batch_size, world)},
        "base_model": {"id": preset.base_model_id, "revision": preset.base_revision},
        "hyperparameters": hp,
        "id2label": ID2LABEL,
        "sources": [s.describe() for s in preset.sources()],
        "calibration_holdout": {"rows": preset.n_holdout, "from": "train sources, disjoint by premise", "seed": preset.seed},
        "model_dir": str(model_dir),
        "output_dir": str(output_dir),
        "manifest_skeleton": {
            "zsnli_version": __version__,
            "preset": preset.name,
            "base_model": {"id": preset.base_model_id, "revision": preset.base_revision, "weights_sha256": None},
            "data": {"counts": None, "holdout_sha256": None},
            "hyperparameters": hp,
            "training": {"steps": None, "epochs": None, "final_loss": None, "final_loss_step": None,
                         "best_metric": None, "validation": None, "wall_seconds": None, "train_pairs_per_second": None},
            "environment": {"device": None, "torch": None, "transformers": None},
            "files": None,
        },
    }


def _tokenize(rows: list[dict[str, str]], tokenizer, max_length: int, split_ids: list[int] | None = None):
    """A `datasets.Dataset` of the encoded pairs with ``labels``, ``length`` (tokens) and, when given, ``split``."""
    import datasets

    columns = {key: [r[key] for r in rows] for key in ("premise", "hypothesis")}
    targets = {**TARGET_IDS, NO_GOLD: NO_GOLD_ID}
    columns["labels"] = [targets[r["label"]] for r in rows]
    if split_ids is not None:
        columns["split"] = list(split_ids)
    ds = datasets.Dataset.from_dict(columns)

    def encode(batch):
        enc = tokenizer(batch["premise"], batch["hypothesis"], truncation=True, max_length=max_length)
        enc["length"] = [len(ids) for ids in enc["input_ids"]]
        return enc

    return ds.map(encode, batched=True, remove_columns=["premise", "hypothesis"], desc="tokenize")


def _eval_set(validation: dict[str, list[dict[str, str]]]) -> tuple[list[dict[str, str]], list[int], list[str]]:
    """The validation rows of every split in order, each row's split index, and the split names."""
    names = list(validation)
    split_ids = [i for i, name in enumerate(names) for _ in validation[name]]
    return [row for name in names for row in validation[name]], split_ids, names


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def checkpoint_step(checkpoint: str | Path) -> int:
    """N of a ``checkpoint-N`` directory (a path or its name)."""
    return int(Path(checkpoint).name.split("-")[-1])


def sorted_checkpoints(folder: Path, up_to: int | None = None) -> list[Path]:
    """The ``checkpoint-N`` directories of ``folder``, oldest step first (only N <= ``up_to`` when given)."""
    found = sorted(folder.glob("checkpoint-*"), key=checkpoint_step)
    return found if up_to is None else [c for c in found if checkpoint_step(c) <= up_to]


HARD_NEGATIVES_FILE = "hard_negatives.json"
"""The nearest-wrong-class table of a run (`zsnli.training.hard_negatives`), kept in its output directory."""


def _hard_negatives(preset: Preset, output_dir: Path) -> tuple[dict[str, list[int]] | None, dict[str, str] | None]:
    """`zsnli.training.hard_negatives.hard_negative_table` with all-MiniLM-L6-v2 as published
    (`zsnli.runtime.embedding.pretrained_encoder_dir`, the encoder the shipped run used; not the served
    ``model/embedding``, which is trained from it), when the preset asks, and the encoder that built it
    (``{"dir", "sha256"}``: an input of the data, so the manifest names it)."""
    if preset.zsc_hard_negative_share <= 0:
        return None, None
    from ..runtime.embedding import SentenceEncoder, pretrained_encoder_dir
    from .hard_negatives import hard_negative_table

    encoder_dir = pretrained_encoder_dir()
    encoder = SentenceEncoder(encoder_dir)
    table = hard_negative_table(preset.zsc_sources, encoder, output_dir / HARD_NEGATIVES_FILE)
    return table, {"dir": str(encoder_dir), "sha256": encoder.digest}


def _load_data(preset: Preset, output_dir: Path, distill: Distillation | None = None) -> NliData:
    """Build the preset's data and write the hold-out to ``output_dir`` (rank 0 only).

    NLI rows come from `zsnli.training.nli_data.build_nli_data` (the calibration hold-out is taken from them
    only); the classification pairs of ``preset.zsc_sources`` (`zsnli.training.zsc_nli.build_zsc_pairs`) join
    the train rows after that, shuffled in with ``preset.seed``; then, when ``distill.augment`` > 0, the
    augmented pairs (`zsnli.training.distill.augmented_pairs`, ``augment`` x the gold train pairs).
    """
    data = build_nli_data(list(preset.train_sources), list(preset.validation_sources), preset.n_holdout,
                          preset.seed, preset.max_validation_rows)
    nli_rows = data.train
    if preset.zsc_sources and preset.zsc_ratio > 0:
        hard, hard_encoder = _hard_negatives(preset, output_dir)
        zsc_rows, zsc_counts = build_zsc_pairs(preset.zsc_sources, len(data.train), preset.zsc_ratio, preset.seed,
                                               preset.zsc_negative, texts_of(preset.zsc_exclude),
                                               negated_share=preset.zsc_negated_share,
                                               hard_negatives=hard, hard_share=preset.zsc_hard_negative_share)
        if hard_encoder:
            zsc_counts["hard_negative_encoder"] = hard_encoder
        zsc_counts["excluded_texts_from"] = list(preset.zsc_exclude)
        data.counts["zsc_train"] = zsc_counts
        data.counts["nli_train_rows"] = len(data.train)
        data.train = data.train + zsc_rows
        random.Random(preset.seed).shuffle(data.train)
        data.counts["train_rows"] = len(data.train)
        log.info("classification as NLI: %d pairs from %d sets mixed in (ratio %.2f)", len(zsc_rows),
                 len(preset.zsc_sources), preset.zsc_ratio)
    if distill is not None and distill.augment > 0:
        extra = augmented_pairs(nli_rows, preset.zsc_sources, texts_of(preset.zsc_exclude),
                                round(distill.augment * len(data.train)), preset.seed)
        data.counts["distill_augmented_pairs"] = len(extra)
        data.train = data.train + extra
        data.counts["train_rows"] = len(data.train)
    log.info("data: %s train rows, %s held out, validation %s", len(data.train), len(data.holdout),
             {k: len(v) for k, v in data.validation.items()})
    _write_jsonl(output_dir / "holdout.jsonl", data.holdout)
    return data


SHARED_TOKENISED = "tokenised-for-ranks"
"""Directory under the output directory where rank 0 leaves the tokenised sets for the other ranks (removed at the end)."""


def _teacher_column(data: NliData, train_ds, distill: Distillation, max_length: int):
    """``train_ds`` with `TEACHER_COLUMN` from the teacher's cache (built or resumed now), and the cache's
    sha256 recorded in ``data.counts``."""
    pairs = unique_pairs(data.train)
    cache, record = build_cache(distill, pairs, max_length)
    data.counts["teacher_cache"] = record
    return train_ds.add_column(TEACHER_COLUMN, row_teacher_log_probs(data.train, pairs, cache))


def _prepare(preset: Preset, args, output_dir: Path, distill: Distillation | None = None):
    """Data, tokenizer, model and tokenised sets, with the data built and tokenised ONCE per job.

    Rank 0 goes first (`TrainingArguments.main_process_first`): it builds the data, writes the hold-out, loads
    (downloads) the base model and, when there are other ranks, saves the tokenised sets under
    `SHARED_TOKENISED`; the other ranks then load the base from the cache it filled and memory-map those sets
    (so a job spanning machines needs an output directory they share, as the Trainer's checkpoints do).
    Returns ``(data, tokenizer, model, train_ds, eval_ds, split_names)``; ``data`` is None except on rank 0.
    Raises `zsnli.training.nli_data.DataError` on the other ranks when rank 0 failed to leave the sets.
    """
    import datasets

    shared = output_dir / SHARED_TOKENISED
    with args.main_process_first(local=False, desc="NLI data and tokenisation"):
        if args.process_index == 0:
            shutil.rmtree(shared, ignore_errors=True)  # never a stale copy, even if this rank fails below
            data = _load_data(preset, output_dir, distill)
            tokenizer, model = load_base(preset)
            eval_rows, split_ids, split_names = _eval_set(data.validation)  # eval_ds has a ``split`` index column
            train_ds = _tokenize(data.train, tokenizer, preset.max_length)
            if distill is not None:
                train_ds = _teacher_column(data, train_ds, distill, preset.max_length)
            eval_ds = _tokenize(eval_rows, tokenizer, preset.max_length, split_ids=split_ids)
            if args.world_size > 1:
                datasets.DatasetDict({"train": train_ds, "eval": eval_ds}).save_to_disk(str(shared))
                (shared / "split_names.json").write_text(json.dumps(split_names), encoding="utf-8")
        else:
            if not (shared / "split_names.json").is_file():
                raise DataError(f"rank {args.process_index}: rank 0 left no tokenised data in {shared} "
                                "(see rank 0's error)")
            data = None
            tokenizer, model = load_base(preset)
            sets = datasets.load_from_disk(str(shared))
            train_ds, eval_ds = sets["train"], sets["eval"]
            split_names = json.loads((shared / "split_names.json").read_text(encoding="utf-8"))
    return data, tokenizer, model, train_ds, eval_ds, split_names


def _joined_args(preset: Preset, output_dir: Path, launch):
    """The TrainingArguments of this process, checked to have joined the launched job (`LaunchError` if not)."""
    import torch

    cuda = torch.cuda.is_available()
    per_device = per_device_batch(preset.batch_size, replicas(launch, torch.cuda.device_count() if cuda else 0))
    args = training_arguments(preset, output_dir, cuda, per_device, distributed_cpu=launch.distributed and not cuda)
    if args.world_size != launch.world_size:
        raise LaunchError(f"WORLD_SIZE={launch.world_size} but this process joined a job of {args.world_size}; "
                          "launch with torchrun or accelerate launch, or unset WORLD_SIZE")
    log.info("data parallel: %d process(es), global batch %d = %d per model copy", args.world_size,
             preset.batch_size, per_device)
    return args


def _leave_job(trainer, distributed: bool) -> None:
    """End this rank's part of a launched job: meet the others, drop the DDP wrapper, destroy the process group.

    The DDP wrapper's reducer holds the process group; freed only at interpreter exit, gloo's destructor
    joined a worker thread forever once (measured: rank 1 hung at exit on a loaded machine). So every rank
    first meets the others (no collective in flight), then releases the wrapper while the interpreter is
    whole, then destroys the group.
    """
    if not distributed:
        return
    import gc

    any_rank(False, trainer.args.device)
    trainer.model_wrapped = trainer.model
    trainer.accelerator.free_memory()
    gc.collect()
    leave_process_group()


def _teacher_cache(data: NliData | None) -> dict[str, Any] | None:
    """The teacher cache's record of a distilling run (`build_cache`), else None (also on ranks other than 0,
    which hold no data: a distilling run is one process)."""
    return data.counts.get("teacher_cache") if data is not None else None


def _resume_point(output_dir: Path, resume: bool, settings: dict[str, Any], writer: bool) -> Path | None:
    """The newest checkpoint of ``output_dir`` to resume from (None: the run starts), once the folder's record
    of its settings (`zsnli.training.run_settings.check_run_settings`, ``settings`` from `nli_settings`)
    agrees; ``writer``: this process writes the record. Raises `RunSettingsMismatch` when it does not."""
    checkpoints = sorted_checkpoints(output_dir)
    checkpoint = checkpoints[-1] if (resume and checkpoints) else None
    check_run_settings(output_dir, settings, checkpoint is not None, write=writer)
    return checkpoint


def train(
    preset: Preset,
    model_dir: str | Path,
    output_dir: str | Path,
    manifest_dir: str | Path | None = None,
    resume: bool = True,
    notes: tuple[str, ...] = (),
    reset_best: bool = False,
    distill: Distillation | None = None,
) -> dict[str, Any]:
    """Run the preset and write the model and its manifests.

    ``output_dir`` holds checkpoints (resumed from when ``resume`` and one exists) and the loss log;
    ``model_dir`` receives the weights, config and tokenizer; ``training_manifest.json`` and
    ``data_sources.json`` go to ``manifest_dir`` (default: ``model_dir``'s parent). ``notes`` (e.g. why a resumed run changed ``max_steps``) are recorded in the manifest.
    ``reset_best``: on resume, forget the best checkpoint and metric of earlier processes (the evaluation
    changed since: the stored best metric is not comparable). Under torchrun / accelerate launch every rank
    calls this; ``preset.batch_size`` is the global batch. Returns the manifest dict (an
    empty dict on ranks other than 0, which write nothing). SIGTERM or SIGINT while training writes a
    checkpoint at the end of the current step and returns ``{"interrupted": True, "signal", "steps"}`` without
    the final evaluation, model or manifests (rerun to resume). Raises `RunSettingsMismatch` (`_resume_point`),
    `zsnli.data_parallel.LaunchError` when the batch does not split over the model copies or the process did
    not join the launched job.
    ``distill``: distil a teacher (module docstring); with ``distill.cache_only`` the run stops once the
    cache is complete and returns ``{"teacher_cache": record}`` (`zsnli.training.distill.build_cache`).
    """
    import transformers
    from transformers import DataCollatorWithPadding

    t0 = time.time()
    model_dir, output_dir = Path(model_dir), Path(output_dir)
    manifest_dir = Path(manifest_dir) if manifest_dir else model_dir.parent
    output_dir.mkdir(parents=True, exist_ok=True)
    launch = launch_from_env()
    transformers.set_seed(preset.seed)
    args = _joined_args(preset, output_dir, launch)
    stop = StopRequest()
    data, tokenizer, model, train_ds, eval_ds, split_names = _prepare(preset, args, output_dir, distill)
    if distill is not None and distill.cache_only:
        return {"teacher_cache": data.counts["teacher_cache"]}
    split_ids = np.asarray(eval_ds["split"])

    def compute_metrics(pred) -> dict[str, float]:
        logits = pred.predictions[0] if isinstance(pred.predictions, tuple) else pred.predictions
        return accuracy_by_split(np.asarray(logits), np.asarray(pred.label_ids), split_ids, split_names)

    trainer_class = distill_trainer_class(distill.alpha, distill.temperature) if distill else nli_trainer_class()
    trainer = trainer_class(
        model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
        data_collator=DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8),
        compute_metrics=compute_metrics, callbacks=trainer_callbacks(preset, t0, reset_best, stop),
    )
    settings = nli_settings(preset.max_length, distill, _teacher_cache(data), run_base_identity(preset))
    checkpoint = _resume_point(output_dir, resume, settings, writer=launch.rank == 0)
    resumed_from = checkpoint.name if checkpoint else None
    train_start = time.time()
    with stop_on_signals(stop):
        result = trainer.train(resume_from_checkpoint=str(checkpoint) if checkpoint else None)
    train_seconds = time.time() - train_start
    if stop.signal is not None:
        _leave_job(trainer, launch.distributed)
        if trainer.is_world_process_zero():
            _write_jsonl(output_dir / "loss_log.jsonl", trainer.state.log_history)
        log.warning("stopped by signal %d at step %d after a checkpoint; rerun the same command to resume",
                    stop.signal, trainer.state.global_step)
        return {"interrupted": True, "signal": stop.signal, "steps": trainer.state.global_step} \
            if trainer.is_world_process_zero() else {}
    final_eval = trainer.evaluate()  # a collective: every rank evaluates its share
    _leave_job(trainer, launch.distributed)
    if not trainer.is_world_process_zero():  # under torchrun / accelerate launch only rank 0 writes
        return {}

    shutil.rmtree(output_dir / SHARED_TOKENISED, ignore_errors=True)
    save_model(trainer.model, tokenizer, model_dir, preset.save_dtype)  # the best (load_best_model_at_end)
    _write_jsonl(output_dir / "loss_log.jsonl", trainer.state.log_history)
    figures = _training_figures(trainer, result, final_eval, preset, resumed_from, train_seconds, t0, reset_best, notes)
    teacher = teacher_entry(distill, data.counts["teacher_cache"]) if distill else None
    manifest = build_manifest(preset, data, model_dir, training=figures, teacher=teacher)
    write_manifests(manifest, preset, data, manifest_dir)
    return manifest


def _training_figures(trainer, result, final_eval: dict[str, Any], preset: Preset, resumed_from: str | None,
                      train_seconds: float, t0: float, reset_best: bool, notes: tuple[str, ...]) -> dict[str, Any]:
    """The manifest's ``training`` object, in its key order, read from a finished Trainer (``t0``: the run's
    start, ``time.time()``; ``train_seconds``: this process's time in ``trainer.train``)."""
    state = trainer.state
    losses = [(h.get("step"), h["loss"]) for h in state.log_history if "loss" in h]
    first_step = checkpoint_step(resumed_from) if resumed_from else 0
    steps_this_run = result.global_step - first_step
    return {
        "steps": state.global_step,
        "epochs": state.epoch,
        "final_loss": losses[-1][1] if losses else None,
        "final_loss_step": losses[-1][0] if losses else None,  # the last logged step, not always the last step
        "train_loss_mean": result.training_loss,
        "best_metric": state.best_metric,
        "best_checkpoint": Path(state.best_model_checkpoint).name if state.best_model_checkpoint else None,
        "validation": {k: v for k, v in final_eval.items() if k.startswith("eval_")},
        "wall_seconds": round(time.time() - t0, 1),
        "train_seconds_this_process": round(train_seconds, 1),
        "train_pairs_per_second": round(steps_this_run * preset.batch_size / max(train_seconds, 1e-9), 2),
        "world_size": trainer.args.world_size,
        "per_device_batch_size": trainer.args.per_device_train_batch_size,
        "saved_dtype": preset.save_dtype,
        "resumed_from_checkpoint": resumed_from,
        "best_reset_on_resume": bool(reset_best and resumed_from),
        "steps_this_process": steps_this_run,
        "notes": list(notes),
    }
