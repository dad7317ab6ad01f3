"""Accuracy of an NLI model on labelled (premise, hypothesis, label) data.

`accuracy_by_split` is the metric of the periodic evaluation during
training (the Trainer's ``compute_metrics``); `evaluate_model` is
``train.py evaluate``: the served model (`zsnli.runtime.model.NliModel`, as the
server loads it) on every full validation and test source of a preset,
with progress (`zsnli.runtime.progress`). `zsnli.training.manifest_writer.record_evaluation`
stores its figures in the manifest.

May import numpy, `zsnli.training.nli_data`, `zsnli.training.presets`, `zsnli.manifest`,
`zsnli.runtime.progress` and, inside functions, `zsnli.runtime.model` (torch).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..manifest import hash_model_dir, model_dir_digest
from .nli_data import Source, load_source
from .presets import Preset
from ..runtime.progress import predict_logits

log = logging.getLogger(__name__)


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


def evaluate_sources(nli, sources: list[Source], token_budget: int | None = None) -> dict[str, Any]:
    """Accuracy of a loaded `zsnli.runtime.model.NliModel` on each source (validation or test files).

    Returns ``{source_name: {"n": rows, "accuracy": float}}``; the figures are
    those of the model as served. ``token_budget``: padded tokens per batch
    (default: the device's, see ``zsnli.runtime.model.default_token_budget``).
    Raises `zsnli.training.nli_data.DataError` for an unreadable source.
    """
    id2label = {k: v.lower() for k, v in nli.id2label.items()}
    out: dict[str, Any] = {}
    for src in sources:
        rows, _ = load_source(src)
        logits = predict_logits(nli, [r["premise"] for r in rows], [r["hypothesis"] for r in rows],
                                desc=src.name, token_budget=token_budget)
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
    from ..runtime.model import NliModel

    t0 = time.time()
    nli = NliModel.load(model_dir)
    return {
        "model_sha256": model_dir_digest(hash_model_dir(model_dir)),
        "validation": evaluate_sources(nli, list(preset.validation_sources)),
        "test": evaluate_sources(nli, list(preset.test_sources)),
        "seconds": round(time.time() - t0, 1),
    }
