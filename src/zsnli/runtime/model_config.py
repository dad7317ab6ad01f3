"""What a model folder's config and tokenizer say about serving it as an NLI cross-encoder: which logit is
entailment and which its alternative (`label_indices`: contradiction, or not_entailment for a 2-way head), and
the pair window in tokens (`model_window`); `ModelConfigError` when the folder cannot be served.

Split out of `zsnli.runtime.model` (which uses and re-offers these names), so both runtimes (`zsnli.runtime.model`,
`zsnli.runtime.onnx_model`), the start-up checks (`zsnli.serving.startup`) and the bench's token counts
(`zsnli.bench.ceiling`) read one rule. Works on plain objects (``id2label`` mappings, any tokenizer/config
with the attributes named), so no model is loaded here.

May import: the standard library only (nothing from zsnli).
"""

from __future__ import annotations

from typing import Any, Mapping

#: Upper bound on the model window when neither tokenizer nor config gives a sane one.
DEFAULT_MAX_LENGTH = 512
#: Largest window we accept from a tokenizer/config (larger values are sentinels like 1e30).
_SANE_WINDOW = 1 << 16


class ModelConfigError(RuntimeError):
    """The model directory cannot be served as an NLI model (e.g. no entailment label)."""


def _is_not_entailment(name: str) -> bool:
    """``not_entailment``, ``non-entailment``, ``Not entailment``...: the negative class of a 2-way NLI head."""
    low = name.replace("-", "_").replace(" ", "_")
    return low.startswith(("not_entail", "non_entail", "notentail", "nonentail"))


def label_indices(id2label: Mapping[Any, str]) -> tuple[int, int]:
    """Find the entailment index and its alternative in a model's ``id2label``.

    3-way heads (entailment / neutral / contradiction, any order): the
    alternative is the contradiction label. 2-way heads (``entailment`` /
    ``not_entailment``, as the zeroshot-classifier v2.0 family and most recent
    zero-shot models have): the alternative is ``not_entailment`` (also
    ``non_entailment``, ``not entailment``; a contradiction label wins when
    both exist). Multi-label scoring compares entailment with this alternative,
    as the transformers zero-shot pipeline does (which takes index 0, or the
    last one when entailment is 0: the same label for every standard head).
    Names are matched case-insensitively on their prefix: ``entail...`` and
    ``contradict...`` (so ``ENTAILMENT``, ``Entailed``, ``contradiction`` all
    work). Keys may be ints or digit strings (as in ``config.json``).

    Returns ``(entailment_idx, alternative_idx)``.
    Raises ``ModelConfigError`` when either label is missing or ambiguous
    (e.g. generic ``LABEL_0/LABEL_1/LABEL_2`` names).
    """
    if not id2label:
        raise ModelConfigError("config.json has no id2label mapping")
    entail: list[int] = []
    contra: list[int] = []
    not_entail: list[int] = []
    for key, name in id2label.items():
        try:
            idx = int(key)
        except (TypeError, ValueError) as exc:
            raise ModelConfigError(f"id2label key is not an integer: {key!r}") from exc
        low = str(name).strip().lower()
        if low.startswith("entail"):
            entail.append(idx)
        elif low.startswith("contradict"):
            contra.append(idx)
        elif _is_not_entailment(low):
            not_entail.append(idx)
    names = ", ".join(f"{k}={v}" for k, v in sorted(id2label.items(), key=lambda kv: int(kv[0])))
    if len(entail) != 1:
        why = "no" if not entail else "more than one"
        raise ModelConfigError(f"{why} entailment label in id2label ({names})")
    alternative = contra or not_entail
    if len(alternative) != 1:
        why = "no" if not alternative else "more than one"
        kind = "contradiction" if contra or not not_entail else "not_entailment"
        raise ModelConfigError(f"{why} {kind} label in id2label ({names}): an NLI head needs entailment and "
                               "contradiction (3-way) or entailment and not_entailment (2-way)")
    return entail[0], alternative[0]


def model_window(tokenizer, config, cap: int = DEFAULT_MAX_LENGTH) -> int:
    """The pair window in tokens (special tokens included): the smallest of the tokenizer's
    ``model_max_length``, the config's ``max_position_embeddings`` (less the padding offset
    for RoBERTa-family models, whose position ids start after the padding index) and ``cap``
    (``ZSNLI_MAX_LENGTH``); values of 2**16 or more are sentinels and ignored; at least 8."""
    candidates: list[int] = []
    tok_max = getattr(tokenizer, "model_max_length", None)
    if isinstance(tok_max, int) and 0 < tok_max < _SANE_WINDOW:
        candidates.append(tok_max)
    pos_max = getattr(config, "max_position_embeddings", None)
    if isinstance(pos_max, int) and 0 < pos_max < _SANE_WINDOW:
        model_type = str(getattr(config, "model_type", ""))
        if "roberta" in model_type or model_type in ("camembert", "longformer"):
            pos_max -= (getattr(config, "pad_token_id", 1) or 1) + 1
        candidates.append(pos_max)
    window = min(candidates) if candidates else DEFAULT_MAX_LENGTH
    return max(8, min(window, cap))
