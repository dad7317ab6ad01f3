"""Fine-tune an encoder as a 3-way NLI cross-encoder with the Hugging Face `Trainer`.

`plan` builds the whole run description without loading anything heavy
(used by ``--dry-run``); `train` runs it: data (`zsnli.training.nli_data`) -> a new
3-way head on the base encoder -> Trainer (AdamW, linear decay with warm-up,
dynamic padding, length-grouped batches, periodic evaluation and
checkpoints, best checkpoint kept, resumable) -> the model saved to the
model directory -> the manifests (`zsnli.manifest`).

Under ``torchrun`` / ``accelerate launch`` (N processes, one per device;
`zsnli.training.data_parallel`) the preset's batch stays the global batch (each
process gets batch/N), rank 0 alone builds and tokenises the data (the
others load its saved copy), only rank 0 writes the hold-out, the logs, the
model and the manifests, and the time-budget stop is one decision for all
ranks. The run is then step for step the single-process run at the same
global batch: same examples per optimiser step, same mean loss and gradient.

May import `zsnli.training.nli_data`, `zsnli.training.presets`, `zsnli.manifest`,
`zsnli.training.evaluation` (the periodic evaluation's metric), `zsnli.training.data_parallel`
and, inside functions, torch, transformers, datasets, `zsnli.runtime.embedding` and
`zsnli.training.hard_negatives` (the hard-negative table, only when the preset asks for one).
"""

from __future__ import annotations

import json
import logging
import os
import random
import shutil
import time
from pathlib import Path
from typing import Any

import numpy as np

from .. import __version__
from .arguments import training_arguments
from .callbacks import StopRequest, stop_on_signals, trainer_callbacks
from .data_parallel import LaunchError, any_rank, launch_from_env, leave_process_group, per_device_batch, replicas
from .evaluation import accuracy_by_split
from .manifest_writer import build_manifest, write_manifests
from .nli_data import LABELS, DataError, NliData, build_nli_data
from .presets import Preset
from .zsc_nli import NOT_ENTAILMENT, build_zsc_pairs, texts_of

log = logging.getLogger(__name__)

ID2LABEL = {i: name for i, name in enumerate(LABELS)}
LABEL2ID = {name: i for i, name in ID2LABEL.items()}
NOT_ENTAILMENT_ID = len(LABELS)
"""Training target id of a "not entailment" pair (`zsnli.training.zsc_nli.NOT_ENTAILMENT`); never a model label."""
TARGET_IDS = {**LABEL2ID, NOT_ENTAILMENT: NOT_ENTAILMENT_ID}


