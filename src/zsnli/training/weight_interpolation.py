"""Weight-space interpolation of a fine-tuned encoder with the pretrained encoder it started from.

WiSE-FT (Wortsman et al., "Robust fine-tuning of zero-shot models", CVPR 2022, eq. 1): the weights
``(1 - alpha) * pretrained + alpha * fine_tuned``, parameter by parameter. The paper finds the
interpolated model keeps the pretrained model's robustness on shifted data while keeping most of the
fine-tuned gain; for this project's sentence encoder (issue 42) alpha 0.5 of the step-1,000 zsc-train
checkpoint won on zsc-dev both ways of holding out where the checkpoint itself broke some kinds
(docs/quality.md).

Used by `zsnli.training.encoder.train_encoder` (``train.py encoder --interpolate-alpha``). May import
torch inside functions only.
"""

from __future__ import annotations

from typing import Any

BUFFERS_NOT_INTERPOLATED = ("position_ids",)
"""State-dict entries that are index buffers, not weights: taken from the fine-tuned model as they are."""


def interpolate_state_dicts(pretrained: dict[str, Any], fine_tuned: dict[str, Any], alpha: float) -> dict[str, Any]:
    """``(1 - alpha) * pretrained + alpha * fine_tuned`` for every floating-point tensor of ``fine_tuned``.

    ``pretrained`` / ``fine_tuned``: state dicts of one architecture (name -> tensor of equal shapes);
    ``alpha`` in ``[0, 1]`` (1: the fine-tuned weights, 0: the pretrained ones). Computed in fp32 and
    returned in each fine-tuned tensor's dtype; integer tensors and `BUFFERS_NOT_INTERPOLATED` are the
    fine-tuned ones. Raises ``ValueError`` for an alpha outside ``[0, 1]``, a weight missing from
    ``pretrained`` or a shape that differs (another architecture).
    """
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha {alpha!r}: must be in [0, 1]")
    out: dict[str, Any] = {}
    for name, tuned in fine_tuned.items():
        if not tuned.is_floating_point() or name.endswith(BUFFERS_NOT_INTERPOLATED):
            out[name] = tuned
            continue
        if name not in pretrained:
            raise ValueError(f"{name}: not in the pretrained weights (another architecture?)")
        base = pretrained[name]
        if tuple(base.shape) != tuple(tuned.shape):
            raise ValueError(f"{name}: shape {tuple(base.shape)} in the pretrained weights, {tuple(tuned.shape)} fine-tuned")
        out[name] = ((1.0 - alpha) * base.float() + alpha * tuned.float()).to(tuned.dtype)
    return out


def interpolate_with_pretrained(model, pretrained_dir: str, alpha: float) -> None:
    """Replace ``model``'s weights (a fine-tuned HF ``AutoModel``, changed in place) by their interpolation
    with the encoder in ``pretrained_dir`` (`interpolate_state_dicts`). Raises ``ValueError`` as it does,
    ``OSError`` when ``pretrained_dir`` holds no loadable model."""
    import torch
    from transformers import AutoModel

    base = AutoModel.from_pretrained(pretrained_dir, dtype=torch.float32)
    merged = interpolate_state_dicts(base.state_dict(), model.state_dict(), alpha)
    model.load_state_dict(merged)
