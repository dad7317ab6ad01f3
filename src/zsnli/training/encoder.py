"""Fine-tune the cosine term's sentence encoder on zsc-train (``train.py encoder``).

The served score's cosine term embeds the text and each label's hypothesis with
`zsnli.runtime.embedding.SentenceEncoder` (all-MiniLM-L6-v2, mean pooling). This run trains that
encoder so that a text lies nearest its own class's hypothesis: each zsc-train text against the
candidates of its batch (`zsnli.training.encoder_data.batch_candidates`: the batch's distinct
hypotheses plus the other classes of its sets), cross-entropy over scaled cosines
(`in_batch_loss`). Texts and hypotheses go through the same encoder and the same pooling
(`zsnli.runtime.embedding.mean_pool`), so the saved directory is read by the server unchanged.

``loss="margin-mse"`` (or ``"mixed"``: in-batch plus a weighted Margin-MSE term) trains it on a teacher NLI
cross-encoder's scores instead (`margin_mse_loss`, cross-architecture distillation, Hofstätter et al. 2020):
the teacher's log-probabilities of each text with each hypothesis of its own set come from
`zsnli.training.distill.build_cache` (the NLI run's cache machinery, resumable, `CacheMismatch` for another
teacher), the pairs and per-example scores from `zsnli.training.encoder_data.own_set_pairs` /
`own_set_scores`, and the manifest records the teacher (`zsnli.training.distill.teacher_entry`); the teacher's
side of such a run (loss checks, scores, recorded settings) is `zsnli.training.encoder_teacher`.

The run is a Hugging Face `Trainer` (`EncoderTrainer`, a ``compute_loss`` subclass) with the NLI
run's machinery: `zsnli.training.arguments.training_arguments` (evaluation off), the callbacks of
`zsnli.training.callbacks` (wall budget, checkpoint clock, SIGTERM -> checkpoint and stop,
progress), the length-grouped sampler seeded per epoch (`zsnli.training.trainer.global_length_grouped_sampler`),
and resume from the newest checkpoint: a stopped and resumed run gives the losses of a straight one.

Output (``output_dir``): ``run/`` (checkpoints, ``loss_log.jsonl``), ``model/`` (the encoder:
config, weights, tokenizer) and `MANIFEST_NAME` (base, every set with its licence, exclusions,
hyperparameters, steps, the sha256 of every output file and the embedding digest the server checks).

May import `zsnli.training.*` (`distill` and `encoder_teacher` for a teacher), `zsnli.manifest`,
`zsnli.runtime.embedding` and, inside functions, torch, transformers and datasets.
"""

from __future__ import annotations

import json
import logging
import math
import time
from pathlib import Path
from typing import Any

from .. import __version__
from ..manifest import hash_model_dir, sha256_file, write_json
from ..runtime.embedding import embedding_digest, encoder_window
from .arguments import training_arguments
from .callbacks import StopRequest, stop_on_signals, trainer_callbacks
from .data_parallel import LaunchError, launch_from_env
from .distill import Distillation, teacher_entry
from .encoder_data import NEGATIVES, EncoderCollator, EncoderData, build_encoder_data
from .encoder_teacher import MARGIN_TEXT, check_loss, teacher_scores, teacher_settings
from .manifest_writer import ENCODER_MANIFEST_NAME, TEACHER_KEY, base_weights_sha256, environment, run_base_identity
from .presets import Preset
from .run_settings import check_run_settings, encoder_settings
from .trainer import checkpoint_step, global_length_grouped_sampler, save_model, sorted_checkpoints
from .zsc_nli import texts_of

log = logging.getLogger(__name__)

DEFAULT_SCALE = 20.0
"""Cosines are multiplied by this before the softmax (a temperature of 0.05): the default ``scale`` of
sentence-transformers' MultipleNegativesRankingLoss, the loss all-MiniLM-L6-v2 was trained with."""

MANIFEST_NAME = ENCODER_MANIFEST_NAME
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


