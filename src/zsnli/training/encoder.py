"""Fine-tune the cosine term's sentence encoder on zsc-train (``train.py encoder``).

The served score's cosine term embeds the text and each label's hypothesis with
`zsnli.runtime.embedding.SentenceEncoder` (all-MiniLM-L6-v2, mean pooling). This run trains that
encoder so that a text lies nearest its own class's hypothesis: each zsc-train text against the
candidates of its batch (`zsnli.training.encoder_data.batch_candidates`: the batch's distinct
hypotheses plus the other classes of its sets), cross-entropy over scaled cosines
(`in_batch_loss`). Texts and hypotheses go through the same encoder and the same pooling
(`zsnli.runtime.embedding.mean_pool`), so the saved directory is read by the server unchanged.

The run is a Hugging Face `Trainer` (`EncoderTrainer`, a ``compute_loss`` subclass) with the NLI
run's machinery: `zsnli.training.arguments.training_arguments` (evaluation off), the callbacks of
`zsnli.training.callbacks` (wall budget, checkpoint clock, SIGTERM -> checkpoint and stop,
progress), the length-grouped sampler seeded per epoch (`zsnli.training.trainer.global_length_grouped_sampler`),
and resume from the newest checkpoint: a stopped and resumed run gives the losses of a straight one.

Output (``output_dir``): ``run/`` (checkpoints, ``loss_log.jsonl``), ``model/`` (the encoder:
config, weights, tokenizer) and `MANIFEST_NAME` (base, every set with its licence, exclusions,
hyperparameters, steps, the sha256 of every output file and the embedding digest the server checks).

May import `zsnli.training.*`, `zsnli.manifest`, `zsnli.runtime.embedding` and, inside functions,
torch, transformers and datasets.
"""

from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Any

from .. import __version__
from ..manifest import hash_model_dir, write_json
from ..runtime.embedding import embedding_digest
from .arguments import training_arguments
from .callbacks import StopRequest, stop_on_signals, trainer_callbacks
from .data_parallel import LaunchError, launch_from_env
from .encoder_data import NEGATIVES, EncoderCollator, EncoderData, build_encoder_data
from .manifest_writer import base_weights_sha256, environment
from .presets import Preset
from .trainer import global_length_grouped_sampler, save_model
from .zsc_nli import texts_of

log = logging.getLogger(__name__)

DEFAULT_SCALE = 20.0
"""Cosines are multiplied by this before the softmax (a temperature of 0.05): the default ``scale`` of
sentence-transformers' MultipleNegativesRankingLoss, the loss all-MiniLM-L6-v2 was trained with."""

MANIFEST_NAME = "encoder_manifest.json"
RUN_SUBDIR, MODEL_SUBDIR = "run", "model"


def in_batch_loss(text_emb, cand_emb, targets, scale: float = DEFAULT_SCALE, allowed=None):
    """Mean cross-entropy of each text over its candidates' scaled cosines (fp32).

    text_emb: float ``[B, D]`` unit vectors; cand_emb: float ``[C, D]`` unit vectors (each candidate
    hypothesis ONCE: `zsnli.training.encoder_data.batch_candidates`); targets: int ``[B]`` in
    ``[0, C)``; allowed: optional bool ``[B, C]``, False candidates left out of row i's softmax
    (the target must be allowed). ``logits = scale * text_emb @ cand_emb.T``, as in
    sentence-transformers' MultipleNegativesRankingLoss, whose candidates are one per row instead.
    """
    import torch

    logits = scale * text_emb.float() @ cand_emb.float().T
    if allowed is not None:
        logits = logits.masked_fill(~allowed, float("-inf"))
    return torch.nn.functional.cross_entropy(logits, targets)


