"""Fine-tune an encoder as a 3-way NLI cross-encoder with the Hugging Face `Trainer`.

`plan` builds the whole run description without loading anything heavy
(used by ``--dry-run``); `train` runs it: data (`zsnli.nli_data`) -> a new
3-way head on the base encoder -> Trainer (AdamW, linear decay with warm-up,
dynamic padding, length-grouped batches, periodic evaluation and
checkpoints, best checkpoint kept, resumable) -> the model saved to the
model directory -> the manifests (`zsnli.manifest`).

May import `zsnli.nli_data`, `zsnli.presets`, `zsnli.manifest`,
`zsnli.evaluation` (the periodic evaluation's metric) and, inside
functions, torch, transformers and datasets.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__
from .evaluation import accuracy_by_split
from .manifest import build_manifest, write_manifests
from .nli_data import LABELS, NliData, build_nli_data
from .presets import Preset

log = logging.getLogger(__name__)

ID2LABEL = {i: name for i, name in enumerate(LABELS)}
LABEL2ID = {name: i for i, name in ID2LABEL.items()}


def plan(preset: Preset, model_dir: str | Path, output_dir: str | Path) -> dict[str, Any]:
    """Describe the run without downloading or loading anything.

    Returns a JSON-ready dict: preset hyperparameters, data sources with roles,
    the output paths and the manifest skeleton the run will fill in.
    """
    hp = preset.hyperparameters()
    return {
        "preset": preset.name,
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
            "training": {"steps": None, "epochs": None, "final_loss": None, "best_metric": None,
                         "validation": None, "wall_seconds": None, "train_pairs_per_second": None},
            "environment": {"device": None, "torch": None, "transformers": None},
            "files": None,
        },
    }


def _tokenize(rows: list[dict[str, str]], tokenizer, max_length: int):
    import datasets

    ds = datasets.Dataset.from_dict(
        {
            "premise": [r["premise"] for r in rows],
            "hypothesis": [r["hypothesis"] for r in rows],
            "labels": [LABEL2ID[r["label"]] for r in rows],
        }
    )

    def encode(batch):
        enc = tokenizer(batch["premise"], batch["hypothesis"], truncation=True, max_length=max_length)
        enc["length"] = [len(ids) for ids in enc["input_ids"]]
        return enc

    return ds.map(encode, batched=True, remove_columns=["premise", "hypothesis"], desc="tokenize")


def _eval_set(validation: dict[str, list[dict[str, str]]]) -> tuple[list[dict[str, str]], np.ndarray, list[str]]:
    names = list(validation)
    rows: list[dict[str, str]] = []
    split_ids: list[int] = []
    for i, name in enumerate(names):
        rows.extend(validation[name])
        split_ids.extend([i] * len(validation[name]))
    return rows, np.asarray(split_ids), names


def _sequential_eval_trainer_class():
    from torch.utils.data import SequentialSampler
    from transformers import Trainer

    class SequentialEvalTrainer(Trainer):
        """A Trainer whose evaluation keeps dataset order.

        With ``train_sampling_strategy="group_by_length"`` the stock Trainer
        (transformers 5.x) also length-groups the *evaluation* sampler, which
        shuffles predictions against any per-row bookkeeping; `accuracy_by_split`
        relies on dataset order, so evaluation here is sequential.
        """

        def _get_eval_sampler(self, eval_dataset):
            if eval_dataset is None:
                return None
            return SequentialSampler(eval_dataset)

    return SequentialEvalTrainer


def _callbacks(preset: Preset, t0: float, reset_best: bool) -> list:
    """The Trainer callbacks: the time budget, and forgetting a resumed best metric when ``reset_best``."""
    from transformers import TrainerCallback

    class TimeBudget(TrainerCallback):
        """Stop (after a checkpoint) when this process has trained longer than the budget."""

        def on_step_end(self, args, state, control, **kwargs):
            if preset.time_budget_s and time.time() - t0 > preset.time_budget_s:
                log.warning("time budget of %.0f s reached at step %d: stopping", preset.time_budget_s, state.global_step)
                control.should_training_stop = True
                control.should_save = True
                control.should_evaluate = True
            return control

    class ResetBest(TrainerCallback):
        """Drop the resumed state's best metric and checkpoint (see ``reset_best`` of `train`)."""

        def on_train_begin(self, args, state, control, **kwargs):
            if state.best_metric is not None or state.best_model_checkpoint is not None:
                log.warning("forgetting the resumed best metric %s (%s)", state.best_metric, state.best_model_checkpoint)
            state.best_metric = None
            state.best_model_checkpoint = None
            state.best_global_step = None
            return control

    return [TimeBudget(), *([ResetBest()] if reset_best else [])]