def margin_mse_loss(text_emb, cand_emb, targets, teacher, scale: float = DEFAULT_SCALE, allowed=None):
    """Margin-MSE of the student's scaled cosine margins against the teacher's score margins (fp32 scalar).

    Hofstätter et al. 2020, "Improving Efficient Neural Ranking Models with Cross-Architecture Knowledge
    Distillation" (arXiv:2010.02666): for text x with its gold hypothesis h+ and each negative h-,
    ``(scale * (cos(x, h+) - cos(x, h-)) - (t(x, h+) - t(x, h-)))^2``, averaged over every (x, h-) pair of the
    batch. ``t`` is the teacher cross-encoder's pair score, ``log p(entailment) - log p(contradiction)``
    (`zsnli.training.distill.teacher_pair_scores`, equal to ``z_e - z_c`` of its logits), in nats; ``scale``
    (the softmax scale of `in_batch_loss`) puts cosines, in [-1, 1], on the student's logit scale, so the
    same encoder scores serve both losses. Only margins matter: neither side's per-text offset is learnt.

    text_emb: float ``[B, D]`` unit vectors; cand_emb: float ``[C, D]`` unit vectors (the batch's candidates,
    `zsnli.training.encoder_data.batch_candidates`); targets: int ``[B]``, each row's h+ in ``[0, C)``;
    teacher: float ``[B, C]`` teacher scores t(x_i, c), NaN where the teacher did not score the pair
    (`zsnli.training.encoder_data.teacher_matrix`: other sets' hypotheses); allowed: optional bool ``[B, C]``
    (`in_batch_loss`'s). The negatives of row i are the candidates other than its target with a finite teacher
    score and allowed. A batch without one gives 0 (still attached to the graph).

    Lives beside `in_batch_loss` rather than in `zsnli.training.distill` because it is an objective of the
    encoder's batches (cosines over `batch_candidates`); distill.py holds the teacher's cache and the NLI
    student's loss, and the run's teacher side (its pairs' scores, the settings recorded) is
    `zsnli.training.encoder_teacher`.
    """
    import torch

    cos = text_emb.float() @ cand_emb.float().T
    rows = torch.arange(cos.shape[0], device=cos.device)
    teacher = teacher.to(device=cos.device, dtype=torch.float32)
    student_margin = scale * (cos[rows, targets].unsqueeze(1) - cos)
    teacher_margin = teacher[rows, targets].unsqueeze(1) - teacher
    negative = torch.isfinite(teacher_margin)
    negative[rows, targets] = False
    if allowed is not None:
        negative &= allowed.to(cos.device)
    if not bool(negative.any()):
        return cos.sum() * 0.0
    return ((student_margin - teacher_margin)[negative] ** 2).mean()