def _trainer_class():
    from torch.utils.data import SequentialSampler
    from transformers import Trainer

    from ..runtime.embedding import mean_pool

    class EncoderTrainer(Trainer):
        """A Trainer whose loss is `in_batch_loss` of mean-pooled text and hypothesis embeddings.

        ``scale`` and the collator's candidates decide the loss; training batches come from the
        global length-grouped sampler (the NLI run's); there is no evaluation set (``evaluate``
        returns no figures, so the time budget's final evaluation is a no-op).
        """

        scale: float = DEFAULT_SCALE

        def __init__(self, *args, scale: float = DEFAULT_SCALE, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.scale = scale
            self.model_accepts_loss_kwargs = False

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            text = {k: v for k, v in inputs.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
            hyps = {k[4:]: v for k, v in inputs.items() if k.startswith("hyp_")}
            text_emb = mean_pool(model(**text).last_hidden_state, text["attention_mask"])
            hyp_emb = mean_pool(model(**hyps).last_hidden_state, hyps["attention_mask"])
            loss = in_batch_loss(text_emb, hyp_emb, inputs["labels"], self.scale, inputs.get("candidate_mask"))
            return (loss, {"text": text_emb, "hypotheses": hyp_emb}) if return_outputs else loss

        def evaluate(self, eval_dataset=None, ignore_keys=None, metric_key_prefix="eval"):
            if eval_dataset is None and self.eval_dataset is None:
                return {}
            return super().evaluate(eval_dataset, ignore_keys, metric_key_prefix)

        def _get_eval_sampler(self, eval_dataset):
            return None if eval_dataset is None else SequentialSampler(eval_dataset)

        def _get_train_sampler(self, train_dataset=None):
            a = self.args
            lengths = [int(n) for n in self.train_dataset[a.length_column_name]]
            seed = a.data_seed if a.data_seed is not None else a.seed
            return global_length_grouped_sampler(lengths, a.train_batch_size * a.gradient_accumulation_steps, seed)

    return EncoderTrainer


def _datasets(data: EncoderData, tokenizer, max_length: int):
    """The tokenised train `datasets.Dataset` (``input_ids``..., ``hyp``, ``set``, ``length``) and the
    tokenised hypotheses (one dict of lists each)."""
    import datasets

    ds = datasets.Dataset.from_dict({"text": data.texts, "hyp": data.hyp_ids, "set": data.set_ids})

    def encode(batch):
        enc = tokenizer(batch["text"], truncation=True, max_length=max_length)
        enc["length"] = [len(ids) for ids in enc["input_ids"]]
        return enc

    ds = ds.map(encode, batched=True, remove_columns=["text"], desc="tokenize")
    enc = tokenizer(data.hypotheses, truncation=True, max_length=max_length)
    hyp_tokens = [{k: enc[k][i] for k in enc.keys()} for i in range(len(data.hypotheses))]
    return ds, hyp_tokens


def train_encoder(preset: Preset, output_dir: str | Path, scale: float = DEFAULT_SCALE, negatives: str = "batch",
                  resume: bool = True, notes: tuple[str, ...] = ()) -> dict[str, Any]:
    """Fine-tune ``preset.base_model`` on ``preset.zsc_sources``; write ``model/`` and the manifest under ``output_dir``.

    ``preset``: `zsnli.training.presets.sentence_encoder` with the ``--zsc-*`` choices applied
    (sets, exclusions); its ``batch_size`` rows per step, ``max_length`` tokens per text,
    ``eval_steps`` the checkpoint interval in steps. ``scale``: `in_batch_loss`'s; ``negatives``:
    `zsnli.training.encoder_data.NEGATIVES`. ``resume``: continue from the newest checkpoint in
    ``output_dir/run``. Returns the manifest dict, or ``{"interrupted": True, "signal", "steps"}``
    after SIGTERM/SIGINT (a checkpoint is written; rerun to resume; no model or manifest).
    Raises ``ValueError`` for an unknown ``negatives`` or a non-positive ``scale``, `LaunchError`
    under a multi-process launch (in-batch negatives are per process: run it in one),
    `zsnli.training.nli_data.DataError` for unreadable or empty data.
    """
    import torch
    import transformers
    from transformers import AutoModel, AutoTokenizer

    if negatives not in NEGATIVES:
        raise ValueError(f"negatives {negatives!r}: choose from {', '.join(NEGATIVES)}")
    if not scale > 0:
        raise ValueError(f"scale {scale!r}: must be > 0")
    if launch_from_env().distributed:
        raise LaunchError("train.py encoder runs in one process (its in-batch negatives are per batch); "
                          "launch it without torchrun / accelerate launch")
    t0 = time.time()
    output_dir = Path(output_dir)
    run_dir, model_dir = output_dir / RUN_SUBDIR, output_dir / MODEL_SUBDIR
    run_dir.mkdir(parents=True, exist_ok=True)
    transformers.set_seed(preset.seed)
    data = build_encoder_data(preset.zsc_sources, texts_of(preset.zsc_exclude))
    log.info("encoder data: %d texts from %d sets, %d distinct hypotheses", len(data.texts), len(data.set_names),
             len(data.hypotheses))
    tokenizer = AutoTokenizer.from_pretrained(preset.base_model)
    model = AutoModel.from_pretrained(preset.base_model, dtype=torch.float32)
    if preset.freeze_word_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
    train_ds, hyp_tokens = _datasets(data, tokenizer, preset.max_length)
    cuda = torch.cuda.is_available()
    args = training_arguments(preset, run_dir, cuda, preset.batch_size, distributed_cpu=False,
                              eval_strategy="no", load_best_model_at_end=False, metric_for_best_model=None,
                              save_steps=preset.eval_steps, remove_unused_columns=False)
    stop = StopRequest()
    trainer = _trainer_class()(
        model=model, args=args, train_dataset=train_ds, scale=scale,
        data_collator=EncoderCollator(tokenizer, hyp_tokens, data.set_hypotheses, negatives),
        callbacks=trainer_callbacks(preset, t0, False, stop),
    )
    checkpoints = sorted(run_dir.glob("checkpoint-*"), key=lambda p: int(p.name.split("-")[-1]))
    resumed_from = checkpoints[-1].name if (resume and checkpoints) else None
    train_start = time.time()
    with stop_on_signals(stop):
        result = trainer.train(resume_from_checkpoint=str(checkpoints[-1]) if resumed_from else None)
    train_seconds = time.time() - train_start
    _write_log(run_dir, trainer.state.log_history)
    if stop.signal is not None:
        log.warning("stopped by signal %d at step %d after a checkpoint; rerun the same command to resume",
                    stop.signal, trainer.state.global_step)
        return {"interrupted": True, "signal": stop.signal, "steps": trainer.state.global_step}
    save_model(trainer.model, tokenizer, model_dir, preset.save_dtype)
    first_step = int(resumed_from.split("-")[-1]) if resumed_from else 0
    losses = [h["loss"] for h in trainer.state.log_history if "loss" in h]
    figures = {
        "steps": trainer.state.global_step, "epochs": trainer.state.epoch,
        "first_logged_loss": losses[0] if losses else None, "final_loss": losses[-1] if losses else None,
        "train_loss_mean_this_process": result.training_loss, "wall_seconds": round(time.time() - t0, 1),
        "train_seconds_this_process": round(train_seconds, 1),
        "train_texts_per_second": round((result.global_step - first_step) * preset.batch_size / max(train_seconds, 1e-9), 2),
        "bf16_autocast": bool(trainer.args.bf16),
        "resumed_from_checkpoint": resumed_from, "steps_this_process": result.global_step - first_step,
        "notes": list(notes),
    }
    manifest = build_encoder_manifest(preset, data, model_dir, scale, negatives, figures)
    write_json(output_dir / MANIFEST_NAME, manifest)
    return manifest


def _write_log(run_dir: Path, history: list[dict[str, Any]]) -> None:
    with open(run_dir / "loss_log.jsonl", "w", encoding="utf-8") as handle:
        for row in history:
            handle.write(json.dumps(row) + "\n")


_HYPERPARAMETERS = ("base_model", "epochs", "max_steps", "batch_size", "max_length", "lr", "warmup_ratio",
                    "weight_decay", "freeze_word_embeddings", "seed", "mixed_precision", "save_dtype", "time_budget_s", "checkpoint_every_s",
                    "eval_steps", "logging_steps")


def build_encoder_manifest(preset: Preset, data: EncoderData, model_dir: str | Path, scale: float, negatives: str,
                           training: dict[str, Any]) -> dict[str, Any]:
    """The trained encoder's manifest: base, objective, every set with licence and sha256, hyperparameters,
    training figures, environment, and ``files`` (sha256 and bytes of every file in ``model_dir``; what
    ``train.py verify --model-dir DIR --manifest encoder_manifest.json`` checks) with ``embedding_sha256``
    (`zsnli.runtime.embedding.embedding_digest`: the digest calibration.json and the server use)."""
    hp = preset.hyperparameters()
    sources = []
    for src in preset.zsc_sources:
        entry = src.describe()
        entry.update({k: v for k, v in data.counts["sets"][src.name].items() if k != "licence"})
        sources.append(entry)
    return {
        "zsnli_version": __version__,
        "artifact": "sentence-encoder",
        "role": "the sentence encoder of the scoring's cosine term (calibration.json embedding_weight), "
                "fine-tuned by this project (train.py encoder)",
        "base_model": {"id": preset.base_model_id, "revision": preset.base_revision,
                       "weights_sha256": base_weights_sha256(preset.base_model, preset.base_revision),
                       "embedding_sha256": embedding_digest(preset.base_model) if Path(preset.base_model).is_dir() else None,
                       "note": preset.base_model_note},
        "pooling": "mean of the last hidden states over the attention mask, L2-normalised (zsnli.runtime.embedding.mean_pool)",
        "objective": {"loss": "cross-entropy of each text over scale x cosine with its batch's distinct hypotheses "
                              "and its sets' other hypotheses; target: its own class's hypothesis",
                      "scale": scale, "negatives": negatives,
                      "scale_source": "sentence-transformers MultipleNegativesRankingLoss default (20)"
                      if scale == DEFAULT_SCALE else "given on the command line"},
        "data": {"sources": sources, "texts": len(data.texts), "hypotheses": len(data.hypotheses),
                 "excluded_texts_from": list(preset.zsc_exclude),
                 "dropped_overlap": sum(s["dropped_overlap"] for s in data.counts["sets"].values())},
        "hyperparameters": {k: hp[k] for k in _HYPERPARAMETERS},
        "training": training,
        "environment": environment(),
        "files": hash_model_dir(model_dir),
        "embedding_sha256": embedding_digest(model_dir),
    }