def _training_arguments(preset: Preset, output_dir: Path, cuda: bool):
    """`transformers.TrainingArguments` of the preset (bf16/TF32 and pinned memory only on CUDA)."""
    from transformers import TrainingArguments

    return TrainingArguments(
        output_dir=str(output_dir),
        num_train_epochs=preset.epochs,
        max_steps=preset.max_steps,
        per_device_train_batch_size=preset.batch_size,
        per_device_eval_batch_size=max(64, preset.batch_size),
        learning_rate=preset.lr,
        warmup_steps=preset.warmup_ratio,
        weight_decay=preset.weight_decay,
        lr_scheduler_type="linear",
        bf16=cuda,
        tf32=True if cuda else None,
        train_sampling_strategy="group_by_length",
        length_column_name="length",
        eval_strategy="steps",
        eval_steps=preset.eval_steps,
        save_strategy="steps",
        save_steps=preset.eval_steps,
        save_total_limit=2,
        load_best_model_at_end=True,
        metric_for_best_model="mean_accuracy",
        greater_is_better=True,
        logging_steps=25,
        logging_first_step=True,
        seed=preset.seed,
        data_seed=preset.seed,
        report_to="none",
        dataloader_num_workers=0,
        dataloader_pin_memory=cuda,  # on CPU pinning does nothing but warn at every evaluation
    )


def _load_base(preset: Preset):
    """Tokenizer and base encoder with a new 3-way head in `ID2LABEL` order (fp32 for training)."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(preset.base_model, revision=preset.base_revision)
    model = AutoModelForSequenceClassification.from_pretrained(
        preset.base_model,
        revision=preset.base_revision,
        num_labels=3,
        id2label=ID2LABEL,
        label2id=LABEL2ID,
        ignore_mismatched_sizes=True,
        dtype=torch.float32,
    )
    if preset.freeze_word_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
    return tokenizer, model


def save_model(model, tokenizer, model_dir: str | Path, save_dtype: str) -> None:
    """Replace the files directly in ``model_dir`` by ``model`` (in ``save_dtype``) and ``tokenizer``.

    Subdirectories (the reused ``embedding/``) are kept. Every written file
    gets mode 644, like the rest of the checkout (safetensors writes 600).
    """
    import torch

    model_dir = Path(model_dir)
    model_dir.mkdir(parents=True, exist_ok=True)
    for old in model_dir.iterdir():
        if old.is_file():
            old.unlink()
    model.to(getattr(torch, save_dtype)).save_pretrained(model_dir, safe_serialization=True)
    tokenizer.save_pretrained(model_dir)
    for path in model_dir.iterdir():
        if path.is_file():
            os.chmod(path, 0o644)


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


def _load_data(preset: Preset, output_dir: Path) -> NliData:
    """Build the preset's data (`zsnli.nli_data.build_nli_data`); rank 0 writes the hold-out to ``output_dir``."""
    data = build_nli_data(list(preset.train_sources), list(preset.validation_sources), preset.n_holdout,
                          preset.seed, preset.max_validation_rows)
    log.info("data: %s train rows, %s held out, validation %s", len(data.train), len(data.holdout),
             {k: len(v) for k, v in data.validation.items()})
    if int(os.environ.get("RANK", "0")) == 0:
        _write_jsonl(output_dir / "holdout.jsonl", data.holdout)
    return data