def _trainer_class():
    from torch.utils.data import SequentialSampler
    from transformers import Trainer

    from ..runtime.embedding import mean_pool

    class EncoderTrainer(Trainer):
        """A Trainer whose loss is `in_batch_loss`, `margin_mse_loss` or ``in_batch + margin_weight x margin``
        (``loss``, `zsnli.training.encoder_teacher.LOSSES`) of mean-pooled text and hypothesis embeddings.

        ``scale`` and the collator's candidates (and teacher scores) decide the loss; training batches come from
        the global length-grouped sampler (the NLI run's); there is no evaluation set (``evaluate``
        returns no figures, so the time budget's final evaluation is a no-op).
        """

        scale: float = DEFAULT_SCALE

        def __init__(self, *args, scale: float = DEFAULT_SCALE, loss: str = "in-batch", margin_weight: float = 1.0,
                     **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.scale, self.loss_name, self.margin_weight = scale, loss, margin_weight
            self.model_accepts_loss_kwargs = False

        def _objective(self, text_emb, hyp_emb, inputs):
            targets, allowed = inputs["labels"], inputs.get("candidate_mask")
            if self.loss_name == "in-batch":
                return in_batch_loss(text_emb, hyp_emb, targets, self.scale, allowed)
            margin = margin_mse_loss(text_emb, hyp_emb, targets, inputs["teacher_scores"], self.scale, allowed)
            if self.loss_name == "margin-mse":
                return margin
            return in_batch_loss(text_emb, hyp_emb, targets, self.scale, allowed) + self.margin_weight * margin

        def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
            text = {k: v for k, v in inputs.items() if k in ("input_ids", "attention_mask", "token_type_ids")}
            hyps = {k[4:]: v for k, v in inputs.items() if k.startswith("hyp_")}
            text_emb = mean_pool(model(**text).last_hidden_state, text["attention_mask"])
            hyp_emb = mean_pool(model(**hyps).last_hidden_state, hyps["attention_mask"])
            loss = self._objective(text_emb, hyp_emb, inputs)
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


def _datasets(data: EncoderData, tokenizer, max_length: int, teacher: list[list[float]] | None = None):
    """The tokenised train `datasets.Dataset` (``input_ids``..., ``hyp``, ``set``, ``length``, and ``teacher``:
    `own_set_scores`' rows when given) and the tokenised hypotheses (one dict of lists each)."""
    import datasets

    columns = {"text": data.texts, "hyp": data.hyp_ids, "set": data.set_ids}
    ds = datasets.Dataset.from_dict(columns if teacher is None else {**columns, "teacher": teacher})

    def encode(batch):
        enc = tokenizer(batch["text"], truncation=True, max_length=max_length)
        enc["length"] = [len(ids) for ids in enc["input_ids"]]
        return enc

    ds = ds.map(encode, batched=True, remove_columns=["text"], desc="tokenize")
    enc = tokenizer(data.hypotheses, truncation=True, max_length=max_length)
    hyp_tokens = [{k: enc[k][i] for k in enc.keys()} for i in range(len(data.hypotheses))]
    return ds, hyp_tokens


def train_encoder(preset: Preset, output_dir: str | Path, scale: float = DEFAULT_SCALE, negatives: str = "batch",
                  resume: bool = True, notes: tuple[str, ...] = (), stop_at_step: int | None = None,
                  interpolate_alpha: float | None = None, loss: str = "in-batch", margin_weight: float | None = None,
                  teacher: Distillation | None = None) -> dict[str, Any]:
    """Fine-tune ``preset.base_model`` on ``preset.zsc_sources``; write ``model/`` and the manifest under ``output_dir``.

    ``preset``: `zsnli.training.presets.sentence_encoder` with the ``--zsc-*`` choices applied
    (sets, exclusions); its ``batch_size`` rows per step, ``max_length`` tokens per text,
    ``eval_steps`` the checkpoint interval in steps. ``scale``: `in_batch_loss`'s; ``negatives``:
    `zsnli.training.encoder_data.NEGATIVES`. ``resume``: continue from the newest checkpoint in
    ``output_dir/run``. ``stop_at_step``: stop there (a checkpoint is written) with the schedule of the
    whole run (its epochs or max_steps), and resume only from checkpoints at or before it: a run folder
    that already holds ``checkpoint-<stop_at_step>`` writes that checkpoint's encoder without training.
    ``interpolate_alpha``: the saved weights are ``(1 - alpha) * base + alpha * trained``
    (`zsnli.training.weight_interpolation`, WiSE-FT); ``None`` keeps the trained ones.
    ``loss``: `zsnli.training.encoder_teacher.LOSSES`; ``margin-mse`` and ``mixed`` need ``teacher`` (its
    model, description and cache folder: the teacher scores `zsnli.training.encoder_data.own_set_pairs` at
    ``preset.max_length`` tokens per pair, `zsnli.training.distill.build_cache`), ``mixed`` its
    ``margin_weight`` (> 0); with ``teacher.cache_only`` the run stops once the cache is complete and returns
    ``{"teacher_cache": record}``. Returns the manifest dict, or ``{"interrupted": True, "signal", "steps"}``
    after SIGTERM/SIGINT
    (a checkpoint is written; rerun to resume; no model or manifest). Raises ``ValueError`` for an
    unknown ``negatives`` or ``loss``, a non-positive ``scale``, ``stop_at_step`` or ``margin_weight``, a
    teacher missing or given where the loss takes none, an alpha outside ``(0, 1]``,
    `LaunchError` under a multi-process launch (in-batch negatives are per process: run it in one),
    `CheckpointMismatch` for a checkpoint to resume from that another schedule, batch size or optimiser
    setting trained (or a ``stop_at_step`` below every checkpoint of the folder),
    `zsnli.training.run_settings.RunSettingsMismatch` for one started under another objective (`encoder_settings`),
    `zsnli.training.distill.CacheMismatch` for a cache folder of another teacher or setting, and
    `zsnli.training.nli_data.DataError` for unreadable or empty data.
    """
    import transformers

    _check_options(negatives, scale, stop_at_step, interpolate_alpha)
    check_loss(loss, margin_weight, teacher)
    t0 = time.time()
    output_dir = Path(output_dir)
    run_dir, model_dir = output_dir / RUN_SUBDIR, output_dir / MODEL_SUBDIR
    run_dir.mkdir(parents=True, exist_ok=True)
    transformers.set_seed(preset.seed)
    data = build_encoder_data(preset.zsc_sources, texts_of(preset.zsc_exclude))
    log.info("encoder data: %d texts from %d sets, %d distinct hypotheses", len(data.texts), len(data.set_names),
             len(data.hypotheses))
    scores, cache = teacher_scores(data, teacher, preset.max_length) if teacher is not None else (None, None)
    if teacher is not None and teacher.cache_only:
        return {"teacher_cache": cache}
    objective = {"loss": loss, "margin_weight": margin_weight if loss == "mixed" else None}
    trainer, tokenizer, stop = _build_trainer(preset, data, run_dir, scale, negatives, t0, stop_at_step,
                                              objective, scores)
    resumed_from = _checked_resume(trainer, run_dir, stop_at_step, resume)
    settings = encoder_settings(objective, scale, negatives, preset.max_length, cache, run_base_identity(preset))
    check_run_settings(run_dir, settings, resumed_from is not None)
    train_start = time.time()
    if resumed_from is not None and stop_at_step is not None and checkpoint_step(resumed_from) >= stop_at_step:
        result = _load_checkpoint(trainer, resumed_from)
    else:
        with stop_on_signals(stop):
            result = trainer.train(resume_from_checkpoint=str(resumed_from) if resumed_from else None)
    train_seconds = time.time() - train_start
    _write_log(run_dir, trainer.state.log_history)
    if stop.signal is not None:
        log.warning("stopped by signal %d at step %d after a checkpoint; rerun the same command to resume",
                    stop.signal, trainer.state.global_step)
        return {"interrupted": True, "signal": stop.signal, "steps": trainer.state.global_step}
    interpolation = None
    if interpolate_alpha is not None:
        interpolation = _interpolate(trainer, preset, run_dir, interpolate_alpha)
    save_model(trainer.model, tokenizer, model_dir, preset.save_dtype, encoder_window(trainer.model.config))
    figures = {**_figures(trainer, result, preset, resumed_from, train_seconds, t0, notes), "stop_at_step": stop_at_step}
    manifest = build_encoder_manifest(preset, data, model_dir, scale, negatives, figures, interpolation, objective)
    if teacher is not None:
        manifest[TEACHER_KEY] = teacher_entry(teacher, cache, teacher_settings(teacher, objective, scale,
                                                                                preset.max_length))
    write_json(output_dir / MANIFEST_NAME, manifest)
    return manifest


def _check_options(negatives: str, scale: float, stop_at_step: int | None, alpha: float | None) -> None:
    """Raise ``ValueError`` (or `LaunchError`) for options `train_encoder` refuses."""
    if negatives not in NEGATIVES:
        raise ValueError(f"negatives {negatives!r}: choose from {', '.join(NEGATIVES)}")
    if not scale > 0:
        raise ValueError(f"scale {scale!r}: must be > 0")
    if stop_at_step is not None and stop_at_step < 1:
        raise ValueError(f"stop_at_step {stop_at_step!r}: must be >= 1")
    if alpha is not None and not 0.0 < alpha <= 1.0:
        raise ValueError(f"interpolate_alpha {alpha!r}: must be in (0, 1]")
    if launch_from_env().distributed:
        raise LaunchError("train.py encoder runs in one process (its in-batch negatives are per batch); "
                          "launch it without torchrun / accelerate launch")


def _build_trainer(preset: Preset, data: EncoderData, run_dir: Path, scale: float, negatives: str, t0: float,
                   stop_at_step: int | None, objective: dict[str, Any] | None = None,
                   scores: list[list[float]] | None = None):
    """The `EncoderTrainer` on the base encoder, its tokenizer and the `StopRequest` its callbacks watch;
    ``objective``: ``{"loss", "margin_weight"}`` (default in-batch); ``scores``: each example's teacher scores
    (`zsnli.training.encoder_data.own_set_scores`) for a margin loss."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(preset.base_model)
    model = AutoModel.from_pretrained(preset.base_model, dtype=torch.float32)
    if preset.freeze_word_embeddings:
        model.get_input_embeddings().weight.requires_grad_(False)
    train_ds, hyp_tokens = _datasets(data, tokenizer, preset.max_length, scores)
    objective = objective or {"loss": "in-batch", "margin_weight": None}
    args = training_arguments(preset, run_dir, torch.cuda.is_available(), preset.batch_size, distributed_cpu=False,
                              eval_strategy="no", load_best_model_at_end=False, metric_for_best_model=None,
                              save_steps=preset.eval_steps, remove_unused_columns=False)
    stop = StopRequest()
    callbacks = trainer_callbacks(preset, t0, False, stop) + ([_stop_at(stop_at_step)] if stop_at_step else [])
    trainer = _trainer_class()(
        model=model, args=args, train_dataset=train_ds, scale=scale, loss=objective["loss"],
        margin_weight=objective["margin_weight"] or 1.0,
        data_collator=EncoderCollator(tokenizer, hyp_tokens, data.set_hypotheses, negatives), callbacks=callbacks,
    )
    return trainer, tokenizer, stop


def _stop_at(step: int):
    """A Trainer callback that writes a checkpoint and stops when the global step reaches ``step``."""
    from transformers import TrainerCallback

    class StopAtStep(TrainerCallback):
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step >= step:
                log.info("step %d reached (--stop-at-step): writing a checkpoint and stopping", state.global_step)
                control.should_save = True
                control.should_training_stop = True
            return control

    return StopAtStep()


class CheckpointMismatch(ValueError):
    """A run folder's checkpoint was trained under another schedule, batch size or optimiser setting than the
    command resuming it, or ``stop_at_step`` would train over a folder holding only later checkpoints."""


def _checked_resume(trainer, run_dir: Path, stop_at_step: int | None, resume: bool) -> Path | None:
    """The newest checkpoint of ``run_dir`` to resume from (only steps <= ``stop_at_step`` when given),
    checked against ``trainer`` (`_check_checkpoint`); ``None`` when there is none or ``resume`` is off.

    Raises `CheckpointMismatch` when it was trained otherwise, or when ``stop_at_step`` is given and
    ``run_dir`` holds checkpoints after it but none at or before it (a run from step 0 there would rotate
    the later ones away).
    """
    every, reached = sorted_checkpoints(run_dir), sorted_checkpoints(run_dir, stop_at_step)
    if every and not reached:
        raise CheckpointMismatch(f"{run_dir} holds {every[0].name} and later but no checkpoint at or before "
                                 f"--stop-at-step {stop_at_step}; training from step 0 there would rotate them "
                                 "away: give another --output-dir")
    schedule = _schedule_steps(trainer)
    if stop_at_step is not None and stop_at_step > schedule:
        log.warning("--stop-at-step %d is past the schedule's %d steps: the run ends at its last step",
                    stop_at_step, schedule)
    checkpoint = reached[-1] if (resume and reached) else None
    if checkpoint is not None:
        _check_checkpoint(trainer, checkpoint)
    return checkpoint


_CHECKED_ARGS = ("learning_rate", "warmup_ratio", "warmup_steps", "weight_decay", "seed", "lr_scheduler_type")
"""`TrainingArguments` fields a resumed checkpoint must share with the resuming command."""


def _check_checkpoint(trainer, checkpoint: Path) -> None:
    """Raise `CheckpointMismatch` unless ``checkpoint`` was trained with ``trainer``'s schedule: the total steps
    (which also tell datasets of other sizes apart under ``--epochs``), the batch size, and the `_CHECKED_ARGS`
    of its ``training_args.bin`` (when present)."""
    import torch

    state = json.loads((checkpoint / "trainer_state.json").read_text(encoding="utf-8"))
    got = {"total steps": state.get("max_steps"), "batch size": state.get("train_batch_size")}
    want = {"total steps": _schedule_steps(trainer), "batch size": trainer.args.per_device_train_batch_size}
    if (checkpoint / "training_args.bin").is_file():
        saved = torch.load(checkpoint / "training_args.bin", weights_only=False)
        for name in _CHECKED_ARGS:
            got[name], want[name] = getattr(saved, name, None), getattr(trainer.args, name, None)
    differ = [k for k in want if got[k] != want[k]]
    if differ:
        k = differ[0]
        raise CheckpointMismatch(f"{checkpoint} was trained with {k} {got[k]}, this command gives {want[k]}: "
                                 "rerun it with the run's own settings or give another --output-dir")


def _schedule_steps(trainer) -> int:
    """The optimiser steps of ``trainer``'s whole schedule, as `transformers.Trainer` counts them (``max_steps``,
    else ``ceil(epochs x batches per epoch)``, one process)."""
    args = trainer.args
    if args.max_steps > 0:
        return int(args.max_steps)
    batches = math.ceil(len(trainer.train_dataset) / args.per_device_train_batch_size)
    return int(math.ceil(args.num_train_epochs * max(batches // args.gradient_accumulation_steps, 1)))


def _load_checkpoint(trainer, checkpoint: Path) -> None:
    """Put a finished checkpoint's weights and state into ``trainer`` instead of training (returns no result)."""
    import torch
    from transformers import AutoModel, TrainerState

    log.info("%s: the run reached --stop-at-step already; writing its encoder without training", checkpoint)
    trainer.model = AutoModel.from_pretrained(checkpoint, dtype=torch.float32)
    trainer.state = TrainerState.load_from_json(str(checkpoint / "trainer_state.json"))


