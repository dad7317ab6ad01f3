"""The teacher side of ``train.py encoder --loss margin-mse`` / ``mixed`` (`zsnli.training.encoder`).

What a margin-MSE encoder run needs from its teacher NLI cross-encoder besides the loss itself (the loss,
`zsnli.training.encoder.margin_mse_loss`, stays beside `zsnli.training.encoder.in_batch_loss`: both are
objectives of the encoder's batches): the checks of the loss choice (`check_loss`), each example's teacher
scores (`teacher_scores`: the own-set pairs of `zsnli.training.encoder_data.own_set_pairs` through the NLI
run's cache, `zsnli.training.distill.build_cache`, turned into one score per pair by
`zsnli.training.distill.teacher_pair_scores`), and what the manifest records of it (`teacher_settings`,
`MARGIN_TEXT`).

May import `zsnli.training.distill` and `zsnli.training.encoder_data` (neither imports torch at module level).
"""

from __future__ import annotations

import logging
from typing import Any

from .distill import Distillation, build_cache, teacher_pair_scores
from .encoder_data import EncoderData, own_set_pairs, own_set_scores

log = logging.getLogger(__name__)

LOSSES = ("in-batch", "margin-mse", "mixed")
"""``train_encoder``'s objectives: `zsnli.training.encoder.in_batch_loss` (today's recipe),
`zsnli.training.encoder.margin_mse_loss` alone, or ``in_batch_loss + margin_weight * margin_mse_loss``."""

MARGIN_TEXT = ("Margin-MSE (Hofstatter et al. 2020, arXiv:2010.02666): mean over (text, h-) of (scale x (cos(x, h+) - "
               "cos(x, h-)) - (t(x, h+) - t(x, h-)))^2, t = the teacher's log p(entailment) - log p(contradiction), "
               "h- every other hypothesis of the text's own set")
"""The encoder manifest's words for the margin term."""


def check_loss(loss: str, margin_weight: float | None, teacher: Distillation | None) -> None:
    """Raise ``ValueError`` for a ``loss`` not in `LOSSES`, a teacher missing (margin-mse, mixed) or given
    (in-batch), a ``margin_weight`` given to another loss than mixed or missing there, or one not > 0."""
    if loss not in LOSSES:
        raise ValueError(f"loss {loss!r}: choose from {', '.join(LOSSES)}")
    if (loss == "in-batch") != (teacher is None):
        raise ValueError(f"loss {loss!r} " + ("takes no teacher" if teacher else "needs a teacher"))
    if (loss == "mixed") != (margin_weight is not None):
        raise ValueError("margin_weight is the weight of the margin term of loss 'mixed', and only of it")
    if margin_weight is not None and not margin_weight > 0:
        raise ValueError(f"margin_weight {margin_weight!r}: must be > 0")


def teacher_scores(data: EncoderData, teacher: Distillation, max_length: int):
    """``(per-example scores, cache record)``: `zsnli.training.encoder_data.own_set_scores` of the teacher's
    pair scores (nats) of `own_set_pairs`, each pair truncated at ``max_length`` tokens, from the cache built or
    resumed now in ``teacher.cache_dir`` (`zsnli.training.distill.build_cache`'s record). Raises
    `zsnli.training.distill.CacheMismatch` for a cache folder of another teacher or setting."""
    pairs = own_set_pairs(data)
    log.info("teacher: %d (text, own-set hypothesis) pairs for margin-MSE", len(pairs))
    logp, record = build_cache(teacher, pairs, max_length)
    return own_set_scores(data, pairs, teacher_pair_scores(logp)), record


def teacher_settings(teacher: Distillation, objective: dict[str, Any], scale: float, max_length: int) -> dict[str, Any]:
    """The ``distillation`` settings of a margin-MSE run's ``teacher`` entry (`zsnli.training.distill.teacher_entry`):
    ``objective`` (``{"loss", "margin_weight"}``), the scale, the teacher score, negatives, pair window and the
    teacher's forward settings."""
    return {**objective, "scale": scale, "teacher_score": "log p(entailment) - log p(contradiction), nats",
            "negatives": "the other hypotheses of the text's own set", "pair_max_length": max_length,
            "batch_size": teacher.batch_size, "chunk_rows": teacher.chunk_rows, "bf16": teacher.bf16}