def plan(preset: Preset, model_dir: str | Path, output_dir: str | Path) -> dict[str, Any]:
    """Describe the run without downloading or loading anything.

    Returns a JSON-ready dict: preset hyperparameters, data sources with roles,
    the output paths and the manifest skeleton the run will fill in.
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
            "training": {"steps": None, "epochs": None, "final_loss": None, "best_metric": None,
                         "validation": None, "wall_seconds": None, "train_pairs_per_second": None},
            "environment": {"device": None, "torch": None, "transformers": None},
            "files": None,
        },
    }


def _tokenize(rows: list[dict[str, str]], tokenizer, max_length: int, split_ids: list[int] | None = None):
    """A `datasets.Dataset` of the encoded pairs with ``labels``, ``length`` (tokens) and, when given, ``split``."""
    import datasets

    columns = {
        "premise": [r["premise"] for r in rows],
        "hypothesis": [r["hypothesis"] for r in rows],
        "labels": [TARGET_IDS[r["label"]] for r in rows],
    }
    if split_ids is not None:
        columns["split"] = list(split_ids)
    ds = datasets.Dataset.from_dict(columns)

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


def global_length_grouped_sampler(lengths: list[int], global_batch: int, seed: int):
    """Length-grouped order of the whole dataset, the same on every rank and for any number of ranks.

    transformers' `LengthGroupedSampler` groups by the batch it is given (the
    per-device one under the Trainer) and draws its permutation from the
    global torch RNG, which dropout advances differently on each rank. Here
    the groups are cut for the GLOBAL batch and the permutation comes from a
    generator seeded with ``seed + epoch`` (the Trainer calls ``set_epoch``).
    accelerate then deals consecutive per-device batches to the ranks in
    turn, so optimiser step k sees examples ``[k*B, (k+1)*B)`` of this order
    whatever the world size: a 2-process run matches a 1-process run.
    """
    import torch
    from transformers.trainer_pt_utils import LengthGroupedSampler

    class GlobalLengthGroupedSampler(LengthGroupedSampler):
        def __init__(self) -> None:
            super().__init__(global_batch, lengths=lengths, generator=torch.Generator())
            self.set_epoch(0)

        def set_epoch(self, epoch: int) -> None:
            self.generator.manual_seed(seed + int(epoch))

    return GlobalLengthGroupedSampler()


def nli_loss(logits, labels):
    """Mean negative log-likelihood of 3-way NLI logits with "not entailment" targets allowed.

    ``logits``: float ``[B, 3]`` in `ID2LABEL` order; ``labels``: int ``[B]``
    with 0-2 the usual classes and `NOT_ENTAILMENT_ID` (3) meaning
    "neutral or contradiction", scored as ``-log(p(neutral) + p(contradiction))``
    (the 2-way target of zero-shot classifiers trained on classification data,
    e.g. the zeroshot-classifier v2.0 recipe, learned by a 3-way head without
    choosing which of the two). With no label 3 in the batch this is exactly
    the mean cross-entropy the model's own head computes. Computed in fp32.
    """
    import torch

    log_probs = torch.log_softmax(logits.float(), dim=-1)
    picked = log_probs.gather(1, labels.clamp(max=NOT_ENTAILMENT_ID - 1).unsqueeze(1)).squeeze(1)
    not_entailment = torch.logsumexp(log_probs[:, LABEL2ID["neutral"]:], dim=-1)
    return -torch.where(labels == NOT_ENTAILMENT_ID, not_entailment, picked).mean()


def _trainer_class():
    from torch.utils.data import SequentialSampler
    from transformers import Trainer

    class NliTrainer(Trainer):
        """A Trainer with sequential evaluation, global-batch length grouping and a plain mean loss.

        * Evaluation keeps dataset order: with ``train_sampling_strategy=
          "group_by_length"`` the stock Trainer (transformers 5.x) also
          length-groups the *evaluation* sampler, which shuffles predictions
          against any per-row bookkeeping; `accuracy_by_split` relies on order.
        * Training batches come from `global_length_grouped_sampler`.
        * The loss is `nli_loss` (label 3 = "not entailment"; plain
          cross-entropy otherwise).
        * ``model_accepts_loss_kwargs = False``: the sequence-classification
          heads take ``**kwargs`` but return the MEAN cross-entropy of their
          batch and ignore ``num_items_in_batch``. Left True, the Trainer
          (``average_tokens_across_devices``, default on) multiplies that mean
          by the world size, so DDP's gradient average becomes N times the
          global-batch gradient and the logged loss N times the true one.
          False gives the mean over each rank's equal share, which DDP
          averages into the global-batch mean.
        """

        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.model_accepts_loss_kwargs = False

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            inputs = dict(inputs)
            labels = inputs.pop("labels")
            outputs = model(**inputs)
            loss = nli_loss(outputs.logits, labels)
            return (loss, outputs) if return_outputs else loss

        def _get_eval_sampler(self, eval_dataset):
            if eval_dataset is None:
                return None
            return SequentialSampler(eval_dataset)

        def _get_train_sampler(self, train_dataset=None):
            # called with the column-pruned copy (no "length"); the rows and their order are train_dataset's
            a = self.args
            lengths = [int(n) for n in self.train_dataset[a.length_column_name]]
            global_batch = a.train_batch_size * a.world_size * a.gradient_accumulation_steps
            seed = a.data_seed if a.data_seed is not None else a.seed
            return global_length_grouped_sampler(lengths, global_batch, seed)

    return NliTrainer


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


COMPUTE_DTYPE = "float32"
"""The dtype written as ``config.json``'s ``dtype``: the one the server computes in on CPU, whatever the
weights are stored in. transformers 5 loads a model in its config's dtype by default, so
``pipeline("zero-shot-classification", model=DIR)`` written plainly computes as the server does (fp16
storage with ``"dtype": "float16"`` made it compute in fp16: 1e-4 to 1e-2 from the server's answers). The
storage dtype is the manifest's ``training.saved_dtype``."""


def save_model(model, tokenizer, model_dir: str | Path, save_dtype: str) -> None:
    """Replace the files directly in ``model_dir`` by ``model`` (weights stored in ``save_dtype``) and
    ``tokenizer``; ``config.json``'s ``dtype`` is `COMPUTE_DTYPE` (the dtype a plain ``from_pretrained`` /
    ``pipeline`` then loads it in), not the storage dtype.

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
    config_path = model_dir / "config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["dtype"] = COMPUTE_DTYPE
    config_path.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")
    tokenizer.save_pretrained(model_dir)
    for path in model_dir.iterdir():
        if path.is_file():
            os.chmod(path, 0o644)


def _write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    with open(path, "w", encoding="utf-8") as handle:
        for row in rows:
            handle.write(json.dumps(row, ensure_ascii=False) + "\n")


HARD_NEGATIVES_FILE = "hard_negatives.json"
"""The nearest-wrong-class table of a run (`zsnli.training.hard_negatives`), kept in its output directory."""


def _hard_negatives(preset: Preset, output_dir: Path) -> tuple[dict[str, list[int]] | None, dict[str, str] | None]:
    """`zsnli.training.hard_negatives.hard_negative_table` with the cosine term's encoder, when the preset
    asks, and the encoder that built it (``{"dir", "sha256"}``: an input of the data, so the manifest names it)."""
    if preset.zsc_hard_negative_share <= 0:
        return None, None
    from ..runtime.embedding import SentenceEncoder, default_embedding_dir
    from .hard_negatives import hard_negative_table

    encoder_dir = default_embedding_dir()
    encoder = SentenceEncoder(encoder_dir)
    table = hard_negative_table(preset.zsc_sources, encoder, output_dir / HARD_NEGATIVES_FILE)
    return table, {"dir": str(encoder_dir), "sha256": encoder.digest}


def _load_data(preset: Preset, output_dir: Path) -> NliData:
    """Build the preset's data and write the hold-out to ``output_dir`` (rank 0 only).

    NLI rows come from `zsnli.training.nli_data.build_nli_data` (the calibration
    hold-out is taken from them only); the classification pairs of
    ``preset.zsc_sources`` (`zsnli.training.zsc_nli.build_zsc_pairs`) join the train
    rows after that, shuffled in with ``preset.seed``.
    """
    data = build_nli_data(list(preset.train_sources), list(preset.validation_sources), preset.n_holdout,
                          preset.seed, preset.max_validation_rows)
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
    log.info("data: %s train rows, %s held out, validation %s", len(data.train), len(data.holdout),
             {k: len(v) for k, v in data.validation.items()})
    _write_jsonl(output_dir / "holdout.jsonl", data.holdout)
    return data


SHARED_TOKENISED = "tokenised-for-ranks"
"""Directory under the output directory where rank 0 leaves the tokenised sets for the other ranks (removed at the end)."""


def _tokenised_sets(data: NliData, tokenizer, preset: Preset):
    """Train and evaluation `datasets.Dataset`s (the latter with a ``split`` index column) and the split names."""
    eval_rows, split_ids, split_names = _eval_set(data.validation)
    train_ds = _tokenize(data.train, tokenizer, preset.max_length)
    eval_ds = _tokenize(eval_rows, tokenizer, preset.max_length, split_ids=split_ids.tolist())
    return train_ds, eval_ds, split_names


def _prepare(preset: Preset, args, output_dir: Path):
    """Data, tokenizer, model and tokenised sets, with the data built and tokenised ONCE per job.

    Rank 0 goes first (`TrainingArguments.main_process_first`): it builds
    the data, writes the hold-out, loads (downloads) the base model and,
    when there are other ranks, saves the tokenised sets under
    `SHARED_TOKENISED`; the other ranks then load the base from the cache
    it filled and memory-map those sets (so a job spanning machines needs
    an output directory they share, as the Trainer's checkpoints do).
    Returns ``(data, tokenizer, model, train_ds, eval_ds, split_names)``;
    ``data`` is None except on rank 0. Raises `zsnli.training.nli_data.DataError` on
    the other ranks when rank 0 failed to leave the sets.
    """
    import datasets

    shared = output_dir / SHARED_TOKENISED
    with args.main_process_first(local=False, desc="NLI data and tokenisation"):
        if args.process_index == 0:
            shutil.rmtree(shared, ignore_errors=True)  # never a stale copy, even if this rank fails below
            data = _load_data(preset, output_dir)
            tokenizer, model = _load_base(preset)
            train_ds, eval_ds, split_names = _tokenised_sets(data, tokenizer, preset)
            if args.world_size > 1:
                datasets.DatasetDict({"train": train_ds, "eval": eval_ds}).save_to_disk(str(shared))
                (shared / "split_names.json").write_text(json.dumps(split_names), encoding="utf-8")
        else:
            if not (shared / "split_names.json").is_file():
                raise DataError(f"rank {args.process_index}: rank 0 left no tokenised data in {shared} "
                                "(see rank 0's error)")
            data = None
            tokenizer, model = _load_base(preset)
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

    The DDP wrapper's reducer holds the process group; freed only at
    interpreter exit, gloo's destructor joined a worker thread forever once
    (measured: rank 1 hung at exit on a loaded machine). So every rank
    first meets the others (no collective in flight), then releases the
    wrapper while the interpreter is whole, then destroys the group.
    """
    if not distributed:
        return
    import gc

    any_rank(False, trainer.args.device)
    trainer.model_wrapped = trainer.model
    trainer.accelerator.free_memory()
    gc.collect()
    leave_process_group()


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
    best metric is not comparable). Under torchrun / accelerate launch every
    rank calls this; ``preset.batch_size`` is the global batch. Returns the
    manifest dict (an empty dict on ranks other than 0, which write nothing).
    SIGTERM or SIGINT while training writes a checkpoint at the end of the
    current step and returns ``{"interrupted": True, "signal", "steps"}``
    without the final evaluation, model or manifests (rerun to resume).
    Raises `zsnli.data_parallel.LaunchError` when the batch does not split
    over the model copies or the process did not join the launched job.
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
    data, tokenizer, model, train_ds, eval_ds, split_names = _prepare(preset, args, output_dir)
    split_ids = np.asarray(eval_ds["split"])

    def compute_metrics(pred) -> dict[str, float]:
        logits = pred.predictions[0] if isinstance(pred.predictions, tuple) else pred.predictions
        return accuracy_by_split(np.asarray(logits), np.asarray(pred.label_ids), split_ids, split_names)

    trainer = _trainer_class()(
        model=model, args=args, train_dataset=train_ds, eval_dataset=eval_ds,
        data_collator=DataCollatorWithPadding(tokenizer, pad_to_multiple_of=8),
        compute_metrics=compute_metrics, callbacks=trainer_callbacks(preset, t0, reset_best, stop),
    )
    checkpoints = sorted(output_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    resumed_from = checkpoints[-1].name if (resume and checkpoints) else None
    train_start = time.time()
    with stop_on_signals(stop):
        result = trainer.train(resume_from_checkpoint=str(checkpoints[-1]) if resumed_from else None)
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
    figures = _training_figures(trainer, result, final_eval, preset, resumed_from, train_seconds)
    figures.update({"wall_seconds": round(time.time() - t0, 1), "best_reset_on_resume": bool(reset_best and resumed_from),
                    "notes": list(notes)})
    manifest = build_manifest(preset, data, model_dir, training=_ordered(figures))
    write_manifests(manifest, preset, data, manifest_dir)
    return manifest


_FIGURE_ORDER = ("steps", "epochs", "final_loss", "train_loss_mean", "best_metric", "best_checkpoint", "validation",
                 "wall_seconds", "train_seconds_this_process", "train_pairs_per_second", "world_size",
                 "per_device_batch_size", "saved_dtype",
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
        "train_pairs_per_second": round(steps_this_run * preset.batch_size / max(train_seconds, 1e-9), 2),
        "world_size": world,
        "per_device_batch_size": trainer.args.per_device_train_batch_size,
        "saved_dtype": preset.save_dtype,
        "resumed_from_checkpoint": resumed_from,
        "steps_this_process": steps_this_run,
    }