def _interpolate(trainer, preset: Preset, run_dir: Path, alpha: float) -> dict[str, Any]:
    """Interpolate ``trainer.model`` with the base encoder in place; the manifest's ``interpolation`` record."""
    from .weight_interpolation import interpolate_with_pretrained

    step = trainer.state.global_step
    checkpoint = run_dir / f"checkpoint-{step}" / "model.safetensors"
    interpolate_with_pretrained(trainer.model, preset.base_model, alpha)
    return {"method": "WiSE-FT weight-space interpolation (Wortsman et al., CVPR 2022, eq. 1)",
            "formula": "(1 - alpha) * base_model + alpha * trained, every floating-point weight, in fp32",
            "alpha": alpha, "trained_step": step,
            "trained_checkpoint": f"{RUN_SUBDIR}/{checkpoint.parent.name}",
            "trained_weights_sha256": sha256_file(checkpoint) if checkpoint.is_file() else None,
            "base_weights_sha256": base_weights_sha256(preset.base_model, preset.base_revision)}


def _figures(trainer, result, preset: Preset, resumed_from: Path | None, train_seconds: float, t0: float,
             notes: tuple[str, ...]) -> dict[str, Any]:
    """The manifest's ``training`` figures; ``result`` is ``None`` when a finished checkpoint was loaded."""
    first_step = checkpoint_step(resumed_from) if resumed_from else 0
    steps_here = trainer.state.global_step - first_step
    losses = [(h.get("step"), h["loss"]) for h in trainer.state.log_history if "loss" in h] or [(None, None)]
    return {  # final_loss_step: the last logged step, not always the last step
        "steps": trainer.state.global_step, "epochs": trainer.state.epoch, "first_logged_loss": losses[0][1],
        "final_loss": losses[-1][1], "final_loss_step": losses[-1][0],
        "train_loss_mean_this_process": None if result is None else result.training_loss,
        "wall_seconds": round(time.time() - t0, 1),
        "train_seconds_this_process": round(train_seconds, 1),
        "train_texts_per_second": round(steps_here * preset.batch_size / train_seconds, 2)
        if steps_here and train_seconds > 0 else None,
        "bf16_autocast": bool(trainer.args.bf16),
        "resumed_from_checkpoint": resumed_from.name if resumed_from else None, "steps_this_process": steps_here,
        "notes": list(notes),
    }