def train(
    preset: Preset,
    model_dir: str | Path,
    output_dir: str | Path,
    manifest_dir: str | Path | None = None,
    resume: bool = True,
    notes: tuple[str, ...] = (),
    reset_best: bool = False,
) -> dict[str, Any]:
    """Run the preset and write the model and its manifests.

    ``output_dir`` holds checkpoints (resumed from when ``resume`` and one
    exists) and the loss log; ``model_dir`` receives ``model.safetensors``,
    ``config.json`` and the tokenizer files; ``training_manifest.json`` and
    ``data_sources.json`` go to ``manifest_dir`` (default: the parent of
    ``model_dir``). ``notes`` (e.g. why a resumed run changed ``max_steps``)
    are recorded in the manifest. ``reset_best``: on resume, forget the best
    checkpoint and metric recorded by earlier processes, so the model saved
    is the best among evaluations made by this process (use it when the
    evaluation changed since those checkpoints were written: the stored
    best metric is not comparable). Returns the manifest dict (an empty dict
    on ranks other than 0 of a multi-process run, which write nothing).
    """
    import torch
    import transformers
    from transformers import DataCollatorWithPadding

    t0 = time.time()
    model_dir, output_dir = Path(model_dir), Path(output_dir)
    manifest_dir = Path(manifest_dir) if manifest_dir else model_dir.parent
    output_dir.mkdir(parents=True, exist_ok=True)
    transformers.set_seed(preset.seed)

    data = _load_data(preset, output_dir)
    tokenizer, model = _load_base(preset)
    train_ds = _tokenize(data.train, tokenizer, preset.max_length)
    eval_rows, split_ids, split_names = _eval_set(data.validation)
    eval_ds = _tokenize(eval_rows, tokenizer, preset.max_length)

    def compute_metrics(pred) -> dict[str, float]:
        logits = pred.predictions[0] if isinstance(pred.predictions, tuple) else pred.predictions
        return accuracy_by_split(np.asarray(logits), np.asarray(pred.label_ids), split_ids, split_names)

    args = _training_arguments(preset, output_dir, torch.cuda.is_available())
    trainer = _sequential_eval_trainer_class()(
        model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
        data_collator=DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8),
        compute_metrics=compute_metrics, callbacks=_callbacks(preset, t0, reset_best),
    )
    checkpoints = sorted(output_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    resumed_from = checkpoints[-1].name if (resume and checkpoints) else None
    train_start = time.time()
    result = trainer.train(resume_from_checkpoint=str(checkpoints[-1]) if resumed_from else None)
    train_seconds = time.time() - train_start
    final_eval = trainer.evaluate()
    if not trainer.is_world_process_zero():  # under torchrun / accelerate launch only rank 0 writes
        return {}

    save_model(trainer.model, tokenizer, model_dir, preset.save_dtype)  # the best (load_best_model_at_end)
    _write_jsonl(output_dir / "loss_log.jsonl", trainer.state.log_history)
    figures = _training_figures(trainer, result, final_eval, preset, resumed_from, train_seconds)
    figures.update({"wall_seconds": round(time.time() - t0, 1), "best_reset_on_resume": bool(reset_best and resumed_from),
                    "notes": list(notes)})
    manifest = build_manifest(preset, data, model_dir, training=_ordered(figures))
    write_manifests(manifest, preset, data, manifest_dir)
    return manifest


_FIGURE_ORDER = ("steps", "epochs", "final_loss", "train_loss_mean", "best_metric", "best_checkpoint", "validation",
                 "wall_seconds", "train_seconds_this_process", "train_pairs_per_second", "world_size", "saved_dtype",
                 "resumed_from_checkpoint", "best_reset_on_resume", "steps_this_process", "notes")
"""Key order of the manifest's ``training`` object."""


def _ordered(figures: dict[str, Any]) -> dict[str, Any]:
    return {k: figures[k] for k in _FIGURE_ORDER}


def _training_figures(trainer, result, final_eval: dict[str, Any], preset: Preset, resumed_from: str | None,
                      train_seconds: float) -> dict[str, Any]:
    """The manifest's ``training`` figures read from a finished Trainer (all but wall time, reset flag, notes)."""
    state = trainer.state
    losses = [h["loss"] for h in state.log_history if "loss" in h]
    first_step = int(resumed_from.split("-")[-1]) if resumed_from else 0
    steps_this_run = result.global_step - first_step
    world = trainer.args.world_size
    return {
        "steps": state.global_step,
        "epochs": state.epoch,
        "final_loss": losses[-1] if losses else None,
        "train_loss_mean": result.training_loss,
        "best_metric": state.best_metric,
        "best_checkpoint": Path(state.best_model_checkpoint).name if state.best_model_checkpoint else None,
        "validation": {k: v for k, v in final_eval.items() if k.startswith("eval_")},
        "train_seconds_this_process": round(train_seconds, 1),
        "train_pairs_per_second": round(steps_this_run * preset.batch_size * world / max(train_seconds, 1e-9), 2),
        "world_size": world,
        "saved_dtype": preset.save_dtype,
        "resumed_from_checkpoint": resumed_from,
        "steps_this_process": steps_this_run,
    }