def _write_log(run_dir: Path, history: list[dict[str, Any]]) -> None:
    with open(run_dir / "loss_log.jsonl", "w", encoding="utf-8") as handle:
        for row in history:
            handle.write(json.dumps(row) + "\n")


_HYPERPARAMETERS = ("base_model", "epochs", "max_steps", "batch_size", "max_length", "lr", "warmup_ratio",
                    "weight_decay", "freeze_word_embeddings", "seed", "mixed_precision", "save_dtype", "time_budget_s", "checkpoint_every_s",
                    "eval_steps", "logging_steps")


def build_encoder_manifest(preset: Preset, data: EncoderData, model_dir: str | Path, scale: float, negatives: str,
                           training: dict[str, Any], interpolation: dict[str, Any] | None = None,
                           loss: dict[str, Any] | None = None) -> dict[str, Any]:
    """The trained encoder's manifest: base, objective (``loss``: ``{"loss", "margin_weight"}``, default in-batch;
    a teacher's run adds its ``teacher`` entry after this, `train_encoder`), every set with licence and sha256, hyperparameters,
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
        "objective": {**_objective_text(loss or {"loss": "in-batch", "margin_weight": None}),
                      "scale": scale, "negatives": negatives,
                      "scale_source": "sentence-transformers MultipleNegativesRankingLoss default (20)"
                      if scale == DEFAULT_SCALE else "given on the command line"},
        "data": {"sources": sources, "texts": len(data.texts), "hypotheses": len(data.hypotheses),
                 "excluded_texts_from": list(preset.zsc_exclude),
                 "dropped_overlap": sum(s["dropped_overlap"] for s in data.counts["sets"].values())},
        "hyperparameters": {k: hp[k] for k in _HYPERPARAMETERS},
        "training": training,
        "interpolation": interpolation,
        "environment": environment(),
        "files": hash_model_dir(model_dir),
        "embedding_sha256": embedding_digest(model_dir),
    }


_IN_BATCH_TEXT = ("cross-entropy of each text over scale x cosine with its batch's distinct hypotheses and its sets' "
                  "other hypotheses; target: its own class's hypothesis")


def _objective_text(loss: dict[str, Any]) -> dict[str, Any]:
    """The manifest objective's ``loss`` (in words), ``loss_name`` and ``margin_weight``."""
    words = {"in-batch": _IN_BATCH_TEXT, "margin-mse": MARGIN_TEXT,
             "mixed": f"{_IN_BATCH_TEXT}; plus margin_weight x {MARGIN_TEXT}"}[loss["loss"]]
    return {"loss": words, "loss_name": loss["loss"], "margin_weight": loss["margin_weight"]}
